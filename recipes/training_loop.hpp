// recipes/training_loop.hpp — the loop every recipe runs: resume, step, progress, checkpoints
#pragma once
#include "dsl/sinter.hpp"
#include "recipe_support.hpp"

#include <filesystem>

namespace recipe {

/// `--threads` and `--device`, applied before anything compiles; a bad device exits 2.
inline void apply_runtime_flags(const Flags& flags) {
  if (flags.integer("threads") > 0) setenv("SINTER_NUM_THREADS", flags.str("threads").c_str(), 1);
  if (flags.str("device").empty()) return;
  try {
    sinter::set_default_device(sinter::Device::parse(flags.str("device")));
  } catch (const std::invalid_argument& e) {
    flags.fail(std::string("--device: ") + e.what());
  }
}

/// `--amp off|bf16|fp16` as the step's mixed-precision mode; a bad value exits 2.
inline sinter::AmpMode amp_flag(const Flags& flags) {
  try {
    return sinter::amp_from_name(flags.str("amp"));
  } catch (const std::invalid_argument& e) {
    flags.fail(std::string("--amp: ") + e.what());
  }
  return sinter::AmpMode::off;
}

struct LoopResult {
  double last_loss = 0;
  int64_t steps_run = 0; ///< steps taken by this process (after any resume)
  double seconds = 0;
};

/// Resumes from `--checkpoint-dir` when `--resume` is given, then steps until `total` optimizer
/// steps, cycling epochs, showing progress, and saving `<dir>/<name>.safetensors` (with the
/// loader position) whenever `save_now(step, loader)` says so.
template <class Model, class Step, class SaveNow>
LoopResult run_training(const std::string& name, const Flags& flags, Model& model, Step& step,
                        sinter::data::DataLoader& loader, int64_t total, SaveNow save_now) {
  using namespace sinter;
  std::filesystem::path ckpt_dir = flags.str("checkpoint-dir");
  std::filesystem::path ckpt = ckpt_dir / (name + ".safetensors");
  if (flags.on("resume")) {
    if (ckpt_dir.empty()) flags.fail("--resume needs --checkpoint-dir");
    auto meta = load_checkpoint(ckpt, model, step);
    loader.seek({std::stoll(meta.at("epoch")), std::stoll(meta.at("batch"))});
    std::fprintf(stderr, "%s: resumed from %s at step %lld\n", name.c_str(), ckpt.c_str(),
                 static_cast<long long>(step.steps()));
  }
  if (!ckpt_dir.empty()) std::filesystem::create_directories(ckpt_dir);

  Progress progress(total);
  data::Batch b;
  LoopResult result;
  int64_t start_step = step.steps();
  while (step.steps() < total) {
    if (!loader.next(b)) {
      loader.start_epoch(loader.position().epoch + 1);
      continue;
    }
    result.last_loss = step(b.examples, b.labels).loss.value();
    progress.update(step.steps(), result.last_loss);
    if (!ckpt_dir.empty() && (save_now(step.steps(), loader) || step.steps() == total))
      save_checkpoint(ckpt, model, step,
                      {{"epoch", std::to_string(loader.position().epoch)},
                       {"batch", std::to_string(loader.position().batch)},
                       {"seed", flags.str("seed")}});
  }
  result.steps_run = step.steps() - start_step;
  result.seconds = progress.seconds();
  return result;
}

} // namespace recipe
