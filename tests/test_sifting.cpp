// tests/test_sifting.cpp — smart sifting: the rule's kept fraction, delay, seeding and resume;
// the sifting loader's full static batches of kept samples (docs/sifting.md)
#include "dsl/sinter.hpp"
#include "jit/data/synthetic.hpp"
#include "jit/train/sift.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

using namespace sinter;
using namespace sinter::data;

namespace {

/// Losses of `batches` batches of `rows` samples, i.i.d. from a skewed distribution (as
/// training losses are), the same for the same seed.
std::vector<std::vector<double>> loss_batches(int batches, int rows, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::exponential_distribution<double> loss(2.0);
  std::vector<std::vector<double>> out(static_cast<std::size_t>(batches));
  for (auto& batch : out)
    for (int i = 0; i < rows; ++i)
      batch.push_back(loss(gen));
  return out;
}

std::vector<bool> run(SiftRule& rule, const std::vector<std::vector<double>>& batches) {
  std::vector<bool> all;
  for (const auto& b : batches) {
    std::vector<bool> keep = rule.select(b);
    all.insert(all.end(), keep.begin(), keep.end());
  }
  return all;
}

} // namespace

TEST_CASE("sifting keeps 1/(1+beta) of the samples, within 2 points over 10 000", "[sifting]") {
  auto batches = loss_batches(100, 100, 5);
  for (double beta : {0.5, 1.0, 2.0, 3.0, 10.0}) {
    SiftRule rule({.beta = beta, .history = 500, .seed = 1});
    run(rule, batches);
    INFO("beta " << beta << ": kept " << rule.kept() << " of " << rule.seen());
    CHECK(rule.seen() == 10000);
    CHECK(std::abs(rule.kept_fraction() - 1.0 / (1.0 + beta)) <= 0.02);
  }
}

TEST_CASE("sifting keeps high-loss samples: the kept ones' losses rank above the dropped ones'",
          "[sifting]") {
  auto batches = loss_batches(50, 100, 6);
  SiftRule rule({.beta = 2.0, .history = 500, .seed = 2});
  std::vector<bool> keep = run(rule, batches);
  double kept = 0, dropped = 0;
  int64_t n_kept = 0, n_dropped = 0;
  std::size_t k = 0;
  for (const auto& b : batches)
    for (double loss : b) {
      (keep[k] ? kept : dropped) += loss;
      (keep[k++] ? n_kept : n_dropped) += 1;
    }
  CHECK(kept / static_cast<double>(n_kept) > 1.5 * dropped / static_cast<double>(n_dropped));
}

TEST_CASE("the sifting delay keeps every sample for its batches, again each epoch with "
          "repeat_delay",
          "[sifting]") {
  auto batches = loss_batches(12, 50, 7);
  for (bool repeat : {false, true}) {
    INFO("repeat_delay " << repeat);
    SiftRule rule({.beta = 3.0, .history = 200, .delay = 5, .repeat_delay = repeat, .seed = 3});
    int64_t seen = 0;
    for (int b = 0; b < 12; ++b) {
      if (b == 8) rule.start_epoch(1); // a new epoch after 8 batches
      bool delayed = b < 5 || (repeat && b >= 8);
      CHECK(rule.delaying() == delayed);
      std::vector<bool> keep = rule.select(batches[static_cast<std::size_t>(b)]);
      int64_t kept = std::count(keep.begin(), keep.end(), true);
      if (delayed)
        CHECK(kept == 50);
      else
        CHECK(kept < 35); // beta 3 keeps a quarter on average
      seen += 50;
    }
    CHECK(rule.seen() == seen);
  }
}

TEST_CASE("the same seed selects the same samples; another seed others; a restored rule "
          "continues exactly",
          "[sifting]") {
  auto batches = loss_batches(40, 64, 8);
  SiftRule a({.beta = 1.0, .history = 300, .seed = 42}),
      b({.beta = 1.0, .history = 300, .seed = 42}), c({.beta = 1.0, .history = 300, .seed = 43});
  std::vector<bool> ka = run(a, batches), kb = run(b, batches), kc = run(c, batches);
  CHECK(ka == kb);
  CHECK(ka != kc);

  SiftRule first({.beta = 1.0, .history = 300, .seed = 42});
  std::vector<std::vector<double>> head(batches.begin(), batches.begin() + 25),
      tail(batches.begin() + 25, batches.end());
  run(first, head);
  std::map<std::string, HostTensor> saved;
  for (auto& [name, tensor] : first.state())
    saved.emplace(name, std::move(tensor));
  SiftRule resumed({.beta = 1.0, .history = 300, .seed = 42});
  resumed.restore(saved);
  std::vector<bool> want = run(first, tail), got = run(resumed, tail);
  CHECK(got == want);
  CHECK(std::vector<bool>(ka.begin() + 25 * 64, ka.end()) == want);
  CHECK_THROWS_WITH(SiftRule({.beta = 1.0, .history = 300}).restore({}),
                    Catch::Contains("no 'sift.history'"));
  CHECK_THROWS_WITH(SiftRule({.beta = -1}), Catch::Contains("beta must be a number >= 0"));
  // A diverged model's loss is a runtime error with what to do (fuzzing found it escaping a
  // resume's handlers as a logic_error, after restored weights made the loss inf).
  const std::vector<double> diverged{0.5, std::numeric_limits<double>::infinity()};
  SiftRule scoring({.beta = 1.0, .history = 300});
  CHECK_THROWS_AS(scoring.select(diverged), std::runtime_error);
  CHECK_THROWS_WITH(scoring.select(diverged), Catch::Contains("non-finite loss (inf) at row 1"));
}

TEST_CASE("a sifting state restored from an edited checkpoint is refused, changing nothing",
          "[sifting]") {
  auto batches = loss_batches(3, 64, 8); // 192 losses: the history of 300 is not full
  SiftRule rule({.beta = 1.0, .history = 300, .seed = 42});
  run(rule, batches);
  std::map<std::string, HostTensor> saved;
  for (auto& [name, tensor] : rule.state())
    saved.emplace(name, std::move(tensor));
  // Each of these once crashed a resume (SIGSEGV, a double free, an out-of-bounds write).
  auto edited = [&](int64_t index, double value) {
    std::map<std::string, HostTensor> copy = saved;
    copy.at("sift.counters").set(index, value);
    return copy;
  };
  for (auto [index, value] :
       {std::pair<int64_t, double>{0, 1e9}, {0, -1}, {0, 50}, {1, -4}, {3, 1e6}, {5, 1e6}}) {
    SiftRule resumed({.beta = 1.0, .history = 300, .seed = 42});
    INFO("counter " << index << " set to " << value);
    CHECK_THROWS_WITH(resumed.restore(edited(index, value)),
                      Catch::Contains("inconsistent at 'sift.counters' (counters"));
    CHECK(resumed.seen() == 0);
  }
  // Fuzzing: the largest i64 once overflowed when read through a double (UBSan), and counts
  // that large would overflow as the run went on.
  for (int64_t index : {1, 4}) {
    std::map<std::string, HostTensor> huge = saved;
    const int64_t largest = std::numeric_limits<int64_t>::max();
    std::memcpy(huge.at("sift.counters").bytes().data() + index * 8, &largest, 8);
    INFO("counter " << index << " set to the largest i64");
    CHECK_THROWS_WITH(SiftRule({.beta = 1.0, .history = 300, .seed = 42}).restore(huge),
                      Catch::Contains("inconsistent at 'sift.counters'"));
  }
  std::map<std::string, HostTensor> short_counters = saved;
  short_counters.at("sift.counters") = HostTensor(DType::i64, {5});
  CHECK_THROWS_WITH(SiftRule({.beta = 1.0, .history = 300}).restore(short_counters),
                    Catch::Contains("'sift.counters' is i64[5], not i64[6]"));
  std::map<std::string, HostTensor> nan_loss = saved;
  nan_loss.at("sift.history").set(7, std::nan(""));
  CHECK_THROWS_WITH(SiftRule({.beta = 1.0, .history = 300}).restore(nan_loss),
                    Catch::Contains("recorded loss 7 is not finite"));
  SiftRule fine({.beta = 1.0, .history = 300, .seed = 42});
  fine.restore(saved);
  CHECK(fine.seen() == 192);
}

TEST_CASE("the sifting loader hands out full batches of kept samples, scored by a compiled "
          "per-sample loss that never recompiles, and resumes exactly",
          "[sifting]") {
  auto blobs = gaussian_blobs(1200, 6, 4, 9);
  Init init(3);
  MLP model({6, 16, 4}, init);
  auto per_sample = compile_eval(
      model,
      [](MLP& m, Var x, Var y) -> Var { return cross_entropy_loss(m(x), y, {}, Reduction::none); },
      {"examples", "labels"});
  auto score = [&](const Batch& b) { return per_sample(b.examples, b.labels); };
  const double beta = 2.0;
  DataLoader inner(*blobs, {.batch_size = 60, .seed = 4, .prefetch_threads = 0});
  SiftingLoader sifting(inner, score, {.beta = beta, .history = 240, .seed = 5});
  Batch b;
  int64_t batches = 0;
  while (sifting.next(b)) {
    ++batches;
    CHECK(b.examples.shape() == Shape{60, 6});
    CHECK(b.labels.shape() == Shape{60});
    CHECK(b.real_rows == 60);
  }
  CHECK(per_sample.trace_count() == 1);
  // 20 scored batches keep about a third of 1200 samples: 6 or 7 full batches.
  CHECK(sifting.rule().seen() == 1200);
  CHECK(std::abs(sifting.rule().kept_fraction() - 1.0 / (1.0 + beta)) < 0.06);
  CHECK(batches == sifting.rule().kept() / 60);
  CHECK(sifting.delivered() == batches * 60);

  // Kept samples are real examples: every delivered row is one of the data set's rows.
  std::vector<std::vector<float>> rows;
  for (std::size_t i = 0; i < blobs->size(); ++i) {
    std::vector<float> x(6);
    int32_t label = 0;
    blobs->read(i, reinterpret_cast<std::byte*>(x.data()), reinterpret_cast<std::byte*>(&label));
    rows.push_back(x);
  }
  sifting.start_epoch(1);
  REQUIRE(sifting.next(b));
  for (int64_t r = 0; r < 60; ++r) {
    std::vector<float> x(6);
    for (int64_t c = 0; c < 6; ++c)
      x[static_cast<std::size_t>(c)] = static_cast<float>(b.examples.at(r * 6 + c));
    CHECK(std::find(rows.begin(), rows.end(), x) != rows.end());
  }

  // Resume: a new loader restored from the state hands out what this one does next.
  auto saved_state = sifting.state();
  std::map<std::string, HostTensor> saved;
  for (auto& [name, tensor] : saved_state)
    saved.emplace(name, std::move(tensor));
  DataLoader inner_again(*blobs, {.batch_size = 60, .seed = 4, .prefetch_threads = 0});
  inner_again.seek(inner.position());
  SiftingLoader again(inner_again, score, {.beta = beta, .history = 240, .seed = 5});
  again.restore(saved);
  Batch want, got;
  for (int i = 0; i < 3; ++i) {
    REQUIRE(sifting.next(want));
    REQUIRE(again.next(got));
    CHECK(std::equal(want.examples.bytes().begin(), want.examples.bytes().end(),
                     got.examples.bytes().begin()));
  }

  // An edited loader state is refused: counts of another shape, pending rows that disagree
  // with their tensors, pending samples of another row shape (found at the first batch).
  REQUIRE(saved.at("sift.loader").at(1) > 0);
  std::map<std::string, HostTensor> one_count = saved;
  one_count.at("sift.loader") = HostTensor(DType::i64, {1});
  CHECK_THROWS_WITH(again.restore(one_count), Catch::Contains("'sift.loader' is i64[1]"));
  std::map<std::string, HostTensor> more_pending = saved;
  more_pending.at("sift.loader").set(1, more_pending.at("sift.loader").at(1) + 3);
  CHECK_THROWS_WITH(again.restore(more_pending), Catch::Contains("pending rows, examples"));
  std::map<std::string, HostTensor> narrow = saved;
  Shape pending_shape = narrow.at("sift.pending.examples").shape();
  narrow.at("sift.pending.examples") = HostTensor(DType::f32, {pending_shape[0], 5});
  DataLoader inner_narrow(*blobs, {.batch_size = 60, .seed = 4, .prefetch_threads = 0});
  inner_narrow.seek(inner.position());
  SiftingLoader narrowed(inner_narrow, score, {.beta = beta, .history = 240, .seed = 5});
  narrowed.restore(narrow);
  CHECK_THROWS_WITH(narrowed.next(got), Catch::Contains("('sift.pending.examples') are f32[" +
                                                        std::to_string(pending_shape[0]) + ",5]"));
}

TEST_CASE("in-step selection in the graph draws k rows by the rule's weights: the same rows as "
          "Efraimidis-Spirakis keys computed on the host",
          "[sifting]") {
  const int64_t b = 32, h = 48, k = 11;
  std::mt19937_64 gen(12);
  std::exponential_distribution<float> loss(2.0f);
  std::uniform_real_distribution<float> unit(0.001f, 0.999f);
  for (int64_t filled : {int64_t{0}, int64_t{20}, h}) {
    INFO("filled " << filled);
    std::vector<double> losses(b), history(h), uniforms(b);
    for (auto& v : losses)
      v = loss(gen);
    for (auto& v : history)
      v = loss(gen);
    for (auto& v : uniforms)
      v = unit(gen);
    losses[3] = history[0]; // a tie with the history counts half
    Graph g;
    Value l = input(g, "losses", {DType::f32, {b}}), hist = input(g, "history", {DType::f32, {h}}),
          f = input(g, "filled", {DType::f32, {}}), u = input(g, "uniforms", {DType::f32, {b}});
    g.add_output("rows", sift_selection(l, hist, f, u, 2.0, k).id);
    CompiledGraph program(g, std::nullopt, Device{Backend::cpu});
    double filled_value = static_cast<double>(filled);
    std::vector<HostTensor> in{HostTensor::from_doubles(DType::f32, {b}, losses),
                               HostTensor::from_doubles(DType::f32, {h}, history),
                               HostTensor::from_doubles(DType::f32, {}, {&filled_value, 1}),
                               HostTensor::from_doubles(DType::f32, {b}, uniforms)};
    HostTensor rows = program.run(in)[0];
    // The host's keys, in f32 as the graph computes them.
    std::vector<std::pair<float, int64_t>> keys;
    for (int64_t i = 0; i < b; ++i) {
      float below = 0;
      for (int64_t j = 0; j < filled; ++j) {
        float hj = static_cast<float>(in[1].at(j)), li = static_cast<float>(in[0].at(i));
        below += hj < li ? 1.0f : (hj == li ? 0.5f : 0.0f);
      }
      float pct = filled ? below / static_cast<float>(filled) : 1.0f;
      float key = std::log(static_cast<float>(in[3].at(i))) / std::pow(pct, 2.0f);
      keys.emplace_back(key, i);
    }
    std::stable_sort(keys.begin(), keys.end(),
                     [](const auto& a, const auto& c) { return a.first > c.first; });
    std::vector<int64_t> want, got;
    for (int64_t s = 0; s < k; ++s) {
      want.push_back(keys[static_cast<std::size_t>(s)].second);
      got.push_back(static_cast<int64_t>(rows.at(s)));
    }
    CHECK(got == want);
  }
}

namespace {

/// Rows `rows` (i32 [k]) of `t` along dim 0.
HostTensor take_rows(const HostTensor& t, const HostTensor& rows) {
  Shape shape = t.shape();
  const int64_t width = t.size() / shape[0];
  shape[0] = rows.size();
  HostTensor out(t.dtype(), shape);
  const std::size_t row_bytes = static_cast<std::size_t>(width) * dtype_bytes(t.dtype());
  for (int64_t r = 0; r < rows.size(); ++r)
    std::memcpy(out.bytes().data() + static_cast<std::size_t>(r) * row_bytes,
                t.bytes().data() + static_cast<std::size_t>(rows.at(r)) * row_bytes, row_bytes);
  return out;
}

double largest_difference(MLP& a, MLP& b) {
  std::vector<const HostTensor*> pa, pb;
  for_each_parameter(a, [&](const std::string&, Parameter& p) { pa.push_back(&p.value); });
  for_each_parameter(b, [&](const std::string&, Parameter& p) { pb.push_back(&p.value); });
  double worst = 0;
  for (std::size_t i = 0; i < pa.size(); ++i)
    for (int64_t k = 0; k < pa[i]->size(); ++k)
      worst = std::max(worst, std::abs(pa[i]->at(k) - pb[i]->at(k)));
  return worst;
}

int64_t count_op(const Graph& g, OpId op) {
  int64_t n = 0;
  for (ValueId id = 0; id < g.size(); ++id)
    n += g.node(id).op == op;
  return n;
}

} // namespace

TEST_CASE("in-step sifting's update equals a plain step on the drawn rows alone, with no extra "
          "forward pass and no recompilation",
          "[sifting]") {
  auto blobs = gaussian_blobs(960, 6, 4, 21);
  Init init_a(8), init_b(8);
  // Widths 96 and 48 are multiples of the rows taken (24): the optimizer's values for those
  // biases look like groups of rows, but do not depend on the rows.
  MLP sifted({6, 96, 48, 4}, init_a), plain({6, 96, 48, 4}, init_b);
  int traces = 0;
  auto per_row = [&traces](MLP& m, Var x, Var y) -> Var {
    ++traces;
    return cross_entropy_loss(m(x), y, {}, Reduction::none);
  };
  auto mean_loss = [](MLP& m, Var x, Var y) -> Var { return cross_entropy_loss(m(x), y); };
  const int64_t batch = 48;
  auto step = compile_step(sifted, per_row, adamw{.lr = 0.02},
                           {.batch_names = {"examples", "labels"},
                            .clip_grad_norm = 1.0,
                            .sift = SiftOptions{.beta = 1.0, .history = 100, .seed = 3}});
  auto reference = compile_step(plain, mean_loss, adamw{.lr = 0.02},
                                {.batch_names = {"examples", "labels"}, .clip_grad_norm = 1.0});
  DataLoader loader(*blobs, {.batch_size = batch, .seed = 2, .prefetch_threads = 0});
  Batch b;
  std::set<int64_t> distinct_rows;
  for (int i = 0; i < 12 && loader.next(b); ++i) {
    StepOutput out = step(b.examples, b.labels);
    const HostTensor& rows = step.runtime().sift_rows();
    REQUIRE(rows.shape() == Shape{batch / 2});
    std::set<int64_t> once;
    for (int64_t r = 0; r < rows.size(); ++r) {
      once.insert(static_cast<int64_t>(rows.at(r)));
      distinct_rows.insert(static_cast<int64_t>(rows.at(r)));
    }
    CHECK(once.size() == static_cast<std::size_t>(batch / 2)); // drawn without replacement
    CHECK(*once.rbegin() < batch);
    reference(take_rows(b.examples, rows), take_rows(b.labels, rows));
    INFO("step " << i);
    CHECK(std::isfinite(out.loss.value()));
    CHECK(largest_difference(sifted, plain) < 2e-5);
  }
  CHECK(distinct_rows.size() > static_cast<std::size_t>(batch / 2)); // not the same rows always
  SiftCounts counts = step.runtime().sift_counts();
  CHECK(counts.seen == 12 * batch);
  CHECK(counts.kept == 12 * batch / 2);
  // Traced once at the batch and once at its kept rows; compiled once.
  CHECK(traces == 2);
  CHECK(step.runtime().compilations() == 1);
  // The kept rows' forward values are gathers of the batch's: the step has the plain step's
  // GEMMs (two forward, three backward), not two more for a second forward pass.
  CHECK(count_op(step.runtime().program().graph(), OpId::matmul) ==
        count_op(reference.runtime().program().graph(), OpId::matmul));
  // The rows a weight-gradient GEMM reads are gathered into a buffer of their own and read
  // transposed by the GEMM, not copied into a transposed layout by a kernel.
  const FusionPlan* plan = step.runtime().program().fusion_plan();
  REQUIRE(plan);
  for (const Kernel& k : plan->kernels) {
    bool gathers = false, permutes = false;
    for (ValueId id : k.body) {
      gathers = gathers || plan->graph->node(id).op == OpId::gather;
      permutes = permutes || plan->graph->node(id).op == OpId::permute;
    }
    CHECK_FALSE((gathers && permutes));
  }
  // Only values computed from the batch are gathered: none in the optimizer's update.
  const Graph& program = step.runtime().program().graph();
  for (ValueId id = 0; id < program.size(); ++id)
    if (program.node(id).op == OpId::gather) {
      INFO(program.scope_path(program.node(id).scope));
      CHECK(program.scope_path(program.node(id).scope).find("optimizer") == std::string::npos);
    }
}

TEST_CASE("in-step sifting honours the delay (again each epoch with repeat_delay) without "
          "recompiling, and a resumed step draws the same rows",
          "[sifting]") {
  auto blobs = gaussian_blobs(640, 6, 4, 22);
  const int64_t batch = 32;
  auto folder = std::filesystem::temp_directory_path() / "sinter-in-step-sift";
  std::filesystem::create_directories(folder);
  auto per_row = [](MLP& m, Var x, Var y) -> Var {
    return cross_entropy_loss(m(x), y, {}, Reduction::none);
  };
  SiftOptions options{.beta = 2.0, .history = 64, .delay = 2, .repeat_delay = true, .seed = 9};
  Init init(4);
  MLP model({6, 12, 4}, init);
  int traces = 0;
  auto counted = [&traces, per_row](MLP& m, Var x, Var y) -> Var {
    ++traces;
    return per_row(m, x, y);
  };
  auto step = compile_step(model, counted, adamw{.lr = 0.01},
                           {.batch_names = {"examples", "labels"}, .sift = options});
  DataLoader loader(*blobs, {.batch_size = batch, .seed = 6, .prefetch_threads = 0});
  Batch b;
  std::vector<int64_t> kept_per_step;
  for (int epoch = 0; epoch < 2; ++epoch) {
    loader.start_epoch(epoch);
    if (epoch > 0) step.runtime().start_sift_epoch();
    for (int i = 0; i < 5 && loader.next(b); ++i) {
      step(b.examples, b.labels);
      kept_per_step.push_back(step.runtime().sift_rows().size());
    }
  }
  // Two whole batches, then a third of each (round(32 / 3) = 11), from each epoch's start.
  CHECK(kept_per_step == std::vector<int64_t>{32, 32, 11, 11, 11, 32, 32, 11, 11, 11});
  CHECK(traces == 3); // the batch, its kept rows, and the delay's whole batch: all at first call
  CHECK(step.runtime().compilations() == 1);
  CHECK(step.runtime().sift_counts().kept == 4 * 32 + 6 * 11);

  // Resume from a checkpoint: the same rows are drawn and the same parameters follow.
  save_checkpoint(folder / "sift.safetensors", model, step);
  auto position = loader.position();
  Init init_again(99); // different weights: all of them come from the checkpoint
  MLP resumed({6, 12, 4}, init_again);
  auto again = compile_step(resumed, per_row, adamw{.lr = 0.01},
                            {.batch_names = {"examples", "labels"}, .sift = options});
  load_checkpoint(folder / "sift.safetensors", resumed, again);
  DataLoader loader_again(*blobs, {.batch_size = batch, .seed = 6, .prefetch_threads = 0});
  loader_again.seek(position);
  Batch b2;
  for (int i = 0; i < 3; ++i) {
    REQUIRE(loader.next(b));
    REQUIRE(loader_again.next(b2));
    step(b.examples, b.labels);
    again(b2.examples, b2.labels);
    std::vector<int64_t> want, got;
    for (int64_t r = 0; r < step.runtime().sift_rows().size(); ++r)
      want.push_back(static_cast<int64_t>(step.runtime().sift_rows().at(r)));
    for (int64_t r = 0; r < again.runtime().sift_rows().size(); ++r)
      got.push_back(static_cast<int64_t>(again.runtime().sift_rows().at(r)));
    CHECK(got == want);
    CHECK(largest_difference(model, resumed) < 1e-6);
  }
  // Counters edited to what no run counts are refused by name before anything is restored
  // (a huge one once went through a cast to an integer: undefined behaviour).
  for (double edit : {-1.0, 1e18}) { // i64 counters: below 0, and past 2^53
    INFO("a counter set to " << edit);
    Checkpoint ckpt = load_safetensors(folder / "sift.safetensors");
    HostTensor& counters = ckpt.tensors.at("optimizer.sift.counters");
    counters.set(0, edit);
    std::vector<std::pair<std::string, const HostTensor*>> named;
    for (const auto& [name, tensor] : ckpt.tensors)
      named.emplace_back(name, &tensor);
    save_safetensors(folder / "edited.safetensors", named, ckpt.metadata);
    CHECK_THROWS_WITH(load_checkpoint(folder / "edited.safetensors", resumed, again),
                      Catch::Contains("'optimizer.sift.counters'") &&
                          Catch::Contains("only a count"));
  }
  std::filesystem::remove_all(folder);
}

TEST_CASE("in-step sifting refuses a loss that is not one value per row, naming the fix",
          "[sifting]") {
  auto blobs = gaussian_blobs(64, 6, 4, 23);
  Init init(5);
  MLP model({6, 8, 4}, init);
  auto step =
      compile_step(model, [](MLP& m, Var x, Var y) -> Var { return cross_entropy_loss(m(x), y); },
                   adamw{}, {.sift = SiftOptions{.beta = 1.0}});
  DataLoader loader(*blobs, {.batch_size = 16, .seed = 1, .prefetch_threads = 0});
  Batch b;
  REQUIRE(loader.next(b));
  CHECK_THROWS_WITH(step(b.examples, b.labels), Catch::Contains("returns each row's loss") &&
                                                    Catch::Contains("Reduction::none"));
}
