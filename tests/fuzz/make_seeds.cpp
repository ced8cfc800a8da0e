// tests/fuzz/make_seeds.cpp — writes each fuzz target's seed inputs with sinter's own writers, so
// the seeds always have today's formats: `make_seeds DIR` fills DIR/<target>/
#include "fuzz_support.hpp"
#include "jit/data/idx.hpp"
#include "jit/runtime/kernel_cache.hpp"
#include "restore_model.hpp"

#include <cstring>
#include <iterator>

namespace {

namespace fs = std::filesystem;
using namespace sinter;

std::string read_all(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write(const fs::path& file, const std::string& bytes) {
  fs::create_directories(file.parent_path());
  std::ofstream(file, std::ios::binary) << bytes;
}

std::string joined(const std::vector<std::string>& files) {
  std::string out;
  for (std::size_t i = 0; i < files.size(); ++i)
    out += (i ? std::string(fuzz::part_separator) : "") + files[i];
  return out;
}

void safetensors_seeds(const fs::path& out, const fs::path& work) {
  std::vector<std::pair<std::string, HostTensor>> owned;
  const std::vector<double> values{1, -2, 0.5, 3};
  for (DType t : all_dtypes)
    owned.emplace_back("t." + std::string(dtype_name(t)),
                       HostTensor::from_doubles(t, {2, 2}, values));
  std::vector<std::pair<std::string, const HostTensor*>> named;
  for (auto& [name, tensor] : owned)
    named.emplace_back(name, &tensor);
  save_safetensors(work / "typed.safetensors", named, {{"step", "12"}, {"epoch", "1"}});
  write(out / "every-dtype", read_all(work / "typed.safetensors"));
  save_safetensors(work / "empty.safetensors", {});
  write(out / "empty", read_all(work / "empty.safetensors"));
}

void checkpoint_seeds(const fs::path& out, const fs::path& work, const fs::path& safetensors_out) {
  fuzz::RestoreModel m;
  data::DataLoader inner(*m.blobs, fuzz::RestoreModel::loader_options);
  auto sifting = m.sifting(inner);
  data::Batch batch;
  sifting->next(batch); // leaves kept samples pending
  auto sift_state = sifting->state();
  NamedTensors extra;
  for (auto& [name, tensor] : sift_state)
    extra.emplace_back(name, &tensor);
  save_checkpoint(work / "whole.safetensors", m.model, m.step, {{"epoch", "0"}}, extra);
  const std::string whole = read_all(work / "whole.safetensors");
  write(out / "whole", whole);
  write(safetensors_out / "checkpoint", whole);

  // The same state as a 2-rank ZeRO save: AdamW's moments in two pieces, everything else in
  // the index (the layout save_sharded_checkpoint writes).
  Checkpoint ckpt = load_safetensors(work / "whole.safetensors");
  std::map<std::string, std::string> index_meta = ckpt.metadata;
  index_meta["sharded.files"] = "ck.step1.rank0-of-2.safetensors,ck.step1.rank1-of-2.safetensors";
  index_meta["sharded.save"] = "4242";
  index_meta["step"] = "1";
  NamedTensors in_index;
  std::vector<std::pair<std::string, HostTensor>> pieces[2];
  for (auto& [name, tensor] : ckpt.tensors) {
    if (!name.starts_with("optimizer.m.") && !name.starts_with("optimizer.v.")) {
      in_index.emplace_back(name, &tensor);
      continue;
    }
    std::string shape;
    for (int64_t d : tensor.shape())
      shape += (shape.empty() ? "" : ",") + std::to_string(d);
    index_meta["sharded.shape." + name] = shape;
    std::vector<double> flat = tensor.to_doubles();
    const std::size_t half = (flat.size() + 1) / 2;
    flat.resize(2 * half, 0.0);
    for (int r = 0; r < 2; ++r)
      pieces[r].emplace_back(name,
                             HostTensor::from_doubles(tensor.dtype(), {static_cast<int64_t>(half)},
                                                      std::span(flat).subspan(r * half, half)));
  }
  std::vector<std::string> files;
  save_safetensors(work / "ck.safetensors", in_index, index_meta);
  files.push_back(read_all(work / "ck.safetensors"));
  for (int r = 0; r < 2; ++r) {
    NamedTensors shard;
    for (auto& [name, tensor] : pieces[r])
      shard.emplace_back(name, &tensor);
    const fs::path file = work / ("ck.step1.rank" + std::to_string(r) + "-of-2.safetensors");
    save_safetensors(file, shard,
                     {{"format", "sinter-checkpoint-shard-v1"},
                      {"step", "1"},
                      {"rank", std::to_string(r)},
                      {"ranks", "2"},
                      {"sharded.save", "4242"}});
    files.push_back(read_all(file));
  }
  write(out / "sharded", joined(files));
}

void idx_seeds(const fs::path& out, const fs::path& work) {
  data::IdxArray images{data::IdxType::u8, {3, 28, 28}, {}};
  images.data.resize(3 * 28 * 28);
  for (std::size_t i = 0; i < images.data.size(); ++i)
    images.data[i] = static_cast<std::byte>(i * 7);
  data::IdxArray labels{data::IdxType::u8, {3}, {std::byte{1}, std::byte{9}, std::byte{0}}};
  for (bool gzip : {false, true}) {
    data::write_idx(work / "images", images, gzip);
    data::write_idx(work / "labels", labels, gzip);
    write(out / (gzip ? "fashion-gzip" : "fashion"),
          joined({read_all(work / "images"), read_all(work / "labels")}));
  }
  data::IdxArray floats{data::IdxType::f64, {2, 2}, {}};
  floats.data.resize(32, std::byte{0x3f});
  data::write_idx(work / "floats", floats, false);
  write(out / "f64", read_all(work / "floats"));
}

void text_seeds(const fs::path& out) {
  write(out / "fortune", std::string("\x07\x10", 2) +
                             "The best way to predict the future is to invent it.\n%\n"
                             "Simplicity is prerequisite for reliability.\n%\n");
  write(out / "short", std::string("\x05\x00", 2) + "abc");
}

void kernel_cache_seeds(const fs::path& out, const fs::path& work) {
  KernelCache cache(work / "cache");
  const CacheKey key{0x5151'7e57'0000'0001ull, 0x0123'4567'89ab'cdefull};
  const std::string object = "\x7f"
                             "ELF a kernel's object bytes";
  cache.store(key, object);
  write(out / "entry", read_all(cache.entry_path(key)));
}

void flag_seeds(const fs::path& out) {
  auto line = [](std::vector<std::string> args) {
    std::string s;
    for (const std::string& a : args)
      s += a + std::string(1, '\0');
    return s;
  };
  write(out / "numbers", line({"--steps", "100", "--lr=0.003", "--batch-size", "max"}));
  write(out / "switches", line({"--resume", "--check-numerics=false", "--checkpoint-dir", "d"}));
  write(out / "ranges", line({"--clip", "1e12", "--temperature=0.5", "--seed", "9"}));
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds DIR (writes DIR/<target>/ seed inputs)\n");
    return 2;
  }
  const fs::path out = argv[1], work = fuzz::scratch();
  safetensors_seeds(out / "safetensors", work);
  checkpoint_seeds(out / "checkpoint", work, out / "safetensors");
  idx_seeds(out / "idx", work);
  text_seeds(out / "text");
  kernel_cache_seeds(out / "kernel_cache", work);
  flag_seeds(out / "flags");
  return 0;
}
