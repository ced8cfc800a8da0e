// recipes/training_loop.hpp — the loop every recipe runs: resume, step, progress, checkpoints
#pragma once
#include "dsl/sinter.hpp"
#include "jit/train/sift.hpp"
#include "recipe_support.hpp"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <type_traits>

namespace recipe {

/// Whether this process prints progress, results and writes checkpoints: rank 0 of a job
/// launched with mpirun (docs/distributed.md), or the process alone.
inline bool leader() { return sinter::world().rank() == 0; }

/// `--loader-threads`: the prefetch threads of the training loaders (set by
/// apply_runtime_flags, read by sharded()).
inline int loader_threads = 2;

/// `--threads`, `--device`, `--collective-timeout`, `--loader-threads`, `--check-numerics` and
/// `--profile`,
/// applied before anything compiles; a bad value exits 2.
inline void apply_runtime_flags(const Flags& flags) {
  if (flags.integer("threads") > 0) setenv("SINTER_NUM_THREADS", flags.str("threads").c_str(), 1);
  loader_threads = static_cast<int>(flags.integer("loader-threads"));
  if (flags.on("check-numerics")) sinter::set_check_numerics(true);
  if (!flags.str("profile").empty()) {
    // Under mpirun each rank profiles itself, into its own folder.
    std::filesystem::path dir = flags.str("profile");
    if (sinter::world().size() > 1) dir /= "rank" + std::to_string(sinter::world().rank());
    try {
      sinter::profile::start_until_exit(dir); // written at exit, after the result line
    } catch (const std::exception& e) {
      flags.fail(std::string("--profile: ") + e.what());
    }
  }
  if (!flags.str("collective-timeout").empty()) {
    double seconds = flags.real("collective-timeout"); // in range: flag_ranges
    sinter::world().set_timeout(std::chrono::duration<double>(seconds));
  }
  if (flags.str("device").empty()) return;
  std::string device = flags.str("device");
  // Under mpirun each rank of a host takes its own GPU: `cuda` means cuda:<local rank>.
  if (device == "cuda" && sinter::world().size() > 1)
    device = "cuda:" + std::to_string(sinter::world_place_from_environment().local_rank);
  try {
    sinter::set_default_device(sinter::Device::parse(device));
  } catch (const std::invalid_argument& e) {
    flags.fail(std::string("--device: ") + e.what());
  }
}

/// `options` with `--zero` and `--bucket-mb` (data parallel under mpirun); their ranges are
/// checked when the recipe starts (flag_ranges).
inline sinter::StepOptions parallel(const Flags& flags, sinter::StepOptions options) {
  int64_t zero = flags.integer("zero");
  double mib = flags.real("bucket-mb");
  options.zero = static_cast<int>(zero);
  options.bucket_bytes = std::max<int64_t>(1, static_cast<int64_t>(mib * 1024 * 1024));
  options.check_every = flags.integer("check-every");
  return options;
}

/// `options` taking this rank's shard of every global batch (every rank of a job launched with
/// mpirun; --batch-size stays the global batch), read ahead by --loader-threads threads.
inline sinter::data::LoaderOptions sharded(sinter::data::LoaderOptions options) {
  options.prefetch_threads = loader_threads;
  options.shard = sinter::world().rank();
  options.shards = sinter::world().size();
  return options;
}

/// The sifting flags (docs/sifting.md) of the recipes that take them.
inline std::vector<Flag> sift_flags() {
  return {{"sift-beta", "0",
           "smart sifting: keep a sample with probability percentile(loss)^B (about 1/(1+B) "
           "of them; 0: off)"},
          {"sift-history", "500", "sifting: losses the percentile is taken among"},
          {"sift-delay", "0", "sifting: steps of plain training first"},
          {"sift-mode", "loader",
           "sifting: loader (score each batch, then train on full batches of kept samples) or "
           "in-step (the step scores its batch and trains on round(B/(1+beta)) drawn rows)"},
          {"sift-repeat-delay", "0", "switch: sifting's delay again at every epoch's start"},
          {"sift-scored-batch", "0",
           "in-step sifting: rows each step scores, of which it trains on --batch-size (0: "
           "round(batch-size x (1 + beta)), the rule's expected share)"}};
}

/// The sifting options of `--sift-*`, or none without `--sift-beta`; bad values exit 2.
inline std::optional<sinter::SiftOptions> sift_options(const Flags& flags) {
  double beta = flags.real("sift-beta");
  if (beta == 0 && flags.integer("sift-scored-batch") != 0)
    flags.fail("--sift-scored-batch needs sifting on: add --sift-beta B --sift-mode in-step");
  if (beta == 0) return std::nullopt;
  if (flags.str("sift-mode") != "loader" && flags.str("sift-mode") != "in-step")
    flags.fail("--sift-mode takes loader or in-step");
  if (flags.str("sift-mode") == "loader" && flags.integer("sift-scored-batch") != 0)
    flags.fail("--sift-scored-batch sets in-step sifting's scored rows; the loader mode keeps "
               "each sample by the rule (add --sift-mode in-step)");
  if (flags.str("sift-mode") == "loader" && sinter::world().size() > 1)
    flags.fail("--sift-mode loader under mpirun would keep different numbers of samples on each "
               "rank; use --sift-mode in-step, which every rank runs in step");
  return sinter::SiftOptions{.beta = beta,
                             .history = flags.integer("sift-history"),
                             .delay = flags.integer("sift-delay"),
                             .repeat_delay = flags.on("sift-repeat-delay"),
                             .seed = static_cast<uint64_t>(flags.integer("seed")) + 7919};
}

/// Whether `--sift-mode in-step` asks for sifting inside the compiled step.
inline bool sift_in_step(const Flags& flags) { return flags.str("sift-mode") == "in-step"; }

/// In-step sifting's scored batch for updates of `batch` rows: --sift-scored-batch, or by
/// default round(batch · (1 + beta)) (the sifting loader scores as many per update), rounded up
/// to whole shards under mpirun.
inline int64_t sift_scored_batch(const Flags& flags, int64_t batch, double beta) {
  const int64_t ranks = sinter::world().size();
  int64_t scored = flags.integer("sift-scored-batch");
  if (scored < 0)
    flags.fail("--sift-scored-batch must be 0 (from --sift-beta) or a number of rows");
  if (scored == 0)
    scored = static_cast<int64_t>(std::llround(static_cast<double>(batch) * (1.0 + beta)));
  else if (scored < batch)
    flags.fail("--sift-scored-batch " + std::to_string(scored) +
               " is smaller than the --batch-size " + std::to_string(batch) +
               " rows each update trains on: score at least as many rows as are trained");
  return (scored + ranks - 1) / ranks * ranks;
}

/// Updates in `epochs` passes of `per_epoch` batches. The sifting loader trains every batch of
/// its delay whole (the run's first `delay` batches, or each epoch's with repeat_delay) and
/// fills about 1/(1+beta) of the others with kept samples; in-step sifting (its batches already
/// scored at batch·(1+beta) rows) and no sifting take every batch. An estimate for the
/// schedule: a loader-sifted run ends where its last pass over the data does
/// (`sifting_ends_with_epochs`).
inline int64_t sifted_steps(int64_t per_epoch, int64_t epochs,
                            const std::optional<sinter::SiftOptions>& sift, bool in_step) {
  if (!sift || in_step) return per_epoch * epochs;
  double steps = 0;
  for (int64_t e = 0; e < epochs; ++e) {
    int64_t delayed = sift->repeat_delay ? sift->delay : sift->delay - e * per_epoch;
    delayed = std::clamp<int64_t>(delayed, 0, per_epoch);
    steps += static_cast<double>(delayed) +
             static_cast<double>(per_epoch - delayed) / (1.0 + sift->beta);
  }
  return std::max<int64_t>(1, static_cast<int64_t>(steps));
}

/// Whether a run of --epochs ends where the inner loader's last pass ends rather than at a step
/// count: loader-mode sifting, whose steps per pass depend on the samples kept.
inline bool sifting_ends_with_epochs(const Flags& flags,
                                     const std::optional<sinter::SiftOptions>& sift, bool in_step) {
  return sift && !in_step && flags.integer("steps") == 0;
}

/// What sifting adds to a recipe's result line.
inline std::string sifted_result(double kept_fraction, int64_t samples_backpropagated) {
  char text[96];
  std::snprintf(text, sizeof text, " kept_fraction=%.4f samples_backpropagated=%lld", kept_fraction,
                static_cast<long long>(samples_backpropagated));
  return text;
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

/// Flags every recipe takes: `--max-batch` and `--memory` (with `--batch-size max`), and for
/// jobs of several ranks `--collective-timeout`, `--zero` and `--bucket-mb`.
inline std::vector<Flag> common_flags() {
  return {{"profile", "",
           "profile the training steps into this folder: trace.json (open in Perfetto), "
           "report.html and summary.txt; the verdicts are printed at the end "
           "(docs/profiling.md)"},
          {"check-numerics", "0",
           "switch: stop at the first inf or NaN a step makes, naming the op, its model path, "
           "the step and which of its inputs already held one (also SINTER_CHECK_NUMERICS=1)"},
          {"loader-threads", "2",
           "threads that read training batches ahead of the step (0: read each batch inside "
           "the loop)"},
          {"collective-timeout", "",
           "under mpirun: seconds a collective waits for the other ranks before the job ends "
           "naming them (default: SINTER_COLLECTIVE_TIMEOUT, else 300)"},
          {"zero", "0",
           "under mpirun: ZeRO stage 0, 1 (each rank keeps 1/N of the optimizer state) or 2 "
           "(also reduce-scatters the gradients)"},
          {"stop-after", "0",
           "stop after this many steps of this run, saving a checkpoint (with "
           "--checkpoint-dir): a later --resume trains the rest of --steps/--epochs, on any "
           "number of ranks (0: run to the end)"},
          {"check-every", "0",
           "under mpirun: compare the ranks' parameter checksums every this many steps and stop "
           "naming a parameter that drifted (0: only at the start)"},
          {"bucket-mb", "25",
           "under mpirun: gradient bucket size in MiB; each bucket's reduction starts as soon "
           "as the backward pass has produced it"},
          {"max-batch", "0",
           "switch: print the largest batch that fits (max_batch=N peak_bytes=P "
           "next_peak_bytes=Q budget_bytes=M, from the memory plan) and exit"},
          {"memory", "",
           "memory budget of --max-batch and --batch-size max: bytes, or with a K/M/G suffix "
           "(default: the device's free memory; on the CPU the host's available memory)"},
          {"eval-only", "0",
           "switch: evaluate the checkpoint in --checkpoint-dir (its weights) and print the "
           "result line with the evaluation's fields only; train nothing"},
          {"allow-changed", "",
           "with --resume: flags (comma-separated, e.g. steps,lr) that may differ from the "
           "values the checkpoint was written with; any other that differs stops the run"},
          {"log-dir", "",
           "write the run's metrics into this folder: metrics.csv and TensorBoard event files "
           "(step, epoch, loss, lr, throughput, host memory, the evaluations); `sinter plot "
           "DIR` draws them (docs/training.md)"},
          {"log-every", "10", "with --log-dir: record the training metrics every this many steps"}};
}

/// --log-dir: the run's metrics log (rank 0 only; empty without the flag).
inline std::optional<sinter::Logger>& run_log() {
  static std::optional<sinter::Logger> log;
  return log;
}

/// Opens the run's log when --log-dir is given: the training columns every recipe records,
/// then the recipe's `evaluations` (e.g. test_accuracy). A folder that holds another run's
/// metrics or cannot be written stops the recipe (exit 2) before any work.
inline void open_run_log(const Flags& flags, const std::vector<std::string>& evaluations) {
  if (flags.str("log-dir").empty() || !leader()) return;
  std::vector<std::string> columns{
      "epoch", "loss", "lr", "steps_per_second", "samples_per_second", "host_memory_mb"};
  columns.insert(columns.end(), evaluations.begin(), evaluations.end());
  try {
    run_log().emplace(flags.str("log-dir"), columns);
  } catch (const std::exception& e) {
    flags.fail(std::string("--log-dir: ") + e.what());
  }
}

/// Records `values` at `step` in the run's log, if it has one.
inline void log_metrics(int64_t step, const std::map<std::string, double>& values) {
  if (run_log()) run_log()->record(step, values);
}

/// This process's resident host memory in MiB (/proc/self/statm), 0 where unknown.
inline double host_memory_mb() {
  long pages = 0, resident = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / 1048576.0;
}

/// Whether flag `name` changes what a run trains: those are stored in its checkpoints
/// (`flag.<name>`), and --resume with another value stops unless --allow-changed names it.
/// The others say only where or how this process runs (or how its result is reported).
inline bool changes_training(const std::string& name) {
  static const std::set<std::string> local = {
      "checkpoint-dir",  "resume",         "device",
      "threads",         "loader-threads", "profile",
      "check-numerics",  "stop-after",     "collective-timeout",
      "bucket-mb",       "check-every",    "zero",
      "max-batch",       "memory",         "eval-every-epoch",
      "evals-per-epoch", "data-dir",       "text",
      "teacher",         "prompt",         "sample-bytes",
      "allow-changed",   "no-baseline",    "eval-only",
      "log-dir",         "log-every"};
  return !local.contains(name);
}

/// --eval-only: loads the weights of `<--checkpoint-dir>/<name>.safetensors` into `model` (a
/// checkpoint, whole or a sharded index, or a weights file), refusing a missing or damaged one
/// by name; without --checkpoint-dir the recipe stops with exit 2.
template <class Model>
void load_for_evaluation(const std::string& name, const Flags& flags, Model& model) {
  if (flags.str("checkpoint-dir").empty())
    flags.fail("--eval-only needs --checkpoint-dir: the folder of the checkpoint to evaluate");
  std::filesystem::path ckpt =
      std::filesystem::path(flags.str("checkpoint-dir")) / (name + ".safetensors");
  std::map<std::string, std::string> meta = sinter::load_weights(ckpt, model);
  auto step = meta.find("step");
  if (leader())
    std::fprintf(stderr, "%s: evaluating %s%s\n", name.c_str(), ckpt.c_str(),
                 step == meta.end() ? "" : (" (step " + step->second + ")").c_str());
}

/// The training flags' values, for a checkpoint's metadata.
inline std::map<std::string, std::string> training_flags(const Flags& flags) {
  std::map<std::string, std::string> out;
  for (const Flag& f : flags.all())
    if (changes_training(f.name)) out["flag." + f.name] = flags.str(f.name);
  return out;
}

/// Stops (exit 2) a resume whose training flags differ from those `ckpt` was written with,
/// unless --allow-changed names them: another --steps is another learning-rate schedule,
/// another --seed or --batch-size another data order.
inline void check_resumed_flags(const Flags& flags, const std::map<std::string, std::string>& meta,
                                const std::filesystem::path& ckpt) {
  std::set<std::string> allowed;
  std::stringstream list(flags.str("allow-changed"));
  for (std::string name; std::getline(list, name, ',');) {
    if (name.empty()) continue;
    if (!flags.has(name)) flags.fail("--allow-changed names --" + name + ", which is no flag");
    allowed.insert(name);
  }
  auto same = [](const std::string& a, const std::string& b) {
    if (a == b) return true;
    char* end_a = nullptr;
    char* end_b = nullptr;
    double x = std::strtod(a.c_str(), &end_a), y = std::strtod(b.c_str(), &end_b);
    return !a.empty() && !b.empty() && *end_a == '\0' && *end_b == '\0' && x == y;
  };
  for (const auto& [key, then] : meta) {
    if (!key.starts_with("flag.")) continue;
    std::string name = key.substr(5);
    if (!flags.has(name) || !changes_training(name) || allowed.contains(name)) continue;
    const std::string now = flags.str(name);
    if (!same(now, then))
      flags.fail(
          "--" + name + " is '" + now + "', but " + ckpt.string() + " was written with '" + then +
          "': a resumed run with another value trains differently (the schedule, the "
          "data order or the model); give --" +
          name + " " + then + ", or --allow-changed " + name + " to go on with the new value");
  }
}

/// The batch size to train at: `--batch-size N`, or `max`, the largest whose planned peak fits
/// the budget. `fit(budget)` plans it (a step's max_batch). With `--max-batch` it prints the
/// max_batch line on stdout and returns 0: the recipe then exits without training.
template <class Fit> int64_t batch_size(const Flags& flags, Fit fit) {
  bool want_max = flags.str("batch-size") == "max";
  if (!want_max && !flags.on("max-batch")) {
    if (!flags.str("memory").empty()) flags.fail("--memory needs --max-batch or --batch-size max");
    return flags.integer("batch-size");
  }
  int64_t budget = 0;
  if (!flags.str("memory").empty()) {
    try {
      budget = sinter::parse_bytes(flags.str("memory"));
    } catch (const std::invalid_argument& e) {
      flags.fail(std::string("--memory: ") + e.what());
    }
  } else {
    budget = sinter::free_memory();
  }
  sinter::MaxBatch m = fit(budget);
  if (flags.on("max-batch")) {
    if (leader()) std::printf("%s\n", m.line().c_str());
    std::fflush(stdout);
    return 0;
  }
  if (m.batch == 0)
    throw std::runtime_error("--batch-size max: not even a batch of 1 fits " +
                             sinter::format_bytes(budget) + " (a batch of 1 plans " +
                             sinter::format_bytes(m.next_peak_bytes) +
                             "): give a larger --memory, a smaller model, or --amp bf16");
  if (leader())
    std::fprintf(stderr, "batch size max: %lld (planned peak %s of %s; %s)\n",
                 static_cast<long long>(m.batch), sinter::format_bytes(m.peak_bytes).c_str(),
                 sinter::format_bytes(budget).c_str(), m.line().c_str());
  return m.batch;
}

/// One example and its label as a batch of 1: what max_batch scales.
inline std::vector<sinter::HostTensor> example_batch(const sinter::data::Dataset& data) {
  auto one = [](sinter::TensorType t) {
    t.shape.insert(t.shape.begin(), 1);
    return sinter::HostTensor(t.dtype, t.shape);
  };
  return {one(data.example_type()), one(data.label_type())};
}

/// Evaluations while training, left out of the training time: `at_epoch_end(steps, seconds)`
/// runs whenever the loader finishes an epoch; `within_epoch(steps, seconds)` after every step,
/// returning whether it evaluated (mid-epoch points such as --evals-per-epoch's).
struct Evaluation {
  std::function<void(int64_t, double)> at_epoch_end;
  std::function<bool(int64_t, double)> within_epoch;
};

/// Evaluation `n` of a run evaluating `per_epoch` times an epoch, as the epoch it ends: "3",
/// "2.25", "0.333".
inline std::string epoch_label(int64_t n, int64_t per_epoch) {
  if (n % per_epoch == 0) return std::to_string(n / per_epoch);
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", static_cast<double>(n) / static_cast<double>(per_epoch));
  std::string label = text;
  label.erase(label.find_last_not_of('0') + 1);
  return label;
}

/// `loss`, read after step `step`, unless it is not finite: a diverged run stops there (exit 1)
/// rather than train on, print or save non-finite weights.
inline double finite_loss(double loss, int64_t step) {
  if (std::isfinite(loss)) return loss;
  throw std::runtime_error(
      "the training loss is " +
      std::string(std::isnan(loss) ? "nan" : (loss > 0 ? "inf" : "-inf")) + " after step " +
      std::to_string(step) +
      ": training diverged, so the run stops here without saving. --check-numerics names the "
      "first op that made a non-finite value; a lower --lr, --clip or --amp bf16 may help");
}

struct LoopResult {
  double last_loss = 0;
  int64_t steps_run = 0; ///< steps taken by this process (after any resume)
  double seconds = 0;
};

/// Resumes from `--checkpoint-dir` when `--resume` is given, then steps until `total` optimizer
/// steps, cycling epochs, showing progress, and saving `<dir>/<name>.safetensors` (with the
/// loader position) whenever `save_now(step, loader)` says so. With `resume_if_present`, a
/// missing checkpoint starts the run afresh (a later phase of a recipe interrupted earlier).
/// `evaluation`'s calls run outside the training time they are given and that the result
/// reports.
/// `before_step(batch, steps)` may change each batch before the step takes it (gpt's
/// --variable-length crops it); `steps` is the optimizer steps done so far.
template <class Model, class Step, class Loader, class SaveNow>
LoopResult run_training(const std::string& name, const Flags& flags, Model& model, Step& step,
                        Loader& loader, int64_t total, SaveNow save_now,
                        bool resume_if_present = false, const Evaluation& evaluation = {},
                        const std::function<void(sinter::data::Batch&, int64_t)>& before_step = {},
                        int64_t until_epoch = 0) {
  // A sifting loader's state (its loss history, draws and waiting samples) is checkpointed.
  constexpr bool sifting = std::is_same_v<Loader, sinter::SiftingLoader>;
  using namespace sinter;
  std::filesystem::path ckpt_dir = flags.str("checkpoint-dir");
  std::filesystem::path ckpt = ckpt_dir / (name + ".safetensors");
  bool resume = flags.on("resume");
  if (resume && resume_if_present && !ckpt_dir.empty() && !std::filesystem::exists(ckpt)) {
    std::fprintf(stderr, "%s: no checkpoint %s yet: starting this phase\n", name.c_str(),
                 ckpt.c_str());
    resume = false;
  }
  if (resume) {
    if (ckpt_dir.empty()) flags.fail("--resume needs --checkpoint-dir");
    auto meta = load_checkpoint(ckpt, model, step);
    check_resumed_flags(flags, meta, ckpt);
    loader.seek({metadata_integer(meta, "epoch", ckpt, 0, 1'000'000'000),
                 metadata_integer(meta, "batch", ckpt, 0, int64_t{1} << 40)});
    if constexpr (sifting) loader.restore(CheckpointReader(ckpt).with_prefix("sift."));
    if (leader())
      std::fprintf(stderr, "%s: resumed from %s at step %lld\n", name.c_str(), ckpt.c_str(),
                   static_cast<long long>(step.steps()));
  }
  // Under mpirun every rank calls save_checkpoint: rank 0 writes the whole state, or under
  // ZeRO each rank its shard and rank 0 the index.
  bool writes = !ckpt_dir.empty();
  if (writes) std::filesystem::create_directories(ckpt_dir);

  Progress progress(total, leader());
  data::Batch b;
  LoopResult result;
  LossHandle last_loss;
  int64_t start_step = step.steps();
  // A checkpoint of the model, the step and the loader's place (and a sifter's state).
  auto save = [&](auto& at_step, const Loader& at) {
    if (at_step.steps() > start_step) // never over a good checkpoint
      finite_loss(last_loss.value(), at_step.steps());
    std::vector<std::pair<std::string, HostTensor>> state;
    if constexpr (sifting) state = at.state();
    NamedTensors extra;
    for (const auto& [tensor_name, tensor] : state)
      extra.emplace_back(tensor_name, &tensor);
    std::map<std::string, std::string> metadata = training_flags(flags);
    metadata["epoch"] = std::to_string(at.position().epoch);
    metadata["batch"] = std::to_string(at.position().batch);
    metadata["seed"] = flags.str("seed");
    save_checkpoint(ckpt, model, at_step, metadata, extra);
  };
  // --stop-after: this run ends early (the schedule still spans `total`), checkpointed.
  // With `until_epoch` the run ends where that pass over the data ends, `total` being an estimate
  // for the schedule.
  int64_t stop = until_epoch > 0 ? std::numeric_limits<int64_t>::max() : total;
  if (flags.integer("stop-after") > 0)
    stop = std::min(stop, start_step + flags.integer("stop-after"));
  bool passes_done = false;
  // --log-dir: the training metrics every --log-every steps, throughput since the last record.
  const int64_t log_every = std::max<int64_t>(1, flags.integer("log-every"));
  int64_t logged_at = step.steps();
  double logged_seconds = 0;
  // Runs `evaluate`; the time it took leaves the training time when it says it evaluated.
  auto left_out = [&](auto evaluate) {
    auto began = std::chrono::steady_clock::now();
    if (evaluate())
      progress.leave_out(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
  };
  while (step.steps() < stop && !passes_done) {
    if (!loader.next(b)) {
      if (evaluation.at_epoch_end)
        left_out([&] {
          evaluation.at_epoch_end(step.steps(), progress.seconds());
          return true;
        });
      if (until_epoch > 0 && loader.position().epoch + 1 >= until_epoch) {
        passes_done = true; // the last pass is over: saved as at a last step
        if (writes) save(step, loader);
        break;
      }
      loader.start_epoch(loader.position().epoch + 1);
      if (step.runtime().sifts_in_step()) step.runtime().start_sift_epoch();
      continue;
    }
    if (before_step) before_step(b, step.steps());
    // The loss is read only when the progress line shows it: on a GPU a read waits for the
    // step to finish, and the host could have queued the next one meanwhile.
    StepOutput out = step(b.examples, b.labels);
    last_loss = out.loss;
    if (run_log() && (step.steps() % log_every == 0 || step.steps() == stop)) {
      const double now = progress.seconds(), steps = static_cast<double>(step.steps() - logged_at);
      const double rate = steps / std::max(now - logged_seconds, 1e-9);
      double epoch = static_cast<double>(loader.position().epoch);
      if constexpr (!sifting) // a sifting loader's passes have no fixed length
        epoch += static_cast<double>(loader.position().batch) /
                 static_cast<double>(std::max<int64_t>(1, loader.batches_per_epoch()));
      log_metrics(step.steps(),
                  {{"epoch", epoch},
                   {"loss", finite_loss(last_loss.value(), step.steps())},
                   {"lr", out.lr},
                   {"steps_per_second", rate},
                   {"samples_per_second", rate * static_cast<double>(b.examples.shape().at(0))},
                   {"host_memory_mb", host_memory_mb()}});
      logged_at = step.steps();
      logged_seconds = now;
    }
    progress.update(
        step.steps(), [&] { return finite_loss(last_loss.value(), step.steps()); },
        [&] {
          if (!sifting && !step.runtime().sifts_in_step()) return std::string();
          double fraction = step.runtime().sift_counts().kept_fraction();
          if constexpr (sifting) fraction = loader.rule().kept_fraction();
          char kept[32];
          std::snprintf(kept, sizeof kept, "kept %.3f", fraction);
          return std::string(kept);
        });
    if (evaluation.within_epoch)
      left_out([&] { return evaluation.within_epoch(step.steps(), progress.seconds()); });
    if (writes && (save_now(step.steps(), loader) || step.steps() == stop)) save(step, loader);
  }
  result.steps_run = step.steps() - start_step;
  result.last_loss =
      result.steps_run == 0 ? last_loss.value() : finite_loss(last_loss.value(), step.steps());
  result.seconds = progress.seconds();
  return result;
}

} // namespace recipe
