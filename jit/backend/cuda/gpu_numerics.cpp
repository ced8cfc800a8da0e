// jit/backend/cuda/gpu_numerics.cpp — --check-numerics on a GPU: the scan kernel after each
// launch, and a replay on the host of the launch that made an inf or NaN
#include "jit/backend/cuda/gpu_numerics.hpp"

#include "jit/profile/kernel_costs.hpp"
#include "jit/profile/numerics_check.hpp"
#include "jit/profile/profiler.hpp"
#include "kernels/cuda/non_finite_scan.hpp"

#include <map>
#include <string>

namespace sinter {

GpuNumericsCheck::GpuNumericsCheck(CudaDevice& device)
    : device_(device),
      scan_(device.hand_written_kernel(std::string(kernels::non_finite_scan_ptx()),
                                       std::string(kernels::non_finite_scan_symbol))) {}

void GpuNumericsCheck::after_launch(const FusionPlan& plan, std::size_t first, std::size_t last,
                                    const NodePointer& pointer_of) {
  const Graph& g = *plan.graph;
  std::vector<ValueId> scanned;
  for (std::size_t k = first; k < last; ++k) {
    if (plan.kernels[k].kind == KernelKind::collective) continue;
    for (ValueId out : plan.kernels[k].outputs())
      if (kernels::exponent_mask(g.type(out).dtype) && numel(g.type(out).shape) > 0 &&
          pointer_of(plan.view_of[out]))
        scanned.push_back(out);
  }
  if (scanned.empty()) return;
  const cuda::Driver& d = device_.driver();
  cuda::StreamHandle stream = device_.stream();
  const std::size_t bytes = scanned.size() * sizeof(uint64_t);
  if (found_.bytes() < bytes) found_ = DeviceBuffer(bytes);
  d.check(d.cuMemsetD8Async(found_.get(), 0, bytes, stream), "cuMemsetD8Async");
  for (std::size_t i = 0; i < scanned.size(); ++i) {
    const TensorType& t = g.type(scanned[i]);
    cuda::DevicePtr data = pointer_of(plan.view_of[scanned[i]]);
    auto count = static_cast<uint64_t>(numel(t.shape));
    auto element_bytes = static_cast<uint32_t>(dtype_bytes(t.dtype));
    uint64_t mask = kernels::exponent_mask(t.dtype);
    cuda::DevicePtr into = found_.get() + i * sizeof(uint64_t);
    void* parameters[] = {&data, &count, &element_bytes, &mask, &into};
    kernels::ScanGrid grid = kernels::non_finite_scan_grid(static_cast<int64_t>(count));
    d.check(d.cuLaunchKernel(scan_, grid.blocks, 1, 1, grid.threads, 1, 1, 0, stream, parameters,
                             nullptr),
            "cuLaunchKernel (--check-numerics scan)");
  }
  found_on_host_.resize(scanned.size());
  d.check(d.cuMemcpyDtoHAsync(found_on_host_.data(), found_.get(), bytes, stream),
          "cuMemcpyDtoHAsync");
  d.check(d.cuStreamSynchronize(stream), "running the step (--check-numerics)");
  for (std::size_t i = 0; i < scanned.size(); ++i)
    if (std::optional<uint64_t> element = kernels::first_non_finite_index(found_on_host_[i]))
      explain(plan, first, last, scanned[i], *element, pointer_of);
}

void GpuNumericsCheck::explain(const FusionPlan& plan, std::size_t first, std::size_t last,
                               ValueId output, uint64_t element, const NodePointer& pointer_of) {
  // Every buffer the launch's kernels read or wrote, on the host, where check_kernel_numerics
  // finds them: the same replay as on the CPU names the op.
  const Graph& g = *plan.graph;
  const cuda::Driver& d = device_.driver();
  std::map<ValueId, std::vector<std::byte>> copies;
  std::vector<void*> host(g.size(), nullptr);
  auto download = [&](ValueId v) {
    ValueId buffer = plan.view_of[v];
    cuda::DevicePtr at = pointer_of(buffer);
    if (!at || copies.contains(buffer)) return;
    std::vector<std::byte>& bytes = copies[buffer];
    bytes.resize(byte_size(g.type(buffer)));
    d.check(d.cuMemcpyDtoH(bytes.data(), at, bytes.size()), "cuMemcpyDtoH (--check-numerics)");
    host[buffer] = bytes.data();
  };
  for (std::size_t k = first; k < last; ++k) {
    const Kernel& kernel = plan.kernels[k];
    for (ValueId v : kernel.outputs())
      download(v);
    for (ValueId v : kernel.reads)
      download(v);
    for (ValueId v : kernel.body)
      if (plan.loads(kernel, v)) download(v);
  }
  for (std::size_t k = first; k < last; ++k)
    if (plan.kernels[k].kind != KernelKind::collective) check_kernel_numerics(plan, k, host);
  // The bad value was found on the device but is not in a buffer the replay reads (a GEMM's
  // epilogue wrote it): name the launch.
  const profile::KernelInfo info = describe_kernels(plan)[first];
  throw NumericsError("sinter: non-finite value (--check-numerics): kernel " + info.name + " (" +
                      profile::role_name(info.role) + ") wrote one to element " +
                      std::to_string(element) + " of " + to_string(g.type(output)) + " (`" +
                      std::string(op_name(g.node(output).op)) + "` at " +
                      g.scope_path(g.node(output).scope) + ")");
}

} // namespace sinter
