// tests/test_profiler.cpp — the profiler: phases and kernels recorded, verdicts right on planted
// problems (a sleeping loader, host work between steps, recompiles), files written
#include "capture_stderr.hpp"
#include "dsl/sinter.hpp"
#include "jit/data/synthetic.hpp"
#include "temp_dir.hpp"

#include <catch2/catch.hpp>
#include <set>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

using namespace sinter;
using namespace sinter::data;

namespace {

/// A data set that takes `delay` to read each example (a slow disk, heavy decoding).
class SlowDataset final : public Dataset {
public:
  SlowDataset(const Dataset& inner, std::chrono::microseconds delay)
      : inner_(inner), delay_(delay) {}
  std::size_t size() const override { return inner_.size(); }
  TensorType example_type() const override { return inner_.example_type(); }
  TensorType label_type() const override { return inner_.label_type(); }
  void read(std::size_t index, std::byte* example, std::byte* label) const override {
    std::this_thread::sleep_for(delay_);
    inner_.read(index, example, label);
  }

private:
  const Dataset& inner_;
  std::chrono::microseconds delay_;
};

bool has_verdict(const profile::Summary& s, const std::string& kind) {
  return std::any_of(s.verdicts.begin(), s.verdicts.end(),
                     [&](const profile::Verdict& v) { return v.kind == kind; });
}

std::string verdict_line(const profile::Summary& s, const std::string& kind) {
  for (const profile::Verdict& v : s.verdicts)
    if (v.kind == kind) return v.line;
  return "";
}

std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// Trains `steps` steps of an MLP over `data`, `between` of host work after each, profiled.
profile::Summary train_profiled(const Dataset& data, const std::filesystem::path& dir,
                                std::vector<int64_t> widths, int64_t batch, int threads, int steps,
                                std::chrono::microseconds between = {}) {
  Init init(3);
  MLP model(widths, init);
  auto loss = [](MLP& m, Var x, Var y) -> Var { return cross_entropy_loss(m(x), y); };
  auto step = compile_step(model, loss, adamw{.lr = 0.01}, {.batch_names = {"x", "y"}});
  DataLoader loader(data, {.batch_size = batch, .seed = 1, .prefetch_threads = threads});
  profile::start(dir, {.print = false});
  Batch b;
  for (int i = 0; i < steps; ++i) {
    if (!loader.next(b)) {
      loader.start_epoch(loader.position().epoch + 1);
      REQUIRE(loader.next(b));
    }
    CHECK(std::isfinite(step(b.examples, b.labels).loss.value()));
    if (between.count() > 0) std::this_thread::sleep_for(between);
  }
  return profile::stop();
}

} // namespace

/// Two MLPs as members of the user's own struct: its modules are named by their whole path.
struct AutoEncoder {
  BOOST_HANA_DEFINE_STRUCT(AutoEncoder, (MLP, enc), (MLP, dec));
  AutoEncoder(Init& init) : enc({16, 8}, init), dec({8, 16}, init) {}
};

TEST_CASE("a module called as a member of the user's struct is named by its whole path in "
          "profiles and shape errors",
          "[profiler]") {
  Init init(4);
  AutoEncoder model(init);
  auto loss = [](AutoEncoder& m, Var x) -> Var {
    Var diff = Var(m.dec(m.enc(x)).value() - x.value());
    return Var(mean(diff.value() * diff.value()));
  };
  auto step = compile_step(model, loss, sgd{.lr = 0.01}, {.batch_names = {"x"}});
  std::vector<double> xs(4 * 16, 0.25);
  HostTensor x = HostTensor::from_doubles(DType::f32, {4, 16}, xs);
  testing::TempDir dir;
  profile::start(dir.path, {.print = false});
  for (int i = 0; i < 3; ++i)
    step(x);
  profile::Summary s = profile::stop();
  std::set<std::string> gemm_paths;
  for (const profile::KernelRow& k : s.kernels)
    if (k.info.gemm) gemm_paths.insert(k.info.path);
  // Once both were `layers.0`.
  CHECK(gemm_paths.contains("enc.layers.0"));
  CHECK(gemm_paths.contains("dec.layers.0"));
  CHECK_FALSE(gemm_paths.contains("layers.0"));

  // A decoder built for another width fails in the decoder, by its path.
  AutoEncoder wrong(init);
  wrong.dec = MLP({6, 16}, init);
  auto wrong_step = compile_step(wrong, loss, sgd{.lr = 0.01}, {.batch_names = {"x"}});
  CHECK_THROWS_WITH(wrong_step(x), Catch::Contains("dec.layers.0"));
}

TEST_CASE("a profile splits each step into phases, names every kernel's model path and role, "
          "and writes its files",
          "[profiler]") {
  auto blobs = gaussian_blobs(2048, 64, 8, 5);
  testing::TempDir dir;
  profile::Summary s = train_profiled(*blobs, dir.path, {64, 128, 8}, 64, 2, 30);
  CHECK(s.steps + s.skipped == 30);
  CHECK(s.steps >= 28);
  CHECK(s.phases.forward > 0);
  CHECK(s.phases.backward > 0);
  CHECK(s.phases.optimizer > 0);
  CHECK(s.phases.step >= s.phases.forward + s.phases.backward + s.phases.optimizer);
  CHECK(s.peak.flops_per_second > 0);
  CHECK(s.peak.bytes_per_second > 0);
  // Every kernel of the step has a role; the matmuls are GEMMs of the layers, forward and
  // backward, with the FLOPs of their shapes.
  int64_t gemms = 0;
  for (const profile::KernelRow& k : s.kernels) {
    CHECK(k.calls == s.steps);
    if (!k.info.gemm) continue;
    ++gemms;
    CHECK(k.info.path.starts_with("layers."));
    CHECK(k.info.flops > 0);
    CHECK(k.info.bytes > 0);
    // The peak is at least what any GEMM reached: no GEMM beats it.
    CHECK(k.achieved > 0);
    CHECK(k.achieved <= 1.0 + 1e-9);
  }
  CHECK(gemms == 5); // two forward, three backward (the first layer's input needs none)
  auto role_count = [&](profile::Role role) {
    return std::count_if(s.kernels.begin(), s.kernels.end(),
                         [&](const profile::KernelRow& k) { return k.info.role == role; });
  };
  CHECK(role_count(profile::Role::forward) > 0);
  CHECK(role_count(profile::Role::backward) > 0);
  CHECK(role_count(profile::Role::optimizer) > 0);
  // The forward GEMM of layer 0 at batch 64: 2·64·64·128 FLOPs.
  auto first = std::find_if(s.kernels.begin(), s.kernels.end(), [](const profile::KernelRow& k) {
    return k.info.gemm && k.info.path == "layers.0";
  });
  REQUIRE(first != s.kernels.end());
  CHECK(first->info.flops == 2 * 64 * 64 * 128);
  CHECK(first->info.role == profile::Role::forward);

  std::string trace = read_text(dir.path / "trace.json");
  CHECK(trace.starts_with("{\"displayTimeUnit\":\"ms\",\"traceEvents\":["));
  for (const char* expected :
       {"\"cat\":\"step\"", "\"cat\":\"kernel\"", "\"cat\":\"loader\"", "\"name\":\"forward\"",
        "\"name\":\"backward\"", "\"name\":\"optimizer\"", "\"name\":\"train step\"",
        "\"path\":\"layers.0\"", "\"name\":\"thread_name\"", "\"name\":\"cpu use\""})
    CHECK(trace.find(expected) != std::string::npos);
  std::string report = read_text(dir.path / "report.html");
  CHECK(report.starts_with("<!DOCTYPE html>"));
  CHECK(report.find("<script") == std::string::npos); // self-contained, nothing to run
  CHECK(report.find("Roofline") != std::string::npos);
  CHECK(read_text(dir.path / "summary.txt") == s.text());
}

TEST_CASE("a loader that sleeps is called input-bound, with the loader threads named; a fast "
          "one is not",
          "[profiler]") {
  auto blobs = gaussian_blobs(4096, 32, 4, 6);
  SlowDataset slow(*blobs, std::chrono::microseconds(100));
  testing::TempDir slow_dir, fast_dir;
  // 32 rows of 100 µs each on one thread: about 3 ms per batch against a step of well under
  // a millisecond.
  profile::Summary starved = train_profiled(slow, slow_dir.path, {32, 128, 4}, 32, 1, 25);
  INFO(starved.text());
  REQUIRE(has_verdict(starved, "input-bound"));
  CHECK(starved.phases.data > 0.5 * starved.phases.step);
  CHECK(verdict_line(starved, "input-bound").find("raise --loader-threads (now 1)") !=
        std::string::npos);
  // A step of a few milliseconds, so the loader's threads keep ahead even when other processes
  // share the cores.
  profile::Summary fed = train_profiled(*blobs, fast_dir.path, {32, 1024, 1024, 4}, 64, 2, 25);
  INFO(fed.text());
  CHECK_FALSE(has_verdict(fed, "input-bound"));
}

TEST_CASE("host work between steps is called host-bound; a step whose kernels dominate is not",
          "[profiler]") {
  auto blobs = gaussian_blobs(4096, 256, 8, 7);
  testing::TempDir busy_dir, lean_dir;
  // Wide enough that the kernels dominate also under AddressSanitizer, which slows the host's
  // work between them (with 512-wide layers CI's sanitized run saw 27% of host work, the
  // verdict's threshold being 25%).
  const std::vector<int64_t> widths{256, 1024, 1024, 8};
  profile::Summary lean = train_profiled(*blobs, lean_dir.path, widths, 256, 2, 12);
  INFO(lean.text());
  CHECK_FALSE(has_verdict(lean, "host-bound"));
  const auto pause =
      std::chrono::microseconds(static_cast<int64_t>(std::max(2e-3, 2 * lean.phases.step) * 1e6));
  profile::Summary busy = train_profiled(*blobs, busy_dir.path, widths, 256, 2, 12, pause);
  INFO(busy.text());
  CHECK(has_verdict(busy, "host-bound"));
  CHECK(busy.phases.host > 0.5 * busy.phases.step);
}

TEST_CASE("recompiles are counted and the verdict names the input and dim that varied",
          "[profiler]") {
  Init init(4);
  MLP model({8, 16, 2}, init);
  auto loss = [](MLP& m, Var x, Var y) -> Var { return cross_entropy_loss(m(x), y); };
  auto step = compile_step(model, loss, sgd{.lr = 0.1}, {.batch_names = {"x", "y"}});
  testing::TempDir dir;
  profile::start(dir.path, {.print = false});
  std::string log;
  for (int64_t rows : {4, 6, 8, 6}) {
    HostTensor x(DType::f32, {rows, 8}), y(DType::i32, {rows});
    log += testing::capture_stderr([&] { step(x, y); });
  }
  profile::Summary s = profile::stop();
  INFO(s.text());
  REQUIRE(has_verdict(s, "recompiles"));
  CHECK_THAT(verdict_line(s, "recompiles"),
             Catch::StartsWith("recompiled 2×: recompiling, input 'x' dim 0 changed 6 -> 8 at ") &&
                 Catch::Contains("test_profiler.cpp:"));
  CHECK(s.compiles == 3);
  // Each recompile's line names the calling line and the compile time so far.
  INFO(log);
  CHECK_THAT(log, Catch::Contains("changed 4 -> 6, specialisation 2) in ") &&
                      Catch::Contains("; called at ") &&
                      Catch::Contains("; 2 compiles so far took ") &&
                      Catch::Contains("; 3 compiles so far took "));
}

TEST_CASE("profiling refuses a second start, a stop without a start, and a folder it cannot "
          "create",
          "[profiler]") {
  testing::TempDir dir;
  CHECK_THROWS_WITH(profile::stop(), Catch::Contains("no profile is running"));
  std::ofstream(dir.path / "file") << "x";
  CHECK_THROWS_WITH(profile::start(dir.path / "file" / "sub"),
                    Catch::Contains("cannot create the profile directory"));
  CHECK_FALSE(profile::active());
  profile::start(dir.path / "p", {.print = false});
  CHECK(profile::active());
  CHECK_THROWS_WITH(profile::start(dir.path / "q"), Catch::Contains("already running"));
  profile::stop();
  CHECK_FALSE(profile::active());
  CHECK(std::filesystem::exists(dir.path / "p" / "trace.json"));
}

TEST_CASE("--check-numerics traces a NaN planted by an absurd learning rate to its op, model "
          "path and step; unchecked, the same run goes on with a NaN loss",
          "[profiler]") {
  auto blobs = gaussian_blobs(512, 16, 4, 8);
  auto run = [&](bool checked) {
    set_check_numerics(checked);
    Init init(5);
    MLP model({16, 32, 4}, init);
    auto loss = [](MLP& m, Var x, Var y) -> Var { return cross_entropy_loss(m(x), y); };
    auto step = compile_step(model, loss, sgd{.lr = 1e30}, {.batch_names = {"x", "y"}});
    DataLoader loader(*blobs, {.batch_size = 32, .seed = 1, .prefetch_threads = 0});
    Batch b;
    double last = 0;
    for (int i = 0; i < 8 && loader.next(b); ++i)
      last = step(b.examples, b.labels).loss.value();
    set_check_numerics(false);
    return last;
  };
  CHECK(std::isnan(run(false)));
  std::string what;
  try {
    run(true);
  } catch (const NumericsError& e) {
    what = e.what();
  }
  set_check_numerics(false);
  INFO(what);
  REQUIRE_FALSE(what.empty());
  CHECK_THAT(what, Catch::StartsWith("sinter: non-finite value in step 2 (--check-numerics): `"));
  CHECK_THAT(what, Catch::Contains(" at layers.") && Catch::Contains("from finite operands") &&
                       Catch::Contains("; kernel k"));
}

TEST_CASE("--check-numerics names a log of a negative number, and a batch input that arrived "
          "holding NaN",
          "[profiler]") {
  set_check_numerics(true);
  auto f = jit([](Var x) -> Var {
    sinter::scope guarded("guard");
    return log(x) * 2.0;
  });
  HostTensor ok(DType::f32, {4});
  for (int64_t i = 0; i < 4; ++i)
    ok.set(i, 1.0 + static_cast<double>(i));
  CHECK_NOTHROW(f(ok));
  HostTensor negative = ok;
  negative.set(2, -1.0);
  CHECK_THROWS_WITH(f(negative), Catch::Contains("`log` at guard made nan (element 2 of f32[4]) "
                                                 "from finite operands"));
  HostTensor poisoned = ok;
  poisoned.set(1, std::nan(""));
  CHECK_THROWS_WITH(f(poisoned), Catch::Contains("input 'arg0' already held a non-finite value "
                                                 "(element 1)") &&
                                     Catch::Contains("the value came from outside the step"));
  set_check_numerics(false);
  CHECK_NOTHROW(f(negative)); // off: no check, and no cost
}

TEST_CASE("a gather kernel's bytes are the rows it reads and writes, not its whole table",
          "[profiler]") {
  auto lookup = jit([](Var table, Var ids) -> Var { return gather(table, ids); });
  HostTensor table(DType::f32, {1000, 64}), ids(DType::i32, {4});
  for (int64_t i = 0; i < 4; ++i)
    ids.set(i, static_cast<double>(i * 100));
  lookup(table, ids);
  testing::TempDir dir;
  profile::start(dir.path, {.skip_steps = 0, .print = false});
  lookup(table, ids);
  profile::Summary s = profile::stop();
  REQUIRE(s.kernels.size() == 1);
  // 4 rows of 64 floats read and written, and the 4 indices.
  CHECK(s.kernels[0].info.bytes == 4 * 64 * 4 * 2 + 4 * 4);
}

TEST_CASE("jit functions and compile_eval name the calling line when they recompile",
          "[profiler]") {
  auto twice = jit([](Var x) -> Var { return x * 2.0; });
  Init init(6);
  MLP model({4, 3}, init);
  auto logits = compile_eval(model, [](MLP& m, Var x) -> Var { return m(x); });
  std::string log;
  for (int64_t rows : {2, 3}) {
    HostTensor x(DType::f32, {rows, 4});
    log += testing::capture_stderr([&] {
      twice(x);
      logits(x);
    });
  }
  INFO(log);
  CHECK(std::count(log.begin(), log.end(), '\n') == 4);
  // Both recompiles (rows 2 -> 3) end with this file's line and the compile time so far.
  std::size_t first = log.find("; called at "), second = log.rfind("; called at ");
  REQUIRE(first != std::string::npos);
  CHECK(second != first);
  CHECK(log.find("test_profiler.cpp:", first) != std::string::npos);
  CHECK(log.find("test_profiler.cpp:", second) != std::string::npos);
  CHECK(log.find("2 compiles so far took") != std::string::npos);
}
