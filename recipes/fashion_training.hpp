// recipes/fashion_training.hpp — the Fashion-MNIST training loop the mlp and vit recipes share
#pragma once
#include "dsl/sinter.hpp"
#include "training_loop.hpp"

#include <filesystem>

namespace recipe {

/// Flags every Fashion-MNIST recipe takes; `defaults` overrides the generic defaults.
inline std::vector<Flag> fashion_flags(const std::map<std::string, std::string>& defaults,
                                       std::vector<Flag> extra) {
  std::vector<Flag> flags{
      {"epochs", "10", "passes over the 60000 training images"},
      {"steps", "0", "stop after this many steps (0: run all epochs)"},
      {"batch-size", "128", "examples per step, or max: the largest that fits (see --memory)"},
      {"lr", "0.002", "peak AdamW learning rate (warm-up, then cosine decay)"},
      {"weight-decay", "0.0001", "AdamW decoupled weight decay"},
      {"seed", "0", "initialisation and shuffling seed"},
      {"threads", "0", "worker threads (0: SINTER_NUM_THREADS or all cores)"},
      {"device", "", "cpu, cuda or cuda:N (default: SINTER_DEVICE, else cpu)"},
      {"amp", "off", "mixed precision: off, bf16 or fp16 (fp16 scales the loss)"},
      {"data-dir", "", "Fashion-MNIST IDX files (default: Debian's dataset-fashion-mnist)"},
      {"checkpoint-dir", "", "save a checkpoint here after every epoch"},
      {"resume", "0", "switch: continue from the checkpoint in --checkpoint-dir"},
      {"eval-every-epoch", "0",
       "switch: after each epoch print `epoch E test_accuracy=A steps=N seconds=S` (the "
       "evaluation is left out of the training time)"},
      {"evals-per-epoch", "1",
       "with --eval-every-epoch: evaluate N times per epoch, at every 1/N of its batches (E is "
       "then fractional, e.g. 2.25)"}};
  for (Flag& f : flags)
    if (auto it = defaults.find(f.name); it != defaults.end()) f.default_value = it->second;
  flags.insert(flags.end(), extra.begin(), extra.end());
  for (Flag& f : common_flags())
    flags.push_back(f);
  for (Flag& f : sift_flags())
    flags.push_back(f);
  return flags;
}

/// Fraction of `split` the model classifies correctly (logits from `logits_of`, 10 classes).
template <class Eval>
double accuracy(const Eval& logits_of, const sinter::data::Dataset& split, int64_t batch) {
  sinter::data::DataLoader loader(split,
                                  {.batch_size = batch, .shuffle = false, .drop_last = false});
  sinter::data::Batch b;
  int64_t correct = 0, seen = 0;
  while (loader.next(b)) {
    sinter::HostTensor logits = logits_of(b.examples);
    for (int64_t r = 0; r < b.real_rows; ++r) {
      int64_t best = 0;
      for (int64_t c = 1; c < 10; ++c)
        if (logits.at(r * 10 + c) > logits.at(r * 10 + best)) best = c;
      correct += best == static_cast<int64_t>(b.labels.at(r));
    }
    seen += b.real_rows;
  }
  return static_cast<double>(correct) / static_cast<double>(std::max<int64_t>(seen, 1));
}

/// Trains `model` (images [B,28,28] → 10 logits) with AdamW and prints the result line.
template <class Model>
int train_fashion(const std::string& name, const Flags& flags, Model& model) {
  using namespace sinter;
  std::filesystem::path dir = flags.str("data-dir").empty()
                                  ? data::default_fashion_mnist_dir()
                                  : std::filesystem::path(flags.str("data-dir"));
  auto train = data::fashion_mnist(data::Split::train, dir);
  auto test = data::fashion_mnist(data::Split::test, dir);
  if (flags.on("eval-only")) {
    load_for_evaluation(name, flags, model);
    auto logits = compile_eval(model, [](Model& m, Var images) { return m(images); }, {"images"});
    double test_accuracy = accuracy(logits, *test, 500);
    if (leader()) std::printf("result: test_accuracy=%.4f\n", test_accuracy);
    return 0;
  }
  open_run_log(flags, {"test_accuracy"});
  int64_t epochs = flags.integer("epochs");
  auto step_options = [&](int64_t total) {
    return parallel(flags, {.batch_names = {"images", "labels"},
                            .schedule = warmup_cosine(
                                flags.real("lr"), std::min<int64_t>(200, total / 10 + 1), total),
                            .amp = amp_flag(flags)});
  };
  auto optimizer = adamw{.lr = flags.real("lr"), .weight_decay = flags.real("weight-decay")};
  auto make_step = [&](int64_t total) {
    return compile_step(
        model,
        [](Model& m, Var images, Var labels) { return cross_entropy_mean(m(images), labels); },
        optimizer, step_options(total));
  };
  int64_t batch = batch_size(
      flags, [&](int64_t budget) { return make_step(1).max_batch(example_batch(*train), budget); });
  if (batch == 0) return 0; // --max-batch printed its line
  auto seed = static_cast<uint64_t>(flags.integer("seed"));
  // Under mpirun each rank takes its shard of every batch: --batch-size is the global batch.
  Communicator& ranks = world();
  std::optional<SiftOptions> sift = sift_options(flags);
  const bool in_step = sift && sift_in_step(flags);
  // Every mode backpropagates --batch-size samples per update: in-step sifting scores batches
  // of about batch·(1+beta) rows and trains on `batch` of them.
  data::DataLoader loader(
      *train, sharded({.batch_size = in_step ? sift_scored_batch(flags, batch, sift->beta) : batch,
                       .shuffle = true,
                       .seed = seed}));
  int64_t per_epoch = loader.batches_per_epoch();
  // The sifting loader trains on about 1/(1+beta) of each epoch's batches (all of its delay's):
  // --epochs E ends where the E-th pass over the data ends, the schedule spanning the estimate.
  // In-step sifting scores each batch in its own step.
  int64_t total = flags.integer("steps") > 0 ? flags.integer("steps")
                                             : sifted_steps(per_epoch, epochs, sift, in_step);
  const int64_t until_epoch = sifting_ends_with_epochs(flags, sift, in_step) ? epochs : 0;
  auto logits = compile_eval(model, [](Model& m, Var images) { return m(images); }, {"images"});

  if (leader())
    std::fprintf(stderr, "%s: %lld parameters, %lld steps of batch %lld%s\n", name.c_str(),
                 static_cast<long long>(parameter_count(model)), static_cast<long long>(total),
                 static_cast<long long>(batch),
                 ranks.size() > 1
                     ? (" over " + std::to_string(ranks.size()) + " ranks (data parallel)").c_str()
                     : "");
  auto at_epoch_end = [&](int64_t, const auto& l) { return l.position().batch == per_epoch; };
  const int64_t evals_per_epoch = flags.integer("evals-per-epoch");
  if (evals_per_epoch < 1 || evals_per_epoch > per_epoch)
    flags.fail("--evals-per-epoch must be between 1 and the " + std::to_string(per_epoch) +
               " batches of an epoch");
  // Evaluations are numbered from the run's start: evaluation n is at epoch n / evals_per_epoch.
  int64_t evaluations_done = -1; // unknown until the first step: a resumed run starts mid-epoch
  Evaluation evaluation;
  if (flags.on("eval-every-epoch")) {
    auto evaluate = [&](int64_t steps, double seconds) {
      double a = accuracy(logits, *test, 500);
      log_metrics(steps, {{"test_accuracy", a}});
      if (leader())
        std::printf("epoch %s test_accuracy=%.4f steps=%lld seconds=%.1f\n",
                    epoch_label(evaluations_done, evals_per_epoch).c_str(), a,
                    static_cast<long long>(steps), seconds);
      std::fflush(stdout);
    };
    // The inner loader's position counts scored batches in every mode (a sifting loader reads
    // several of them per batch it hands out), so 1/N of an epoch is 1/N of the data scored.
    auto evaluations_passed = [&] {
      data::DataLoader::Position at = loader.position();
      return at.epoch * evals_per_epoch + at.batch * evals_per_epoch / per_epoch;
    };
    evaluation.at_epoch_end = [&, evaluate](int64_t steps, double seconds) {
      evaluations_done = (loader.position().epoch + 1) * evals_per_epoch;
      evaluate(steps, seconds);
    };
    if (evals_per_epoch > 1)
      evaluation.within_epoch = [&, evaluate, evaluations_passed](int64_t steps, double seconds) {
        int64_t passed = evaluations_passed();
        if (evaluations_done < 0) evaluations_done = passed; // points before a resume are past
        // The epoch's last point is its end, which at_epoch_end evaluates.
        if (passed <= evaluations_done || passed % evals_per_epoch == 0) return false;
        evaluations_done = passed;
        evaluate(steps, seconds);
        return true;
      };
  }
  LoopResult run;
  std::string sifted;
  int64_t steps_done = 0;
  if (in_step) {
    StepOptions options = step_options(total);
    options.sift = sift;
    options.sift_rows = batch / ranks.size();
    auto step = compile_step(
        model,
        [](Model& m, Var images, Var labels) -> Var {
          return cross_entropy_loss(m(images), labels, {}, Reduction::none);
        },
        optimizer, options);
    run = run_training(name, flags, model, step, loader, total, at_epoch_end, false, evaluation);
    SiftCounts counts = step.runtime().sift_counts();
    sifted = sifted_result(counts.kept_fraction(), counts.kept * ranks.size());
    steps_done = step.steps();
  } else if (sift) {
    auto step = make_step(total);
    auto per_sample =
        compile_eval(model,
                     [](Model& m, Var images, Var labels) -> Var {
                       return cross_entropy_loss(m(images), labels, {}, Reduction::none);
                     },
                     {"images", "labels"});
    SiftingLoader sifting(
        loader, [&](const data::Batch& b) { return per_sample(b.examples, b.labels); }, *sift);
    run = run_training(name, flags, model, step, sifting, total, at_epoch_end, false, evaluation,
                       {}, until_epoch);
    sifted = sifted_result(sifting.rule().kept_fraction(), sifting.delivered());
    steps_done = step.steps();
  } else {
    auto step = make_step(total);
    run = run_training(name, flags, model, step, loader, total, at_epoch_end, false, evaluation);
    steps_done = step.steps();
  }
  double test_accuracy = accuracy(logits, *test, 500);
  if (!leader()) return 0;
  log_metrics(steps_done, {{"test_accuracy", test_accuracy}});
  std::printf("result: test_accuracy=%.4f train_loss=%.4f steps=%lld steps_per_second=%.1f "
              "seconds=%.1f%s\n",
              test_accuracy, run.last_loss, static_cast<long long>(steps_done),
              static_cast<double>(run.steps_run) / std::max(run.seconds, 1e-9), run.seconds,
              sifted.c_str());
  return 0;
}

/// main() around a recipe body: flags errors exit 2, every other error prints and exits 1.
template <class Body> int run(const std::string& name, Body body) {
  try {
    return body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), e.what());
    return 1;
  }
}

} // namespace recipe
