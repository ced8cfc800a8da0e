// tests/support/null_cuda/null_state.cpp — the null driver's devices, memory accounting,
// virtual device clock, counters, error details and report
#include "null_state.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <stdexcept>
#include <string_view>

namespace sinter::null_gpu {

const char* status_name(int status) {
  switch (status) {
  case success: return "CUDA_SUCCESS";
  case invalid_value: return "CUDA_ERROR_INVALID_VALUE";
  case out_of_memory: return "CUDA_ERROR_OUT_OF_MEMORY";
  case not_initialized: return "CUDA_ERROR_NOT_INITIALIZED";
  case no_device: return "CUDA_ERROR_NO_DEVICE";
  case invalid_device: return "CUDA_ERROR_INVALID_DEVICE";
  case invalid_image: return "CUDA_ERROR_INVALID_IMAGE";
  case invalid_context: return "CUDA_ERROR_INVALID_CONTEXT";
  case invalid_ptx: return "CUDA_ERROR_INVALID_PTX";
  case invalid_handle: return "CUDA_ERROR_INVALID_HANDLE";
  case not_found: return "CUDA_ERROR_NOT_FOUND";
  case illegal_address: return "CUDA_ERROR_ILLEGAL_ADDRESS";
  case launch_out_of_resources: return "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
  case capture_unsupported: return "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
  case capture_invalidated: return "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED";
  default: return nullptr;
  }
}

const char* status_text(int status) {
  switch (status) {
  case success: return "no error";
  case invalid_value: return "invalid argument";
  case out_of_memory: return "out of memory";
  case not_initialized: return "initialization error";
  case no_device: return "no CUDA-capable device is detected";
  case invalid_device: return "invalid device ordinal";
  case invalid_image: return "device kernel image is invalid";
  case invalid_context: return "invalid device context";
  case invalid_ptx: return "a PTX JIT compilation failed";
  case invalid_handle: return "invalid resource handle";
  case not_found: return "named symbol not found";
  case illegal_address: return "an illegal memory access was encountered";
  case launch_out_of_resources: return "too many resources requested for launch";
  case capture_unsupported: return "operation not permitted when stream is capturing";
  case capture_invalidated: return "operation failed due to a previous error during capture";
  default: return nullptr;
  }
}

namespace {

/// "80GiB", "512MiB", "1.5e9", "2.95T" (powers of 1000 for bare suffixes K M G T).
double parse_quantity(std::string_view key, std::string_view text) {
  std::string s(text);
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string_view unit(end);
  double scale = 1;
  if (unit == "KiB")
    scale = 1024.0;
  else if (unit == "MiB")
    scale = 1024.0 * 1024;
  else if (unit == "GiB")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "TiB")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "K")
    scale = 1e3;
  else if (unit == "M")
    scale = 1e6;
  else if (unit == "G")
    scale = 1e9;
  else if (unit == "T")
    scale = 1e12;
  else if (unit == "us")
    scale = 1e-6;
  else if (unit == "ms")
    scale = 1e-3;
  else if (!unit.empty() || end == s.c_str())
    throw std::invalid_argument("SINTER_NULL_GPU_DEVICE: " + std::string(key) + "=" + s +
                                " is not a number (suffixes: KiB MiB GiB TiB, K M G T, us ms)");
  if (!(v >= 0))
    throw std::invalid_argument("SINTER_NULL_GPU_DEVICE: " + std::string(key) + "=" + s +
                                " must not be negative");
  return v * scale;
}

DeviceSpec preset(std::string_view name) {
  DeviceSpec d; // the H100 SXM measured on 2026-11-26 (docs/gpu-status.md)
  if (name == "h100") return d;
  if (name == "h200") {
    d.name = "NVIDIA H200";
    d.memory = 143771ull << 20;
    d.bandwidth = 4.1e12;
    return d;
  }
  if (name == "a100") {
    d.name = "NVIDIA A100-SXM4-80GB";
    d.compute_capability = 80;
    d.multiprocessors = 108;
    d.memory = 81920ull << 20;
    d.bandwidth = 1.7e12;
    d.flops = 280e12;
    d.fp32_flops = 19.5e12;
    d.host_bandwidth = 25e9;
    d.link_bandwidth = 250e9;
    return d;
  }
  throw std::invalid_argument("SINTER_NULL_GPU_DEVICE: unknown preset '" + std::string(name) +
                              "'; use h100, h200 or a100, then ,key=value to change a field");
}

} // namespace

namespace {

/// The fields given as a rate or a time (suffixes K M G T, us ms).
struct Rate {
  const char* key;
  double DeviceSpec::* field;
};
constexpr Rate rates[] = {{"bandwidth", &DeviceSpec::bandwidth},
                          {"flops", &DeviceSpec::flops},
                          {"fp32_flops", &DeviceSpec::fp32_flops},
                          {"host_bandwidth", &DeviceSpec::host_bandwidth},
                          {"link_bandwidth", &DeviceSpec::link_bandwidth},
                          {"launch", &DeviceSpec::launch_seconds}};

} // namespace

DeviceSpec parse_device_spec(const std::string& text) {
  std::vector<std::string> parts;
  std::size_t from = 0;
  while (from <= text.size()) {
    std::size_t comma = text.find(',', from);
    if (comma == std::string::npos) comma = text.size();
    parts.push_back(text.substr(from, comma - from));
    from = comma + 1;
  }
  DeviceSpec d;
  std::size_t first = 0;
  if (!parts.empty() && parts[0].find('=') == std::string::npos) {
    if (!parts[0].empty()) d = preset(parts[0]);
    first = 1;
  }
  for (std::size_t i = first; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    std::size_t eq = part.find('=');
    if (eq == std::string::npos)
      throw std::invalid_argument("SINTER_NULL_GPU_DEVICE: '" + part +
                                  "' is not key=value (only the first part names a preset)");
    std::string key = part.substr(0, eq), value = part.substr(eq + 1);
    auto whole = [&](double max) {
      double v = parse_quantity(key, value);
      if (v != static_cast<double>(static_cast<uint64_t>(v)) || v < 1 || v > max)
        throw std::invalid_argument("SINTER_NULL_GPU_DEVICE: " + key + "=" + value +
                                    " must be a whole number from 1 to " +
                                    std::to_string(static_cast<uint64_t>(max)));
      return static_cast<uint64_t>(v);
    };
    if (key == "name")
      d.name = value;
    else if (key == "sm")
      d.compute_capability = static_cast<int>(whole(200));
    else if (key == "sms")
      d.multiprocessors = static_cast<int>(whole(1024));
    else if (key == "memory")
      d.memory = whole(1e15);
    else if (key == "reserve")
      d.reserve = static_cast<uint64_t>(parse_quantity(key, value));
    else if (key == "count")
      d.count = static_cast<int>(whole(64));
    else if (auto rate = std::find_if(std::begin(rates), std::end(rates),
                                      [&](const Rate& r) { return key == r.key; });
             rate != std::end(rates))
      d.*rate->field = parse_quantity(key, value);
    else {
      std::string known = "name sm sms memory reserve count";
      for (const Rate& r : rates)
        known += std::string(" ") + r.key;
      throw std::invalid_argument("SINTER_NULL_GPU_DEVICE: unknown key '" + key +
                                  "'; known: " + known);
    }
  }
  for (const Rate& r : rates)
    if (r.field != &DeviceSpec::launch_seconds && d.*r.field <= 0)
      throw std::invalid_argument("SINTER_NULL_GPU_DEVICE: a bandwidth or FLOP rate is 0");
  if (d.reserve >= d.memory)
    throw std::invalid_argument("SINTER_NULL_GPU_DEVICE: reserve= is not below memory=");
  return d;
}

State::State() {
  const char* text = std::getenv("SINTER_NULL_GPU_DEVICE");
  try {
    spec = parse_device_spec(text ? text : "h100");
  } catch (const std::invalid_argument& e) {
    spec_error = e.what();
  }
  if (const char* c = std::getenv("SINTER_NULL_GPU_COPIES")) {
    if (std::string_view(c) == "1")
      copies = true;
    else if (std::string_view(c) != "0" && spec_error.empty())
      spec_error = std::string("SINTER_NULL_GPU_COPIES='") + c + "': use 0 or 1";
  }
  device_used.assign(static_cast<std::size_t>(spec.count), 0);
  contexts.resize(static_cast<std::size_t>(spec.count));
  context_refs.assign(static_cast<std::size_t>(spec.count), 0);
  if (std::getenv("SINTER_NULL_GPU_REPORT"))
    std::atexit([] {
      const char* path = std::getenv("SINTER_NULL_GPU_REPORT");
      if (!path || !*path) return;
      std::string line = State::get().report() + "\n";
      if (std::FILE* f = std::fopen(path, "a")) {
        std::fwrite(line.data(), 1, line.size(), f);
        std::fclose(f);
      } else {
        std::fprintf(stderr, "null CUDA driver: cannot append its report to %s\n", path);
      }
    });
}

State& State::get() {
  static State* state = new State(); // never destroyed: see the class comment
  return *state;
}

ContextState*& State::current() {
  thread_local ContextState* context = nullptr;
  return context;
}

std::string& State::last_detail() {
  thread_local std::string detail;
  return detail;
}

int& State::last_status() {
  thread_local int status = 0;
  return status;
}

int State::fail(int status, std::string detail) {
  last_status() = status;
  last_detail() = std::move(detail);
  return status;
}

int State::need_context() {
  if (!initialized) return fail(not_initialized, "call cuInit first");
  if (!current()) return fail(invalid_context, "no context is current on this thread");
  return success;
}

StreamState& State::stream(void* handle) {
  return handle ? *static_cast<StreamState*>(handle) : default_stream_;
}

bool State::device_range_ok(uint64_t address, uint64_t bytes) const {
  auto after = device_memory.upper_bound(address);
  if (after == device_memory.begin()) return false;
  auto it = std::prev(after);
  return address + bytes <= it->first + it->second.bytes && address + bytes >= address;
}

bool State::host_is_pinned(const void* address) const {
  auto a = reinterpret_cast<uintptr_t>(address);
  auto after = pinned.upper_bound(a);
  if (after == pinned.begin()) return false;
  auto it = std::prev(after);
  return a < it->first + it->second;
}

uint64_t State::device_free(int device) const {
  uint64_t used = device_used[static_cast<std::size_t>(device)];
  return used >= spec.memory ? 0 : spec.memory - used;
}

void State::perform(const Work& w) {
  if (w.kind == Work::copy_d2h && !copies) std::memset(w.to, 0, w.bytes); // nothing ran: zeros
  if (copies && w.bytes) switch (w.kind) {
    case Work::copy_h2d:
    case Work::copy_d2h:
    case Work::copy_d2d: std::memmove(w.to, w.from, w.bytes); break;
    case Work::memset: std::memset(w.to, w.value, w.bytes); break;
    default: break;
    }
  if (copies && w.emulate) w.emulate();
  NullGpuCounters& c = counters;
  c.device_seconds += w.seconds;
  switch (w.kind) {
  case Work::kernel: ++c.kernel_launches; break;
  case Work::gemm: ++c.gemms; break;
  case Work::collective: ++c.collectives; break;
  case Work::memset: ++c.memsets; break;
  case Work::copy_h2d:
    ++c.copies_host_to_device;
    c.bytes_host_to_device += w.bytes;
    if (w.pageable) c.bytes_host_to_device_pageable += w.bytes;
    break;
  case Work::copy_d2h:
    ++c.copies_device_to_host;
    c.bytes_device_to_host += w.bytes;
    break;
  case Work::copy_d2d:
    ++c.copies_device_to_device;
    c.bytes_device_to_device += w.bytes;
    break;
  case Work::event: break;
  }
}

void State::enqueue(StreamState& s, Work work) {
  if (s.capturing) {
    s.capturing->nodes.push_back(std::move(work));
    return;
  }
  s.clock += work.seconds;
  if (work.kind == Work::event) {
    work.record->time = s.clock;
    work.record->recorded = true;
  }
  perform(work);
}

std::string State::report() const {
  const NullGpuCounters& c = counters;
  char line[2048];
  std::snprintf(
      line, sizeof line,
      "null_gpu device_bytes=%llu device_peak_bytes=%llu device_allocations=%llu "
      "device_failed_allocations=%llu module_bytes=%llu context_bytes=%llu pinned_bytes=%llu "
      "pinned_peak_bytes=%llu kernel_launches=%llu gemms=%llu collectives=%llu memsets=%llu "
      "copies_host_to_device=%llu bytes_host_to_device=%llu bytes_host_to_device_pageable=%llu "
      "copies_device_to_host=%llu bytes_device_to_host=%llu copies_device_to_device=%llu "
      "bytes_device_to_device=%llu graph_launches=%llu graph_nodes_launched=%llu "
      "last_graph_nodes=%llu host_syncs=%llu ptx_assembled=%llu ptxas_runs=%llu "
      "ptxas_seconds=%.3f ptxas_longest_seconds=%.3f modules_loaded=%llu cubins_loaded=%llu "
      "device_seconds=%.6f",
      static_cast<unsigned long long>(c.device_bytes),
      static_cast<unsigned long long>(c.device_peak_bytes),
      static_cast<unsigned long long>(c.device_allocations),
      static_cast<unsigned long long>(c.device_failed_allocations),
      static_cast<unsigned long long>(c.module_bytes),
      static_cast<unsigned long long>(c.context_bytes),
      static_cast<unsigned long long>(c.pinned_bytes),
      static_cast<unsigned long long>(c.pinned_peak_bytes),
      static_cast<unsigned long long>(c.kernel_launches), static_cast<unsigned long long>(c.gemms),
      static_cast<unsigned long long>(c.collectives), static_cast<unsigned long long>(c.memsets),
      static_cast<unsigned long long>(c.copies_host_to_device),
      static_cast<unsigned long long>(c.bytes_host_to_device),
      static_cast<unsigned long long>(c.bytes_host_to_device_pageable),
      static_cast<unsigned long long>(c.copies_device_to_host),
      static_cast<unsigned long long>(c.bytes_device_to_host),
      static_cast<unsigned long long>(c.copies_device_to_device),
      static_cast<unsigned long long>(c.bytes_device_to_device),
      static_cast<unsigned long long>(c.graph_launches),
      static_cast<unsigned long long>(c.graph_nodes_launched),
      static_cast<unsigned long long>(c.last_graph_nodes),
      static_cast<unsigned long long>(c.host_syncs),
      static_cast<unsigned long long>(c.ptx_assembled),
      static_cast<unsigned long long>(c.ptxas_runs), c.ptxas_seconds, c.ptxas_longest_seconds,
      static_cast<unsigned long long>(c.modules_loaded),
      static_cast<unsigned long long>(c.cubins_loaded), c.device_seconds);
  return line;
}

std::string State::describe() const {
  if (!spec_error.empty()) return "null driver: " + spec_error;
  char line[512];
  std::snprintf(line, sizeof line,
                "%s (null driver: sm_%d, %d SMs, %.1f GiB, %.2f TB/s, %.0f TF/s; nothing runs)",
                spec.name.c_str(), spec.compute_capability, spec.multiprocessors,
                static_cast<double>(spec.memory) / (1ull << 30), spec.bandwidth / 1e12,
                spec.flops / 1e12);
  return line;
}

std::vector<KernelSignature> parse_ptx_entries(const std::string& ptx) {
  std::vector<KernelSignature> out;
  std::size_t at = 0;
  while ((at = ptx.find(".entry", at)) != std::string::npos) {
    at += 6;
    std::size_t open = ptx.find('(', at);
    if (open == std::string::npos) break;
    std::string name;
    for (std::size_t i = at; i < open; ++i)
      if (!std::isspace(static_cast<unsigned char>(ptx[i]))) name += ptx[i];
    std::size_t close = ptx.find(')', open);
    if (close == std::string::npos) break;
    KernelSignature k{name, {}};
    std::string params = ptx.substr(open + 1, close - open - 1);
    std::size_t p = 0;
    while ((p = params.find(".param", p)) != std::string::npos) {
      std::size_t end = params.find(',', p);
      if (end == std::string::npos) end = params.size();
      std::string decl = params.substr(p, end - p);
      p = end;
      std::size_t bytes = 8;
      if (decl.find(".u32") != std::string::npos || decl.find(".s32") != std::string::npos ||
          decl.find(".b32") != std::string::npos || decl.find(".f32") != std::string::npos)
        bytes = 4;
      else if (std::size_t bracket = decl.find('['); bracket != std::string::npos)
        bytes = std::strtoull(decl.c_str() + bracket + 1, nullptr, 10);
      k.parameters.emplace_back(bytes, decl.find(".ptr") != std::string::npos);
    }
    out.push_back(std::move(k));
    at = close;
  }
  return out;
}

} // namespace sinter::null_gpu

extern "C" {

__attribute__((visibility("default"))) void sinterNullGpuCounters(NullGpuCounters* out) {
  auto& s = sinter::null_gpu::State::get();
  std::lock_guard lock(s.mutex);
  *out = s.counters;
}

__attribute__((visibility("default"))) void sinterNullGpuResetCounters(void) {
  auto& s = sinter::null_gpu::State::get();
  std::lock_guard lock(s.mutex);
  NullGpuCounters kept = s.counters;
  s.counters = NullGpuCounters{};
  s.counters.device_bytes = kept.device_bytes;
  s.counters.device_peak_bytes = kept.device_bytes; // peaks count from now
  s.counters.device_allocations = kept.device_allocations;
  s.counters.device_failed_allocations = kept.device_failed_allocations;
  s.counters.module_bytes = kept.module_bytes;
  s.counters.context_bytes = kept.context_bytes;
  s.counters.pinned_bytes = kept.pinned_bytes;
  s.counters.pinned_peak_bytes = kept.pinned_bytes;
}

__attribute__((visibility("default"))) const char* sinterNullGpuDescribe(void) {
  static std::string text;
  auto& s = sinter::null_gpu::State::get();
  std::lock_guard lock(s.mutex);
  text = s.describe();
  return text.c_str();
}

__attribute__((visibility("default"))) size_t sinterNullGpuReport(char* buffer, size_t size) {
  auto& s = sinter::null_gpu::State::get();
  std::string line;
  {
    std::lock_guard lock(s.mutex);
    line = s.report();
  }
  if (buffer && size) {
    std::size_t n = std::min(size - 1, line.size());
    std::memcpy(buffer, line.data(), n);
    buffer[n] = '\0';
  }
  return line.size();
}

} // extern "C"
