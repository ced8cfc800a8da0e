// jit/backend/cuda/nvptx_schedule.cpp — NVPTX kernels: grid-stride loops with 16-byte vector
// access, warp/block/column-split reductions, atomic scatter, libdevice math; launch heuristics
#include "jit/backend/cuda/nvptx_schedule.hpp"

#include "jit/backend/cuda/nvptx_attention.hpp"

#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <stdexcept>

namespace sinter {
namespace {

/// Emits the body of one NVPTX kernel for its launch.
class NvptxBody {
public:
  NvptxBody(KernelEmitter& e, const GpuLaunch& launch) : e_(e), b_(e.builder()), launch_(launch) {}

  llvm::Value* special_register(llvm::Intrinsic::ID id) {
    return b_.CreateZExt(b_.CreateIntrinsic(id, {}, {}), b_.getInt64Ty());
  }
  llvm::Value* thread_in_block() {
    return special_register(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
  }
  llvm::Value* block_in_grid() {
    return special_register(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
  }
  llvm::Value* blocks_in_grid() {
    return special_register(llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x);
  }
  llvm::Value* global_thread() {
    return b_.CreateAdd(b_.CreateMul(block_in_grid(), e_.i64(launch_.threads)), thread_in_block());
  }
  llvm::Value* threads_in_grid() { return b_.CreateMul(blocks_in_grid(), e_.i64(launch_.threads)); }

  void loop() {
    const Node& root = e_.root();
    Shape s = root.type.shape;
    Shape rows_shape(s.begin(), s.end() - (s.empty() ? 0 : 1));
    int64_t inner = s.empty() ? 1 : s.back();
    int64_t width = launch_.vector_width, groups = inner / width;
    e_.emit_for(
        global_thread(), e_.i64(launch_.items),
        [&](llvm::Value* item) {
          llvm::Value* row = groups == 1 ? item : b_.CreateUDiv(item, e_.i64(groups));
          llvm::Value* first = groups == 1 ? e_.i64(0)
                                           : b_.CreateMul(b_.CreateURem(item, e_.i64(groups)),
                                                          e_.i64(width), "", true, true);
          Index row_idx = e_.delinearize(row, rows_shape);
          // `width` consecutive elements per thread: adjacent, aligned accesses that the
          // load/store vectoriser turns into 16-byte ld/st.v4.
          llvm::Value* item_base = b_.CreateMul(item, e_.i64(width), "", true, true);
          for (int64_t k = 0; k < width; ++k) {
            e_.clear_memo();
            llvm::Value* j = b_.CreateAdd(first, e_.i64(k), "", true, true);
            Index element = row_idx;
            if (!s.empty()) element.push_back(j);
            // row * inner + j, written so that consecutive k are visibly consecutive.
            llvm::Value* flat = b_.CreateAdd(item_base, e_.i64(k), "", true, true);
            e_.set_current_element(element, flat);
            e_.compute_and_store_outputs(element, flat);
          }
          e_.set_current_element({}, nullptr);
        },
        threads_in_grid());
  }

  /// x from the lane `lane ^ mask` of this warp (all 32 lanes take part).
  llvm::Value* shuffle_xor(llvm::Value* v, int mask) {
    auto shuffle32 = [&](llvm::Value* x, bool fp) -> llvm::Value* {
      return b_.CreateIntrinsic(
          fp ? llvm::Intrinsic::nvvm_shfl_sync_bfly_f32 : llvm::Intrinsic::nvvm_shfl_sync_bfly_i32,
          {}, {b_.getInt32(0xffffffffu), x, b_.getInt32(mask), b_.getInt32(31)});
    };
    llvm::Type* t = v->getType();
    if (t->isFloatTy()) return shuffle32(v, true);
    if (t->isIntegerTy(32)) return shuffle32(v, false);
    if (t->isIntegerTy(1))
      return b_.CreateTrunc(shuffle32(b_.CreateZExt(v, b_.getInt32Ty()), false), t);
    // 64-bit values travel as two 32-bit halves.
    llvm::Value* bits = t->isDoubleTy() ? b_.CreateBitCast(v, b_.getInt64Ty()) : v;
    llvm::Value* lo = shuffle32(b_.CreateTrunc(bits, b_.getInt32Ty()), false);
    llvm::Value* hi = shuffle32(b_.CreateTrunc(b_.CreateLShr(bits, 32), b_.getInt32Ty()), false);
    llvm::Value* joined = b_.CreateOr(b_.CreateZExt(lo, b_.getInt64Ty()),
                                      b_.CreateShl(b_.CreateZExt(hi, b_.getInt64Ty()), 32));
    return t->isDoubleTy() ? b_.CreateBitCast(joined, t) : joined;
  }

  /// Butterfly reduction: every lane ends with the combination of all 32 lanes' values.
  llvm::Value* warp_reduce(const Node& root, llvm::Value* v) {
    for (int mask = 16; mask > 0; mask /= 2)
      v = e_.combine(root, v, shuffle_xor(v, mask));
    return v;
  }

  /// Warp shuffles, then one partial per warp through shared memory, then one more warp
  /// reduction. Every thread of the block must call it; thread 0 gets the result.
  llvm::Value* block_reduce(const Node& root, llvm::Value* v) {
    if (!partials_) {
      auto* slots = llvm::ArrayType::get(b_.getInt64Ty(), 32); // 8 bytes hold any compute type
      partials_ = new llvm::GlobalVariable(
          e_.module(), slots, false, llvm::GlobalValue::InternalLinkage,
          llvm::UndefValue::get(slots), e_.function()->getName() + ".partials", nullptr,
          llvm::GlobalValue::NotThreadLocal, 3);
      partials_->setAlignment(llvm::Align(8));
    }
    llvm::Value* tid = thread_in_block();
    llvm::Value* lane = b_.CreateAnd(tid, e_.i64(31));
    llvm::Value* warp = b_.CreateLShr(tid, 5);
    v = warp_reduce(root, v);
    e_.emit_if(b_.CreateICmpEQ(lane, e_.i64(0)),
               [&] { b_.CreateStore(v, b_.CreateGEP(b_.getInt64Ty(), partials_, warp)); });
    b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
    int64_t warps = launch_.threads / 32;
    llvm::Value* slot = b_.CreateSelect(b_.CreateICmpULT(tid, e_.i64(warps)), tid, e_.i64(0));
    llvm::Value* partial =
        b_.CreateLoad(v->getType(), b_.CreateGEP(b_.getInt64Ty(), partials_, slot));
    v = b_.CreateSelect(b_.CreateICmpULT(tid, e_.i64(warps)), partial, e_.reduce_init(root));
    v = warp_reduce(root, v);
    // The next output's partials must not overwrite these before every warp has read them.
    b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
    return v;
  }

  void reduce() {
    const Node& root = e_.root();
    ValueId operand = root.inputs[0];
    Shape out_shape = root.type.shape, dims = e_.reduced_dims();
    DType t = root.type.dtype;
    llvm::AllocaInst* acc = e_.entry_alloca(e_.compute_type(t));
    auto load_acc = [&] { return b_.CreateLoad(acc->getAllocatedType(), acc); };
    auto fold = [&](const Index& out_idx, const Index& red_idx) {
      e_.clear_memo();
      llvm::Value* x = e_.compute(operand, e_.operand_index(out_idx, red_idx));
      b_.CreateStore(e_.combine(root, load_acc(), x), acc);
    };
    auto outputs = e_.i64(launch_.items);
    if (launch_.strategy == GpuStrategy::thread_per_output) {
      e_.emit_for(
          global_thread(), outputs,
          [&](llvm::Value* o) {
            Index out_idx = e_.delinearize(o, out_shape);
            b_.CreateStore(e_.reduce_init(root), acc);
            e_.emit_nest(dims, [&](const Index& red_idx) { fold(out_idx, red_idx); });
            e_.store_out(load_acc(), o, t);
          },
          threads_in_grid());
      return;
    }
    if (launch_.strategy == GpuStrategy::column_split) {
      emit_column_split(root, acc);
      return;
    }
    // Cooperative: lanes (or the block's threads) stride over the reduced elements, which are
    // contiguous in the operand, so neighbouring threads read neighbouring addresses.
    bool per_warp = launch_.strategy == GpuStrategy::warp_per_output;
    llvm::Value* tid = thread_in_block();
    llvm::Value* lane = per_warp ? b_.CreateAnd(tid, e_.i64(31)) : tid;
    llvm::Value* first = per_warp ? b_.CreateLShr(global_thread(), 5) : block_in_grid();
    llvm::Value* step = per_warp ? b_.CreateLShr(threads_in_grid(), 5) : blocks_in_grid();
    int64_t helpers = per_warp ? 32 : launch_.threads;
    e_.emit_for(
        first, outputs,
        [&](llvm::Value* o) {
          Index out_idx = e_.delinearize(o, out_shape);
          b_.CreateStore(e_.reduce_init(root), acc);
          e_.emit_for(
              lane, e_.i64(numel(dims)),
              [&](llvm::Value* r) { fold(out_idx, e_.delinearize(r, dims)); }, e_.i64(helpers));
          llvm::Value* total =
              per_warp ? warp_reduce(root, load_acc()) : block_reduce(root, load_acc());
          e_.emit_if(b_.CreateICmpEQ(lane, e_.i64(0)), [&] { e_.store_out(total, o, t); });
        },
        step);
  }

  /// Reductions that keep the last axis: a block takes 32 consecutive outputs (neighbouring
  /// columns, so each row's reads are coalesced); its 32 row groups stride over the reduced
  /// rows, and group 0 combines the 32 partials from shared memory.
  void emit_column_split(const Node& root, llvm::AllocaInst* acc) {
    constexpr int64_t lanes = 32;
    int64_t groups = launch_.threads / lanes;
    if (!column_partials_) {
      auto* slots = llvm::ArrayType::get(b_.getInt64Ty(), static_cast<uint64_t>(launch_.threads));
      column_partials_ = new llvm::GlobalVariable(
          e_.module(), slots, false, llvm::GlobalValue::InternalLinkage,
          llvm::UndefValue::get(slots), e_.function()->getName() + ".columns", nullptr,
          llvm::GlobalValue::NotThreadLocal, 3);
      column_partials_->setAlignment(llvm::Align(8));
    }
    ValueId operand = root.inputs[0];
    Shape out_shape = root.type.shape, dims = e_.reduced_dims();
    DType t = root.type.dtype;
    llvm::Type* value_type = acc->getAllocatedType();
    llvm::Value* tid = thread_in_block();
    llvm::Value* lane = b_.CreateAnd(tid, e_.i64(lanes - 1));
    llvm::Value* group = b_.CreateLShr(tid, 5);
    auto slot = [&](llvm::Value* g) {
      return b_.CreateGEP(b_.getInt64Ty(), column_partials_,
                          b_.CreateAdd(b_.CreateMul(g, e_.i64(lanes)), lane));
    };
    e_.emit_for(
        b_.CreateMul(block_in_grid(), e_.i64(lanes)), e_.i64(launch_.items),
        [&](llvm::Value* tile) {
          llvm::Value* o = b_.CreateAdd(tile, lane);
          llvm::Value* valid = b_.CreateICmpULT(o, e_.i64(launch_.items));
          b_.CreateStore(e_.reduce_init(root), acc);
          e_.emit_if(valid, [&] {
            Index out_idx = e_.delinearize(o, out_shape);
            e_.emit_for(
                group, e_.i64(numel(dims)),
                [&](llvm::Value* r) {
                  e_.clear_memo();
                  llvm::Value* x =
                      e_.compute(operand, e_.operand_index(out_idx, e_.delinearize(r, dims)));
                  b_.CreateStore(e_.combine(root, b_.CreateLoad(value_type, acc), x), acc);
                },
                e_.i64(groups));
          });
          b_.CreateStore(b_.CreateLoad(value_type, acc), slot(group));
          b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
          e_.emit_if(b_.CreateAnd(valid, b_.CreateICmpEQ(group, e_.i64(0))), [&] {
            llvm::Value* total = b_.CreateLoad(value_type, slot(e_.i64(0)));
            for (int64_t g = 1; g < groups; ++g)
              total = e_.combine(root, total, b_.CreateLoad(value_type, slot(e_.i64(g))));
            e_.store_out(total, o, t);
          });
          // The next tile's partials must wait until group 0 has read these.
          b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
        },
        b_.CreateMul(blocks_in_grid(), e_.i64(lanes)));
  }

  void scatter() {
    if (launch_.strategy == GpuStrategy::serial_scatter) {
      // One thread clears the output and applies every update in order.
      llvm::Value* only = b_.CreateICmpEQ(global_thread(), e_.i64(0));
      e_.emit_serial_scatter(e_.i64(0), b_.CreateSelect(only, e_.i64(1), e_.i64(0)));
      return;
    }
    const Node& root = e_.root();
    Shape out_shape = root.type.shape, idx_shape = e_.graph().type(root.inputs[0]).shape;
    Shape row_shape(out_shape.begin() + 1, out_shape.end());
    int64_t width = numel(row_shape);
    DType t = root.type.dtype;
    e_.emit_for(
        global_thread(), e_.i64(launch_.items),
        [&](llvm::Value* item) {
          e_.clear_memo();
          llvm::Value* position = b_.CreateUDiv(item, e_.i64(width));
          llvm::Value* k = b_.CreateURem(item, e_.i64(width));
          Index at = e_.delinearize(position, idx_shape);
          llvm::Value* row = b_.CreateSExt(e_.compute(root.inputs[0], at), b_.getInt64Ty());
          e_.emit_if(e_.scatter_row_valid(row), [&] {
            auto [x, slot] = e_.scatter_update(at, row, k);
            b_.CreateAtomicRMW(x->getType()->isFloatingPointTy() ? llvm::AtomicRMWInst::FAdd
                                                                 : llvm::AtomicRMWInst::Add,
                               slot, x, llvm::MaybeAlign(dtype_bytes(t)),
                               llvm::AtomicOrdering::Monotonic);
          });
        },
        threads_in_grid());
  }

private:
  KernelEmitter& e_;
  llvm::IRBuilder<>& b_;
  GpuLaunch launch_;
  llvm::GlobalVariable* partials_ = nullptr;        ///< block reductions: one slot per warp
  llvm::GlobalVariable* column_partials_ = nullptr; ///< column reductions: one per thread
};

} // namespace

void NvptxSchedule::emit(KernelEmitter& e, const std::string& name) {
  const Kernel& kernel = e.kernel();
  llvm::IRBuilder<>& b = e.builder();
  GpuLaunch launch = gpu_launch(e.graph(), kernel);
  auto* global_ptr = b.getPtrTy(1);
  std::size_t outputs = 1 + kernel.extra_outputs.size();
  std::vector<llvm::Type*> params(outputs + kernel.reads.size(), global_ptr);
  auto* fn = llvm::Function::Create(llvm::FunctionType::get(b.getVoidTy(), params, false),
                                    llvm::Function::ExternalLinkage, name, e.module());
  for (unsigned i = 0; i < params.size(); ++i) {
    // The runtime passes 16-byte aligned buffers (arena slots are 64-byte aligned), which
    // lets the load/store vectoriser form 16-byte accesses.
    fn->addParamAttr(i, llvm::Attribute::getWithAlignment(e.context(), llvm::Align(16)));
    if (kernel.in_place()) continue;
    fn->addParamAttr(i, llvm::Attribute::NoAlias);
    if (i >= outputs) fn->addParamAttr(i, llvm::Attribute::ReadOnly); // → ld.global.nc
  }
  auto* annotations = e.module().getOrInsertNamedMetadata("nvvm.annotations");
  auto annotate = [&](const char* key, int value) {
    annotations->addOperand(llvm::MDNode::get(
        e.context(), {llvm::ValueAsMetadata::get(fn), llvm::MDString::get(e.context(), key),
                      llvm::ValueAsMetadata::get(b.getInt32(static_cast<uint32_t>(value)))}));
  };
  annotate("kernel", 1);
  annotate("maxntidx", static_cast<int>(launch.threads));
  std::vector<llvm::Value*> outs, reads;
  for (std::size_t i = 0; i < outputs; ++i)
    outs.push_back(fn->getArg(static_cast<unsigned>(i)));
  for (std::size_t i = 0; i < kernel.reads.size(); ++i)
    reads.push_back(fn->getArg(static_cast<unsigned>(outputs + i)));
  e.begin_function(fn, outs, reads);
  NvptxBody body(e, launch);
  switch (kernel.kind) {
  case KernelKind::loop: body.loop(); break;
  case KernelKind::reduce:
    // Sibling reductions in one kernel are not asked for: the GPU fuses without them.
    if (!kernel.extra_outputs.empty())
      throw std::logic_error("sinter: no NVPTX schedule for a reduction with several outputs");
    body.reduce();
    break;
  case KernelKind::scatter_add: body.scatter(); break;
  case KernelKind::attention: emit_nvptx_attention(e, launch); break;
  case KernelKind::gemm:
  case KernelKind::row: // not asked for: the GPU fuses without row kernels
    throw std::logic_error("sinter: no NVPTX schedule for this kernel kind");
  }
  b.CreateRetVoid();
}

llvm::Value* NvptxSchedule::math(KernelEmitter& e, MathFunction function,
                                 std::span<llvm::Value* const> args) {
  // libdevice's function for the type: `__nv_expf` for f32, `__nv_exp` for f64.
  const char* base = "";
  switch (function) {
  case MathFunction::exp: base = "exp"; break;
  case MathFunction::log: base = "log"; break;
  case MathFunction::tanh: base = "tanh"; break;
  case MathFunction::erf: base = "erf"; break;
  case MathFunction::pow: base = "pow"; break;
  }
  llvm::Type* t = args[0]->getType();
  std::vector<llvm::Type*> types(args.size(), t);
  auto callee =
      e.module().getOrInsertFunction(std::string("__nv_") + base + (t->isFloatTy() ? "f" : ""),
                                     llvm::FunctionType::get(t, types, false));
  return e.builder().CreateCall(callee, std::vector<llvm::Value*>(args.begin(), args.end()));
}

GpuLaunch gpu_launch(const Graph& g, const Kernel& k) {
  constexpr int64_t max_blocks = 65535; // more work than that is walked grid-stride
  GpuLaunch launch;
  auto blocks_for = [&](int64_t threads) {
    return std::clamp<int64_t>((threads + launch.threads - 1) / launch.threads, 1, max_blocks);
  };
  const Node& root = g.node(k.root);
  Shape s = root.type.shape;
  switch (k.kind) {
  case KernelKind::loop: {
    int64_t inner = s.empty() ? 1 : s.back();
    int64_t width = std::max<int64_t>(1, 16 / static_cast<int64_t>(dtype_bytes(root.type.dtype)));
    while (width > 1 && inner % width != 0)
      width /= 2;
    launch.vector_width = width;
    launch.items = numel(s) / width;
    launch.blocks = blocks_for(launch.items);
    return launch;
  }
  case KernelKind::reduce: {
    Shape xs = g.type(root.inputs[0]).shape;
    bool contiguous = reduces_last_axis(g, k);
    int64_t outputs = numel(s), reduced = numel(xs) / std::max<int64_t>(1, outputs);
    launch.items = outputs;
    if (!contiguous && reduced >= 64) {
      launch.strategy = GpuStrategy::column_split;
      launch.threads = 1024;
      launch.blocks = std::clamp<int64_t>((outputs + 31) / 32, 1, max_blocks);
    } else if (!contiguous || reduced < 32) {
      launch.strategy = GpuStrategy::thread_per_output;
      launch.blocks = blocks_for(outputs);
    } else if (reduced < 1024) {
      launch.strategy = GpuStrategy::warp_per_output;
      launch.blocks = blocks_for(outputs * 32);
    } else {
      launch.strategy = GpuStrategy::block_per_output;
      launch.blocks = std::clamp<int64_t>(outputs, 1, max_blocks);
    }
    return launch;
  }
  case KernelKind::scatter_add: {
    std::size_t bytes = dtype_bytes(root.type.dtype);
    if (root.type.dtype == DType::boolean || bytes < 4) {
      launch.strategy = GpuStrategy::serial_scatter;
      launch.items = 1;
      launch.threads = 1;
      return launch;
    }
    launch.strategy = GpuStrategy::atomic_scatter;
    launch.items = numel(g.type(root.inputs[1]).shape);
    launch.blocks = blocks_for(launch.items);
    launch.zero_output_first = true;
    return launch;
  }
  case KernelKind::attention: return nvptx_attention_launch(g, k);
  case KernelKind::gemm:
  case KernelKind::row: // not asked for: the GPU fuses without row kernels
    throw std::logic_error("sinter: no NVPTX schedule for this kernel kind");
  }
  throw std::logic_error("sinter: gemm kernels are library calls, not GPU launches");
}

} // namespace sinter
