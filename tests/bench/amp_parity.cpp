// tests/bench/amp_parity.cpp — sinter's side of the mixed-precision parity study (amp_parity.py)
//
// Trains sinter::GPT (vocab 256, --context T, --dim, --depth, --heads; separate head with bias)
// on batches of bytes that amp_parity.py wrote, with AdamW (lr 1e-3, betas 0.9/0.999, eps 1e-8,
// weight decay 1e-4), and prints what the study compares:
//   amp_parity --write-init FILE [model flags] [--seed S]
//       writes the model's initial weights (sinter::Init(S)) as a safetensors file (save_weights:
//       `model.<parameter>` names) for both sides to start from
//   amp_parity --init FILE --train FILE --holdout FILE --steps N --batch B [--amp off|bf16|fp16]
//              [--grads FILE] [--device cpu|cuda[:N]] [model flags]
//       FILE of --train: N·B rows of T+1 bytes (row r: input bytes 0..T-1, next bytes 1..T);
//       --holdout: a multiple of B such rows. Prints `loss step=<k> value=<v>` after each update
//       (the loss of batch k, k = 1..N), then `holdout loss=<mean over the holdout batches>`.
//       --grads: before training, the loss's gradient at the initial weights on batch 1 under
//       --amp (value_and_grad with .amp), one f32 tensor per parameter, as a safetensors file;
//       with --grad-scale S the loss is multiplied by S before the backward pass and the
//       gradients divided by it after, as fp16's loss scaling does (S = its initial 65536).
//       --save FILE: after the N updates, the trained weights as --write-init writes them (a
//       later study can start from them: amp_parity.py --init).
// SINTER_ATTENTION=fused|decomposed picks the attention path as everywhere else.
#include "dsl/sinter.hpp"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

using namespace sinter;

namespace {

struct Options {
  GPTConfig model{.vocab = 256, .context = 256, .dim = 256, .depth = 4, .heads = 4};
  std::string write_init, init, train, holdout, grads, save, amp = "off", device = "cpu";
  int64_t steps = 0, batch = 0;
  uint64_t seed = 0;
  double grad_scale = 1.0;
};

std::vector<unsigned char> read_bytes(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open '" + file + "'");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// Rows [first, first + batch) of a file of (T + 1)-byte rows: the ids and the next bytes.
std::pair<HostTensor, HostTensor> batch_at(const std::vector<unsigned char>& rows, int64_t first,
                                           int64_t batch, int64_t context) {
  std::vector<double> ids, next;
  for (int64_t r = first; r < first + batch; ++r) {
    const unsigned char* row = rows.data() + r * (context + 1);
    for (int64_t t = 0; t < context; ++t) {
      ids.push_back(row[t]);
      next.push_back(row[t + 1]);
    }
  }
  return {HostTensor::from_doubles(DType::i32, {batch, context}, ids),
          HostTensor::from_doubles(DType::i32, {batch, context}, next)};
}

int64_t rows_in(const std::vector<unsigned char>& rows, const std::string& file, int64_t context) {
  if (rows.empty() || rows.size() % static_cast<std::size_t>(context + 1) != 0)
    throw std::runtime_error(
        "'" + file + "' holds " + std::to_string(rows.size()) +
        " bytes, not a whole number of rows of --context + 1 = " + std::to_string(context + 1));
  return static_cast<int64_t>(rows.size()) / (context + 1);
}

int train(const Options& opt) {
  Init init(opt.seed);
  GPT model(opt.model, init);
  load_weights(opt.init, model);
  const int64_t t = opt.model.context;
  std::vector<unsigned char> train_rows = read_bytes(opt.train),
                             holdout_rows = read_bytes(opt.holdout);
  if (rows_in(train_rows, opt.train, t) < opt.steps * opt.batch)
    throw std::runtime_error("'" + opt.train + "' holds fewer than --steps × --batch rows");
  const int64_t holdout_batches = rows_in(holdout_rows, opt.holdout, t) / opt.batch;
  auto loss_fn = [](GPT& m, Var ids, Var next) { return cross_entropy_mean(m(ids), next); };

  if (!opt.grads.empty()) {
    const double scale = opt.grad_scale;
    auto grads = value_and_grad(
        model,
        [scale](GPT& m, Var ids, Var next) { return cross_entropy_mean(m(ids), next) * scale; },
        {.batch_names = {"ids", "next"}, .amp = amp_from_name(opt.amp)});
    auto [ids, next] = batch_at(train_rows, 0, opt.batch, t);
    GradResult g = grads(ids, next);
    std::vector<std::pair<std::string, HostTensor>> unscaled;
    for (const NamedTensor& n : g.grads) {
      std::vector<double> v = n.tensor.to_doubles();
      for (double& x : v)
        x /= scale;
      unscaled.emplace_back(n.name, HostTensor::from_doubles(DType::f32, n.tensor.shape(), v));
    }
    std::vector<std::pair<std::string, const HostTensor*>> named;
    for (const auto& [name, tensor] : unscaled)
      named.emplace_back(name, &tensor);
    save_safetensors(opt.grads, named, {{"loss", std::to_string(g.value.at(0) / scale)}});
  }

  auto step = compile_step(
      model, loss_fn,
      adamw{.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 1e-4},
      {.batch_names = {"ids", "next"}, .amp = amp_from_name(opt.amp)});
  for (int64_t k = 0; k < opt.steps; ++k) {
    auto [ids, next] = batch_at(train_rows, k * opt.batch, opt.batch, t);
    double loss = step(ids, next).loss.value();
    std::printf("loss step=%lld value=%.6f\n", static_cast<long long>(k + 1), loss);
    std::fflush(stdout);
  }
  if (!opt.save.empty()) save_weights(opt.save, model);
  // Held-out loss in f32, as each side evaluates its f32 master weights.
  auto eval = compile_eval(model, loss_fn, {"ids", "next"});
  double sum = 0;
  for (int64_t b = 0; b < holdout_batches; ++b) {
    auto [ids, next] = batch_at(holdout_rows, b * opt.batch, opt.batch, t);
    sum += eval(ids, next).at(0);
  }
  std::printf("holdout loss=%.6f\n", sum / static_cast<double>(holdout_batches));
  return 0;
}

int usage() {
  std::fprintf(stderr,
               "usage: amp_parity --write-init FILE [--seed S] [model flags]\n"
               "       amp_parity --init FILE --train FILE --holdout FILE --steps N --batch B "
               "[--amp off|bf16|fp16] [--grads FILE [--grad-scale S]] [--save FILE] "
               "[--device cpu|cuda[:N]] [model flags]\n"
               "model flags: --context T --dim D --depth L --heads H\n");
  return 2;
}

} // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (i + 1 >= argc) return usage();
    std::string v = argv[++i];
    if (a == "--write-init")
      opt.write_init = v;
    else if (a == "--init")
      opt.init = v;
    else if (a == "--train")
      opt.train = v;
    else if (a == "--holdout")
      opt.holdout = v;
    else if (a == "--grads")
      opt.grads = v;
    else if (a == "--save")
      opt.save = v;
    else if (a == "--amp")
      opt.amp = v;
    else if (a == "--device")
      opt.device = v;
    else if (a == "--steps")
      opt.steps = std::atoll(v.c_str());
    else if (a == "--batch")
      opt.batch = std::atoll(v.c_str());
    else if (a == "--grad-scale")
      opt.grad_scale = std::atof(v.c_str());
    else if (a == "--seed")
      opt.seed = std::strtoull(v.c_str(), nullptr, 10);
    else if (a == "--context")
      opt.model.context = std::atoll(v.c_str());
    else if (a == "--dim")
      opt.model.dim = std::atoll(v.c_str());
    else if (a == "--depth")
      opt.model.depth = std::atoll(v.c_str());
    else if (a == "--heads")
      opt.model.heads = std::atoll(v.c_str());
    else
      return usage();
  }
  try {
    set_default_device(Device::parse(opt.device));
    if (!opt.write_init.empty()) {
      Init init(opt.seed);
      GPT model(opt.model, init);
      save_weights(opt.write_init, model);
      return 0;
    }
    if (opt.init.empty() || opt.train.empty() || opt.holdout.empty() || opt.steps < 1 ||
        opt.batch < 1)
      return usage();
    return train(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "amp_parity: %s\n", e.what());
    return 1;
  }
}
