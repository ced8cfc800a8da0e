// jit/backend/cuda/nvptx_target.cpp — LLVM NVPTX: target machine, libdevice linking, O3, PTX text
#include "jit/backend/cuda/nvptx_target.hpp"
#include "jit/settings.hpp"

#include "jit/backend/backends.hpp"
#include "jit/backend/cuda/gpu_launch.hpp"
#include "jit/backend/cuda/nvptx_attention.hpp"
#include "jit/backend/cuda/nvptx_schedule.hpp"
#include "jit/codegen/llvm_pipeline.hpp"
#include "jit/passes/passes.hpp"

#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Linker/Linker.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>

#include <dlfcn.h>

#include <cstdlib>
#include <functional>
#include <mutex>
#include <stdexcept>

namespace sinter {
namespace {

constexpr const char* nvptx_triple = "nvptx64-nvidia-cuda";
// PTX ISA 8.0 (CUDA 12.0): new enough for sm_90, old enough for every CUDA 12/13 driver.
constexpr const char* ptx_features = "+ptx80";

void initialize_nvptx() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
}

} // namespace

struct NvptxTarget::Impl {
  int capability = 0;
  const llvm::Target* target = nullptr;
  std::string cpu;
  llvm::TargetOptions options;
  std::string fingerprint;
  std::optional<std::filesystem::path> libdevice_path;
  std::unique_ptr<llvm::MemoryBuffer> libdevice; // read on first use
  std::mutex mutex;

  /// A target machine of its own for each compile: kernels compile on several threads, and
  /// LLVM does not share a TargetMachine between concurrent code generations.
  std::unique_ptr<llvm::TargetMachine> make_machine() const {
    return std::unique_ptr<llvm::TargetMachine>(
        target->createTargetMachine(nvptx_triple, cpu, ptx_features, options, std::nullopt,
                                    std::nullopt, llvm::CodeGenOptLevel::Aggressive));
  }

  void link_libdevice(llvm::Module& module) {
    {
      std::lock_guard lock(mutex);
      if (!libdevice) {
        if (!libdevice_path)
          throw std::runtime_error(
              "sinter: this kernel needs CUDA's libdevice (math functions such as exp) and "
              "libdevice.10.bc was not found; set SINTER_LIBDEVICE to its path (it ships with "
              "the CUDA toolkit under nvvm/libdevice/)");
        auto file = llvm::MemoryBuffer::getFile(libdevice_path->string());
        if (!file)
          throw std::runtime_error("sinter: cannot read libdevice at " + libdevice_path->string() +
                                   ": " + file.getError().message());
        libdevice = std::move(*file);
      }
    }
    // Read lazily: the linker below materialises only the functions the kernel calls, instead
    // of parsing all of libdevice (hundreds of functions) for every kernel.
    auto parsed = llvm::getLazyBitcodeModule(libdevice->getMemBufferRef(), module.getContext());
    if (!parsed)
      throw std::runtime_error("sinter: " + libdevice_path->string() +
                               " is not valid LLVM bitcode: " + llvm::toString(parsed.takeError()));
    std::unique_ptr<llvm::Module> library = std::move(*parsed);
    // libdevice says nvptx64-nvidia-gpulibs; matching ours avoids a linker warning.
    library->setTargetTriple(module.getTargetTriple());
    library->setDataLayout(module.getDataLayout());
    if (llvm::Linker::linkModules(module, std::move(library), llvm::Linker::LinkOnlyNeeded))
      throw std::runtime_error("sinter: linking libdevice failed");
  }
};

NvptxTarget::NvptxTarget(int compute_capability) : impl_(std::make_unique<Impl>()) {
  initialize_nvptx();
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(nvptx_triple, error);
  if (!target) throw std::runtime_error("sinter: LLVM has no NVPTX backend: " + error);
  impl_->capability = compute_capability;
  std::string cpu = arch();
  if (!supports(compute_capability))
    throw std::invalid_argument("sinter: LLVM " LLVM_VERSION_STRING " cannot generate code for " +
                                cpu + "; supported GPUs start at sm_50");
  // No unsafe math (no approximate exp, no flush-to-zero), but a*b+c contracts into one fma,
  // which is faster and rounds once instead of twice.
  llvm::TargetOptions options;
  options.AllowFPOpFusion = llvm::FPOpFusion::Fast;
  impl_->target = target;
  impl_->cpu = cpu;
  impl_->options = options;
  impl_->libdevice_path = find_libdevice();
  std::string libdevice_id = "none";
  if (impl_->libdevice_path) {
    std::error_code ec;
    libdevice_id = std::to_string(std::filesystem::file_size(*impl_->libdevice_path, ec));
  }
  impl_->fingerprint = "sinter " SINTER_VERSION ";" + std::string(nvptx_triple) + ";" + cpu + ";" +
                       ptx_features + ";llvm " LLVM_VERSION_STRING ";libdevice " + libdevice_id +
                       ";build " + emitter_build_id() + ";attention-pipeline " +
                       (attention_pipeline_enabled() ? "1" : "0") +
                       (gpu_deterministic() ? ";deterministic" : "");
}

NvptxTarget::~NvptxTarget() = default;

int NvptxTarget::compute_capability() const { return impl_->capability; }
std::string NvptxTarget::arch() const { return "sm_" + std::to_string(impl_->capability); }
const std::string& NvptxTarget::fingerprint() const { return impl_->fingerprint; }

std::string NvptxTarget::compile(const FusionPlan& plan, const Kernel& kernel,
                                 const std::string& symbol) {
  return compile_module(symbol, [&](llvm::Module& module) {
    NvptxSchedule schedule;
    emit_kernel(module, plan, kernel, symbol, schedule);
  });
}

void emit_rows_kernel(llvm::Module& module, const RuntimeRowsKernel& kernel,
                      const GpuLaunch& launch, const std::string& name) {
  // The same kernel for a second row count that no shape holds, aside: the code must differ in
  // nothing (every use of the row count reads the parameter), or one binary cannot serve every
  // count.
  auto emit = [&](llvm::Module& into, int64_t extent) {
    RowsInstance instance = kernel.instance(extent);
    NvptxSchedule schedule(launch, extent);
    emit_kernel(into, instance.plan, instance.kernel(), name, schedule);
    std::string text;
    llvm::raw_string_ostream out(text);
    into.getFunction(name)->print(out);
    return text;
  };
  llvm::Module aside(name, module.getContext());
  aside.setDataLayout(module.getDataLayout());
  aside.setTargetTriple(module.getTargetTriple());
  if (emit(module, nvptx_rows_extent) != emit(aside, nvptx_rows_extent_check)) {
    module.getFunction(name)->eraseFromParent();
    if (auto* partials = module.getNamedGlobal(name + ".partials")) partials->eraseFromParent();
    if (auto* columns = module.getNamedGlobal(name + ".columns")) columns->eraseFromParent();
    throw RowsDependentCode("sinter: the code of " + name +
                            " depends on its row count beyond the loop bounds");
  }
}

bool rows_kernel_emits(const RuntimeRowsKernel& kernel, const GpuLaunch& launch) {
  llvm::LLVMContext context;
  llvm::Module module("probe", context);
  try {
    emit_rows_kernel(module, kernel, launch, "probe");
    return true;
  } catch (const RowsDependentCode&) {
    return false;
  }
}

std::string NvptxTarget::compile(const RuntimeRowsKernel& kernel, const GpuLaunch& launch,
                                 const std::string& symbol) {
  return compile_module(
      symbol, [&](llvm::Module& module) { emit_rows_kernel(module, kernel, launch, symbol); });
}

std::string NvptxTarget::compile_module(const std::string& symbol,
                                        const std::function<void(llvm::Module&)>& emit) {
  llvm::LLVMContext context;
  llvm::Module module(symbol, context);
  std::unique_ptr<llvm::TargetMachine> target_machine = impl_->make_machine();
  llvm::TargetMachine& machine = *target_machine;
  target_module(module, machine);
  emit(module);
  bool uses_libdevice = false;
  for (const llvm::Function& f : module)
    uses_libdevice |= f.isDeclaration() && f.getName().starts_with("__nv_");
  llvm::Function* kernel = module.getFunction(symbol);
  if (uses_libdevice && kernel) vectorize_memory_access(*kernel, machine);
  if (uses_libdevice) impl_->link_libdevice(module);
  // Only the kernel is visible, so the optimiser drops every libdevice function it does not call.
  for (llvm::Function& f : module)
    if (!f.isDeclaration() && f.getName() != symbol)
      f.setLinkage(llvm::GlobalValue::InternalLinkage);
  // The NVPTX machine adds NVVMReflect at pipeline start, which resolves libdevice's
  // __nvvm_reflect("__CUDA_FTZ") to 0: IEEE denormals, precise math.
  optimize_o3(module, machine);
  std::vector<char> ptx = emit_machine_code(module, machine, true);
  return std::string(ptx.begin(), ptx.end());
}

bool NvptxTarget::supports(int compute_capability) {
  initialize_nvptx();
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(nvptx_triple, error);
  if (!target) return false;
  std::unique_ptr<llvm::MCSubtargetInfo> subtarget(
      target->createMCSubtargetInfo(nvptx_triple, "sm_50", "")); // sm_50: any known one
  return subtarget->isCPUStringValid("sm_" + std::to_string(compute_capability));
}

int NvptxTarget::best_target_for(int compute_capability) {
  for (int cc = compute_capability; cc >= 50; --cc)
    if (supports(cc)) return cc;
  throw std::invalid_argument("sinter: no NVPTX target for sm_" +
                              std::to_string(compute_capability) + " (GPUs from sm_50 on)");
}

std::optional<std::filesystem::path> NvptxTarget::find_libdevice() {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
  if (const char* explicit_path = setting("SINTER_LIBDEVICE")) {
    // A path the user named and that is wrong is an error, not a reason to look elsewhere.
    if (!fs::is_regular_file(explicit_path))
      throw std::invalid_argument(std::string("sinter: SINTER_LIBDEVICE=") + explicit_path +
                                  " is not a file; point it at libdevice.10.bc");
    return fs::path(explicit_path);
  }
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&emit_kernel), &info) && info.dli_fname)
    candidates.push_back(fs::path(info.dli_fname).parent_path() / "libdevice.10.bc");
  if (const char* home = std::getenv("CUDA_HOME"))
    candidates.push_back(fs::path(home) / "nvvm/libdevice/libdevice.10.bc");
  candidates.push_back("/usr/local/cuda/nvvm/libdevice/libdevice.10.bc");
  candidates.push_back("/usr/lib/nvidia-cuda-toolkit/libdevice/libdevice.10.bc");
  for (const fs::path& p : candidates)
    if (std::error_code ec; fs::is_regular_file(p, ec)) return p;
  return std::nullopt;
}

BackendGraphStages nvptx_graph_stages(const Graph& optimized, int compute_capability,
                                      NvptxAttentionChoice* choice,
                                      std::function<bool(DType, DType)> gemm_sums_columns,
                                      std::function<bool(const FusionPlan&)> keeping_fits) {
  NvptxAttentionChoice seen;
  bool requested = has_fused_attention(optimized) && attention_decomposition_requested();
  // Why this GPU decomposes a fused attention node with these operands; empty: it fuses it.
  auto why = [requested, compute_capability](std::span<const TensorType> operands) {
    return requested ? std::string("SINTER_ATTENTION=decomposed")
                     : nvptx_attention_unsupported(operands, compute_capability);
  };
  bool decompose_some = false;
  for (ValueId id = 0; id < optimized.size(); ++id) {
    const Node& n = optimized.node(id);
    if (!is_fused_attention(n.op)) continue;
    std::vector<TensorType> types;
    for (ValueId in : n.inputs)
      types.push_back(optimized.type(in));
    std::string reason = why(types);
    decompose_some = decompose_some || !reason.empty();
    // Forwards and gradients count; a log-sum-exp runs in its forward's kernel (a graph may
    // still hold one alone, which is decomposed like the others).
    if (n.op == OpId::fused_attention_lse) continue;
    ++(reason.empty() ? seen.fused : seen.decomposed);
    if (!reason.empty() && seen.why.empty()) seen.why = reason;
  }
  if (choice) *choice = seen;
  BackendGraphStages out;
  out.fusion = gpu_fusion_options;
  out.fusion.attention_operand_views = switch_setting("SINTER_ATTENTION_VIEWS", true);
  out.fusion.store_over_donated_inputs = switch_setting("SINTER_UPDATE_IN_PLACE", true);
  if (!switch_setting("SINTER_HEAD_BIAS_EPILOGUE", true)) out.fusion.gemm_bias_rows_above = 0;
  out.fusion.gemm_gelu_pre_activation = switch_setting("SINTER_GELU_EPILOGUE", true);
  if (decompose_some)
    out.stages.push_back({"decompose-attention", [why](Graph g) {
                            return decompose_nodes(
                                g, [&](const Node& n, std::span<const Value> operands) {
                                  if (!is_fused_attention(n.op)) return false;
                                  std::vector<TensorType> types;
                                  for (const Value& v : operands)
                                    types.push_back(v.type());
                                  return !why(types).empty();
                                });
                          }});
  if (out.fusion.attention_operand_views && seen.fused > 0)
    out.stages.push_back({"attention-views", [](Graph g) {
                            return attention_results_in_place(cast_before_attention_views(g));
                          }});
  // Before rematerialize: a rebuild merges recomputed values back into the ones they repeat.
  if (switch_setting("SINTER_SPLIT_REDUCTIONS", true))
    out.stages.push_back({"split-reductions", [gemm_sums_columns](Graph g) {
                            ColumnSplitOptions options;
                            options.gemm_sums_columns = gemm_sums_columns;
                            // Blocks of 256 threads, 16 bytes of columns a lane.
                            options.lane_bytes = 16;
                            options.target_blocks = gpu_column_target_blocks;
                            // A group is a block of 8 warps: at least a row each, and
                            // at least a block an SM.
                            options.row_groups = gpu_row_groups;
                            options.row_groups_min = gpu_row_partial_min_groups;
                            options.row_group_min_rows = gpu_row_partial_group_rows;
                            // Room for a layernorm's two (γ and β); longer rows split
                            // as other column sums do.
                            options.row_group_max_length = gpu_row_partial_max_values / 2;
                            return split_column_reductions(g, options);
                          }});
  // Recomputing the backward's GEMM operands saves memory and costs bandwidth: only where
  // keeping them would not fit.
  out.stages.push_back({"rematerialize", [keeping_fits](Graph g) {
                          return recompute_late_gemm_operands(g, gpu_fusion_options, keeping_fits);
                        }});
  return out;
}

Prepared prepare_for_nvptx(Graph optimized, int compute_capability, CompileRun& run) {
  BackendGraphStages stages = nvptx_graph_stages(optimized, compute_capability);
  return prepare(std::move(optimized), stages, run);
}

Graph for_nvptx(const Graph& optimized, int compute_capability, NvptxAttentionChoice* choice) {
  CompileRun run("program", false, DumpSelection(""));
  BackendGraphStages stages = nvptx_graph_stages(optimized, compute_capability, choice);
  stages.fuses = false;
  return std::move(*prepare(optimized, stages, run).graph);
}

} // namespace sinter
