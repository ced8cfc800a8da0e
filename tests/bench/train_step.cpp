// tests/bench/train_step.cpp — sinter's side of the full training-step benchmark (CPU and GPU)
//
// One step = forward + mean softmax cross-entropy + backward + AdamW update of every parameter,
// compiled as one program by sinter::compile_step, for one of these models (mlp and vit: batch
// 128, images [B, 28, 28] float32, integer labels; gpt: token ids [B, T] and next tokens):
//   --model mlp  the recipes/mlp.cpp model: (x - 0.2860) / 0.3530, flatten, 784-512-256-10 ReLU
//   --model vit  sinter::ViT with ViTConfig{28, 7, 64, 4, 4, 10} (dsl/nn/transformer.hpp)
//   --model distill  the distill recipe's pair in one compile_distill_step: the vit above as a
//                frozen teacher (pattern phases 1001 + k) and a student ViTConfig{28, 7, 32, 2,
//                2, 10}; loss kd_loss(student, teacher, labels, {T = 2, alpha = 0.5})
//   --model distill-vit-b-s  the same pair as ViT-B/16 → ViT-S/16: images [B, 3, 224, 224],
//                1000 classes, teacher ViTConfig{224, 16, 768, 12, 12, 1000, 3}, student
//                {224, 16, 384, 12, 6, 1000, 3}, batch 256 (--batch N)
//   --model gpt  sinter::GPT, vocab 256, context 64, width 128, 4 layers, 4 heads, batch 32
//   --model gpt2-small  sinter::GPT, vocab 50304, context 1024, width 768, 12 layers, 12 heads,
//                batch 8; tokens_per_s and flops_per_step (6·params + attention per token)
//                give model FLOP utilisation against a measured peak (train_peers.py --peak)
//   --model gpt2-small-tied  the same as GPT-2 small was released: the head is the token
//                embedding (logits = states · tokens.weightᵀ, no head bias), 124M parameters
// Every step trains on the same batch, which stays on the device (StepOptions::resident_batch,
// uploaded once), as the PyTorch peers keep theirs on the GPU; `--host-batch` uploads it from
// the host every step instead, as a loop over new batches does. `--print-losses` prints
// `step=N loss=L` after every step (as train_peers.py --print-losses does), to see where two
// runs' curves part.
// `--device cpu|cuda[:N]` picks where the step runs; `--amp off|bf16|fp16` its mixed precision;
// `--batch N` the sequences per step of the gpt models, `--context N` their tokens per sequence
// (sinter only: the PyTorch peers keep the model's own).
// AdamW: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 1e-4 (decoupled, on every
// parameter). Images, labels and every parameter are deterministic patterns (a sine of the flat
// index, see init_parameters) that tests/bench/train_peers.py reproduces, so every peer prints
// the same initial loss (`loss`, the loss of the first call) and, after the same number of
// steps on the same batch, about the same `final_loss`.
//
// Prints one machine-readable line (read by tests/bench/train_rounds.py and gpu_table.py):
//   peer=sinter model=<m> compile_s=<first call, s> median_step_s=<s> threads=<n> iters=<n>
//   loss=<first step> final_loss=<last step> maxrss_mb=<ru_maxrss> base_rss_mb=<ru_maxrss
//   before the model> planned_peak_mb=<memory_plan().peak_bytes()> state_mb=<parameters + m + v>
//   params=<count> ... plan_total_mb=<plan_memory(batch).total(): everything the step allocates
//   on its device, inputs and workspace included>
// planned_peak_mb is what the compiled step allocates besides its inputs (arena of
// intermediates plus outputs); state_mb is the parameters and AdamW's m and v.
// `--threads N` sets SINTER_NUM_THREADS. `--print-params` lists the parameters in order.
// `--max-batch [--memory BYTES]` prints `max_batch=N peak_bytes=P next_peak_bytes=Q
// budget_bytes=M` (the largest batch whose planned peak fits the budget, default the device's
// free memory; docs/distillation.md) and exits without running.
//
// `--serve` (used by tests/bench/train_rounds.py): after the first call and --warmup steps it
// prints `ready peer=sinter model=<m> compile_s=<s> loss=<first step> device=<d>`, then
// answers `run K [W]` on stdin (W untimed steps, then K timed ones) with `times=<s>,...` until
// `quit` or the end of the input, then prints the line above over every timed step
// (bench::serve_steps).
//
// Build: ninja -C build tests/bench/train_step   (tests/bench/train_run.sh builds and runs all)
#include "bench_timing.hpp"
#include "dsl/sinter.hpp"
#include "recipes/fashion_mlp.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

using namespace sinter;

namespace {

constexpr int64_t batch = 128, side = 28, classes = 10;

using bench::pattern;

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// Replaces the seeded initial values by deterministic patterns: parameter k (in
/// for_each_parameter order) gets phase 1 + k; Linear weights [in, out] scale 1/√in, LayerNorm
/// gamma 1 + 0.1·sin, everything else (biases, LayerNorm beta, positions) 0.1·sin.
template <class Model> int64_t init_parameters(Model& model, bool print, double first_phase = 1.0) {
  int64_t k = 0, count = 0;
  for_each_parameter(model, [&](const std::string& name, Parameter& p) {
    Shape shape = p.value.shape();
    double phase = first_phase + static_cast<double>(k++);
    if (ends_with(name, "weight"))
      p.value = pattern(shape, 1.0 / std::sqrt(static_cast<double>(shape.at(0))), phase);
    else if (ends_with(name, "gamma"))
      p.value = pattern(shape, 0.1, phase, 1.0);
    else
      p.value = pattern(shape, 0.1, phase);
    count += p.value.size();
    if (print) std::fprintf(stderr, "param %s %s\n", name.c_str(), to_string(shape).c_str());
  });
  return count;
}

struct Options : bench::StepFlags {
  std::string model = "mlp";
  bool print_params = false;
  bool serve = false;
  std::string device = "cpu";
  std::string amp = "off";
  int64_t batch = 0;   ///< gpt models: sequences per step (0: the model's own)
  int64_t context = 0; ///< gpt models: tokens per sequence (0: the model's own)
  bool max_batch = false;
  bool print_losses = false; ///< --print-losses: `step=N loss=L` after every step
  std::string memory;        ///< --memory: the budget of --max-batch (default: free memory)
  bool host_batch = false;   ///< --host-batch: the batch goes up from the host every step
};

double maxrss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0; // kilobytes on Linux
}

/// The GPT configurations: a small one (the gpt recipe's shape) and GPT-2 small's
/// (12 layers, 768 wide, 1024 tokens, GPT-2's vocabulary padded to 50304), with its own head
/// or (gpt2-small-tied) the token embedding as the head.
struct GptBench {
  GPTConfig config;
  int64_t batch = 0;
};
GptBench gpt_bench(const std::string& model, int64_t context = 0) {
  GptBench b =
      model == "gpt"
          ? GptBench{GPTConfig{.vocab = 256, .context = 64, .dim = 128, .depth = 4, .heads = 4}, 32}
          : GptBench{GPTConfig{.vocab = 50304,
                               .context = 1024,
                               .dim = 768,
                               .depth = 12,
                               .heads = 12,
                               .tied_head = model == "gpt2-small-tied"},
                     8};
  if (context > 0) b.config.context = context;
  return b;
}

/// (i * 7 + shift) mod `modulus` over the flat index: labels, token ids and next tokens.
HostTensor cyclic_ids(Shape shape, int64_t modulus, int64_t shift = 0) {
  std::vector<double> v(static_cast<std::size_t>(numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<double>((static_cast<int64_t>(i) * 7 + shift) % modulus);
  return HostTensor::from_doubles(DType::i64, std::move(shape), v);
}

/// compile_step over `model` with the benchmark's AdamW and mean cross-entropy.
template <class Model> auto cross_entropy_step(Model& model, const Options& opt) {
  return compile_step(
      model, [](Model& m, Var x, Var y) { return cross_entropy_mean(m(x), y); },
      adamw{.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 1e-4},
      {.batch_names = {"images", "labels"},
       .amp = amp_from_name(opt.amp),
       .resident_batch = !opt.host_batch});
}

template <class Model, class MakeStep>
int run(const Options& opt, Model& model, double base_rss, MakeStep make_step) {
  int64_t params = init_parameters(model, opt.print_params);
  bool gpt = opt.model.starts_with("gpt");
  HostTensor images, labels;
  int64_t tokens_per_step = 0, flops_per_step = 0;
  if (gpt) {
    GptBench b = gpt_bench(opt.model, opt.context);
    if (opt.batch > 0) b.batch = opt.batch;
    int64_t t = b.config.context;
    images = cyclic_ids({b.batch, t}, b.config.vocab, 3);  // token ids
    labels = cyclic_ids({b.batch, t}, b.config.vocab, 10); // the next token of each
    tokens_per_step = b.batch * t;
    // Training FLOPs per token: 6 per parameter, plus attention's 12 · layers · tokens · width.
    flops_per_step = tokens_per_step * (6 * params + 12 * b.config.depth * t * b.config.dim);
  } else if (opt.model == "distill-vit-b-s") {
    int64_t b = opt.batch > 0 ? opt.batch : 256;
    images = pattern({b, 3, 224, 224}, 0.5, 0.0, 0.5);
    labels = cyclic_ids({b}, 1000);
  } else {
    images = pattern({batch, side, side}, 0.5, 0.0, 0.5); // in [0, 1]
    labels = cyclic_ids({batch}, classes);
  }

  auto step = make_step();
  if (opt.max_batch) {
    HostTensor example[] = {images, labels};
    int64_t budget = opt.memory.empty() ? free_memory() : parse_bytes(opt.memory);
    std::printf("%s\n", step.max_batch(example, budget).line().c_str());
    return 0;
  }

  double first_loss = 0, loss = 0;
  bool first = true;
  int taken = 0;
  auto one_step = [&] {
    loss = step(images, labels).loss.value();
    if (std::exchange(first, false)) first_loss = loss;
    if (opt.print_losses) std::printf("step=%d loss=%.9g\n", ++taken, loss); // every f32 bit
  };
  auto ready = [&](double first_call_s) {
    std::printf("ready peer=sinter model=%s compile_s=%.4g loss=%.6f device=%s\n",
                opt.model.c_str(), first_call_s, first_loss, opt.device.c_str());
  };
  bench::StepTiming timing = opt.serve ? bench::serve_steps(one_step, opt.warmup, ready)
                                       : bench::time_steps(one_step, opt.warmup, opt.iters);
  double first_call = timing.first_call_s, median = timing.median_step_s;
  if (step.runtime().compilations() != 1) {
    std::fprintf(stderr, "train_step: compiled %zu times, expected once\n",
                 step.runtime().compilations());
    return 1;
  }
  double state_bytes = 0; // parameters + AdamW m and v
  for_each_parameter(model, [&](const std::string&, Parameter& p) {
    state_bytes += static_cast<double>(p.value.byte_size());
  });
  for (auto& [name, t] : step.runtime().state())
    state_bytes += static_cast<double>(t->byte_size());
  double planned = static_cast<double>(step.runtime().program().memory_plan().peak_bytes());
  HostTensor example[] = {images, labels};
  double device_plan = static_cast<double>(step.plan_memory(example).total());
  std::printf("peer=sinter model=%s compile_s=%.4g median_step_s=%.6g threads=%d iters=%d "
              "loss=%.6f final_loss=%.6f maxrss_mb=%.1f base_rss_mb=%.1f planned_peak_mb=%.2f "
              "state_mb=%.2f params=%lld device=%s tokens_per_s=%.6g flops_per_step=%lld amp=%s "
              "plan_total_mb=%.2f\n",
              opt.model.c_str(), first_call, median, opt.threads, timing.steps, first_loss, loss,
              maxrss_mb(), base_rss, planned / (1 << 20), state_bytes / (1 << 20),
              static_cast<long long>(params), opt.device.c_str(),
              gpt ? static_cast<double>(tokens_per_step) / median : 0.0,
              static_cast<long long>(flops_per_step), opt.amp.c_str(), device_plan / (1 << 20));
  return 0;
}

int usage(const char* argv0) {
  std::fprintf(
      stderr,
      "usage: %s [--model mlp|vit|distill|distill-vit-b-s|gpt|gpt2-small|gpt2-small-tied] "
      "[--device "
      "cpu|cuda[:N]] [--threads N] "
      "[--warmup N] [--amp off|bf16|fp16] [--batch N (gpt, distill-vit-b-s)] [--context N (gpt)] "
      "[--iters N] [--print-params] [--serve] [--max-batch [--memory BYTES]] "
      "[--host-batch] [--print-losses]\n"
      "  one full training step (forward, loss, backward, AdamW) via compile_step,\n"
      "  batch 128; prints first-call and median step time, losses and memory\n"
      "  --serve: after warm-up, answer 'run K [W]' / 'quit' on stdin (train_rounds.py)\n",
      argv0);
  return 2;
}

} // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    bool ok = true;
    if (std::optional<bool> step_flag = bench::read_step_flag(argc, argv, i, opt))
      ok = *step_flag;
    else if (a == "--model" && i + 1 < argc)
      opt.model = argv[++i];
    else if (a == "--print-params")
      opt.print_params = true;
    else if (a == "--serve")
      opt.serve = true;
    else if (a == "--device" && i + 1 < argc)
      opt.device = argv[++i];
    else if (a == "--amp" && i + 1 < argc)
      opt.amp = argv[++i];
    else if (a == "--batch" && i + 1 < argc)
      ok = (opt.batch = std::atoll(argv[++i])) > 0;
    else if (a == "--context" && i + 1 < argc)
      ok = (opt.context = std::atoll(argv[++i])) > 0;
    else if (a == "--max-batch")
      opt.max_batch = true;
    else if (a == "--memory" && i + 1 < argc)
      opt.memory = argv[++i];
    else if (a == "--host-batch")
      opt.host_batch = true;
    else if (a == "--print-losses")
      opt.print_losses = true;
    else
      ok = false;
    constexpr std::array<std::string_view, 7> models{
        "mlp", "vit", "distill", "distill-vit-b-s", "gpt", "gpt2-small", "gpt2-small-tied"};
    if (!ok || std::find(models.begin(), models.end(), opt.model) == models.end() ||
        (opt.amp != "off" && opt.amp != "bf16" && opt.amp != "fp16") ||
        (opt.context > 0 && !opt.model.starts_with("gpt")))
      return usage(argv[0]);
  }
  // The runtime reads its thread count from here when it starts (before the first call).
  setenv("SINTER_NUM_THREADS", std::to_string(opt.threads).c_str(), 1);
  double base_rss = maxrss_mb();
  try {
    set_default_device(Device::parse(opt.device));
    Init init(0);
    if (opt.model == "mlp") {
      recipe::FashionMLP model({784, 512, 256, 10}, init);
      return run(opt, model, base_rss, [&] { return cross_entropy_step(model, opt); });
    }
    if (opt.model.starts_with("gpt")) {
      GPT model(gpt_bench(opt.model, opt.context).config, init);
      return run(opt, model, base_rss, [&] { return cross_entropy_step(model, opt); });
    }
    ViTConfig vit{.image = 28, .patch = 7, .dim = 64, .depth = 4, .heads = 4, .classes = 10};
    if (opt.model.starts_with("distill")) {
      bool base = opt.model == "distill-vit-b-s"; // ViT-B/16 → ViT-S/16
      ViTConfig teacher_config = base ? ViTConfig{224, 16, 768, 12, 12, 1000, 3} : vit;
      ViTConfig student_config =
          base ? ViTConfig{224, 16, 384, 12, 6, 1000, 3} : ViTConfig{28, 7, 32, 2, 2, 10, 1};
      ViT teacher(teacher_config, init);
      init_parameters(teacher, false, 1001.0);
      ViT student(student_config, init);
      return run(opt, student, base_rss, [&] {
        return compile_distill_step(
            student, teacher,
            [](ViT& s, const ViT& t, Var x, Var y) {
              return kd_loss(s(x), t(x), y, {.temperature = 2.0, .alpha = 0.5});
            },
            adamw{.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 1e-4},
            {.step = {.batch_names = {"images", "labels"},
                      .amp = amp_from_name(opt.amp),
                      .resident_batch = !opt.host_batch}});
      });
    }
    ViT model(vit, init);
    return run(opt, model, base_rss, [&] { return cross_entropy_step(model, opt); });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_step: %s\n", e.what());
    return 1;
  }
}
