// jit/cli/main.cpp — the `sinter` command-line tool: op registry, host info, kernel cache,
// checkpoints and the Jupyter kernelspec
#include "jit/backend/cpu/thread_pool.hpp"
#include "jit/backend/cuda/cuda_device.hpp"
#include "jit/backend/cuda/cuda_driver.hpp"
#include "jit/backend/cuda/nvptx_target.hpp"
#include "jit/cli/plot_command.hpp"
#include "jit/io/atomic_file.hpp"
#include "jit/io/json.hpp"
#include "jit/io/sharded_checkpoint.hpp"
#include "jit/pipeline/stage.hpp"
#include "jit/runtime/kernel_cache.hpp"
#include "jit/settings.hpp"
#include "kernels/cuda/cudnn_attention.hpp"
#include "ops/registry.hpp"

#include <llvm/ADT/StringMap.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/TargetParser/Host.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

void print_usage(std::FILE* to) {
  std::fprintf(to,
               "usage: sinter <command>\n\n"
               "commands:\n"
               "  ops        list every registered op: name arity grad=yes|no\n"
               "  version    print the sinter and LLVM versions\n"
               "  info       print the versions, host CPU, thread count, cache dir, GPUs and\n"
               "             whether a CUDA driver is loadable\n"
               "  cache stats  print the kernel cache's dir, entries, bytes and last run\n"
               "  cache clear  remove every kernel cache entry\n"
               "  checkpoint export INDEX OUT  write a checkpoint (one file, or a ZeRO index\n"
               "             and its shard files) as one safetensors file of whole tensors\n"
               "  plot DIR   draw a recipe's --log-dir metrics (DIR/metrics.csv) as DIR/loss.svg\n"
               "             and DIR/accuracy.svg\n"
               "  kernel install [--user | --prefix P]  install the Jupyter kernelspec\n"
               "             `sinter` (default /usr/local/share/jupyter; --user: your Jupyter\n"
               "             data dir; --prefix: P/share/jupyter), running sinter-kernel\n"
               "  settings   print every SINTER_* environment variable: values, default, effect\n"
               "  stages     print every stage a compile can run, in order (SINTER_DUMP=NAME\n"
               "             prints what one made)\n"
               "  help       show this message\n");
}

int list_ops() {
  for (std::size_t i = 0; i < sinter::num_ops; ++i) {
    auto op = static_cast<sinter::OpId>(i);
    const sinter::OpDef& def = sinter::op_def(op);
    std::string arity = def.arity < 0 ? "n" : std::to_string(def.arity);
    std::printf("%s %s grad=%s\n", std::string(sinter::op_name(op)).c_str(), arity.c_str(),
                def.differentiable ? "yes" : "no");
  }
  return 0;
}

constexpr const char* sinter_version = SINTER_VERSION;

std::string enabled_cpu_features() {
  // LLVM 19: a StringMap<bool> of every feature LLVM knows for the host, true when enabled.
  const llvm::StringMap<bool> features = llvm::sys::getHostCPUFeatures();
  std::vector<std::string> names;
  for (const auto& feature : features)
    if (feature.getValue()) names.push_back(feature.getKey().str());
  std::sort(names.begin(), names.end());
  std::string text;
  for (const std::string& name : names)
    text += (text.empty() ? "" : " ") + name;
  return text.empty() ? "(none reported)" : text;
}

int print_info() {
  std::printf("sinter: %s\n", sinter_version);
  std::printf("llvm: %s\n", LLVM_VERSION_STRING);
  std::printf("cpu: %s\n", llvm::sys::getHostCPUName().str().c_str());
  std::printf("cpu features: %s\n", enabled_cpu_features().c_str());
  std::printf("threads: %zu\n", sinter::default_thread_count());
  std::printf("cache dir: %s\n", sinter::KernelCache::default_dir().c_str());
  if (const sinter::cuda::Driver* cuda = sinter::cuda::driver()) {
    int version = cuda->version();
    if (cuda->is_null())
      std::printf("cuda driver: null (SINTER_NULL_GPU=1, no GPU): %s\n",
                  cuda->null_description.c_str());
    else
      std::printf("cuda driver: %d.%d\n", version / 1000, version % 1000 / 10);
    auto gpus = cuda->devices();
    std::printf("gpus: %zu\n", gpus.size());
    for (const sinter::cuda::DeviceInfo& gpu : gpus)
      std::printf("  cuda:%d  %s  sm_%d  %.1f GiB  %d SMs\n", gpu.ordinal, gpu.name.c_str(),
                  gpu.compute_capability, static_cast<double>(gpu.total_memory) / (1u << 30),
                  gpu.multiprocessors);
  } else {
    std::printf("cuda driver: none (%s)\n", sinter::cuda::unavailable_reason().c_str());
    std::printf("gpus: 0\n");
  }
  auto libdevice = sinter::NvptxTarget::find_libdevice();
  std::printf("libdevice: %s\n",
              libdevice ? libdevice->c_str() : "not found (set SINTER_LIBDEVICE)");
  try {
    std::printf("ptx assembler: %s\n", sinter::ptx_assembler()
                                           ? "libnvJitLink (in process, on every compile thread)"
                                           : "the driver's JIT (cuLinkComplete)");
  } catch (const std::exception& e) {
    std::printf("ptx assembler: none (%s)\n", e.what());
  }
  if (const sinter::kernels::CudnnAttention* cudnn = sinter::kernels::CudnnAttention::get()) {
    std::size_t v = cudnn->version();
    std::printf("cudnn: %zu.%zu.%zu\n", v / 10000, v / 100 % 100, v % 100);
  } else {
    std::printf("cudnn: none (%s)\n",
                sinter::kernels::CudnnAttention::unavailable_reason().c_str());
  }
  return 0;
}

int run_cache_command(int argc, char** argv) {
  std::string_view sub = argc >= 3 ? argv[2] : "";
  if (argc != 3 || (sub != "stats" && sub != "clear")) {
    if (!sub.empty()) std::fprintf(stderr, "sinter: unknown cache command '%s'\n\n", argv[2]);
    std::fprintf(stderr, "usage: sinter cache stats|clear\n"
                         "  stats  print the kernel cache's dir, entries, bytes and last run\n"
                         "  clear  remove every kernel cache entry\n"
                         "the cache dir is $SINTER_CACHE_DIR, else $XDG_CACHE_HOME/sinter, else "
                         "$HOME/.cache/sinter\n");
    return 2;
  }
  sinter::KernelCache cache(sinter::KernelCache::default_dir());
  if (sub == "stats") {
    sinter::KernelCache::Stats stats = cache.stats();
    std::printf("dir: %s\n", cache.dir().c_str());
    std::printf("entries: %zu\n", stats.entries);
    std::printf("bytes: %llu\n", static_cast<unsigned long long>(stats.bytes));
    std::optional<std::string> last = cache.last_run();
    std::printf("last run: %s\n", last ? last->c_str() : "(none recorded)");
    return 0;
  }
  std::size_t removed = cache.clear();
  std::printf("removed %zu entries from %s\n", removed, cache.dir().c_str());
  return 0;
}

int run_checkpoint_command(int argc, char** argv) {
  std::string_view sub = argc >= 3 ? argv[2] : "";
  if (argc != 5 || sub != "export") {
    if (!sub.empty() && sub != "export")
      std::fprintf(stderr, "sinter: unknown checkpoint command '%s'\n\n", argv[2]);
    std::fprintf(stderr,
                 "usage: sinter checkpoint export INDEX OUT\n"
                 "  INDEX  a checkpoint save_checkpoint wrote (a ZeRO job's index, with its\n"
                 "         shard files beside it, or a single file)\n"
                 "  OUT    the safetensors file to write: every tensor whole, loadable by\n"
                 "         PyTorch's safetensors and resumable at any world size\n");
    return 2;
  }
  sinter::consolidate_checkpoint(argv[3], argv[4]);
  std::printf("wrote %s\n", argv[4]);
  return 0;
}

/// Jupyter's per-user data folder: $JUPYTER_DATA_DIR, else $XDG_DATA_HOME/jupyter, else
/// ~/.local/share/jupyter.
std::filesystem::path jupyter_user_dir() {
  if (const char* dir = std::getenv("JUPYTER_DATA_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg)
    return std::filesystem::path(xdg) / "jupyter";
  const char* home = std::getenv("HOME");
  if (!home || !*home)
    throw std::runtime_error("sinter: HOME is not set: give --prefix P for the kernelspec");
  return std::filesystem::path(home) / ".local" / "share" / "jupyter";
}

int run_kernel_command(int argc, char** argv) {
  auto usage = [] {
    std::fprintf(stderr, "usage: sinter kernel install [--user | --prefix P]\n");
    return 2;
  };
  if (argc < 3 || std::string_view(argv[2]) != "install") return usage();
  std::filesystem::path data_dir = "/usr/local/share/jupyter";
  for (int i = 3; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--user") {
      data_dir = jupyter_user_dir();
    } else if (arg == "--prefix" && i + 1 < argc) {
      data_dir = std::filesystem::path(argv[++i]) / "share" / "jupyter";
    } else {
      std::fprintf(stderr, "sinter: unknown kernel install option '%s'\n", argv[i]);
      return usage();
    }
  }
  // sinter-kernel is built and installed beside this program.
  std::filesystem::path kernel =
      std::filesystem::canonical("/proc/self/exe").parent_path() / "sinter-kernel";
  if (!std::filesystem::exists(kernel)) {
    std::fprintf(stderr,
                 "sinter: %s does not exist: the kernel is built only when xeus-dev, "
                 "libclang-19-dev and libclang-cpp19-dev are installed (docs/notebook.md)\n",
                 kernel.c_str());
    return 1;
  }
  std::filesystem::path dir = data_dir / "kernels" / "sinter";
  std::filesystem::create_directories(dir);
  std::string spec = "{\n  \"argv\": [";
  sinter::json::append_quoted(spec, kernel.string());
  spec += ", \"-f\", \"{connection_file}\"],\n"
          "  \"display_name\": \"C++20 (sinter)\",\n"
          "  \"language\": \"c++\",\n"
          "  \"interrupt_mode\": \"signal\"\n}\n";
  sinter::write_file_atomically(dir / "kernel.json", spec, "kernelspec");
  std::printf("installed kernelspec sinter in %s\n", dir.c_str());
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  std::string_view command = argv[1];
  if (command == "ops") return list_ops();
  if (command == "settings") {
    std::fputs(sinter::settings_markdown().c_str(), stdout);
    return 0;
  }
  if (command == "stages") {
    std::fputs(sinter::stage_table().c_str(), stdout);
    return 0;
  }
  if (command == "version") {
    std::printf("sinter %s (LLVM %s)\n", sinter_version, LLVM_VERSION_STRING);
    return 0;
  }
  try {
    if (command == "info") return print_info();
    if (command == "cache") return run_cache_command(argc, argv);
    if (command == "checkpoint") return run_checkpoint_command(argc, argv);
    if (command == "kernel") return run_kernel_command(argc, argv);
    if (command == "plot") return sinter::cli::run_plot_command(argc, argv);
  } catch (const std::exception& error) { // e.g. a bad SINTER_NUM_THREADS
    std::fprintf(stderr, "%s\n", error.what());
    return 1;
  }
  if (command == "help" || command == "--help" || command == "-h") {
    print_usage(stdout);
    return 0;
  }
  std::fprintf(stderr, "sinter: unknown command '%s'\n\n", argv[1]);
  print_usage(stderr);
  return 2;
}
