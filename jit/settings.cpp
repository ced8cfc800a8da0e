// jit/settings.cpp — the table of SINTER_* variables, the compiler's settings parsed once, and
// the warning for a variable sinter does not read
#include "jit/settings.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace sinter {
namespace {

constexpr SettingInfo table[] = {
    {"SINTER_NUM_THREADS", "count", "hardware threads",
     "threads for kernels on the CPU (a bad value is an error naming it)"},
    {"SINTER_COMPILE_THREADS", "count", "hardware threads",
     "threads a CUDA compile generates and assembles its kernels on, whatever "
     "`SINTER_NUM_THREADS` says (a bad value is an error naming it)"},
    {"SINTER_CACHE_DIR", "path", "`$XDG_CACHE_HOME/sinter`, else `~/.cache/sinter`",
     "the persistent kernel cache"},
    {"SINTER_BACKEND", "`cpu`, `interpreter`", "`cpu`",
     "the default backend; the interpreter is the float64 reference (slow)"},
    {"SINTER_DEVICE", "`cpu`, `cuda`, `cuda:N`, `interpreter`", "`cpu`",
     "the default device; wins over `SINTER_BACKEND` (GPU settings: `docs/gpu.md`)"},
    {"SINTER_LOG", "`0`, `1`", "`1`", "`0` silences the compile lines"},
    {"SINTER_MEMORY_LIMIT", "bytes (suffixes `K`, `M`, `G`, `T`: powers of 1024)", "unlimited",
     "the peak a training step may plan; a larger one throws `sinter::OutOfMemory` with the "
     "plan, its largest buffers and the largest batch that fits, as a device of that size would "
     "(docs/distillation.md §5). A malformed value is an error naming it"},
    {"SINTER_ATTENTION", "`fused`, `cudnn`, `nvptx`, `decomposed`", "`fused`",
     "`fused` runs `attention` on the backend's fused kernels where it has them (the CPU always; "
     "CUDA in bf16/f16 on sm_80 or newer: the faster of cuDNN's fused SDPA and sinter's NVPTX "
     "kernels, timed and compared at a shape's first compile and remembered in the kernel "
     "cache, see `docs/gpu.md`); `cudnn` and `nvptx` force one of the two on CUDA (the CPU "
     "treats both as `fused`); `decomposed` runs it as GEMMs and a softmax with the scores in "
     "memory, and says so once: `sinter: attention on cpu: decomposed "
     "(SINTER_ATTENTION=decomposed)`. Any other value is an error naming the four"},
    {"SINTER_DUMP", "stage names, `list`, `all` (comma-separated)", "off",
     "prints what each named compile stage made (the graph, or the fusion, memory or launch "
     "plan, or the kernels) and `list` the stages each compile ran, in order, with their times "
     "(see *The stages of a compile*). Plans a step measures without compiling (`--max-batch`, "
     "`SINTER_MEMORY_LIMIT`, `TrainStep::plan_memory`) are marked `(planned)`. A name that is "
     "no stage gets a warning naming the closest"},
    {"SINTER_TIME_PHASES", "`0`, `1`", "`0`",
     "`1` prints `sinter: phase <stage> <ms> ms` as each compile stage ends, and `first run` (a "
     "program's first call: uploads, and on a GPU graph capture; on CUDA its parts first: "
     "`first run.buffers`, `.batch`, `.parameters`, `.launches`, `.wait`)"},
    {"SINTER_COLLECTIVE_TIMEOUT", "seconds (decimals allowed)", "300",
     "how long a collective between ranks may wait before the job ends with the missing ranks "
     "named (docs/distributed.md); a malformed value is an error naming it"},
    {"SINTER_PROFILE", "path", "off",
     "profiles any program into this directory (docs/profiling.md)"},
    {"SINTER_CHECK_NUMERICS", "`0`, `1`", "`0`",
     "stops at the first kernel that writes an infinity or NaN, naming the op (docs/profiling.md)"},
    {"SINTER_TF32", "`0`, `1`", "`0`", "cuda: f32 GEMMs may use TF32 tensor cores"},
    {"SINTER_CUDA_GRAPH", "`0`, `1`", "`1`",
     "cuda: `0` never captures steps as CUDA graphs (for `compute-sanitizer`)"},
    {"SINTER_ROWS_PARAMETER", "`0`, `1`", "`1`",
     "cuda: `1` compiles each kernel whose work splits into rows with the row count as a launch "
     "parameter, and a kernel met at two shapes (shape buckets: planned at the two nearest "
     "other buckets on the first compile) with the size that changed as one, so one binary "
     "serves every batch size and sequence length (a recompile reuses it); `0` compiles every "
     "kernel for its shape. Another value is an error naming it"},
    {"SINTER_SPLIT_REDUCTIONS", "`0`, `1`", "`1`",
     "cuda: `1` splits long column reductions (bias and layernorm gradients) into partial sums "
     "over row groups and a short sum, for more blocks (docs/gpu.md); `0` runs each in one pass. "
     "Another value is an error naming it"},
    {"SINTER_UPDATE_IN_PLACE", "`0`, `1`", "`1`",
     "cuda: `1` writes a step's new parameters and optimizer state over the old ones, which "
     "stay on the GPU between steps (no buffers of their own, no copy back after each step); "
     "`0` writes them to buffers of their own and copies them over the old after the step. "
     "Another value is an error naming it"},
    {"SINTER_HEAD_BIAS_EPILOGUE", "`0`, `1`", "`1`",
     "cuda: `1` keeps a bias added to a GEMM's product over rows longer than 2048 that a row "
     "kernel reduces (a language model's head and its loss) for the GEMM's cuBLASLt epilogue; "
     "`0` lets the loss's row kernel add it, reading the whole vector again for every row and "
     "pass (docs/gpu.md). Another value is an error naming it"},
    {"SINTER_GELU_EPILOGUE", "`0`, `1`", "`1`",
     "cuda: `1` stores a GEMM's bias add that feeds a tanh-GELU and that more than one "
     "kernel reads (GELU's forward and backward, in training) in place of the GEMM's "
     "product, so the GEMM writes it and GELU's output together (cuBLASLt's GELU_AUX_BIAS "
     "epilogue) and the backward's GEMM applies GELU's derivative to its product (DGELU); "
     "`0` computes GELU and its derivative in loop kernels of their own (docs/gpu.md). "
     "Another value is an error naming it"},
    {"SINTER_DETERMINISTIC", "`0`, `1`", "`0`",
     "cuda: `1` makes a step give the same bits on every run with the same inputs: scatters "
     "(embedding gradients) add their updates in position order, a block owning each output row, "
     "instead of with atomic adds in whatever order the blocks run, and attention backwards run on "
     "sinter's kernels rather than cuDNN's (docs/gpu.md, \"Reproducible runs\"); with "
     "`SINTER_ATTENTION=cudnn` it is an error. Another value is an error naming it"},
    {"SINTER_ATTENTION_VIEWS", "`0`, `1`", "`1`",
     "cuda: `1` lets the fused attention kernels read q, k, v and dO where the model's reshapes, "
     "slices and permutes leave them (the heads of a packed qkv projection, rows apart) and "
     "casts them before those views; `0` copies each into its own [..., T, D] buffer first. "
     "Another value is an error naming it"},
    {"SINTER_ATTENTION_PIPELINE", "`0`, `1`", "`1`",
     "cuda: `1` double-buffers the fused attention kernels' key and query tiles in shared "
     "memory where two fit (cp.async copies the next tile while the block computes on this "
     "one); `0` copies each tile between two barriers. Another value is an error naming it"},
    {"SINTER_LIBCUDA", "path", "`libcuda.so.1`", "cuda: the driver library to load"},
    {"SINTER_LIBDEVICE", "path", "beside libsinter, then the CUDA toolkit",
     "cuda: `libdevice.10.bc` (a wrong path is an error, not a fallback)"},
    {"SINTER_LIBNCCL", "path", "`libnccl.so.2`",
     "cuda: the NCCL library for collectives (docs/distributed.md)"},
    {"SINTER_LIBNVJITLINK", "path", "`libnvJitLink.so.13`, `.so.12`, then the CUDA toolkit",
     "cuda: the in-process PTX assembler (a wrong path is an error, not a fallback)"},
    {"SINTER_PTX_ASSEMBLER", "`jitlink`, `driver`",
     "`jitlink` where libnvJitLink loads (`driver` under the null driver)",
     "cuda: who assembles the kernels' PTX: libnvJitLink on every compile thread, or the "
     "driver's JIT (`cuLinkComplete`). Another value is an error naming it"},
    {"SINTER_NULL_GPU", "`0`, `1`, or the library's path", "`0`",
     "cuda: `1` loads the null CUDA driver (`libsinter_null_gpu.so`, beside libsinter) in place "
     "of libcuda, libcublasLt and libnccl: a GPU that runs nothing, for the host side "
     "(docs/gpu.md)"},
    {"SINTER_NULL_GPU_DEVICE", "`h100`, `h200`, `a100`, then `,key=value`", "`h100`",
     "null driver: the device it reports (docs/gpu.md lists the keys)"},
    {"SINTER_NULL_GPU_COPIES", "`0`, `1`", "`0`",
     "null driver: `1` backs device memory and moves the bytes of copies and memsets (kernels "
     "still run nothing), to check the host's data path end to end"},
    {"SINTER_NULL_GPU_FILL", "`nan`", "unset",
     "null driver, with `SINTER_NULL_GPU_COPIES=1`: `nan` fills fresh device memory with NaN, "
     "as if every kernel had made one (tests --check-numerics on cuda)"},
    {"SINTER_NULL_GPU_PTXAS", "`0`, `1`", "`1`",
     "null driver: `0` skips assembling the PTX it is given"},
    {"SINTER_NULL_GPU_ASSEMBLER", "`jitlink`, `ptxas`", "`jitlink`",
     "null driver: how it assembles PTX: in the process with the toolkit's libnvJitLink, as the "
     "driver's JIT does (the default, where the library is found), or with a `ptxas` process"},
    {"SINTER_NULL_GPU_REPORT", "path", "off",
     "null driver: appends its counters as one `null_gpu key=value ...` line at exit"},
    {"SINTER_FASHION_MNIST_DIR", "path", "`/usr/share/datasets/fashion-mnist`",
     "where the Fashion-MNIST loader reads its IDX files"},
    {"SINTER_FORTUNES_DIR", "path", "`/usr/share/games/fortunes`",
     "where the text loader finds the fortunes"},
    {"SINTER_KERNEL_PRELUDE", "path, or empty", "the prelude built with sinter",
     "notebook: the precompiled DSL prelude (`PATH.pch`, `PATH.o`); empty parses the DSL in "
     "each kernel (docs/notebook.md)"},
    {"SINTER_KERNEL_TIMING", "`0`, `1`", "`0`", "notebook: prints the kernel's start-up phases"},
    {"SINTER_REQUIRE_GPU", "`0`, `1`", "`0`",
     "tests: the CUDA suites fail instead of skipping where there is no GPU"},
    {"SINTER_REQUIRE_PTXAS", "`0`, `1`", "`0`",
     "tests: the PTX suites fail instead of skipping where there is no `ptxas`"},
    {"SINTER_PTXAS", "path", "`ptxas` on `PATH`", "tests: the `ptxas` the PTX tests use"},
    {"SINTER_INTEROP_PYTHON", "path", "`python3`",
     "tests: a Python with numpy and safetensors for the checkpoint interop test"},
    {"SINTER_INTEROP_REEXEC", "`0`, `1`", "`0`",
     "tests: set by the checkpoint interop test when it runs itself again"},
    {"SINTER_HF_PYTHON", "path", "`python3`",
     "tests: a Python with torch and transformers for the Hugging Face weights test"},
    {"SINTER_HF_REEXEC", "`0`, `1`", "`0`",
     "tests: set by the Hugging Face weights test when it runs itself again"},
    {"SINTER_HF_TIMING", "`0`, `1`", "`0`",
     "tests: `tests/pretrained/hf_forward` prints its build, load and forward seconds"},
};

} // namespace

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = above;
    }
  }
  return row[b.size()];
}

namespace {

Settings parse() {
  Settings s;
  for (const SettingInfo& info : table)
    if (const char* value = std::getenv(std::string(info.name).c_str()))
      s.values.emplace_back(info.name, value);
  auto value = [&](std::string_view name) -> std::string_view {
    for (const auto& [variable, text] : s.values)
      if (variable == name) return text;
    return "";
  };
  s.dump = value("SINTER_DUMP");
  s.time_phases = value("SINTER_TIME_PHASES") == "1";
  s.log = value("SINTER_LOG") != "0";
  return s;
}

std::mutex settings_mutex;
Settings* current = nullptr;

} // namespace

std::span<const SettingInfo> setting_table() { return table; }

bool switch_setting(std::string_view name, bool fallback) {
  const char* value = setting(name);
  if (!value) return fallback;
  if (std::string_view(value) == "1") return true;
  if (std::string_view(value) == "0") return false;
  throw std::invalid_argument("sinter: " + std::string(name) + " must be 0 or 1, not '" +
                              std::string(value) + "'");
}

const SettingInfo* find_setting(std::string_view name) {
  for (const SettingInfo& s : table)
    if (s.name == name) return &s;
  return nullptr;
}

std::string_view closest_setting(std::string_view name) {
  return closest_name(name, table, [](const SettingInfo& s) { return s.name; });
}

std::string settings_markdown() {
  std::string out = "| variable | values | default | effect |\n| --- | --- | --- | --- |\n";
  for (const SettingInfo& s : table)
    out += "| `" + std::string(s.name) + "` | " + std::string(s.type) + " | " +
           std::string(s.fallback) + " | " + std::string(s.meaning) + " |\n";
  return out;
}

std::string unknown_settings_warning(char** environment) {
  std::string out;
  for (char** entry = environment; entry && *entry; ++entry) {
    std::string_view text(*entry);
    if (!text.starts_with("SINTER_")) continue;
    std::string_view name = text.substr(0, text.find('='));
    if (find_setting(name)) continue;
    out += "sinter: warning: " + std::string(name) + " is not a sinter setting (did you mean " +
           std::string(closest_setting(name)) + "?); the settings: docs/compiling.md\n";
  }
  return out;
}

const Settings& settings() {
  std::lock_guard lock(settings_mutex);
  if (!current) {
    current = new Settings(parse()); // never freed: read until the process ends
    if (std::string warning = unknown_settings_warning(environ); !warning.empty())
      std::fputs(warning.c_str(), stderr);
  }
  return *current;
}

const char* setting(std::string_view name) {
  if (!find_setting(name))
    throw std::logic_error("sinter: setting " + std::string(name) +
                           " is not in jit/settings.cpp's table");
  const Settings& current_settings = settings();
  for (const auto& [variable, value] : current_settings.values)
    if (variable == name) return value.c_str();
  return nullptr;
}

void reload_settings() {
  Settings fresh = parse();
  std::lock_guard lock(settings_mutex);
  if (current)
    *current = std::move(fresh);
  else
    current = new Settings(std::move(fresh));
}

} // namespace sinter
