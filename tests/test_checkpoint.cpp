// tests/test_checkpoint.cpp — safetensors checkpoints: format, round trips, validation, atomicity
#include "jit/dist/communicator.hpp"
#include "jit/io/checkpoint.hpp"
#include "jit/io/sharded_checkpoint.hpp"

#include "temp_dir.hpp"

#include <catch2/catch.hpp>
#include <cctype>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utility>
#include <vector>

using namespace sinter;
using sinter::testing::TempDir;
namespace fs = std::filesystem;

namespace {

std::string read_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& file, const std::string& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// A file with the given header text (unpadded, as written) followed by `data`.
std::string safetensors_bytes(const std::string& header, const std::string& data = "") {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[static_cast<std::size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

using Named = std::pair<std::string, const HostTensor*>;

std::vector<std::string> directory_listing(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

/// Runs `body` in a child process and returns its exit status (or 128 + signal).
template <class F> int in_child(F body) {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// The message load_safetensors throws for `bytes`, or "" if it loads.
std::string load_error(const fs::path& file, const std::string& bytes) {
  write_bytes(file, bytes);
  try {
    load_safetensors(file);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST_CASE("Every dtype round-trips through a safetensors file, including scalars and empty tensors",
          "[checkpoint]") {
  TempDir dir;
  std::vector<std::pair<std::string, HostTensor>> owned;
  for (DType t : all_dtypes) {
    std::vector<double> values = {0, 1, 0, 1, 1, 0};
    if (t != DType::boolean) values = {1.5, -2, 3.25, 0, 1e3, -7};
    if (is_integer(t)) values = {1, -2, 3, 0, 1000, -2147483647};
    std::string name(dtype_name(t));
    owned.emplace_back(name + ".matrix", HostTensor::from_doubles(t, {2, 3}, values));
    owned.emplace_back(name + ".scalar", HostTensor::from_doubles(t, {}, {values.data(), 1}));
    owned.emplace_back(name + ".empty", HostTensor(t, {0, 4}));
  }
  std::vector<Named> named;
  for (const auto& [name, tensor] : owned)
    named.emplace_back(name, &tensor);

  save_safetensors(dir.path / "all.safetensors", named);
  Checkpoint loaded = load_safetensors(dir.path / "all.safetensors");

  REQUIRE(loaded.tensors.size() == owned.size());
  CHECK(loaded.metadata.empty());
  for (const auto& [name, tensor] : owned) {
    INFO(name);
    REQUIRE(loaded.tensors.count(name) == 1);
    const HostTensor& back = loaded.tensors.at(name);
    CHECK(back.dtype() == tensor.dtype());
    CHECK(back.shape() == tensor.shape());
    CHECK(back.to_doubles() == tensor.to_doubles());
    CHECK(std::equal(back.bytes().begin(), back.bytes().end(), tensor.bytes().begin(),
                     tensor.bytes().end()));
  }
}

TEST_CASE("A tiny checkpoint is laid out byte for byte as the safetensors format specifies",
          "[checkpoint]") {
  TempDir dir;
  // Data is ordered by descending element size, then by name (as the reference writer does, so
  // each tensor is aligned to its element size); the header lists tensors in that same order,
  // after "__metadata__", and is padded with spaces to a multiple of 8 bytes.
  HostTensor c = HostTensor::from_doubles(DType::i64, {}, std::vector<double>{7});
  HostTensor b = HostTensor::from_doubles(DType::f32, {2}, std::vector<double>{1.0, -2.0});
  HostTensor a = HostTensor::from_doubles(DType::boolean, {3}, std::vector<double>{1, 0, 1});
  std::vector<Named> named = {{"a", &a}, {"b", &b}, {"c", &c}};
  save_safetensors(dir.path / "tiny.safetensors", named, {{"format", "pt"}});

  std::string header = R"({"__metadata__":{"format":"pt"},)"
                       R"("c":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                       R"("a":{"dtype":"BOOL","shape":[3],"data_offsets":[16,19]}})"
                       "      "; // 194 bytes of JSON + 6 spaces = 200
  std::string expected = std::string("\xc8\0\0\0\0\0\0\0", 8) + header +
                         std::string("\x07\0\0\0\0\0\0\0" // c = 7 (i64)
                                     "\0\0\x80\x3f"       // b[0] = 1.0f
                                     "\0\0\0\xc0"         // b[1] = -2.0f
                                     "\x01\x00\x01",      // a = true, false, true
                                     19);
  CHECK(read_bytes(dir.path / "tiny.safetensors") == expected);
}

TEST_CASE("A single-tensor file matches the safetensors reference test vector", "[checkpoint]") {
  // From the reference implementation's test_serialization_forced_alignement: "attn0" is
  // f32[1,1,2,3] {0..5}; 65 bytes of JSON are padded to 72.
  TempDir dir;
  HostTensor attn =
      HostTensor::from_doubles(DType::f32, {1, 1, 2, 3}, std::vector<double>{0, 1, 2, 3, 4, 5});
  std::vector<Named> named = {{"attn0", &attn}};
  save_safetensors(dir.path / "attn.safetensors", named);
  const unsigned char reference[] = {
      72,  0,   0,   0,   0,   0,   0,   0,   123, 34, 97, 116, 116, 110, 48,  34,  58,  123,
      34,  100, 116, 121, 112, 101, 34,  58,  34,  70, 51, 50,  34,  44,  34,  115, 104, 97,
      112, 101, 34,  58,  91,  49,  44,  49,  44,  50, 44, 51,  93,  44,  34,  100, 97,  116,
      97,  95,  111, 102, 102, 115, 101, 116, 115, 34, 58, 91,  48,  44,  50,  52,  93,  125,
      125, 32,  32,  32,  32,  32,  32,  32,  0,   0,  0,  0,   0,   0,   128, 63,  0,   0,
      0,   64,  0,   0,   64,  64,  0,   0,   128, 64, 0,  0,   160, 64};
  CHECK(read_bytes(dir.path / "attn.safetensors") ==
        std::string(reinterpret_cast<const char*>(reference), sizeof reference));
}

TEST_CASE("The output does not depend on the order the tensors are given in", "[checkpoint]") {
  TempDir dir;
  HostTensor x = HostTensor::from_doubles(DType::f16, {2}, std::vector<double>{1, 2});
  HostTensor y = HostTensor::from_doubles(DType::f64, {1}, std::vector<double>{3});
  HostTensor z = HostTensor::from_doubles(DType::f16, {1}, std::vector<double>{4});
  std::vector<Named> forward = {{"x", &x}, {"y", &y}, {"z", &z}};
  std::vector<Named> backward = {{"z", &z}, {"y", &y}, {"x", &x}};
  save_safetensors(dir.path / "forward.safetensors", forward, {{"k1", "v1"}, {"k0", "v0"}});
  save_safetensors(dir.path / "backward.safetensors", backward, {{"k0", "v0"}, {"k1", "v1"}});
  CHECK(read_bytes(dir.path / "forward.safetensors") ==
        read_bytes(dir.path / "backward.safetensors"));
}

TEST_CASE("Metadata round-trips, including escapes and non-ASCII text", "[checkpoint]") {
  TempDir dir;
  HostTensor w = HostTensor::from_doubles(DType::f32, {1}, std::vector<double>{0.5});
  std::vector<Named> named = {{"w", &w}};
  std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {"step", "1200"},
      {"quote \" and backslash \\", "tab\there, newline\nthere, bell\x07, slash /"},
      {"unicode", "h\xc3\xa9llo \xe2\x9c\x93 \xf0\x9f\x98\x80"},
      {"", ""}};
  save_safetensors(dir.path / "meta.safetensors", named, metadata);
  Checkpoint loaded = load_safetensors(dir.path / "meta.safetensors");
  CHECK(loaded.metadata == metadata);
  CHECK(loaded.tensors.at("w").to_doubles() == std::vector<double>{0.5});
  // serde_json's escaping: \t, \n and \u0007 escaped; '/' and UTF-8 written verbatim.
  std::string bytes = read_bytes(dir.path / "meta.safetensors");
  CHECK(bytes.find(R"("tab\there, newline\nthere, bell\u0007, slash /")") != std::string::npos);
  CHECK(bytes.find("h\xc3\xa9llo") != std::string::npos);
}

TEST_CASE("A file without tensors or metadata is the minimal '{}' header", "[checkpoint]") {
  TempDir dir;
  save_safetensors(dir.path / "empty.safetensors", {});
  CHECK(read_bytes(dir.path / "empty.safetensors") ==
        std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
  Checkpoint loaded = load_safetensors(dir.path / "empty.safetensors");
  CHECK(loaded.tensors.empty());
  CHECK(loaded.metadata.empty());
}

TEST_CASE("Every truncation of a checkpoint is rejected with the file named", "[checkpoint]") {
  TempDir dir;
  HostTensor a = HostTensor::from_doubles(DType::f32, {2, 2}, std::vector<double>{1, 2, 3, 4});
  HostTensor b = HostTensor::from_doubles(DType::i32, {3}, std::vector<double>{5, 6, 7});
  std::vector<Named> named = {{"a", &a}, {"b", &b}};
  save_safetensors(dir.path / "full.safetensors", named, {{"step", "3"}});
  std::string full = read_bytes(dir.path / "full.safetensors");
  fs::path cut = dir.path / "cut.safetensors";
  for (std::size_t length = 0; length < full.size(); ++length) {
    INFO("prefix of " << length << " of " << full.size() << " bytes");
    std::string message = load_error(cut, full.substr(0, length));
    CHECK(message.find(cut.string()) != std::string::npos);
  }
  CHECK(load_error(cut, full).empty());
}

TEST_CASE("Corrupted headers are rejected with a message saying what is wrong", "[checkpoint]") {
  TempDir dir;
  fs::path file = dir.path / "bad.safetensors";
  auto tensor = [](const std::string& dtype, const std::string& shape, const std::string& offsets) {
    return R"({"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":)" + offsets +
           "}";
  };
  std::string eight(8, '\x11');
  struct Case {
    std::string bytes, expected;
  };
  std::vector<Case> cases = {
      {"short", "shorter than the 8-byte header length"},
      {std::string("\xff\0\0\0\0\0\0\0{}", 10), "runs past the end"},
      {safetensors_bytes("[]"), "does not start with '{'"},
      {safetensors_bytes(R"({"a":)"), "not valid JSON"},
      {safetensors_bytes(R"({"a":{}} x)"), "not valid JSON"},
      {safetensors_bytes(R"({"a":)" + tensor("F32", "[2]", "[0,8]") + "}", eight),
       ""}, // the valid baseline for the cases below
      {safetensors_bytes(R"({"a":)" + tensor("F32", "[2]", "[0,8]") + R"(,"a":)" +
                             tensor("F32", "[2]", "[8,16]") + "}",
                         eight + eight),
       "duplicate key"},
      {safetensors_bytes(R"({"a":)" + tensor("U8", "[8]", "[0,8]") + "}", eight),
       "unsupported dtype \"U8\""},
      {safetensors_bytes(R"({"a":)" + tensor("F32", "[3]", "[0,8]") + "}", eight),
       "(12 bytes) but its data_offsets [0, 8] span 8 bytes"},
      {safetensors_bytes(R"({"a":)" + tensor("F32", "[-2]", "[0,8]") + "}", eight),
       "negative numbers are not allowed"},
      {safetensors_bytes(R"({"a":)" + tensor("F32", "[2.0]", "[0,8]") + "}", eight),
       "only integers are allowed"},
      {safetensors_bytes(R"({"a":)" + tensor("F32", "[2]", "[0]") + "}", eight),
       "must be [begin, end]"},
      {safetensors_bytes(R"({"a":)" + tensor("F32", "[2]", "[8,0]") + "}", eight),
       "end before they begin"},
      {safetensors_bytes(R"({"a":)" + tensor("F32", "[2]", "[0,8]") + R"(,"b":)" +
                             tensor("F32", "[1]", "[4,8]") + "}",
                         eight),
       "overlaps the previous tensor"},
      {safetensors_bytes(R"({"a":)" + tensor("F32", "[1]", "[4,8]") + "}", eight), "leaves a gap"},
      {safetensors_bytes(R"({"a":)" + tensor("F32", "[4]", "[0,16]") + "}", eight),
       "runs past the end of the 8-byte data section"},
      {safetensors_bytes(R"({"a":)" + tensor("F32", "[2]", "[0,8]") + "}", eight + "junk"),
       "trailing garbage"},
      {safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2]}})", eight), "has no \"data_offsets\""},
      {safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", eight),
       "unknown field \"x\""},
      {safetensors_bytes(R"({"__metadata__":{"step":3}})"), "metadata value for \"step\""},
      {safetensors_bytes(R"({"__metadata__":["a"]})"), "\"__metadata__\" must be an object"},
      {safetensors_bytes("{\"\xc3\x28\":1}"), "invalid UTF-8"},
      {safetensors_bytes(R"({"\ud800":1})"), "unpaired high surrogate"},
      {safetensors_bytes(R"({"a":true})"), "not valid JSON"},
      {safetensors_bytes(R"({"a":)" + tensor("F32", "[99999999999999999999]", "[0,8]") + "}",
                         eight),
       "does not fit in 64 bits"},
      {safetensors_bytes(R"({"a":)" + tensor("F64", "[4611686018427387904,4]", "[0,8]") + "}",
                         eight),
       "overflows 64 bits"},
  };
  for (const Case& c : cases) {
    INFO("expected: " << c.expected);
    std::string message = load_error(file, c.bytes);
    INFO("got: " << message);
    if (c.expected.empty()) {
      CHECK(message.empty());
    } else {
      CHECK(message.find(c.expected) != std::string::npos);
      CHECK(message.find(file.string()) != std::string::npos);
    }
  }
}

TEST_CASE("Loading a missing file names the file and the reason", "[checkpoint]") {
  TempDir dir;
  fs::path missing = dir.path / "missing.safetensors";
  REQUIRE_THROWS_WITH(load_safetensors(missing), Catch::Contains(missing.string()) &&
                                                     Catch::Contains("No such file or directory"));
}

TEST_CASE("A failed overwrite leaves the previous checkpoint intact and no temporary file behind",
          "[checkpoint]") {
  TempDir dir;
  fs::path file = dir.path / "model.safetensors";
  HostTensor old_w = HostTensor::from_doubles(DType::f32, {2}, std::vector<double>{1, 2});
  std::vector<Named> old_named = {{"w", &old_w}};
  save_safetensors(file, old_named, {{"step", "1"}});
  std::string before = read_bytes(file);

  HostTensor big(DType::f64, {1 << 16}); // 512 KiB: far past the file-size limit below
  std::vector<Named> new_named = {{"w", &big}};

  SECTION("when the disk fills up mid-write") {
    // RLIMIT_FSIZE makes write() fail with EFBIG partway through, as a full disk would; it is
    // set in a child so the test process keeps its limits.
    int status = in_child([&] {
      std::signal(SIGXFSZ, SIG_IGN);
      rlimit limit{4096, RLIM_INFINITY};
      ::setrlimit(RLIMIT_FSIZE, &limit);
      try {
        save_safetensors(file, new_named, {{"step", "2"}});
      } catch (const std::runtime_error& e) {
        std::string message = e.what();
        return message.find(file.string()) != std::string::npos &&
                       message.find("unchanged") != std::string::npos
                   ? 0
                   : 2;
      }
      return 1; // the write should not have succeeded
    });
    CHECK(status == 0);
  }
  SECTION("when the directory is read-only") {
    fs::permissions(dir.path, fs::perms::owner_read | fs::perms::owner_exec |
                                  fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec);
    int status = in_child([&] {
      // NOTE: root ignores directory permissions, so a root test run drops to 'nobody' here.
      if (::geteuid() == 0 && ::setuid(65534) != 0) return 3;
      try {
        save_safetensors(file, new_named);
      } catch (const std::runtime_error& e) {
        return std::string(e.what()).find("cannot create a temporary file") != std::string::npos
                   ? 0
                   : 2;
      }
      return 1;
    });
    CHECK(status == 0);
    fs::permissions(dir.path, fs::perms::owner_all, fs::perm_options::add);
  }
  CHECK(read_bytes(file) == before);
  CHECK(load_safetensors(file).metadata.at("step") == "1");
  CHECK(directory_listing(dir.path) == std::vector<std::string>{"model.safetensors"});
}

TEST_CASE("A successful overwrite replaces the previous checkpoint", "[checkpoint]") {
  TempDir dir;
  fs::path file = dir.path / "model.safetensors";
  HostTensor v1 = HostTensor::from_doubles(DType::f32, {1}, std::vector<double>{1});
  HostTensor v2 = HostTensor::from_doubles(DType::f32, {3}, std::vector<double>{4, 5, 6});
  std::vector<Named> first = {{"w", &v1}}, second = {{"w", &v2}};
  save_safetensors(file, first);
  save_safetensors(file, second);
  CHECK(load_safetensors(file).tensors.at("w").to_doubles() == std::vector<double>{4, 5, 6});
  CHECK(directory_listing(dir.path) == std::vector<std::string>{"model.safetensors"});
}

TEST_CASE("Duplicate or reserved tensor names are rejected before anything is written",
          "[checkpoint]") {
  TempDir dir;
  fs::path file = dir.path / "dup.safetensors";
  HostTensor a = HostTensor::from_doubles(DType::f32, {1}, std::vector<double>{1});
  HostTensor b = HostTensor::from_doubles(DType::i64, {1}, std::vector<double>{2});
  std::vector<Named> duplicate = {{"w", &a}, {"v", &a}, {"w", &b}};
  REQUIRE_THROWS_WITH(save_safetensors(file, duplicate), Catch::Contains("\"w\" appears twice"));
  std::vector<Named> reserved = {{"__metadata__", &a}};
  REQUIRE_THROWS_WITH(save_safetensors(file, reserved), Catch::Contains("reserved"));
  std::vector<Named> not_utf8 = {{"w\xff", &a}};
  REQUIRE_THROWS_WITH(save_safetensors(file, not_utf8), Catch::Contains("not valid UTF-8"));
  CHECK(directory_listing(dir.path).empty());
}

namespace sinter::testing {
namespace {

TEST_CASE("A sharded save deletes only the old shard files it wrote, never what an edited index "
          "lists elsewhere, and a reader refuses shard names outside the index's folder",
          "[checkpoint]") {
  TempDir tmp("sinter-shard-delete");
  namespace fs = std::filesystem;
  fs::path run = tmp.path / "run", victims = tmp.path / "victim_dir";
  fs::create_directories(run);
  fs::create_directories(victims);
  auto touch = [](const fs::path& file) { std::ofstream(file) << "keep me"; };
  touch(victims / "precious.txt");
  touch(run / "notes.txt");
  touch(run / "mlp.step10.rank0-of-1.safetensors");   // what a save at step 10 wrote
  touch(run / "other.step10.rank0-of-1.safetensors"); // another checkpoint's shard
  const std::vector<double> values{1, 2, 3, 4};
  HostTensor w = HostTensor::from_doubles(DType::f32, {4}, values);
  NamedTensors none;
  const std::string listed = "mlp.step10.rank0-of-1.safetensors,../victim_dir/precious.txt," +
                             (victims / "precious.txt").string() +
                             ",notes.txt,other.step10.rank0-of-1.safetensors";
  save_safetensors(run / "mlp.safetensors", none,
                   {{"sharded.files", listed}, {"sharded.shape.w", "4"}});
  save_sharded_checkpoint(run / "mlp.safetensors", none, {{"w", &w, {4}}}, {}, world(), 20);
  CHECK(fs::exists(victims / "precious.txt"));
  CHECK(fs::exists(run / "notes.txt"));
  CHECK(fs::exists(run / "other.step10.rank0-of-1.safetensors"));
  CHECK_FALSE(fs::exists(run / "mlp.step10.rank0-of-1.safetensors")); // replaced, so removed
  CHECK(fs::exists(run / "mlp.step20.rank0-of-1.safetensors"));
  CheckpointReader ok(run / "mlp.safetensors");
  CHECK(ok.contains("w"));

  // An index whose list points outside its folder is refused by name, before any read.
  for (const std::string& name : {std::string("../victim_dir/precious.txt"),
                                  (victims / "precious.txt").string(), std::string("..")}) {
    save_safetensors(run / "edited.safetensors", none,
                     {{"sharded.files", name}, {"sharded.shape.w", "4"}});
    CHECK_THROWS_WITH(CheckpointReader(run / "edited.safetensors"),
                      Catch::Contains("not a file beside it") && Catch::Contains(name));
  }
}

TEST_CASE("A sharded checkpoint whose shards come from another save, step, rank or dtype is "
          "refused by shard name",
          "[checkpoint]") {
  TempDir tmp("sinter-shard-mix");
  namespace fs = std::filesystem;
  const fs::path index = tmp.path / "mlp.safetensors";
  const std::vector<double> low{1, 2}, high{3, 4};
  HostTensor a = HostTensor::from_doubles(DType::f32, {2}, low);
  HostTensor b = HostTensor::from_doubles(DType::f32, {2}, high);
  HostTensor b64 = HostTensor::from_doubles(DType::f64, {2}, high);
  NamedTensors none;
  const std::string r0 = "mlp.step10.rank0-of-2.safetensors",
                    r1 = "mlp.step10.rank1-of-2.safetensors";
  auto shard = [&](const std::string& file, const HostTensor& t, std::string step, std::string rank,
                   std::string save) {
    NamedTensors named{{"w", &t}};
    save_safetensors(tmp.path / file, named,
                     {{"step", step}, {"rank", rank}, {"ranks", "2"}, {"sharded.save", save}});
  };
  auto write_index = [&](const std::string& files) {
    save_safetensors(index, none,
                     {{"sharded.files", files},
                      {"sharded.shape.w", "4"},
                      {"step", "10"},
                      {"sharded.save", "77"}});
  };
  auto whole = [&] { return CheckpointReader(index).read("w", DType::f32, {4}); };
  shard(r0, a, "10", "0", "77");
  shard(r1, b, "10", "1", "77");
  write_index(r0 + "," + r1);
  HostTensor w = whole();
  CHECK(w.at(0) == 1);
  CHECK(w.at(3) == 4);

  // Each of these once resumed with exit 0 and other values (or read past a buffer).
  shard(r1, b, "10", "1", "78"); // another run's rank 1, same step
  CHECK_THROWS_WITH(whole(), Catch::Contains(r1) && Catch::Contains("sharded.save '78'"));
  shard(r1, b, "9", "1", "77"); // an earlier step's file renamed
  CHECK_THROWS_WITH(whole(), Catch::Contains("step '9', where the index wants '10'"));
  shard(r1, b, "10", "1", "77");
  write_index(r1 + "," + r0); // swapped
  CHECK_THROWS_WITH(whole(), Catch::Contains("rank '1', where the index wants '0'"));
  write_index(r0 + "," + r0); // rank 0 listed twice
  CHECK_THROWS_WITH(whole(), Catch::Contains("rank '0', where the index wants '1'"));
  write_index(r0 + "," + r1);
  shard(r1, b64, "10", "1", "77"); // an F64 copy: once read with f32's element size
  CHECK_THROWS_WITH(whole(), Catch::Contains("holds 'w' as f64, the first shard as f32"));
  shard(r1, b, "10", "1", "77");
  CHECK(whole().at(2) == 3);

  // An export over one of the files it reads is refused, and leaves that file as it was.
  const auto size_before = fs::file_size(tmp.path / r1);
  CHECK_THROWS_WITH(consolidate_checkpoint(index, tmp.path / r1),
                    Catch::Contains("would overwrite") && Catch::Contains(r1));
  CHECK_THROWS_WITH(consolidate_checkpoint(index, index), Catch::Contains("would overwrite"));
  CHECK(fs::file_size(tmp.path / r1) == size_before);
  CHECK(whole().at(2) == 3);
  consolidate_checkpoint(index, tmp.path / "whole.safetensors");
  CHECK(load_safetensors(tmp.path / "whole.safetensors").tensors.at("w").at(3) == 4);
}

TEST_CASE("A save removes the temporary files a killed save of the same file left on this host",
          "[checkpoint]") {
  TempDir tmp("sinter-stale-temp");
  namespace fs = std::filesystem;
  char host[256] = {};
  REQUIRE(gethostname(host, sizeof host - 1) == 0);
  std::string tag;
  for (const char* c = host; *c; ++c)
    if (std::isalnum(static_cast<unsigned char>(*c)) || *c == '.') tag += *c;
  // A process that is gone: a child that exited and was reaped.
  pid_t child = fork();
  if (child == 0) _exit(0);
  REQUIRE(child > 0);
  REQUIRE(waitpid(child, nullptr, 0) == child);
  auto touch = [&](const std::string& name) {
    std::ofstream(tmp.path / name) << "half a checkpoint";
    return tmp.path / name;
  };
  fs::path dead = touch(".c.safetensors.tmp-" + tag + "-" + std::to_string(child) + "-5-0");
  fs::path alive = touch(".c.safetensors.tmp-" + tag + "-" + std::to_string(getpid()) + "-5-0");
  fs::path elsewhere = touch(".c.safetensors.tmp-otherhost-" + std::to_string(child) + "-5-0");
  fs::path other_file = touch(".d.safetensors.tmp-" + tag + "-" + std::to_string(child) + "-5-0");
  const std::vector<double> values{1, 2};
  HostTensor w = HostTensor::from_doubles(DType::f32, {2}, values);
  NamedTensors named{{"w", &w}};
  save_safetensors(tmp.path / "c.safetensors", named);
  CHECK_FALSE(fs::exists(dead));
  CHECK(fs::exists(alive));      // a writer still running
  CHECK(fs::exists(elsewhere));  // another host's: its process cannot be asked
  CHECK(fs::exists(other_file)); // another file's
  CHECK(load_safetensors(tmp.path / "c.safetensors").tensors.at("w").at(1) == 2);
}

} // namespace
} // namespace sinter::testing
