// tests/test_data.cpp — data sets (IDX, Fashion-MNIST, text, synthetic) and the DataLoader
#include "jit/data/fashion_mnist.hpp"
#include "jit/data/idx.hpp"
#include "jit/data/loader.hpp"
#include "jit/data/synthetic.hpp"
#include "jit/data/text.hpp"

#include "env_override.hpp"
#include "temp_dir.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

using namespace sinter;
using sinter::testing::TempDir;
using namespace sinter::data;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

void write_file(const fs::path& file, const std::vector<uint8_t>& bytes) {
  std::ofstream out(file, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> file_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

IdxArray u8_array(Shape dims, const std::vector<uint8_t>& values) {
  IdxArray a{IdxType::u8, std::move(dims), {}};
  for (uint8_t v : values)
    a.data.push_back(std::byte{v});
  return a;
}

/// The message of the exception `f` throws, or "" when it throws none.
template <class F> std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

/// Example i is the i32 scalar i; its label is 1000 + i: batches reveal which examples they hold.
class IndexDataset final : public Dataset {
public:
  explicit IndexDataset(std::size_t n, std::optional<std::size_t> failing = std::nullopt)
      : n_(n), failing_(failing) {}
  std::size_t size() const override { return n_; }
  TensorType example_type() const override { return {DType::i32, {}}; }
  TensorType label_type() const override { return {DType::i32, {}}; }
  void read(std::size_t index, std::byte* example, std::byte* label) const override {
    if (failing_ && index == *failing_)
      throw std::runtime_error("example " + std::to_string(index) + " is unreadable");
    auto x = static_cast<int32_t>(index), y = static_cast<int32_t>(1000 + index);
    std::memcpy(example, &x, 4);
    std::memcpy(label, &y, 4);
  }

private:
  std::size_t n_;
  std::optional<std::size_t> failing_;
};

std::vector<int32_t> ints(const HostTensor& t) {
  std::vector<int32_t> out(static_cast<std::size_t>(t.size()));
  std::memcpy(out.data(), t.bytes().data(), out.size() * 4);
  return out;
}

/// Every batch of the loader's current epoch, from its current position.
std::vector<Batch> drain(DataLoader& loader) {
  std::vector<Batch> batches;
  Batch b;
  while (loader.next(b))
    batches.push_back(b);
  return batches;
}

bool same_batch(const Batch& a, const Batch& b) {
  auto same = [](const HostTensor& x, const HostTensor& y) {
    return x.dtype() == y.dtype() && x.shape() == y.shape() &&
           std::equal(x.bytes().begin(), x.bytes().end(), y.bytes().begin(), y.bytes().end());
  };
  return a.real_rows == b.real_rows && same(a.examples, b.examples) && same(a.labels, b.labels) &&
         same(a.mask, b.mask);
}

bool same_batches(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), same_batch);
}

/// A directory with Fashion-MNIST-named files: `images` u8[n,28,28], `labels` u8[m].
void write_fashion_files(const fs::path& dir, const std::string& prefix, std::size_t images,
                         std::size_t labels, bool gzip) {
  std::vector<uint8_t> pixels(images * 784);
  for (std::size_t i = 0; i < pixels.size(); ++i)
    pixels[i] = static_cast<uint8_t>(i % 256);
  std::vector<uint8_t> classes(labels);
  for (std::size_t i = 0; i < labels; ++i)
    classes[i] = static_cast<uint8_t>(i % 10);
  std::string ext = gzip ? ".gz" : "";
  write_idx(dir / (prefix + "-images-idx3-ubyte" + ext),
            u8_array({static_cast<int64_t>(images), 28, 28}, pixels), gzip);
  write_idx(dir / (prefix + "-labels-idx1-ubyte" + ext),
            u8_array({static_cast<int64_t>(labels)}, classes), gzip);
}

} // namespace

// ---------------------------------------------------------------------------------------------
// IDX

TEST_CASE("IDX files round-trip through write_idx and read_idx, gzip-compressed and plain",
          "[data]") {
  TempDir tmp;
  IdxArray array{IdxType::i32, {2, 3}, {}};
  std::vector<int32_t> values = {1, -2, 300000, 4, 0x01020304, -6};
  array.data.resize(values.size() * 4);
  std::memcpy(array.data.data(), values.data(), array.data.size());

  write_idx(tmp.path / "plain.idx", array, false);
  write_idx(tmp.path / "packed.idx.gz", array, true);
  auto plain = file_bytes(tmp.path / "plain.idx");
  REQUIRE(plain.size() == 4 + 2 * 4 + 24);
  CHECK(std::vector<uint8_t>(plain.begin(), plain.begin() + 12) ==
        std::vector<uint8_t>{0, 0, 0x0C, 2, 0, 0, 0, 2, 0, 0, 0, 3});
  CHECK(std::vector<uint8_t>(plain.begin() + 12, plain.begin() + 16) ==
        std::vector<uint8_t>{0, 0, 0, 1}); // big-endian elements
  auto packed = file_bytes(tmp.path / "packed.idx.gz");
  CHECK((packed[0] == 0x1f && packed[1] == 0x8b)); // the gzip magic

  for (const char* name : {"plain.idx", "packed.idx.gz"}) {
    IdxArray back = read_idx(tmp.path / name);
    CHECK(back.type == IdxType::i32);
    CHECK(back.dims == Shape{2, 3});
    CHECK(back.data == array.data);
  }
}

TEST_CASE("a truncated plain IDX file is reported with the promised and the present size",
          "[data]") {
  TempDir tmp;
  fs::path file = tmp.path / "cut.idx";
  write_idx(file, u8_array({4, 5}, std::vector<uint8_t>(20, 7)), false);
  fs::resize_file(file, 12 + 13); // 4-byte magic, two 4-byte dims, 13 of 20 data bytes
  std::string message = error_of([&] { read_idx(file); });
  CHECK_THAT(message, Contains(file.string()));
  CHECK_THAT(message, Contains("truncated"));
  CHECK_THAT(message, Contains("u8[4,5] (20 bytes of data) but only 13 bytes follow"));
  CHECK_THAT(message, Contains("expected an IDX file"));
}

TEST_CASE("a truncated gzip-compressed IDX file is reported, not read short", "[data]") {
  TempDir tmp;
  fs::path file = tmp.path / "cut.idx.gz";
  std::vector<uint8_t> noise(50000);
  uint32_t x = 12345;
  for (auto& v : noise)
    v = static_cast<uint8_t>((x = x * 1664525u + 1013904223u) >> 24);
  write_idx(file, u8_array({50000}, noise), true);
  fs::resize_file(file, fs::file_size(file) / 2);
  std::string message = error_of([&] { read_idx(file); });
  CHECK_THAT(message, Contains(file.string()));
  CHECK_THAT(message, Contains("truncated"));
  CHECK_THAT(message, Contains("expected an IDX file"));
}

TEST_CASE("an IDX file with a bad magic number names the bytes it found", "[data]") {
  TempDir tmp;
  fs::path file = tmp.path / "bad.idx";
  write_file(file, {0x12, 0x34, 0x08, 0x01, 0, 0, 0, 1, 42});
  std::string message = error_of([&] { read_idx(file); });
  CHECK_THAT(message, Contains(file.string()));
  CHECK_THAT(message, Contains("bad magic number 12 34 08 01"));
  CHECK_THAT(message, Contains("expected an IDX file: bytes 00 00, a type byte"));
}

TEST_CASE("an IDX file with bytes past its data is refused", "[data]") {
  TempDir tmp;
  fs::path file = tmp.path / "long.idx";
  write_file(file, {0, 0, 0x08, 0x01, 0, 0, 0, 1, 42, 43});
  CHECK_THAT(error_of([&] { read_idx(file); }), Contains("trailing bytes"));
}

// ---------------------------------------------------------------------------------------------
// Fashion-MNIST

TEST_CASE("a missing Fashion-MNIST directory names the Debian package and the variable", "[data]") {
  TempDir tmp;
  std::string message = error_of([&] { fashion_mnist(Split::train, tmp.path / "absent"); });
  CHECK_THAT(message, Contains("train-images-idx3-ubyte.gz"));
  CHECK_THAT(message, Contains("does not exist"));
  CHECK_THAT(message, Contains("apt-get install dataset-fashion-mnist"));
  CHECK_THAT(message, Contains("SINTER_FASHION_MNIST_DIR"));
}

TEST_CASE("SINTER_FASHION_MNIST_DIR overrides the default Fashion-MNIST directory", "[data]") {
  {
    testing::EnvOverride elsewhere("SINTER_FASHION_MNIST_DIR", "/somewhere/else");
    CHECK(default_fashion_mnist_dir() == fs::path("/somewhere/else"));
  }
  testing::EnvOverride unset("SINTER_FASHION_MNIST_DIR", std::nullopt);
  CHECK(default_fashion_mnist_dir() == fs::path("/usr/share/datasets/fashion-mnist"));
}

TEST_CASE("a Fashion-MNIST directory of plain IDX files loads with pixels scaled to [0,1]",
          "[data]") {
  TempDir tmp;
  write_fashion_files(tmp.path, "t10k", 3, 3, false);
  auto test = fashion_mnist(Split::test, tmp.path);
  REQUIRE(test->size() == 3);
  CHECK(test->example_type() == TensorType{DType::f32, {28, 28}});
  CHECK(test->label_type() == TensorType{DType::i32, {}});
  std::vector<float> image(784);
  int32_t label = -1;
  test->read(1, reinterpret_cast<std::byte*>(image.data()), reinterpret_cast<std::byte*>(&label));
  CHECK(label == 1);
  // Image 1 starts at flat pixel 784: values (784 + k) % 256.
  CHECK(image[0] == Approx(float(784 % 256) / 255.0f));
  CHECK(image[255 - 784 % 256] == 1.0f);
  CHECK(image[256 - 784 % 256] == 0.0f);
}

TEST_CASE("Fashion-MNIST images and labels of different counts are refused", "[data]") {
  TempDir tmp;
  write_fashion_files(tmp.path, "train", 3, 2, true);
  std::string message = error_of([&] { fashion_mnist(Split::train, tmp.path); });
  CHECK_THAT(message, Contains("train-labels-idx1-ubyte.gz"));
  CHECK_THAT(message, Contains("has 2 labels but"));
  CHECK_THAT(message, Contains("has 3 images"));
}

TEST_CASE("Fashion-MNIST images of the wrong size are refused with the expected format", "[data]") {
  TempDir tmp;
  write_idx(tmp.path / "train-images-idx3-ubyte", u8_array({1, 4, 4}, std::vector<uint8_t>(16)),
            false);
  write_idx(tmp.path / "train-labels-idx1-ubyte", u8_array({1}, {0}), false);
  std::string message = error_of([&] { fashion_mnist(Split::train, tmp.path); });
  CHECK_THAT(message, Contains("holds u8[1,4,4]; expected u8[N,28,28]"));
}

TEST_CASE("the installed Fashion-MNIST splits have their published sizes, labels and pixels",
          "[data]") {
  fs::path dir = default_fashion_mnist_dir();
  if (!fs::exists(dir / "train-images-idx3-ubyte.gz") &&
      !fs::exists(dir / "train-images-idx3-ubyte")) {
    WARN("Fashion-MNIST is not installed in " << dir.string()
                                              << " (apt-get install dataset-fashion-mnist); "
                                                 "skipping the real-data checks");
    return;
  }
  auto train = fashion_mnist(Split::train);
  auto test = fashion_mnist(Split::test);
  REQUIRE(train->size() == 60000);
  REQUIRE(test->size() == 10000);

  std::vector<float> image(784);
  int32_t label = -1;
  train->read(0, reinterpret_cast<std::byte*>(image.data()), reinterpret_cast<std::byte*>(&label));
  CHECK(label == 9); // the first training image is an ankle boot

  std::vector<int> per_class(10, 0);
  float lo = 1.0f, hi = 0.0f;
  for (std::size_t i = 0; i < train->size(); ++i) {
    train->read(i, reinterpret_cast<std::byte*>(image.data()),
                reinterpret_cast<std::byte*>(&label));
    REQUIRE((label >= 0 && label <= 9));
    ++per_class[static_cast<std::size_t>(label)];
    auto [mn, mx] = std::minmax_element(image.begin(), image.end());
    lo = std::min(lo, *mn);
    hi = std::max(hi, *mx);
  }
  CHECK(per_class == std::vector<int>(10, 6000)); // the published split is balanced
  CHECK(lo == 0.0f);
  CHECK(hi == 1.0f);
}

// ---------------------------------------------------------------------------------------------
// DataLoader

TEST_CASE("an epoch order is a permutation that depends only on seed and epoch", "[data]") {
  auto a = epoch_order(1000, 7, 3);
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::size_t> identity(1000);
  for (std::size_t i = 0; i < identity.size(); ++i)
    identity[i] = i;
  CHECK(sorted == identity);
  CHECK(a == epoch_order(1000, 7, 3));
  CHECK(a != epoch_order(1000, 7, 4));
  CHECK(a != epoch_order(1000, 8, 3));
  CHECK(epoch_order(1000, 1, 0) != epoch_order(1000, 0, 1));
}

TEST_CASE("the loader visits every example exactly once per shuffled epoch", "[data]") {
  IndexDataset dataset(1000);
  DataLoader loader(dataset, {.batch_size = 32, .shuffle = true, .seed = 5, .drop_last = false});
  REQUIRE(loader.batches_per_epoch() == 32);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    loader.start_epoch(epoch);
    std::multiset<int32_t> seen;
    std::vector<int32_t> in_order;
    for (const Batch& b : drain(loader)) {
      auto xs = ints(b.examples), ys = ints(b.labels);
      for (int64_t r = 0; r < b.real_rows; ++r) {
        seen.insert(xs[static_cast<std::size_t>(r)]);
        in_order.push_back(xs[static_cast<std::size_t>(r)]);
        CHECK(ys[static_cast<std::size_t>(r)] == 1000 + xs[static_cast<std::size_t>(r)]);
      }
    }
    REQUIRE(seen.size() == 1000);
    CHECK(std::set<int32_t>(seen.begin(), seen.end()).size() == 1000);
    CHECK(!std::is_sorted(in_order.begin(), in_order.end()));
  }
}

TEST_CASE("the same seed and epoch give the same batches, another epoch another order", "[data]") {
  IndexDataset dataset(500);
  LoaderOptions options{.batch_size = 50, .seed = 11};
  DataLoader first(dataset, options), second(dataset, options);
  first.start_epoch(4);
  second.start_epoch(4);
  auto a = drain(first), b = drain(second);
  CHECK(same_batches(a, b));
  first.start_epoch(5);
  CHECK(!same_batches(a, drain(first)));
}

TEST_CASE("seek to a saved position resumes the identical batch sequence", "[data]") {
  IndexDataset dataset(700);
  LoaderOptions options{.batch_size = 64, .seed = 3, .drop_last = false};
  DataLoader reference(dataset, options);
  reference.start_epoch(2);
  auto epoch2 = drain(reference);
  reference.start_epoch(3);
  auto epoch3 = drain(reference);

  DataLoader::Position saved;
  {
    DataLoader interrupted(dataset, options);
    interrupted.start_epoch(2);
    Batch b;
    for (int i = 0; i < 4; ++i)
      REQUIRE(interrupted.next(b));
    saved = interrupted.position();
    CHECK(saved == DataLoader::Position{2, 4});
  } // destroyed mid-epoch with prefetches in flight
  DataLoader resumed(dataset, options);
  resumed.seek(saved);
  auto rest = drain(resumed);
  CHECK(same_batches(rest, std::vector<Batch>(epoch2.begin() + 4, epoch2.end())));
  CHECK(resumed.position() == DataLoader::Position{2, resumed.batches_per_epoch()});
  resumed.start_epoch(3);
  CHECK(same_batches(drain(resumed), epoch3));
}

TEST_CASE("without drop_last the last batch is padded with zero rows that the mask excludes",
          "[data]") {
  IndexDataset dataset(10);
  DataLoader loader(dataset, {.batch_size = 4, .shuffle = false, .drop_last = false});
  auto batches = drain(loader);
  REQUIRE(batches.size() == 3);
  const Batch& last = batches.back();
  CHECK(last.examples.shape() == Shape{4});
  CHECK(last.real_rows == 2);
  CHECK(ints(last.examples) == std::vector<int32_t>{8, 9, 0, 0});
  CHECK(ints(last.labels) == std::vector<int32_t>{1008, 1009, 0, 0});
  CHECK(last.mask.to_doubles() == std::vector<double>{1, 1, 0, 0});
  CHECK(batches[0].mask.to_doubles() == std::vector<double>{1, 1, 1, 1});

  DataLoader dropping(dataset, {.batch_size = 4, .shuffle = false, .drop_last = true});
  CHECK(dropping.batches_per_epoch() == 2);
}

TEST_CASE("shards of a global batch are its rows in rank order, padding included", "[data]") {
  IndexDataset dataset(22);
  for (int64_t epoch : {0, 1}) {
    DataLoader whole(dataset, {.batch_size = 8, .seed = 5, .drop_last = false});
    whole.start_epoch(epoch);
    auto global = drain(whole);
    std::vector<std::vector<Batch>> shards;
    for (int shard = 0; shard < 2; ++shard) {
      DataLoader part(dataset, {.batch_size = 8,
                                .seed = 5,
                                .drop_last = false,
                                .prefetch_threads = shard, // prefetching or not: same rows
                                .shard = shard,
                                .shards = 2});
      part.start_epoch(epoch);
      shards.push_back(drain(part));
      CHECK(part.batches_per_epoch() == whole.batches_per_epoch());
    }
    REQUIRE(global.size() == 3);
    for (std::size_t b = 0; b < global.size(); ++b) {
      std::vector<int32_t> joined = ints(shards[0][b].examples),
                           second = ints(shards[1][b].examples);
      joined.insert(joined.end(), second.begin(), second.end());
      CHECK(joined == ints(global[b].examples));
      CHECK(shards[0][b].examples.shape() == Shape{4});
      CHECK(shards[0][b].real_rows + shards[1][b].real_rows == global[b].real_rows);
    }
    // The last global batch has 6 real rows: 4 on shard 0, 2 and 2 padding rows on shard 1.
    CHECK(shards[1].back().real_rows == 2);
    CHECK(shards[1].back().mask.to_doubles() == std::vector<double>{1, 1, 0, 0});
  }
}

TEST_CASE("a global batch that does not split into the shards is refused with the fix", "[data]") {
  IndexDataset dataset(22);
  CHECK(error_of([&] { DataLoader(dataset, {.batch_size = 9, .shard = 0, .shards = 2}); })
            .find("batch_size 9 (the global batch) does not split into 2 equal shards; use a "
                  "multiple of 2") != std::string::npos);
  CHECK(error_of([&] {
          DataLoader(dataset, {.batch_size = 8, .shard = 2, .shards = 2});
        }).find("shard 2 of 2") != std::string::npos);
}

TEST_CASE("batches stack example and label dims behind the batch dim", "[data]") {
  auto blobs = gaussian_blobs(100, 3, 4, 1);
  DataLoader loader(*blobs, {.batch_size = 16});
  Batch b;
  REQUIRE(loader.next(b));
  CHECK(b.examples.dtype() == DType::f32);
  CHECK(b.examples.shape() == Shape{16, 3});
  CHECK(b.labels.dtype() == DType::i32);
  CHECK(b.labels.shape() == Shape{16});
  CHECK(b.mask.shape() == Shape{16});
}

TEST_CASE("prefetching and synchronous loading give identical batches", "[data]") {
  auto blobs = gaussian_blobs(1000, 5, 3, 9);
  auto batches_with = [&](int threads, int depth) {
    DataLoader loader(*blobs, {.batch_size = 30,
                               .seed = 2,
                               .drop_last = false,
                               .prefetch_threads = threads,
                               .prefetch_depth = depth});
    loader.start_epoch(1);
    return drain(loader);
  };
  auto synchronous = batches_with(0, 1);
  REQUIRE(synchronous.size() == 34);
  CHECK(same_batches(synchronous, batches_with(1, 1)));
  CHECK(same_batches(synchronous, batches_with(2, 2)));
  CHECK(same_batches(synchronous, batches_with(4, 3)));
}

TEST_CASE("a read error in a prefetch worker surfaces in next until the loader seeks", "[data]") {
  IndexDataset dataset(100, 42);
  for (int threads : {0, 2}) {
    DataLoader loader(dataset, {.batch_size = 10, .shuffle = false, .prefetch_threads = threads});
    Batch b;
    for (int i = 0; i < 4; ++i)
      REQUIRE(loader.next(b));
    CHECK_THROWS_WITH(loader.next(b), Contains("example 42 is unreadable"));
    if (threads > 0) CHECK_THROWS_WITH(loader.next(b), Contains("example 42 is unreadable"));
    loader.seek({0, 5});
    CHECK(loader.next(b));
    CHECK(ints(b.examples)[0] == 50);
  }
}

TEST_CASE("a loader that would yield no batches is refused with the reason", "[data]") {
  IndexDataset dataset(10);
  CHECK_THROWS_WITH(DataLoader(dataset, {.batch_size = 16}), Contains("would yield no batches"));
  CHECK_THROWS_WITH(DataLoader(dataset, {.batch_size = 0}), Contains("batch_size 0"));
}

// ---------------------------------------------------------------------------------------------
// Text

TEST_CASE("text windows tile the bytes and label each position with the next byte", "[data]") {
  TempDir tmp;
  fs::path file = tmp.path / "corpus.txt";
  write_file(file, {'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j'});
  auto windows = text_windows(file, 3);
  REQUIRE(windows->size() == 3); // (10 - 1) / 3
  CHECK(windows->example_type() == TensorType{DType::i32, {3}});
  CHECK(windows->label_type() == TensorType{DType::i32, {3}});
  int32_t x[3], y[3];
  windows->read(2, reinterpret_cast<std::byte*>(x), reinterpret_cast<std::byte*>(y));
  CHECK(std::vector<int32_t>(x, x + 3) == std::vector<int32_t>{'g', 'h', 'i'});
  CHECK(std::vector<int32_t>(y, y + 3) == std::vector<int32_t>{'h', 'i', 'j'});
  CHECK_THROWS_WITH(text_windows(file, 10), Contains("needs at least context + 1 = 11 bytes"));
}

TEST_CASE("the fortunes corpus reads the plain-text files and names the package when absent",
          "[data]") {
  TempDir tmp;
  CHECK_THAT(error_of([&] { fortunes_corpus(8, tmp.path / "absent"); }),
             Contains("apt-get install fortunes"));
  write_file(tmp.path / "b", {'B', 'B'});
  write_file(tmp.path / "a", {'A', 'A'});
  write_file(tmp.path / "a.dat", {0, 0, 0, 2});
  fs::create_symlink(tmp.path / "a", tmp.path / "a.u8");
  CHECK(fortune_files(tmp.path) == std::vector<fs::path>{tmp.path / "a", tmp.path / "b"});
  auto corpus = fortunes_corpus(3, tmp.path);
  REQUIRE(corpus->size() == 1);
  int32_t x[3], y[3];
  corpus->read(0, reinterpret_cast<std::byte*>(x), reinterpret_cast<std::byte*>(y));
  CHECK(std::vector<int32_t>(x, x + 3) == std::vector<int32_t>{'A', 'A', 'B'});

  if (fs::is_directory(default_fortunes_dir())) {
    auto files = fortune_files(default_fortunes_dir());
    CHECK(std::find(files.begin(), files.end(), default_text_corpus()) != files.end());
    CHECK(fortunes_corpus(128)->size() > 1000);
  } else {
    WARN("fortunes is not installed (apt-get install fortunes); skipping the real corpus");
  }
}

TEST_CASE("split_holdout keeps the last fraction of examples for holdout", "[data]") {
  auto [train, holdout] = split_holdout(std::make_unique<IndexDataset>(100), 0.1);
  REQUIRE(train->size() == 90);
  REQUIRE(holdout->size() == 10);
  int32_t x = -1, y = -1;
  holdout->read(0, reinterpret_cast<std::byte*>(&x), reinterpret_cast<std::byte*>(&y));
  CHECK(x == 90);
  train->read(89, reinterpret_cast<std::byte*>(&x), reinterpret_cast<std::byte*>(&y));
  CHECK(x == 89);
  CHECK_THROWS_AS(
      holdout->read(10, reinterpret_cast<std::byte*>(&x), reinterpret_cast<std::byte*>(&y)),
      std::out_of_range);
  CHECK_THROWS_WITH(split_holdout(std::make_unique<IndexDataset>(10), 1.5),
                    Contains("outside [0, 1]"));
}

// ---------------------------------------------------------------------------------------------
// Synthetic

TEST_CASE("gaussian_blobs is a deterministic function of its seed", "[data]") {
  auto read_all = [](const Dataset& d) {
    std::vector<float> xs(d.size() * 4);
    std::vector<int32_t> ys(d.size());
    for (std::size_t i = 0; i < d.size(); ++i)
      d.read(i, reinterpret_cast<std::byte*>(&xs[i * 4]), reinterpret_cast<std::byte*>(&ys[i]));
    return std::pair(xs, ys);
  };
  auto a = read_all(*gaussian_blobs(300, 4, 3, 42));
  auto b = read_all(*gaussian_blobs(300, 4, 3, 42));
  auto c = read_all(*gaussian_blobs(300, 4, 3, 43));
  CHECK(a == b);
  CHECK(a.first != c.first);
  for (int32_t y : a.second)
    REQUIRE((y >= 0 && y < 3));
  CHECK(std::set<int32_t>(a.second.begin(), a.second.end()).size() == 3);
}
