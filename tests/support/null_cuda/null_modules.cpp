// tests/support/null_cuda/null_modules.cpp — the driver's modules: PTX linked by cuLink* (and
// assembled by the real ptxas when there is one), the null driver's own cubin container, module
// loads and their kernels' signatures
#include "null_state.hpp"

#include "kernels/cuda/nvjitlink.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

using namespace sinter::null_gpu;

namespace {

constexpr const char* container_magic = "SINTER-NULL-CUBIN 1\n";

struct LinkState {
  char* error_log = nullptr;
  std::size_t error_log_size = 0;
  std::string ptx;
  std::string name;
  std::string image; ///< what cuLinkComplete hands out (owned here, as the driver owns it)
};

std::filesystem::path find_ptxas() {
  namespace fs = std::filesystem;
  if (const char* off = std::getenv("SINTER_NULL_GPU_PTXAS"); off && std::string(off) == "0")
    return {};
  std::vector<fs::path> candidates;
  if (const char* p = std::getenv("SINTER_PTXAS"); p && *p) candidates.emplace_back(p);
  if (const char* home = std::getenv("CUDA_HOME"); home && *home)
    candidates.push_back(fs::path(home) / "bin/ptxas");
  candidates.emplace_back("/usr/local/cuda/bin/ptxas");
  if (const char* path = std::getenv("PATH")) {
    std::stringstream dirs(path);
    for (std::string dir; std::getline(dirs, dir, ':');)
      if (!dir.empty()) candidates.push_back(fs::path(dir) / "ptxas");
  }
  for (const fs::path& p : candidates)
    if (std::error_code ec; fs::is_regular_file(p, ec) && access(p.c_str(), X_OK) == 0) return p;
  return {};
}

const std::filesystem::path& ptxas() {
  static const std::filesystem::path found = find_ptxas();
  return found;
}

/// Runs ptxas on the PTX: the cubin, or the assembler's complaint in `errors`.
bool assemble_with_process(const std::string& ptx, int capability, std::string& cubin,
                           std::string& errors, double& seconds) {
  namespace fs = std::filesystem;
  const char* tmp = std::getenv("TMPDIR");
  std::string base = std::string(tmp && *tmp ? tmp : "/tmp") + "/sinter-null-ptxas-XXXXXX";
  std::vector<char> dir(base.begin(), base.end());
  dir.push_back('\0');
  if (!mkdtemp(dir.data())) {
    errors = "null driver: cannot make a temporary folder for ptxas";
    return false;
  }
  fs::path folder(dir.data());
  fs::path in = folder / "kernel.ptx", out = folder / "kernel.cubin", log = folder / "log.txt";
  std::ofstream(in, std::ios::binary) << ptx;
  std::string command =
      "'" + ptxas().string() + "' -arch=" + sinter::kernels::NvJitLink::arch_for(ptx, capability) +
      " -o '" + out.string() + "' '" + in.string() + "' >'" + log.string() + "' 2>&1";
  auto start = std::chrono::steady_clock::now();
  int status = std::system(command.c_str());
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::ifstream log_in(log);
  errors.assign(std::istreambuf_iterator<char>(log_in), std::istreambuf_iterator<char>());
  std::ifstream cubin_in(out, std::ios::binary);
  cubin.assign(std::istreambuf_iterator<char>(cubin_in), std::istreambuf_iterator<char>());
  std::error_code ec;
  fs::remove_all(folder, ec);
  if (status != 0 || cubin.empty()) {
    if (errors.empty()) errors = "ptxas exited with status " + std::to_string(status);
    return false;
  }
  return true;
}

/// The CUDA toolkit's in-process assembler (libnvJitLink), as sinter itself assembles with it:
/// the same PTX compiler the driver's JIT runs inside the process, so an assembly costs what it
/// costs a driver, without a process start.
struct JitLink {
  /// Loaded from $CUDA_HOME/lib64, /usr/local/cuda/lib64 or the loader's path; null when absent
  /// or when SINTER_NULL_GPU_ASSEMBLER=ptxas asks for the ptxas process.
  static const sinter::kernels::NvJitLink* get() {
    static const std::optional<sinter::kernels::NvJitLink> loaded = load();
    return loaded ? &*loaded : nullptr;
  }

private:
  static std::optional<sinter::kernels::NvJitLink> load() {
    if (const char* choice = std::getenv("SINTER_NULL_GPU_ASSEMBLER"); choice && *choice) {
      std::string chosen = choice;
      if (chosen == "ptxas") return std::nullopt;
      if (chosen != "jitlink")
        std::fprintf(stderr,
                     "null driver: SINTER_NULL_GPU_ASSEMBLER=%s is neither jitlink nor ptxas; "
                     "assembling with jitlink\n",
                     choice);
    }
    std::vector<std::string> candidates = sinter::kernels::NvJitLink::toolkit_paths();
    candidates.emplace_back("libnvJitLink.so.13");
    return sinter::kernels::NvJitLink::load(candidates);
  }
};

/// Whether the PTX given to the driver is assembled (in process, else by ptxas).
bool can_assemble() {
  if (const char* off = std::getenv("SINTER_NULL_GPU_PTXAS"); off && std::string(off) == "0")
    return false;
  return JitLink::get() || !ptxas().empty();
}

/// Assembles the PTX for the device (in process where libnvJitLink is, else by ptxas): the
/// cubin, or the assembler's complaint in `errors`; `seconds` the time it took.
bool assemble(const std::string& ptx, int capability, std::string& cubin, std::string& errors,
              double& seconds) {
  const sinter::kernels::NvJitLink* jit = JitLink::get();
  if (!jit) return assemble_with_process(ptx, capability, cubin, errors, seconds);
  auto start = std::chrono::steady_clock::now();
  bool ok =
      jit->assemble(ptx, sinter::kernels::NvJitLink::arch_for(ptx, capability), cubin, errors);
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return ok;
}

/// The null driver's "cubin": the kernels' signatures (which a real cubin keeps in its
/// .nv.info sections) and the image ptxas made.
std::string make_container(const std::vector<KernelSignature>& kernels, const std::string& image) {
  std::string out = container_magic;
  for (const KernelSignature& k : kernels) {
    out += "entry " + k.name;
    for (auto [bytes, pointer] : k.parameters)
      out += " " + std::to_string(bytes) + (pointer ? "p" : "");
    out += "\n";
  }
  out += "image " + std::to_string(image.size()) + "\n";
  out += image;
  return out;
}

bool read_container(const char* data, std::vector<KernelSignature>& kernels, uint64_t& bytes) {
  std::size_t magic = std::strlen(container_magic);
  if (std::strncmp(data, container_magic, magic) != 0) return false;
  const char* at = data + magic;
  while (std::strncmp(at, "entry ", 6) == 0) {
    const char* end = std::strchr(at, '\n');
    if (!end) return false;
    std::istringstream line(std::string(at + 6, end));
    KernelSignature k;
    line >> k.name;
    for (std::string p; line >> p;)
      k.parameters.emplace_back(std::strtoull(p.c_str(), nullptr, 10), p.back() == 'p');
    kernels.push_back(std::move(k));
    at = end + 1;
  }
  if (std::strncmp(at, "image ", 6) != 0) return false;
  bytes = std::strtoull(at + 6, nullptr, 10);
  return true;
}

/// The kernels of a real cubin (the ELF image libnvJitLink or a driver makes): each one's name
/// from its `.nv.info.<name>` section and its parameters' sizes from that section's
/// EIATTR_KPARAM_INFO records. A cubin does not say which parameters are pointers, so launches
/// of its kernels check no addresses. False when `data` is no ELF image.
bool read_cubin(const char* data, std::vector<KernelSignature>& kernels, uint64_t& bytes) {
  constexpr char elf64[] = {0x7f, 'E', 'L', 'F', 2}; // the magic, then ELFCLASS64
  if (std::memcmp(data, elf64, sizeof elf64) != 0) return false;
  auto at = [&](uint64_t offset, auto value) {
    std::memcpy(&value, data + offset, sizeof value);
    return value;
  };
  auto section_headers = at(0x28, uint64_t{});
  auto header_size = at(0x3a, uint16_t{}), count = at(0x3c, uint16_t{}),
       names = at(0x3e, uint16_t{});
  bytes = section_headers + uint64_t{header_size} * count;
  auto section = [&](uint16_t i) {
    uint64_t h = section_headers + uint64_t{header_size} * i;
    return std::make_tuple(at(h, uint32_t{}), at(h + 0x18, uint64_t{}), at(h + 0x20, uint64_t{}));
  };
  uint64_t names_at = std::get<1>(section(names));
  constexpr std::string_view info_prefix = ".nv.info.";
  constexpr uint8_t sval = 4, kparam_info = 0x17; // EIFMT_SVAL, EIATTR_KPARAM_INFO
  for (uint16_t i = 0; i < count; ++i) {
    auto [name, offset, size] = section(i);
    std::string_view section_name(data + names_at + name);
    if (!section_name.starts_with(info_prefix)) continue;
    KernelSignature k;
    k.name = section_name.substr(info_prefix.size());
    std::vector<std::pair<uint16_t, std::size_t>> by_ordinal;
    for (uint64_t record = offset; record + 4 <= offset + size;) {
      uint8_t format = static_cast<uint8_t>(data[record]);
      uint8_t attribute = static_cast<uint8_t>(data[record + 1]);
      uint16_t payload = format == sval ? at(record + 2, uint16_t{}) : 0;
      if (format == sval && attribute == kparam_info && payload >= 12)
        by_ordinal.emplace_back(at(record + 8, uint16_t{}),
                                (at(record + 12, uint32_t{}) >> 18) & 0x3fff);
      record += 4 + payload;
    }
    std::sort(by_ordinal.begin(), by_ordinal.end());
    for (auto [ordinal, param_bytes] : by_ordinal)
      k.parameters.emplace_back(param_bytes, false);
    kernels.push_back(std::move(k));
  }
  return !kernels.empty();
}

} // namespace

NULL_GPU_API int cuModuleLoadDataEx(void** module, const void* image, unsigned, int*, void**) {
  State& s = State::get();
  auto m = std::make_unique<ModuleState>();
  std::string ptx;
  {
    std::lock_guard lock(s.mutex);
    if (int r = s.need_context()) return r;
    if (!module || !image) return s.fail(invalid_value, "cuModuleLoadDataEx without an image");
    m->device = State::current()->device;
    const char* data = static_cast<const char*>(image);
    m->cubin = read_cubin(data, m->kernels, m->bytes);
    if (!m->cubin && !read_container(data, m->kernels, m->bytes)) {
      ptx.assign(data, strnlen(data, 64u << 20));
      if (ptx.find(".version") == std::string::npos || ptx.find(".entry") == std::string::npos)
        return s.fail(invalid_image, "the image is neither PTX, a cubin nor this null driver's "
                                     "container");
      m->kernels = parse_ptx_entries(ptx);
      m->bytes = ptx.size();
    }
  }
  // PTX loaded directly is JIT-compiled by the driver: the assembler checks it here, unlocked.
  if (!ptx.empty() && can_assemble()) {
    std::string cubin, errors;
    double seconds = 0;
    bool ok = assemble(ptx, s.spec.compute_capability, cubin, errors, seconds);
    std::lock_guard lock(s.mutex);
    ++s.counters.ptxas_runs;
    s.counters.ptxas_seconds += seconds;
    s.counters.ptxas_longest_seconds = std::max(s.counters.ptxas_longest_seconds, seconds);
    if (!ok) return s.fail(invalid_ptx, "the assembler rejected the module's PTX: " + errors);
    m->bytes = cubin.size();
  }
  std::lock_guard lock(s.mutex);
  uint64_t bytes = std::max<uint64_t>(m->bytes, 4096);
  if (bytes > s.device_free(m->device)) return s.fail(out_of_memory, "no room for the module");
  s.device_used[static_cast<std::size_t>(m->device)] += bytes;
  m->bytes = bytes;
  s.counters.module_bytes += bytes;
  ++s.counters.modules_loaded;
  s.counters.cubins_loaded += m->cubin;
  *module = m.release();
  return success;
}

NULL_GPU_API int cuModuleUnload(void* module) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  if (!module) return s.fail(invalid_handle, "cuModuleUnload of a null module");
  auto* m = static_cast<ModuleState*>(module);
  s.device_used[static_cast<std::size_t>(m->device)] -= m->bytes;
  s.counters.module_bytes -= m->bytes;
  delete m;
  return success;
}

NULL_GPU_API int cuModuleGetFunction(void** function, void* module, const char* name) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  auto* m = static_cast<ModuleState*>(module);
  if (!m || !name) return s.fail(invalid_handle, "cuModuleGetFunction without a module or name");
  for (const KernelSignature& k : m->kernels)
    if (k.name == name) {
      *function = m->functions.emplace_back(std::make_unique<FunctionState>(m, &k)).get();
      return success;
    }
  return s.fail(not_found, std::string("the module has no kernel ") + name);
}

NULL_GPU_API int cuLinkCreate_v2(unsigned count, int* options, void** values, void** link) {
  auto l = std::make_unique<LinkState>();
  for (unsigned i = 0; i < count; ++i) {
    if (options[i] == 5) l->error_log = static_cast<char*>(values[i]);
    if (options[i] == 6) l->error_log_size = reinterpret_cast<std::size_t>(values[i]);
  }
  if (l->error_log && l->error_log_size) l->error_log[0] = '\0';
  *link = l.release();
  return success;
}

NULL_GPU_API int cuLinkAddData_v2(void* link, int type, void* data, std::size_t size,
                                  const char* name, unsigned, int*, void**) {
  State& s = State::get();
  auto* l = static_cast<LinkState*>(link);
  if (!l || !data) return s.fail(invalid_value, "cuLinkAddData without data");
  if (type != 1) return s.fail(invalid_value, "the null driver links PTX only (CU_JIT_INPUT_PTX)");
  l->ptx.assign(static_cast<const char*>(data), strnlen(static_cast<const char*>(data), size));
  l->name = name ? name : "";
  return success;
}

NULL_GPU_API int cuLinkComplete(void* link, void** image, std::size_t* size) {
  State& s = State::get();
  auto* l = static_cast<LinkState*>(link);
  if (!l || l->ptx.empty()) return s.fail(invalid_value, "cuLinkComplete with no PTX added");
  auto complain = [&](const std::string& why) {
    if (l->error_log && l->error_log_size)
      std::snprintf(l->error_log, l->error_log_size, "%s", why.c_str());
    return s.fail(invalid_ptx, why);
  };
  if (l->ptx.find(".version") == std::string::npos || l->ptx.find(".target") == std::string::npos)
    return complain("the PTX of " + l->name + " has no .version or .target line");
  std::vector<KernelSignature> kernels = parse_ptx_entries(l->ptx);
  if (kernels.empty()) return complain("the PTX of " + l->name + " defines no .entry");
  std::string cubin;
  int capability = s.spec.compute_capability;
  {
    std::lock_guard lock(s.mutex);
    ++s.counters.ptx_assembled;
  }
  if (can_assemble()) {
    std::string errors;
    double seconds = 0;
    bool ok = assemble(l->ptx, capability, cubin, errors, seconds);
    {
      std::lock_guard lock(s.mutex);
      ++s.counters.ptxas_runs;
      s.counters.ptxas_seconds += seconds;
      s.counters.ptxas_longest_seconds = std::max(s.counters.ptxas_longest_seconds, seconds);
    }
    if (!ok) return complain("the assembler rejected the PTX of " + l->name + ": " + errors);
  }
  l->image = make_container(kernels, cubin.empty() ? l->ptx : cubin);
  *image = l->image.data();
  *size = l->image.size();
  return success;
}

NULL_GPU_API int cuLinkDestroy(void* link) {
  delete static_cast<LinkState*>(link);
  return success;
}
