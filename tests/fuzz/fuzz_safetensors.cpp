// tests/fuzz/fuzz_safetensors.cpp — libFuzzer target: a whole safetensors file through
// load_safetensors, each tensor's finiteness check and the integer metadata a resume reads
#include "fuzz_support.hpp"
#include "jit/io/checkpoint.hpp"

#include <stdexcept>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace sinter;
  const std::filesystem::path file =
      fuzz::as_file("input.safetensors", {reinterpret_cast<const char*>(data), size});
  Checkpoint ckpt;
  try {
    ckpt = load_safetensors(file);
  } catch (const std::runtime_error& e) {
    fuzz::require_named(e.what(), {file.string()});
    return 0;
  }
  for (const auto& [name, tensor] : ckpt.tensors) {
    // A loaded tensor's bytes are all there: reading every element must stay inside them.
    if (tensor.byte_size() != static_cast<std::size_t>(tensor.size()) * dtype_bytes(tensor.dtype()))
      std::abort();
    try {
      require_finite(tensor, name, file, name.starts_with("optimizer.v."));
    } catch (const std::runtime_error& e) {
      fuzz::require_named(e.what(), {name});
    }
  }
  for (const char* key : {"step", "epoch", "batch"}) {
    try {
      metadata_integer(ckpt.metadata, key, file, 0, int64_t{1} << 62);
    } catch (const std::runtime_error& e) {
      fuzz::require_named(e.what(), {key});
    }
  }
  return 0;
}
