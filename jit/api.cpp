// jit/api.cpp — CompiledGraph: pipeline at construction, checked inputs, interpreter execution
#include "jit/api.hpp"
#include "jit/profile/profiler.hpp"
#include "jit/settings.hpp"

#include "jit/backend/backends.hpp"
#include "jit/backend/context.hpp"
#include "jit/pipeline/pipeline.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string_view>

namespace sinter {

F64Tensor to_f64(const HostTensor& t) { return F64Tensor{t.shape(), t.to_doubles()}; }

HostTensor from_f64(const F64Tensor& t, DType dtype) {
  return HostTensor::from_doubles(dtype, t.shape, t.data);
}

namespace {
std::mutex default_device_mutex;
std::optional<Device> chosen_device;
} // namespace

void set_default_device(Device device) {
  std::lock_guard lock(default_device_mutex);
  chosen_device = device;
}

Device default_device() {
  {
    std::lock_guard lock(default_device_mutex);
    if (chosen_device) return *chosen_device;
  }
  if (const char* value = setting("SINTER_DEVICE"); value && *value) {
    try {
      return Device::parse(value);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("SINTER_DEVICE: ") + e.what());
    }
  }
  const char* value = setting("SINTER_BACKEND");
  if (!value || !*value || std::string_view(value) == "cpu") return Backend::cpu;
  if (std::string_view(value) == "interpreter") return Backend::interpreter;
  throw std::invalid_argument(std::string("sinter: SINTER_BACKEND='") + value +
                              "' is not a backend — use cpu or interpreter (or SINTER_DEVICE)");
}

Backend backend_from_environment() { return default_device().backend; }

int64_t free_memory(const Device& device) {
  return backend_entry(device.backend).free_memory(device);
}

void log_line(const std::string& line) {
  if (!settings().log) return;
  std::fprintf(stderr, "%s\n", line.c_str());
}

CompiledGraph::CompiledGraph(Graph traced, std::optional<AutodiffOptions> autodiff, Device device,
                             Context* context, double traced_ms, const std::string& label)
    : device_(device) {
  CompileRun run(label);
  run.given("trace", traced, traced_ms); // traced by the caller
  compile(std::move(traced), Pipeline::standard(std::move(autodiff)), run, context);
  executable_->set_label(label);
}

CompiledGraph::CompiledGraph(Graph graph, const Pipeline& stages, CompileRun& run, Device device,
                             Context* context)
    : device_(device) {
  compile(std::move(graph), stages, run, context);
}

void CompiledGraph::compile(Graph graph, const Pipeline& stages, CompileRun& run,
                            Context* context) {
  profile::start_from_environment();
  const int64_t start_ns = profile::now_ns();
  const double before_ms = run.total_ms(); // stages the caller ran (trace, autodiff, update)
  auto start = std::chrono::steady_clock::now();
  graph_ = stages.run(std::move(graph), run);
  Context& ctx = context ? *context : Context::global();
  const BackendEntry& backend = backend_entry(device_.backend);
  executable_ = backend.compile(prepare_for(graph_, device_, run), device_, ctx, run);
  compile_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() +
      before_ms * 1e-3;
  stage_times_ = run.times();
  run.finish(device_.name());
  profile::compiled("program", start_ns, profile::now_ns());
}

void CompiledGraph::set_label(std::string label) { executable_->set_label(std::move(label)); }

CompiledGraph::~CompiledGraph() = default;
CompiledGraph::CompiledGraph(CompiledGraph&&) noexcept = default;
CompiledGraph& CompiledGraph::operator=(CompiledGraph&&) noexcept = default;

void CompiledGraph::set_carried(
    std::span<const std::pair<std::size_t, std::size_t>> input_from_output) {
  executable_->set_carried(input_from_output);
}

void CompiledGraph::set_communicator(Communicator& communicator) {
  executable_->set_communicator(communicator);
}

void CompiledGraph::set_resident(std::span<const std::size_t> inputs) {
  executable_->set_resident(inputs);
}

const MemoryPlan& CompiledGraph::memory_plan() const { return executable_->memory_plan(); }

const CompileReport& CompiledGraph::compile_report() const { return executable_->report(); }

const FusionPlan* CompiledGraph::fusion_plan() const { return executable_->fusion_plan(); }

namespace {
std::vector<const HostTensor*> pointers_to(std::span<const HostTensor> tensors) {
  std::vector<const HostTensor*> out;
  for (const HostTensor& t : tensors)
    out.push_back(&t);
  return out;
}
} // namespace

void CompiledGraph::run_into(std::span<const HostTensor> inputs,
                             std::span<HostTensor> outputs) const {
  run_into(pointers_to(inputs), outputs);
}

void CompiledGraph::run_into(std::span<const HostTensor* const> inputs,
                             std::span<HostTensor> outputs) const {
  if (outputs.size() != graph_.outputs().size())
    throw std::invalid_argument("sinter: run_into needs one output tensor per graph output");
  check_inputs(inputs);
  executable_->run_into(inputs, outputs);
}

void CompiledGraph::check_inputs(std::span<const HostTensor* const> inputs) const {
  const auto& declared = graph_.inputs();
  if (inputs.size() != declared.size())
    throw std::invalid_argument("sinter: expected " + std::to_string(declared.size()) +
                                " inputs, got " + std::to_string(inputs.size()));
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const TensorType& want = graph_.type(declared[i].id);
    if (inputs[i]->dtype() != want.dtype || inputs[i]->shape() != want.shape)
      throw std::invalid_argument("sinter: input '" + declared[i].name + "' expects " +
                                  to_string(want) + ", got " +
                                  to_string(TensorType{inputs[i]->dtype(), inputs[i]->shape()}));
  }
}

std::vector<HostTensor> CompiledGraph::run(std::span<const HostTensor> inputs) const {
  std::vector<HostTensor> out;
  for (const NamedValue& o : graph_.outputs())
    out.emplace_back(graph_.type(o.id).dtype, graph_.type(o.id).shape);
  run_into(inputs, out);
  return out;
}

} // namespace sinter
