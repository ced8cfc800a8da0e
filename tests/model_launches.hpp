// tests/model_launches.hpp — a fusion plan's launches as the cost model reads them, without a GPU
#pragma once
#include "jit/backend/cuda/gpu_launch.hpp"
#include "jit/backend/cuda/launch_plan.hpp"

#include <vector>

namespace sinter::testing {

/// One launch per kernel, each with the launch shape gpu_launch gives it (GEMMs and collectives
/// are library calls: no shape).
inline std::vector<GpuLaunchStep> model_launches(const FusionPlan& plan) {
  std::vector<GpuLaunchStep> launches;
  for (std::size_t i = 0; i < plan.kernels.size(); ++i) {
    GpuLaunchStep l;
    l.kind = plan.kernels[i].kind;
    l.kernel = i;
    if (l.kind != KernelKind::gemm && l.kind != KernelKind::collective)
      l.shape = gpu_launch(*plan.graph, plan.kernels[i]);
    launches.push_back(l);
  }
  return launches;
}

} // namespace sinter::testing
