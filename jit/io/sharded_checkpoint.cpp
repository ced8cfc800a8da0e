// jit/io/sharded_checkpoint.cpp — shard files, their index, resharding on read, consolidation
#include "jit/io/sharded_checkpoint.hpp"

#include "jit/dist/communicator.hpp"
#include "jit/ir/graph.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <system_error>

namespace sinter {
namespace {

constexpr const char* files_key = "sharded.files";
constexpr const char* shape_prefix = "sharded.shape.";
/// One save's id, in the index and in each of its shards: shards of another save (another run,
/// an earlier step, a copied file) never pass for this one's.
constexpr const char* save_key = "sharded.save";

std::string shape_text(const Shape& shape) {
  std::string out;
  for (int64_t d : shape)
    out += (out.empty() ? "" : ",") + std::to_string(d);
  return out;
}

Shape parse_shape(const std::string& text, const std::filesystem::path& file) {
  Shape shape;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    int64_t d = -1;
    auto [end, error] = std::from_chars(part.data(), part.data() + part.size(), d);
    if (part.empty() || error != std::errc{} || end != part.data() + part.size() || d < 0)
      throw std::runtime_error("sinter: checkpoint " + file.string() + ": bad shape '" + text +
                               "' in its shard index (comma-separated sizes of 0 or more)");
    shape.push_back(d);
  }
  return shape;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ','))
    if (!part.empty()) out.push_back(part);
  return out;
}

/// Whether `name` is a file name a sharded save of `stem` writes:
/// `<stem>.step<digits>.rank<digits>-of-<digits>.safetensors`, with no folder part.
bool is_shard_file_name(const std::string& name, const std::string& stem) {
  std::string_view rest = name;
  auto take = [&](std::string_view text) {
    if (!rest.starts_with(text)) return false;
    rest.remove_prefix(text.size());
    return true;
  };
  auto digits = [&] {
    std::size_t n = 0;
    while (n < rest.size() && rest[n] >= '0' && rest[n] <= '9')
      ++n;
    rest.remove_prefix(n);
    return n > 0;
  };
  return take(stem) && take(".step") && digits() && take(".rank") && digits() && take("-of-") &&
         digits() && take(".safetensors") && rest.empty();
}

/// A name from an index's file list is a plain name beside the index: no folder, no `..`.
bool plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos;
}

int64_t shard_of(int64_t elements, int pieces) {
  return std::max<int64_t>(1, (elements + pieces - 1) / pieces);
}

} // namespace

void save_sharded_checkpoint(const std::filesystem::path& index, const NamedTensors& whole,
                             const std::vector<ShardedTensor>& shards,
                             std::map<std::string, std::string> metadata, Communicator& ranks,
                             int64_t step) {
  const int n = ranks.size();
  auto shard_name = [&](int r) {
    return index.stem().string() + ".step" + std::to_string(step) + ".rank" + std::to_string(r) +
           "-of-" + std::to_string(n) + ".safetensors";
  };
  std::filesystem::path dir = index.parent_path();
  NamedTensors mine;
  for (const ShardedTensor& s : shards)
    mine.emplace_back(s.name, s.piece);
  // Rank 0 draws the save's id; every shard and the index carry it.
  int64_t id = 0;
  if (ranks.rank() == 0) {
    std::random_device entropy;
    id = static_cast<int64_t>((uint64_t{entropy()} << 32 | entropy()) >> 1);
  }
  ranks.broadcast(&id, 1, DType::i64, 0);
  const std::string save_id = std::to_string(id);
  // Every rank's shard is on disk before the index that names them replaces the old one.
  save_safetensors(dir / shard_name(ranks.rank()), mine,
                   {{"format", "sinter-checkpoint-shard-v1"},
                    {"step", std::to_string(step)},
                    {"rank", std::to_string(ranks.rank())},
                    {"ranks", std::to_string(n)},
                    {save_key, save_id}});
  ranks.barrier();
  if (ranks.rank() == 0) {
    std::vector<std::string> previous;
    std::error_code missing;
    if (std::filesystem::exists(index, missing)) {
      try {
        Checkpoint old = load_safetensors(index);
        if (auto it = old.metadata.find(files_key); it != old.metadata.end())
          previous = split_list(it->second);
      } catch (const std::runtime_error&) {
        // An unreadable old index is replaced; its shards, if any, are left alone.
      }
    }
    std::string files;
    for (int r = 0; r < n; ++r)
      files += (r ? "," : "") + shard_name(r);
    metadata[files_key] = files;
    metadata[save_key] = save_id;
    for (const ShardedTensor& s : shards)
      metadata[shape_prefix + s.name] = shape_text(s.whole);
    save_safetensors(index, whole, metadata);
    // Only shard files a save of this index wrote, by their name, beside it: an index can be
    // edited or copied, and its list must never delete anything else.
    std::vector<std::string> kept = split_list(files);
    for (const std::string& old : previous)
      if (std::find(kept.begin(), kept.end(), old) == kept.end() &&
          is_shard_file_name(old, index.stem().string()) &&
          std::filesystem::is_regular_file(std::filesystem::symlink_status(dir / old, missing)))
        std::filesystem::remove(dir / old, missing);
  }
  ranks.barrier(); // no rank reads the checkpoint before its index exists
}

CheckpointReader::CheckpointReader(std::filesystem::path index)
    : path_(std::move(index)), index_(load_safetensors(path_)) {
  if (auto it = index_.metadata.find(files_key); it != index_.metadata.end())
    shard_names_ = split_list(it->second);
  for (const std::string& name : shard_names_)
    if (!plain_file_name(name))
      throw std::runtime_error("sinter: checkpoint " + path_.string() + " lists the shard file '" +
                               name +
                               "', which is not a file beside it: shard files live in the "
                               "index's folder; restore the index that wrote them, or copy the "
                               "shards there and list them by name");
  for (const auto& [key, value] : index_.metadata)
    if (key.starts_with(shape_prefix))
      sharded_shapes_[key.substr(std::strlen(shape_prefix))] = parse_shape(value, path_);
  shard_files_.resize(shard_names_.size());
  if (!sharded_shapes_.empty() && shard_names_.empty())
    throw std::runtime_error("sinter: checkpoint " + path_.string() +
                             " lists sharded tensors but no shard files");
}

CheckpointReader::~CheckpointReader() = default;

bool CheckpointReader::contains(const std::string& name) const {
  return index_.tensors.contains(name) || sharded_shapes_.contains(name);
}

const Checkpoint& CheckpointReader::shard_file(std::size_t i) {
  if (!shard_files_[i]) {
    std::filesystem::path file = path_.parent_path() / shard_names_[i];
    if (!std::filesystem::exists(file))
      throw std::runtime_error("sinter: checkpoint " + path_.string() + " needs its shard file " +
                               file.string() +
                               ", which is missing: keep every rank's shard file beside the "
                               "index (copy them together)");
    auto shard = std::make_unique<Checkpoint>(load_safetensors(file));
    // The shard must be this save's piece `i` of all of them: its step, rank, rank count and
    // save id (written since shards carry them) agree with the index.
    auto value = [](const Checkpoint& c, const std::string& key) {
      auto it = c.metadata.find(key);
      return it == c.metadata.end() ? std::optional<std::string>() : it->second;
    };
    const std::string count = std::to_string(shard_names_.size());
    std::pair<std::string, std::optional<std::string>> expected[] = {
        {"step", value(index_, "step")},
        {"rank", std::to_string(i)},
        {"ranks", count},
        {save_key, value(index_, save_key)}};
    for (const auto& [key, want] : expected) {
      std::optional<std::string> got = value(*shard, key);
      bool checked = want && (got || key == "step" || index_.metadata.contains(save_key));
      if (checked && got != want)
        throw std::runtime_error(
            "sinter: checkpoint " + path_.string() + ": its shard file " + shard_names_[i] +
            " has " + key + " " + (got ? "'" + *got + "'" : "none") + ", where the index wants " +
            "'" + *want + "' — it belongs to another save (another run, step or rank count, or " +
            "files renamed or swapped); restore the shard files that index wrote");
    }
    shard_files_[i] = std::move(shard);
  }
  return *shard_files_[i];
}

HostTensor CheckpointReader::whole(const std::string& name) {
  if (auto it = index_.tensors.find(name); it != index_.tensors.end()) return it->second;
  auto shape = sharded_shapes_.find(name);
  if (shape == sharded_shapes_.end())
    throw std::runtime_error("sinter: checkpoint " + path_.string() + " has no tensor '" + name +
                             "' — it was written for a different model or optimizer");
  const int pieces = static_cast<int>(shard_names_.size());
  const int64_t elements = numel(shape->second), shard = shard_of(elements, pieces);
  HostTensor out;
  std::size_t element_bytes = 0;
  for (int r = 0; r < pieces; ++r) {
    const Checkpoint& file = shard_file(static_cast<std::size_t>(r));
    auto it = file.tensors.find(name);
    if (it == file.tensors.end() || it->second.shape() != Shape{shard})
      throw std::runtime_error("sinter: checkpoint shard " + shard_names_[r] + " has no '" + name +
                               "' of " + std::to_string(shard) + " elements (written by another " +
                               "run?)");
    if (r == 0) {
      out = HostTensor(it->second.dtype(), shape->second);
      element_bytes = dtype_bytes(it->second.dtype());
    } else if (it->second.dtype() != out.dtype()) {
      throw std::runtime_error("sinter: checkpoint shard " + shard_names_[r] + " holds '" + name +
                               "' as " + std::string(dtype_name(it->second.dtype())) +
                               ", the first shard as " + std::string(dtype_name(out.dtype())) +
                               " — the shards come from different saves; restore the shard "
                               "files that index wrote");
    }
    int64_t begin = r * shard, count = std::min(shard, elements - begin);
    if (count > 0)
      std::memcpy(out.bytes().data() + begin * static_cast<int64_t>(element_bytes),
                  it->second.bytes().data(), static_cast<std::size_t>(count) * element_bytes);
  }
  return out;
}

HostTensor CheckpointReader::read(const std::string& name, DType dtype, const Shape& shape,
                                  int pieces, int rank) {
  HostTensor all = whole(name);
  if (all.dtype() != dtype || all.shape() != shape)
    throw std::runtime_error("sinter: checkpoint " + path_.string() + ": '" + name + "' is " +
                             to_string(TensorType{all.dtype(), all.shape()}) +
                             ", the model expects " + to_string(TensorType{dtype, shape}));
  if (pieces == 1) return all;
  const int64_t elements = numel(shape), shard = shard_of(elements, pieces);
  const std::size_t element_bytes = dtype_bytes(dtype);
  HostTensor piece(dtype, {shard});
  std::fill(piece.bytes().begin(), piece.bytes().end(), std::byte{0}); // the padding
  int64_t begin = rank * shard, count = std::clamp<int64_t>(elements - begin, 0, shard);
  if (count > 0)
    std::memcpy(piece.bytes().data(),
                all.bytes().data() + begin * static_cast<int64_t>(element_bytes),
                static_cast<std::size_t>(count) * element_bytes);
  return piece;
}

std::map<std::string, HostTensor> CheckpointReader::all() {
  std::map<std::string, HostTensor> out = index_.tensors;
  for (const auto& [name, shape] : sharded_shapes_)
    out.emplace(name, whole(name));
  return out;
}

std::map<std::string, HostTensor> CheckpointReader::with_prefix(const std::string& prefix) {
  std::map<std::string, HostTensor> out;
  for (const auto& [name, tensor] : index_.tensors)
    if (name.starts_with(prefix)) out.emplace(name, tensor);
  for (const auto& [name, shape] : sharded_shapes_)
    if (name.starts_with(prefix)) out.emplace(name, whole(name));
  return out;
}

void consolidate_checkpoint(const std::filesystem::path& index, const std::filesystem::path& out) {
  CheckpointReader reader(index);
  // The export must not replace a file it reads: the index or one of its shards.
  std::vector<std::filesystem::path> read = {index};
  for (const std::string& shard : reader.shard_names())
    read.push_back(index.parent_path() / shard);
  std::error_code error;
  for (const std::filesystem::path& source : read)
    if (std::filesystem::equivalent(source, out, error))
      throw std::runtime_error("sinter: exporting " + index.string() + " to " + out.string() +
                               " would overwrite " + source.string() +
                               ", which the export reads: write the whole checkpoint to another "
                               "file");
  std::map<std::string, HostTensor> tensors = reader.all();
  std::map<std::string, std::string> metadata;
  for (const auto& [key, value] : reader.metadata())
    if (key != files_key && !key.starts_with(shape_prefix)) metadata[key] = value;
  NamedTensors named;
  for (const auto& [name, tensor] : tensors)
    named.emplace_back(name, &tensor);
  save_safetensors(out, named, metadata);
}

} // namespace sinter
