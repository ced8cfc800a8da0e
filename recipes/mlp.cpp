// recipes/mlp.cpp — an MLP trained on Fashion-MNIST: the whole step compiled, AdamW, checkpoints
#include "dsl/sinter.hpp"
#include "recipe_support.hpp"

#include <filesystem>
#include <iostream>

using namespace sinter;

namespace {

/// Images [B, 28, 28] in [0, 1] → standardised, flattened → MLP → 10 logits.
struct FashionMLP {
  BOOST_HANA_DEFINE_STRUCT(FashionMLP, (MLP, mlp));

  FashionMLP(const std::vector<int64_t>& widths, Init& init) : mlp(widths, init) {}
  Var operator()(const Var& images) const {
    Value x = images.value();
    int64_t batch = x.shape()[0];
    Value flat = reshape((x - 0.2860) * (1.0 / 0.3530), {batch, 784}); // dataset mean and std
    return mlp(Var(flat));
  }
};

std::vector<int64_t> parse_widths(const recipe::Flags& flags) {
  std::vector<int64_t> widths{784};
  std::string spec = flags.str("hidden");
  std::size_t at = 0;
  while (at <= spec.size()) {
    std::size_t comma = spec.find(',', at);
    std::string part = spec.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    try {
      widths.push_back(std::stoll(part));
    } catch (...) {
      flags.fail("--hidden must be comma-separated widths such as 512,256, got '" + spec + "'");
    }
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  widths.push_back(10);
  return widths;
}

/// Fraction of the split classified correctly by the model's current weights.
template <class Eval> double accuracy(Eval& logits_of, const data::Dataset& split, int64_t batch) {
  data::DataLoader loader(split, {.batch_size = batch, .shuffle = false, .drop_last = false});
  data::Batch b;
  int64_t correct = 0, seen = 0;
  while (loader.next(b)) {
    HostTensor logits = logits_of(b.examples);
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

} // namespace

int main(int argc, char** argv) {
  recipe::Flags flags(
      "mlp", "Trains an MLP on Fashion-MNIST (CPU) and reports test accuracy.",
      {{"epochs", "10", "passes over the 60000 training images"},
       {"steps", "0", "stop after this many steps (0: run all epochs)"},
       {"batch-size", "128", "examples per step"},
       {"lr", "0.002", "peak AdamW learning rate (warm-up, then cosine decay)"},
       {"weight-decay", "0.0001", "AdamW decoupled weight decay"},
       {"hidden", "512,256", "hidden layer widths"},
       {"seed", "0", "initialisation and shuffling seed"},
       {"threads", "0", "worker threads (0: SINTER_NUM_THREADS or all cores)"},
       {"data-dir", "", "Fashion-MNIST IDX files (default: Debian's dataset-fashion-mnist)"},
       {"checkpoint-dir", "", "save a checkpoint here after every epoch"},
       {"resume", "0", "switch: continue from the checkpoint in --checkpoint-dir"}},
      argc, argv);
  if (flags.integer("threads") > 0) setenv("SINTER_NUM_THREADS", flags.str("threads").c_str(), 1);
  try {
    std::filesystem::path dir = flags.str("data-dir").empty()
                                    ? data::default_fashion_mnist_dir()
                                    : std::filesystem::path(flags.str("data-dir"));
    auto train = data::fashion_mnist(data::Split::train, dir);
    auto test = data::fashion_mnist(data::Split::test, dir);
    int64_t batch = flags.integer("batch-size"), epochs = flags.integer("epochs");
    if (batch <= 0) flags.fail("--batch-size must be positive");
    auto seed = static_cast<uint64_t>(flags.integer("seed"));

    Init init(seed);
    FashionMLP model(parse_widths(flags), init);
    data::DataLoader loader(*train, {.batch_size = batch, .shuffle = true, .seed = seed});
    int64_t per_epoch = loader.batches_per_epoch();
    int64_t total = flags.integer("steps") > 0 ? flags.integer("steps") : epochs * per_epoch;
    auto step = compile_step(
        model,
        [](FashionMLP& m, Var images, Var labels) { return cross_entropy_mean(m(images), labels); },
        adamw{.lr = flags.real("lr"), .weight_decay = flags.real("weight-decay")},
        {.batch_names = {"images", "labels"},
         .schedule =
             warmup_cosine(flags.real("lr"), std::min<int64_t>(200, total / 10 + 1), total)});
    auto logits =
        compile_eval(model, [](FashionMLP& m, Var images) { return m(images); }, {"images"});

    std::filesystem::path ckpt_dir = flags.str("checkpoint-dir");
    std::filesystem::path ckpt = ckpt_dir / "mlp.safetensors";
    if (flags.on("resume")) {
      if (ckpt_dir.empty()) flags.fail("--resume needs --checkpoint-dir");
      auto meta = load_checkpoint(ckpt, model, step);
      loader.seek({std::stoll(meta.at("epoch")), std::stoll(meta.at("batch"))});
      std::fprintf(stderr, "mlp: resumed from %s at step %lld\n", ckpt.c_str(),
                   static_cast<long long>(step.steps()));
    }
    if (!ckpt_dir.empty()) std::filesystem::create_directories(ckpt_dir);

    std::fprintf(stderr, "mlp: %lld parameters, %lld steps of batch %lld\n",
                 static_cast<long long>(parameter_count(model)), static_cast<long long>(total),
                 static_cast<long long>(batch));
    recipe::Progress progress(total);
    data::Batch b;
    double loss = 0;
    int64_t start_step = step.steps();
    while (step.steps() < total) {
      if (!loader.next(b)) {
        loader.start_epoch(loader.position().epoch + 1);
        continue;
      }
      StepOutput out = step(b.examples, b.labels);
      loss = out.loss.value();
      progress.update(step.steps(), loss);
      bool epoch_end = loader.position().batch == per_epoch || step.steps() == total;
      if (!ckpt_dir.empty() && epoch_end)
        save_checkpoint(ckpt, model, step,
                        {{"epoch", std::to_string(loader.position().epoch)},
                         {"batch", std::to_string(loader.position().batch)},
                         {"seed", std::to_string(seed)}});
    }
    double seconds = progress.seconds();
    double test_accuracy = accuracy(logits, *test, 1000);
    std::printf("result: test_accuracy=%.4f train_loss=%.4f steps=%lld steps_per_second=%.1f "
                "seconds=%.1f\n",
                test_accuracy, loss, static_cast<long long>(step.steps()),
                static_cast<double>(step.steps() - start_step) / std::max(seconds, 1e-9), seconds);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlp: %s\n", e.what());
    return 1;
  }
}
