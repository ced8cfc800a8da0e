// jit/backend/backends.cpp — the backend table (one line per backend), device names, the
// interpreter as a backend, and what every Executable shares (its dumps)
#include "jit/backend/backends.hpp"
#include "jit/dist/communicator.hpp"
#include "jit/settings.hpp"

#include "jit/backend/cpu/cpu_executable.hpp"
#include "jit/backend/cuda/gpu_executable.hpp"
#include "jit/interp/interpreter.hpp"

#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unistd.h>

namespace sinter {

AttentionRequest attention_requested() {
  const char* value = setting("SINTER_ATTENTION");
  if (!value || !*value || std::string_view(value) == "fused") return AttentionRequest::fused;
  if (std::string_view(value) == "decomposed") return AttentionRequest::decomposed;
  if (std::string_view(value) == "cudnn") return AttentionRequest::cudnn;
  if (std::string_view(value) == "nvptx") return AttentionRequest::nvptx;
  throw std::invalid_argument(std::string("sinter: SINTER_ATTENTION='") + value +
                              "' is not a choice — use fused, cudnn, nvptx or decomposed");
}

bool attention_decomposition_requested() {
  return attention_requested() == AttentionRequest::decomposed;
}
namespace {

/// The float64 reference interpreter behind the Executable interface: no kernels, no arena.
class InterpreterExecutable final : public Executable {
public:
  explicit InterpreterExecutable(Graph graph) : graph_(std::move(graph)) {}

  void run_into(std::span<const HostTensor* const> inputs,
                std::span<HostTensor> outputs) const override {
    std::vector<F64Tensor> values;
    for (const HostTensor* t : inputs)
      values.push_back(F64Tensor{t->shape(), t->to_doubles()});
    std::vector<F64Tensor> results = interpret(graph_, values);
    for (std::size_t i = 0; i < results.size(); ++i)
      outputs[i] = HostTensor::from_doubles(graph_.type(graph_.outputs()[i].id).dtype,
                                            results[i].shape, results[i].data);
  }
  const MemoryPlan& memory_plan() const override { return none_; }
  const CompileReport& report() const override { return report_; }

private:
  Graph graph_; // its own copy, like every executable: a CompiledGraph may move
  MemoryPlan none_;
  CompileReport report_;
};

BackendGraphStages interpreter_graph_stages(const Graph&, const Device&) {
  return BackendGraphStages{.fuses = false}; // it runs the graph node by node
}

std::unique_ptr<Executable> compile_for_interpreter(Prepared prepared, const Device&, Context&,
                                                    CompileRun&) {
  return std::make_unique<InterpreterExecutable>(std::move(*prepared.graph));
}

StepMemory plan_memory_for_interpreter(const Prepared& prepared, const Device&,
                                       std::span<const InputKeeping>) {
  StepMemory memory;
  memory.inputs = input_bytes(*prepared.graph);
  return memory; // values live in float64 vectors the interpreter makes as it goes
}

const BackendEntry interpreter_backend{
    Backend::interpreter,     "interpreter",           false,
    interpreter_graph_stages, compile_for_interpreter, plan_memory_for_interpreter,
    host_free_memory};

// A new backend is a folder under jit/backend/ defining one BackendEntry, and one entry here.
// Each entry is constant-initialised, so the table is complete before any code runs.
const BackendEntry* const table[] = {&cpu_backend, &cuda_backend, &interpreter_backend};

std::string accepted_names() {
  std::string names;
  for (const BackendEntry* entry : table) {
    const BackendEntry& e = *entry;
    if (!names.empty()) names += ", ";
    names += std::string(e.name);
    if (e.numbered) names += ", " + std::string(e.name) + ":N (N = 0, 1, ...)";
  }
  return names;
}

} // namespace

int64_t host_available_memory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

int64_t host_free_memory(const Device&) { return host_available_memory(); }

int64_t input_bytes(const Graph& graph) {
  int64_t bytes = 0;
  for (const NamedValue& in : graph.inputs())
    bytes += static_cast<int64_t>(byte_size(graph.type(in.id)));
  return bytes;
}

Communicator& Executable::communicator() const { return communicator_ ? *communicator_ : world(); }

Prepared prepare_for(Graph optimized, const Device& device, CompileRun& run) {
  const BackendEntry& backend = backend_entry(device.backend);
  BackendGraphStages stages = backend.graph_stages(optimized, device);
  return prepare(std::move(optimized), stages, run);
}

std::span<const BackendEntry* const> backends() { return table; }

const BackendEntry& backend_entry(Backend backend) {
  for (const BackendEntry* e : table)
    if (e->backend == backend) return *e;
  throw std::logic_error("sinter: backend " + std::to_string(static_cast<int>(backend)) +
                         " has no entry in jit/backend/backends.cpp");
}

Device Device::parse(std::string_view text) {
  auto bad = [&] {
    return std::invalid_argument("sinter: '" + std::string(text) + "' is not a device — use " +
                                 accepted_names());
  };
  for (const BackendEntry* entry : table) {
    const BackendEntry& e = *entry;
    if (text == e.name) return e.backend;
    if (!e.numbered || !text.starts_with(e.name) || text.size() <= e.name.size() + 1 ||
        text[e.name.size()] != ':' || text.size() > e.name.size() + 5)
      continue;
    int ordinal = 0;
    for (char c : text.substr(e.name.size() + 1)) {
      if (c < '0' || c > '9') throw bad();
      ordinal = ordinal * 10 + (c - '0');
    }
    return Device(e.backend, ordinal);
  }
  throw bad();
}

std::string Device::name() const {
  const BackendEntry& e = backend_entry(backend);
  return std::string(e.name) + (e.numbered ? ":" + std::to_string(ordinal) : "");
}

} // namespace sinter
