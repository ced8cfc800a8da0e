// jit/io/checkpoint.hpp — safetensors checkpoints: atomic save and fully validated load
#pragma once
#include "jit/runtime/host_tensor.hpp"

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <utility>

namespace sinter {

/// Writes `tensors` and string `metadata` to `file` in the safetensors format, byte for byte what
/// the `safetensors` package writes for the same input (data ordered by descending element size,
/// then by name, so every tensor is aligned to its element size; header padded to 8 bytes).
/// Atomic: the bytes go to a temporary file in the same directory, which is fsync'ed and renamed
/// over `file`; on any failure `file` is left as it was and std::runtime_error is thrown.
/// Throws std::invalid_argument for duplicate, reserved ("__metadata__") or non-UTF-8 names,
/// null tensors or negative dims.
void save_safetensors(const std::filesystem::path& file,
                      std::span<const std::pair<std::string, const HostTensor*>> tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// The contents of a safetensors file.
struct Checkpoint {
  std::map<std::string, HostTensor> tensors;
  std::map<std::string, std::string> metadata; ///< the header's "__metadata__" (empty if absent)
};

/// Reads and validates a whole safetensors file: header length, JSON syntax, dtypes (F32 F64 BF16
/// F16 I32 I64 BOOL), shape vs. byte size, offsets that tile the data section exactly, string
/// metadata. Anything else throws std::runtime_error naming the file and the problem; nothing is
/// returned from a truncated or corrupted file.
Checkpoint load_safetensors(const std::filesystem::path& file);

/// Refuses a restored tensor holding inf or NaN (a run that diverged wrote it), or, with
/// `non_negative`, a value below 0 (AdamW's second moment): std::runtime_error naming the file,
/// the tensor, the first bad element and its value. Floating-point dtypes only; others pass.
void require_finite(const HostTensor& tensor, const std::string& name,
                    const std::filesystem::path& file, bool non_negative = false);

/// Refuses a restored tensor of counts (in-step sifting's counters) holding anything but whole
/// numbers from 0 to 2^53: std::runtime_error naming the file, the tensor and the element.
void require_counts(const HostTensor& tensor, const std::string& name,
                    const std::filesystem::path& file);

/// Integer metadata `key` of checkpoint `file`, read whole (decimal digits, a leading `-` at
/// most) and from `min` to `max`: what a resume restores its step, epoch and batch from. A
/// missing key or any other text (`3abc`, `1e3`, `-5` below `min`) throws std::runtime_error
/// naming the file, the key and the value.
int64_t metadata_integer(const std::map<std::string, std::string>& metadata, const std::string& key,
                         const std::filesystem::path& file, int64_t min, int64_t max);

} // namespace sinter
