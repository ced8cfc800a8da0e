// jit/train/sift.cpp — the sifting rule (percentile of the loss history, seeded draws) and the
// sifting loader
#include "jit/train/sift.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace sinter {
namespace {

/// splitmix64: the draw for counter `n` under `seed` (portable, and resumable from the count).
uint64_t mix(uint64_t seed, uint64_t n) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (n + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

const HostTensor& take(const std::map<std::string, HostTensor>& tensors, const std::string& name) {
  auto it = tensors.find(name);
  if (it == tensors.end())
    throw std::runtime_error("sinter: the checkpoint has no '" + name +
                             "': it was written without sifting (or by another version); resume "
                             "with the same --sift-* flags it was written with");
  return it->second;
}

/// An integer tensor `name` of `count` values, each from `min` to `max` (they are in an
/// earlier value's range where `within` names it); else the checkpoint was edited or damaged.
std::vector<int64_t> counts_of(const std::map<std::string, HostTensor>& tensors,
                               const std::string& name, int64_t count) {
  const HostTensor& t = take(tensors, name);
  if (t.dtype() != DType::i64 || t.shape() != Shape{count})
    throw std::runtime_error("sinter: the checkpoint's '" + name + "' is " +
                             std::string(dtype_name(t.dtype())) + to_string(t.shape()) +
                             ", not i64[" + std::to_string(count) +
                             "]: it was edited or damaged; resume from another checkpoint");
  // Read as the integers they are: through a double, INT64_MAX would round past the range
  // and the cast back would overflow (fuzzing found it).
  std::vector<int64_t> out(static_cast<std::size_t>(count));
  std::memcpy(out.data(), t.bytes().data(), out.size() * sizeof(int64_t));
  return out;
}

/// `tensor`: the `sift.*` tensor that disagrees with the rest of the sifting state.
[[noreturn]] void inconsistent(const std::string& tensor, const std::string& what) {
  throw std::runtime_error("sinter: the checkpoint's sifting state is inconsistent at '" + tensor +
                           "' (" + what +
                           "): it was edited or damaged; resume from another checkpoint");
}

} // namespace

void check_sift_options(const SiftOptions& options) {
  if (!(options.beta >= 0) || !std::isfinite(options.beta))
    throw std::invalid_argument("sinter: sifting beta must be a number >= 0, got " +
                                std::to_string(options.beta));
  if (options.history < 1)
    throw std::invalid_argument("sinter: the sifting loss history must hold at least 1 loss, got " +
                                std::to_string(options.history));
  if (options.delay < 0)
    throw std::invalid_argument("sinter: the sifting delay must be 0 or more batches, got " +
                                std::to_string(options.delay));
}

SiftRule::SiftRule(SiftOptions options) : options_(options) {
  check_sift_options(options_);
  history_.reserve(static_cast<std::size_t>(options_.history));
}

void SiftRule::start_epoch(int64_t) { epoch_batches_ = 0; }

bool SiftRule::delaying() const {
  return (options_.repeat_delay ? epoch_batches_ : batches_) < options_.delay;
}

double SiftRule::percentile(double loss) const {
  if (history_.empty()) return 1.0;
  double below = 0;
  for (double h : history_)
    below += h < loss ? 1.0 : (h == loss ? 0.5 : 0.0);
  return below / static_cast<double>(history_.size());
}

double SiftRule::draw() {
  return static_cast<double>(mix(options_.seed, static_cast<uint64_t>(draws_++)) >> 11) * 0x1p-53;
}

float sift_uniform(uint64_t seed, uint64_t n) {
  return (static_cast<float>(mix(seed, n) >> 41) + 0.5f) * 0x1p-23f;
}

std::vector<bool> SiftRule::select(std::span<const double> losses, std::span<const bool> real) {
  if (!real.empty() && real.size() != losses.size())
    throw std::invalid_argument("sinter: SiftRule::select needs one real flag per loss");
  std::vector<bool> keep(losses.size(), false);
  bool all = delaying();
  for (std::size_t i = 0; i < losses.size(); ++i) {
    if (!real.empty() && !real[i]) continue;
    if (!std::isfinite(losses[i]))
      // A runtime condition, not a caller's mistake: the model's values made it.
      throw std::runtime_error("sinter: sifting scored a non-finite loss (" +
                               std::to_string(losses[i]) + ") at row " + std::to_string(i) +
                               ": the model diverged; lower the learning rate");
    double u = draw(); // drawn in the delay too, so the draws never depend on it
    keep[i] = all || u < std::pow(percentile(losses[i]), options_.beta);
  }
  for (std::size_t i = 0; i < losses.size(); ++i) {
    if (!real.empty() && !real[i]) continue;
    if (static_cast<int64_t>(history_.size()) < options_.history)
      history_.push_back(losses[i]);
    else
      history_[static_cast<std::size_t>(next_slot_)] = losses[i];
    next_slot_ = (next_slot_ + 1) % options_.history;
    ++seen_;
    kept_ += keep[i];
  }
  ++batches_;
  ++epoch_batches_;
  return keep;
}

std::vector<std::pair<std::string, HostTensor>> SiftRule::state() const {
  std::vector<std::pair<std::string, HostTensor>> out;
  out.emplace_back(
      "sift.history",
      HostTensor::from_doubles(DType::f64, {static_cast<int64_t>(history_.size())}, history_));
  std::vector<double> counters{static_cast<double>(next_slot_), static_cast<double>(draws_),
                               static_cast<double>(batches_),   static_cast<double>(epoch_batches_),
                               static_cast<double>(seen_),      static_cast<double>(kept_)};
  out.emplace_back("sift.counters", HostTensor::from_doubles(DType::i64, {6}, counters));
  return out;
}

void SiftRule::restore(const std::map<std::string, HostTensor>& tensors) {
  const HostTensor& history = take(tensors, "sift.history");
  if (history.shape().size() != 1 || history.size() > options_.history)
    throw std::runtime_error("sinter: the checkpoint's 'sift.history' holds " +
                             std::to_string(history.size()) + " losses for a history of " +
                             std::to_string(options_.history) +
                             ": resume with the --sift-history it was written with");
  std::vector<int64_t> c = counts_of(tensors, "sift.counters", 6);
  // next slot, draws, batches, epoch batches, seen, kept: the slot follows the filled history
  // until it is full; every count is at least 0, and kept and the epoch's within their totals.
  const int64_t filled = history.size();
  bool slot_ok = filled < options_.history ? c[0] == filled : c[0] >= 0 && c[0] < filled;
  // No run counts 2^62 of anything: a larger count would overflow as the run goes on.
  const bool in_range =
      std::all_of(c.begin(), c.end(), [](int64_t v) { return v <= (int64_t{1} << 62); });
  if (!slot_ok || !in_range || c[1] < 0 || c[2] < 0 || c[3] < 0 || c[3] > c[2] || c[4] < filled ||
      c[5] < 0 || c[5] > c[4])
    inconsistent("sift.counters", "counters " + std::to_string(c[0]) + ", " + std::to_string(c[1]) +
                                      ", " + std::to_string(c[2]) + ", " + std::to_string(c[3]) +
                                      ", " + std::to_string(c[4]) + ", " + std::to_string(c[5]) +
                                      " with " + std::to_string(filled) + " losses recorded");
  std::vector<double> losses(static_cast<std::size_t>(filled), 0.0);
  for (int64_t i = 0; i < filled; ++i) {
    losses[static_cast<std::size_t>(i)] = history.at(i);
    if (!std::isfinite(losses[static_cast<std::size_t>(i)]))
      inconsistent("sift.history", "recorded loss " + std::to_string(i) + " is not finite");
  }
  history_ = std::move(losses);
  next_slot_ = c[0];
  draws_ = c[1];
  batches_ = c[2];
  epoch_batches_ = c[3];
  seen_ = c[4];
  kept_ = c[5];
}

Value sift_selection(Value losses, Value history, Value filled, Value uniforms, double beta,
                     int64_t k) {
  Graph& g = *losses.graph;
  const int64_t b = losses.shape().at(0), h = history.shape().at(0);
  if (k < 1 || k > b)
    throw std::invalid_argument("sinter: in-step sifting keeps between 1 and " + std::to_string(b) +
                                " rows, not " + std::to_string(k));
  // Percentiles: a [B, H] comparison of every loss with every recorded one. The counts are
  // summed in i32: exact, and an integer sum vectorises (a float sum must keep its order, one
  // dependent add per element).
  Value valid = less(iota(g, DType::f32, {h}, 0), broadcast_to(filled, {h}));
  Value l = broadcast_to(reshape(losses, {b, 1}), {b, h});
  Value r = broadcast_to(reshape(history, {1, h}), {b, h});
  Value v = broadcast_to(reshape(valid, {1, h}), {b, h});
  // Twice the count below: 2 for each recorded loss below, 1 for a tie.
  Value twice = cast(less(r, l), DType::i32) * 2.0 + cast(equal(r, l), DType::i32);
  Value below = cast(sum(where(v, twice, 0.0), {1}), DType::f32) * 0.5;
  Value any = greater(filled, scalar_like(filled, 0.0));
  Value percentile =
      where(broadcast_to(any, {b}),
            below / broadcast_to(maximum(filled, scalar_like(filled, 1.0)), {b}), 1.0);
  Value weight = beta == 0 ? percentile * 0.0 + 1.0
                           : pow(percentile, broadcast_to(scalar_like(percentile, beta), {b}));
  Value key = log(uniforms) / weight; // -inf for a zero weight: drawn last
  // Rank of each key: how many keys are larger, or equal in a lower row.
  Value ki = broadcast_to(reshape(key, {b, 1}), {b, b}); // [i, j] = key_i
  Value kj = broadcast_to(reshape(key, {1, b}), {b, b}); // [i, j] = key_j
  Value row_i = iota(g, DType::i32, {b, b}, 0), row_j = iota(g, DType::i32, {b, b}, 1);
  Value ahead =
      where(less(ki, kj), 1.0, where(equal(ki, kj), cast(less(row_j, row_i), DType::i32), 0.0));
  Value rank = sum(ahead, {1}); // [B], i32
  // Row index of each of the first k ranks: a [k, B] one-hot by rank, weighted by row number.
  Value slot = iota(g, DType::i32, {k, b}, 0);
  Value rows = iota(g, DType::i32, {k, b}, 1);
  Value chosen = equal(broadcast_to(reshape(rank, {1, b}), {k, b}), slot);
  return sum(where(chosen, rows, 0.0), {1});
}

SiftingLoader::SiftingLoader(data::DataLoader& inner, PerSampleLoss loss, SiftOptions options)
    : inner_(inner), loss_(std::move(loss)), rule_(options) {}

void SiftingLoader::append_rows(const HostTensor& from, int64_t row,
                                std::vector<std::byte>& to) const {
  std::size_t row_bytes = from.bytes().size() / static_cast<std::size_t>(rows_);
  const std::byte* at = from.bytes().data() + static_cast<std::size_t>(row) * row_bytes;
  to.insert(to.end(), at, at + row_bytes);
}

bool SiftingLoader::next(data::Batch& out) {
  while (rows_ == 0 || pending_rows_ < rows_) {
    if (!inner_.next(scored_)) return false;
    rows_ = scored_.examples.shape().at(0);
    check_restored_rows();
    HostTensor losses = loss_(scored_);
    if (losses.size() != rows_)
      throw std::invalid_argument("sinter: the sifting loss gave " + std::to_string(losses.size()) +
                                  " losses for a batch of " + std::to_string(rows_) +
                                  " rows: it must return one per sample (Reduction::none)");
    std::vector<double> values(static_cast<std::size_t>(rows_));
    std::unique_ptr<bool[]> real(new bool[static_cast<std::size_t>(rows_)]);
    for (int64_t i = 0; i < rows_; ++i) {
      values[static_cast<std::size_t>(i)] = losses.at(i);
      real[static_cast<std::size_t>(i)] = scored_.mask.size() != rows_ || scored_.mask.at(i) != 0;
    }
    std::vector<bool> keep =
        rule_.select(values, std::span<const bool>(real.get(), static_cast<std::size_t>(rows_)));
    for (int64_t i = 0; i < rows_; ++i)
      if (keep[static_cast<std::size_t>(i)]) {
        append_rows(scored_.examples, i, pending_examples_);
        append_rows(scored_.labels, i, pending_labels_);
        ++pending_rows_;
      }
  }
  auto fill = [&](HostTensor& tensor, const HostTensor& like, std::vector<std::byte>& pending) {
    if (tensor.dtype() != like.dtype() || tensor.shape() != like.shape() ||
        tensor.bytes().size() != like.bytes().size())
      tensor = HostTensor(like.dtype(), like.shape());
    std::size_t bytes = tensor.bytes().size();
    std::memcpy(tensor.bytes().data(), pending.data(), bytes);
    pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(bytes));
  };
  fill(out.examples, scored_.examples, pending_examples_);
  fill(out.labels, scored_.labels, pending_labels_);
  if (out.mask.shape() != Shape{rows_}) out.mask = HostTensor(DType::f32, {rows_});
  for (int64_t i = 0; i < rows_; ++i)
    out.mask.set(i, 1.0);
  out.real_rows = rows_;
  pending_rows_ -= rows_;
  delivered_ += rows_;
  return true;
}

void SiftingLoader::start_epoch(int64_t epoch) {
  inner_.start_epoch(epoch);
  rule_.start_epoch(epoch);
}

std::vector<std::pair<std::string, HostTensor>> SiftingLoader::state() const {
  std::vector<std::pair<std::string, HostTensor>> out = rule_.state();
  std::vector<double> counts{static_cast<double>(delivered_), static_cast<double>(pending_rows_)};
  out.emplace_back("sift.loader", HostTensor::from_doubles(DType::i64, {2}, counts));
  if (pending_rows_ > 0) {
    auto pending = [&](const HostTensor& like, const std::vector<std::byte>& bytes) {
      Shape shape = like.shape();
      shape[0] = pending_rows_;
      HostTensor t(like.dtype(), shape);
      std::memcpy(t.bytes().data(), bytes.data(), bytes.size());
      return t;
    };
    out.emplace_back("sift.pending.examples", pending(scored_.examples, pending_examples_));
    out.emplace_back("sift.pending.labels", pending(scored_.labels, pending_labels_));
  }
  return out;
}

void SiftingLoader::restore(const std::map<std::string, HostTensor>& tensors) {
  std::vector<int64_t> counts = counts_of(tensors, "sift.loader", 2);
  if (counts[0] < 0 || counts[1] < 0)
    inconsistent("sift.loader", std::to_string(counts[0]) + " samples delivered, " +
                                    std::to_string(counts[1]) + " pending");
  std::vector<std::byte> examples_bytes, labels_bytes;
  std::optional<RestoredRows> restored;
  if (counts[1] > 0) {
    const HostTensor& examples = take(tensors, "sift.pending.examples");
    const HostTensor& labels = take(tensors, "sift.pending.labels");
    if (examples.shape().empty() || examples.shape()[0] != counts[1] || labels.shape().empty() ||
        labels.shape()[0] != counts[1])
      inconsistent("sift.pending.examples", std::to_string(counts[1]) + " pending rows, examples " +
                                                to_string(examples.shape()) + ", labels " +
                                                to_string(labels.shape()));
    restored = RestoredRows{examples.dtype(), examples.shape(), labels.dtype(), labels.shape()};
    examples_bytes.assign(examples.bytes().begin(), examples.bytes().end());
    labels_bytes.assign(labels.bytes().begin(), labels.bytes().end());
  }
  rule_.restore(tensors); // all checked: only now does anything change
  delivered_ = counts[0];
  pending_rows_ = counts[1];
  pending_examples_ = std::move(examples_bytes);
  pending_labels_ = std::move(labels_bytes);
  restored_rows_ = std::move(restored);
}

void SiftingLoader::check_restored_rows() {
  if (!restored_rows_) return;
  auto row_of = [](Shape s) {
    s.erase(s.begin());
    return s;
  };
  const RestoredRows& r = *restored_rows_;
  if (r.examples != scored_.examples.dtype() ||
      row_of(r.examples_shape) != row_of(scored_.examples.shape()) ||
      r.labels != scored_.labels.dtype() ||
      row_of(r.labels_shape) != row_of(scored_.labels.shape()))
    throw std::runtime_error(
        "sinter: the checkpoint's pending sifted samples ('sift.pending.examples') are " +
        std::string(dtype_name(r.examples)) + to_string(r.examples_shape) + " with labels " +
        std::string(dtype_name(r.labels)) + to_string(r.labels_shape) +
        ", but this loader's batches are " + std::string(dtype_name(scored_.examples.dtype())) +
        to_string(scored_.examples.shape()) + " with labels " +
        std::string(dtype_name(scored_.labels.dtype())) + to_string(scored_.labels.shape()) +
        ": resume with the data the checkpoint was written with");
  restored_rows_.reset();
}

} // namespace sinter
