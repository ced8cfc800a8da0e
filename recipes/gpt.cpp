// recipes/gpt.cpp — a byte-level GPT trained on a text corpus (default: Debian's fortunes)
#include "dsl/sinter.hpp"
#include "training_loop.hpp"

#include <cmath>
#include <random>

using namespace sinter;

namespace {

/// Entropy in nats of the byte distribution of `data`: what a model that ignores context
/// (a unigram model) achieves at best, the bar a language model must clear.
double unigram_entropy(const data::Dataset& windows) {
  std::vector<double> counts(256, 0.0);
  TensorType t = windows.label_type();
  std::vector<int32_t> example(static_cast<std::size_t>(numel(t.shape))), label(example.size());
  double total = 0;
  for (std::size_t i = 0; i < windows.size(); ++i) {
    windows.read(i, reinterpret_cast<std::byte*>(example.data()),
                 reinterpret_cast<std::byte*>(label.data()));
    for (int32_t b : label)
      ++counts[static_cast<std::size_t>(b)];
    total += static_cast<double>(label.size());
  }
  double h = 0;
  for (double c : counts)
    if (c > 0) h -= c / total * std::log(c / total);
  return h;
}

/// Mean loss over the held-out windows.
template <class Eval>
double holdout_loss(const Eval& loss_of, const data::Dataset& split, int64_t batch) {
  data::DataLoader loader(split, {.batch_size = batch, .shuffle = false, .drop_last = true});
  data::Batch b;
  double sum = 0;
  int64_t n = 0;
  while (loader.next(b)) {
    sum += loss_of(b.examples, b.labels).at(0);
    ++n;
  }
  return n ? sum / static_cast<double>(n) : NAN;
}

/// Samples `length` bytes after `prompt`, temperature `temperature`, from the current weights.
template <class Eval>
std::string sample(const Eval& logits_of, const std::string& prompt, int64_t context,
                   int64_t length, double temperature, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string text = prompt;
  for (int64_t i = 0; i < length; ++i) {
    std::string window = text.size() > static_cast<std::size_t>(context)
                             ? text.substr(text.size() - static_cast<std::size_t>(context))
                             : text;
    // Left-pad with spaces to the full context so every call has the same shape.
    std::string padded =
        std::string(static_cast<std::size_t>(context) - window.size(), ' ') + window;
    std::vector<double> ids(padded.begin(), padded.end());
    for (double& v : ids)
      v = static_cast<unsigned char>(static_cast<char>(v));
    HostTensor logits = logits_of(HostTensor::from_doubles(DType::i32, {1, context}, ids));
    std::vector<double> p(256);
    double max_logit = -1e30;
    for (int64_t c = 0; c < 256; ++c)
      max_logit = std::max(max_logit, logits.at((context - 1) * 256 + c));
    // discrete_distribution normalises the weights itself.
    for (int64_t c = 0; c < 256; ++c)
      p[c] = std::exp((logits.at((context - 1) * 256 + c) - max_logit) / temperature);
    std::discrete_distribution<int> pick(p.begin(), p.end());
    text.push_back(static_cast<char>(pick(rng)));
  }
  return text;
}

std::string bucket_list(const std::vector<int64_t>& sizes) {
  std::string out;
  for (int64_t s : sizes)
    out += (out.empty() ? "" : ",") + std::to_string(s);
  return out;
}

} // namespace

int main(int argc, char** argv) {
  std::vector<recipe::Flag> options{
      {"steps", "800", "optimizer steps"},
      {"epochs", "0", "passes over the corpus instead of --steps (0: use --steps)"},
      {"batch-size", "32", "sequences per step, or max: the largest that fits (see --memory)"},
      {"context", "64", "tokens (bytes) per sequence"},
      {"dim", "128", "model width"},
      {"depth", "4", "transformer blocks"},
      {"heads", "4", "attention heads"},
      {"lr", "0.003", "peak AdamW learning rate (warm-up, then cosine decay)"},
      {"weight-decay", "0.01", "AdamW decoupled weight decay (not on biases, norms, embeddings)"},
      {"clip", "1.0", "global gradient-norm clipping (0: off)"},
      {"seed", "0", "initialisation, shuffling and sampling seed"},
      {"threads", "0", "worker threads (0: SINTER_NUM_THREADS or all cores)"},
      {"device", "", "cpu, cuda or cuda:N (default: SINTER_DEVICE, else cpu)"},
      {"amp", "off", "mixed precision: off, bf16 or fp16 (fp16 scales the loss)"},
      {"text", "", "a text file to train on (default: the fortunes in /usr/share/games/fortunes)"},
      {"checkpoint-dir", "", "save a checkpoint here every 500 steps and at the end"},
      {"resume", "0", "switch: continue from the checkpoint in --checkpoint-dir"},
      {"prompt", "The ", "text the sample starts from"},
      {"sample-bytes", "200", "bytes to generate at the end"},
      {"variable-length", "0",
       "switch: cut each batch to a random length in [1, --context] (seeded) and pad it to "
       "shape buckets of context/8, /4, /2 and /1 bytes: at most 4 step programs"}};
  for (recipe::Flag& f : recipe::common_flags())
    options.push_back(f);
  recipe::Flags flags(
      "gpt",
      "Trains a byte-level GPT on a text corpus (CPU or GPU), reports held-out loss and a sample.",
      options, argc, argv);
  recipe::apply_runtime_flags(flags);
  return [&]() -> int {
    try {
      int64_t context = flags.integer("context");
      if (context <= 1) flags.fail("--context must be > 1");
      auto corpus = flags.str("text").empty() ? data::fortunes_corpus(context)
                                              : data::text_windows(flags.str("text"), context);
      auto [train, holdout] = data::split_holdout(std::move(corpus), 0.05);
      // A text too short to hold windows out for the evaluation is refused before training
      // (it once trained, saved, then failed in the evaluation).
      if (holdout->size() == 0)
        throw std::runtime_error("the text gives " + std::to_string(train->size()) +
                                 " windows of " + std::to_string(context) +
                                 " bytes, too few to hold 5% out for the evaluation: give " +
                                 "a text of at least " + std::to_string(10 * context + 10) +
                                 " bytes or a smaller " + "--context");
      auto seed = static_cast<uint64_t>(flags.integer("seed"));
      Init init(seed);
      GPT model(GPTConfig{.vocab = 256,
                          .context = context,
                          .dim = flags.integer("dim"),
                          .depth = flags.integer("depth"),
                          .heads = flags.integer("heads")},
                init);
      auto loss_fn = [](GPT& m, Var ids, Var next) { return cross_entropy_mean(m(ids), next); };
      // --variable-length: both inputs share the buckets (the loss masks their padding).
      ShapeBuckets buckets;
      if (flags.on("variable-length")) {
        std::vector<int64_t> sizes;
        for (int64_t part : {8, 4, 2, 1})
          if (int64_t size = std::max<int64_t>(1, context / part);
              sizes.empty() || size != sizes.back())
            sizes.push_back(size);
        buckets = {{"ids", sizes}, {"next", sizes}};
      }
      auto make_step = [&](int64_t total) {
        return compile_step(
            model, loss_fn,
            // As GPT-2 trains: no decay on biases, norms, embeddings and positions.
            adamw{.lr = flags.real("lr"),
                  .weight_decay = flags.real("weight-decay"),
                  .groups = {param_group::no_decay_on_biases_norms_embeddings()}},
            recipe::parallel(
                flags, {.batch_names = {"ids", "next"},
                        .schedule = warmup_cosine(flags.real("lr"),
                                                  std::min<int64_t>(100, total / 10 + 1), total),
                        .clip_grad_norm = flags.real("clip"),
                        .amp = amp_flag(flags),
                        .buckets = buckets}));
      };
      if (flags.on("eval-only")) {
        recipe::load_for_evaluation("gpt", flags, model);
        auto eval_only_loss = compile_eval(model, loss_fn, {"ids", "next"});
        int64_t eval_batch = flags.str("batch-size") == "max" ? 32 : flags.integer("batch-size");
        double held_out =
            holdout_loss(eval_only_loss, *holdout,
                         std::min<int64_t>(eval_batch, static_cast<int64_t>(holdout->size())));
        if (recipe::leader())
          std::printf("result: holdout_loss=%.4f unigram_entropy=%.4f\n", held_out,
                      unigram_entropy(*train));
        return 0;
      }
      int64_t batch = recipe::batch_size(flags, [&](int64_t budget) {
        return make_step(1).max_batch(recipe::example_batch(*train), budget);
      });
      if (batch == 0) return 0; // --max-batch printed its line
      if (static_cast<int64_t>(train->size()) < batch)
        throw std::runtime_error("the text gives " + std::to_string(train->size()) +
                                 " training windows, fewer than one batch of " +
                                 std::to_string(batch) +
                                 ": give a longer text, a smaller --batch-size or --context");
      // Under mpirun each rank takes its shard of every batch: --batch-size is the global batch.
      data::DataLoader loader(
          *train, recipe::sharded({.batch_size = batch, .shuffle = true, .seed = seed}));
      int64_t total = flags.integer("epochs") > 0
                          ? flags.integer("epochs") * loader.batches_per_epoch()
                          : flags.integer("steps");
      auto step = make_step(total);
      auto eval_loss = compile_eval(model, loss_fn, {"ids", "next"});
      auto logits = compile_eval(model, [](GPT& m, Var ids) { return m(ids); }, {"ids"});

      double unigram = unigram_entropy(*train);
      if (recipe::leader())
        std::fprintf(
            stderr,
            "gpt: %lld parameters, %zu training windows of %lld bytes, unigram entropy %.3f nats\n",
            static_cast<long long>(parameter_count(model)), train->size(),
            static_cast<long long>(context), unigram);

      // The length of a step's batch depends only on the seed and the step (resumes replay it).
      auto crop = [&](data::Batch& b, int64_t steps) {
        std::mt19937_64 draw(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(steps));
        int64_t length = 1 + static_cast<int64_t>(draw() % static_cast<uint64_t>(context));
        b.examples = resize_dim(b.examples, 1, length);
        b.labels = resize_dim(b.labels, 1, length);
      };
      if (flags.on("variable-length") && recipe::leader())
        std::fprintf(stderr, "gpt: variable lengths 1..%lld padded to buckets %s\n",
                     static_cast<long long>(context), bucket_list(buckets.at("ids")).c_str());
      recipe::open_run_log(flags, {"holdout_loss"});
      recipe::LoopResult run = recipe::run_training(
          "gpt", flags, model, step, loader, total,
          [](int64_t s, const data::DataLoader&) { return s % 500 == 0; }, false, {},
          flags.on("variable-length") ? std::function<void(data::Batch&, int64_t)>(crop)
                                      : std::function<void(data::Batch&, int64_t)>());
      double held_out = holdout_loss(
          eval_loss, *holdout, std::min<int64_t>(batch, static_cast<int64_t>(holdout->size())));
      std::string text =
          sample(logits, flags.str("prompt"), context, flags.integer("sample-bytes"), 0.8, seed);
      if (!recipe::leader()) return 0;
      recipe::log_metrics(step.steps(), {{"holdout_loss", held_out}});
      std::printf("sample: %s\n", text.c_str());
      std::printf("result: holdout_loss=%.4f unigram_entropy=%.4f train_loss=%.4f steps=%lld "
                  "steps_per_second=%.1f seconds=%.1f\n",
                  held_out, unigram, run.last_loss, static_cast<long long>(step.steps()),
                  static_cast<double>(run.steps_run) / std::max(run.seconds, 1e-9), run.seconds);
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpt: %s\n", e.what());
      return 1;
    }
  }();
}
