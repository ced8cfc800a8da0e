// jit/backend/cuda/launch_plan.cpp — plans a CUDA step's launches: kernels and their grids,
// cuBLASLt GEMM shapes, epilogues absorbed where cuBLASLt has an algorithm for them
#include "jit/backend/cuda/launch_plan.hpp"

#include "jit/backend/cuda/gemm_epilogue.hpp"
#include "jit/runtime/kernel_lookup.hpp"
#include "jit/settings.hpp"

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string_view>

namespace sinter {

GpuLaunch sized_launch(const RuntimeRowsKernel& sized, GpuLaunch launch) {
  RowsInstance probe = sized.instance(nvptx_rows_extent);
  int64_t width = gpu_launch(*probe.graph, probe.kernel()).vector_width;
  if (width >= launch.vector_width) return launch;
  if (launch.strategy == GpuStrategy::elementwise) {
    launch.items = launch.items * launch.vector_width / width;
    launch.blocks = std::clamp<int64_t>((launch.items + launch.threads - 1) / launch.threads, 1,
                                        gpu_max_blocks);
  }
  launch.vector_width = width;
  return launch;
}

bool row_count_covers(const RuntimeRowsKernel& rows, const RuntimeRowsKernel& sized) {
  // `sized` at a size no shape holds is the kernel where the changed dim is far from any it
  // had: the row-count form must be the same kernel there.
  RowsInstance elsewhere = sized.instance(nvptx_rows_extent);
  std::optional<RuntimeRowsKernel> there =
      RuntimeRowsKernel::of(elsewhere.plan, elsewhere.kernel());
  if (!there) return false;
  RowsInstance here = rows.instance(nvptx_rows_extent), far = there->instance(nvptx_rows_extent);
  return kernel_key(here.plan, here.kernel(), {}) == kernel_key(far.plan, far.kernel(), {});
}

void remember_shapes_for_cuda(const Prepared& prepared, const Device& device) {
  if (switch_setting("SINTER_ROWS_PARAMETER", true) && cuda::driver())
    CudaDevice::get(device.ordinal).remember_shapes(capture_shapes(prepared.fusion));
}

std::vector<GpuLaunchStep> plan_launches(const FusionPlan& fusion,
                                         std::span<const GemmEpilogue> epilogues,
                                         CudaDevice& device, KernelCache& cache,
                                         kernels::Fp32Math fp32, CompileReport& report,
                                         const NodePointer& pointer_of) {
  const Graph& g = *fusion.graph;
  std::vector<GpuLaunchStep> launches;
  report.kernels = fusion.kernels.size();
  kernels::CublasLt* blas = nullptr;
  auto gemm_launch = [&](const Kernel& kernel, const GemmEpilogue* epilogue) {
    if (!blas && !(blas = kernels::CublasLt::get()))
      throw std::runtime_error("sinter: GEMMs on CUDA need cuBLASLt: " +
                               kernels::CublasLt::unavailable_reason());
    GpuLaunchStep launch;
    launch.kind = KernelKind::gemm;
    Shape a = g.type(kernel.gemm_a.logical).shape, c = g.type(kernel.root).shape;
    kernels::GpuGemmShape& gemm = launch.gemm;
    gemm.dtype = g.type(kernel.root).dtype;
    gemm.fp32 = fp32;
    gemm.shape.m = c[c.size() - 2];
    gemm.shape.n = c.back();
    gemm.shape.k = kernel.gemm_a.transposed ? a[a.size() - 2] : a.back();
    gemm.shape.trans_a = kernel.gemm_a.transposed;
    gemm.shape.trans_b = kernel.gemm_b.transposed;
    gemm.batch = numel(c) / std::max<int64_t>(1, gemm.shape.m * gemm.shape.n);
    launch.a = kernel.gemm_a.buffer;
    launch.b = kernel.gemm_b.buffer;
    launch.c = kernel.root;
    if (epilogue) {
      const Kernel& absorbed = fusion.kernels[epilogue->absorbed];
      switch (epilogue->kind) {
      case EpilogueKind::bias:
      case EpilogueKind::relu_bias:
      case EpilogueKind::gelu_bias:
      case EpilogueKind::gelu_aux_bias:
        gemm.epilogue =
            epilogue->kind == EpilogueKind::bias        ? kernels::GemmEpilogueOp::bias
            : epilogue->kind == EpilogueKind::relu_bias ? kernels::GemmEpilogueOp::relu_bias
            : epilogue->kind == EpilogueKind::gelu_bias ? kernels::GemmEpilogueOp::gelu_bias
                                                        : kernels::GemmEpilogueOp::gelu_aux_bias;
        launch.bias_node = epilogue->bias;
        // An f32 bias beside a bf16 product (mixed precision): cuBLASLt's BIAS_DATA_TYPE.
        if (g.type(epilogue->bias).dtype != gemm.dtype)
          gemm.bias_dtype = g.type(epilogue->bias).dtype;
        launch.c = absorbed.root; // the GEMM writes the absorbed kernel's result
        if (epilogue->kind == EpilogueKind::gelu_aux_bias) {
          // D is GELU's output; the loop's other output, the sum it also stored, is the aux.
          std::vector<ValueId> outputs = absorbed.outputs();
          launch.c = outputs[0] == epilogue->aux ? outputs[1] : outputs[0];
          launch.aux_node = epilogue->aux;
        }
        break;
      case EpilogueKind::bias_gradient:
        gemm.epilogue = kernels::GemmEpilogueOp::bias_gradient;
        gemm.bias_dtype = g.type(absorbed.root).dtype; // f32 under mixed precision
        launch.bias_node = absorbed.root;              // the GEMM writes the reduction's result too
        break;
      case EpilogueKind::gelu_gradient:
        gemm.epilogue = kernels::GemmEpilogueOp::gelu_gradient;
        launch.aux_node = epilogue->aux; // the stored pre-activation, read
        launch.c = absorbed.root;
        break;
      }
    }
    device.gemm_workspace(); // allocated now: never during graph capture
    return launch;
  };
  // Kernels whose row count can be a parameter: one binary for every batch size and sequence
  // length (a shape bucket's recompile finds them loaded).
  std::vector<std::unique_ptr<RowsKernelRequest>> rows_request(fusion.kernels.size());
  auto kernel_launch = [&](const Kernel& kernel) {
    GpuLaunchStep launch;
    launch.kind = kernel.kind;
    const auto& rows = rows_request[static_cast<std::size_t>(&kernel - fusion.kernels.data())];
    if (rows && (launch.function = device.rows_kernel(*rows, cache, report))) {
      launch.rows = rows->rows.rows();
      launch.shape = rows->launch;
    } else {
      launch.shape = gpu_launch(g, kernel);
      launch.function = device.kernel(fusion, kernel, cache, report);
    }
    for (ValueId out : kernel.outputs())
      launch.argument_nodes.push_back(out);
    launch.argument_nodes.insert(launch.argument_nodes.end(), kernel.reads.begin(),
                                 kernel.reads.end());
    if (launch.shape.zero_output_first) launch.clear_bytes = byte_size(g.type(kernel.root));
    if (launch.shape.shared_bytes > cuda::default_dynamic_shared_bytes) {
      // A row cache above the default: the function must ask for it, and for the carveout
      // that lets two such blocks share an SM where the device has the room.
      const cuda::Driver& d = device.driver();
      d.check(d.cuFuncSetAttribute(launch.function, cuda::function_max_dynamic_shared_bytes,
                                   static_cast<int>(launch.shape.shared_bytes)),
              "cuFuncSetAttribute (dynamic shared memory)");
      d.check(d.cuFuncSetAttribute(launch.function, cuda::function_preferred_shared_carveout,
                                   cuda::shared_carveout_max_shared),
              "cuFuncSetAttribute (shared memory carveout)");
    }
    if (kernel.kind == KernelKind::attention && !launch.rows)
      launch.cudnn = choose_attention(fusion, kernel, launch.function, launch.shape,
                                      launch.argument_nodes, device, cache);
    return launch;
  };
  // Kernels that cuBLASLt can run as a GEMM's epilogue are absorbed into it, unless cuBLASLt
  // has no algorithm for that combination (bind() finds out; then both run as usual).
  std::vector<const GemmEpilogue*> epilogue_of(fusion.kernels.size(), nullptr);
  std::vector<bool> absorbed(fusion.kernels.size(), false);
  for (const GemmEpilogue& e : epilogues) {
    epilogue_of[e.gemm] = &e;
    absorbed[e.absorbed] = true;
  }
  report.kernels -= epilogues.size();
  // Code generation and assembly of the kernels not cached yet, on several threads at once.
  std::vector<const Kernel*> generated;
  std::vector<const RowsKernelRequest*> generated_rows;
  bool runtime_rows = switch_setting("SINTER_ROWS_PARAMETER", true);
  std::vector<std::optional<RuntimeRowsKernel>> captured;
  if (runtime_rows) captured = capture_shapes(fusion);
  for (std::size_t index = 0; index < fusion.kernels.size(); ++index) {
    const Kernel& kernel = fusion.kernels[index];
    if (kernel.kind == KernelKind::gemm || kernel.kind == KernelKind::collective) continue;
    if (runtime_rows) {
      // The row count as the size where it is what changes; the size another plan shows
      // changing (a shape bucket's length) where it is not (a sum over the batch whose rows
      // are the sequence).
      std::optional<RuntimeRowsKernel> rows = RuntimeRowsKernel::of(fusion, kernel);
      std::optional<RuntimeRowsKernel> sized =
          captured[index] ? device.sized_kernel(*captured[index]) : std::nullopt;
      if (rows && (!sized || row_count_covers(*rows, *sized)))
        rows_request[index] = std::make_unique<RowsKernelRequest>(fusion, kernel, std::move(*rows),
                                                                  gpu_launch(g, kernel));
      else if (sized)
        rows_request[index] = std::make_unique<RowsKernelRequest>(
            fusion, kernel, *sized, sized_launch(*sized, gpu_launch(g, kernel)));
    }
    if (absorbed[index]) continue;
    if (rows_request[index])
      generated_rows.push_back(rows_request[index].get());
    else
      generated.push_back(&kernel);
  }
  // After the lookups: a plan never unifies with its own kernels.
  if (runtime_rows) device.remember_shapes(std::move(captured));
  device.compile_ahead(fusion, generated, generated_rows, cache);
  std::vector<std::size_t> launch_of_kernel(fusion.kernels.size(), 0);
  for (std::size_t index = 0; index < fusion.kernels.size(); ++index) {
    const Kernel& kernel = fusion.kernels[index];
    if (absorbed[index]) continue;
    launch_of_kernel[index] = launches.size();
    if (kernel.kind == KernelKind::gemm) {
      launches.push_back(gemm_launch(kernel, epilogue_of[index]));
    } else if (kernel.kind == KernelKind::collective) {
      GpuLaunchStep launch;
      launch.kind = KernelKind::collective;
      launch.a = kernel.reads[0];
      launch.c = kernel.root;
      launches.push_back(launch);
    } else {
      launches.push_back(kernel_launch(kernel));
    }
    launches.back().kernel = index;
  }
  // An epilogue cuBLASLt cannot run is split again: the GEMM plain, the absorbed kernel back
  // in its place (compiled now).
  for (const GemmEpilogue& e : epilogues) {
    GpuLaunchStep& gemm = launches[launch_of_kernel[e.gemm]];
    kernels::GpuGemmShape probe = gemm.gemm;
    if (gemm.bias_node) probe.bias = pointer_of(*gemm.bias_node); // the plan bind() reuses
    if (gemm.aux_node) probe.aux = pointer_of(*gemm.aux_node);
    try {
      blas->prepare(probe);
      continue;
    } catch (const std::runtime_error&) {
    }
    gemm = gemm_launch(fusion.kernels[e.gemm], nullptr);
    gemm.kernel = e.gemm;
    GpuLaunchStep launch = kernel_launch(fusion.kernels[e.absorbed]);
    launch.kernel = e.absorbed;
    // Bias kernels follow their GEMM; a bias-gradient reduction may run right after it too
    // (its readers all come later).
    launches.insert(launches.begin() + static_cast<std::ptrdiff_t>(launch_of_kernel[e.gemm] + 1),
                    std::move(launch));
    for (std::size_t& position : launch_of_kernel)
      if (position > launch_of_kernel[e.gemm]) ++position;
    ++report.kernels;
  }

  return launches;
}

std::string print_launch_plan(std::span<const GemmEpilogue> epilogues,
                              std::span<const GpuLaunchStep> launches) {
  auto epilogue_name = [](EpilogueKind kind) {
    switch (kind) {
    case EpilogueKind::bias: return "bias";
    case EpilogueKind::relu_bias: return "relu_bias";
    case EpilogueKind::gelu_bias: return "gelu_bias";
    case EpilogueKind::gelu_aux_bias: return "gelu_aux_bias";
    case EpilogueKind::gelu_gradient: return "gelu_gradient";
    case EpilogueKind::bias_gradient: return "bias_gradient";
    }
    return "?";
  };
  std::string out = "launch plan: " + std::to_string(launches.size()) + " launches, " +
                    std::to_string(epilogues.size()) + " GEMM epilogues considered\n";
  for (const GemmEpilogue& e : epilogues)
    out += "  epilogue " + std::string(epilogue_name(e.kind)) + ": kernel " +
           std::to_string(e.absorbed) + " into the GEMM of kernel " + std::to_string(e.gemm) + "\n";
  for (std::size_t i = 0; i < launches.size(); ++i) {
    const GpuLaunchStep& l = launches[i];
    out += "  launch " + std::to_string(i) + " kernel " + std::to_string(l.kernel) + " " +
           kernel_kind_name(l.kind);
    if (l.kind == KernelKind::gemm)
      out += " m=" + std::to_string(l.gemm.shape.m) + " n=" + std::to_string(l.gemm.shape.n) +
             " k=" + std::to_string(l.gemm.shape.k) + " batch=" + std::to_string(l.gemm.batch) +
             (l.gemm.epilogue != kernels::GemmEpilogueOp::none ? " with epilogue" : "");
    else if (l.kind != KernelKind::collective)
      out += l.cudnn
                 ? " cudnn " + l.cudnn->shape.describe()
                 : " blocks=" + std::to_string(l.shape.blocks) +
                       " threads=" + std::to_string(l.shape.threads) +
                       (l.rows ? " size=" + std::to_string(*l.rows) + " (parameter)" : "") +
                       (l.shape.shared_bytes ? " row_cache=" + std::to_string(l.shape.shared_bytes)
                                             : "");
    out += "\n";
  }
  return out;
}

} // namespace sinter
