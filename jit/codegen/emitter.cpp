// jit/codegen/emitter.cpp — elemental code generation: every inlined node computed at an index
#include "jit/codegen/emitter.hpp"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/Module.h>

#include <dlfcn.h>
#include <sys/stat.h>

#include <map>
#include <stdexcept>

namespace sinter {
namespace {

using Index = std::vector<llvm::Value*>;

int64_t product(const Shape& s, std::size_t from, std::size_t to) {
  int64_t p = 1;
  for (std::size_t i = from; i < to; ++i)
    p *= s[i];
  return p;
}

/// Emits one kernel's function body.
class KernelEmitter {
public:
  KernelEmitter(llvm::Module& module, const FusionPlan& plan, const Kernel& kernel,
                CodegenTarget target)
      : module_(module), ctx_(module.getContext()), b_(ctx_), plan_(plan), g_(*plan.graph),
        kernel_(kernel), target_(target) {}

  void emit(const std::string& name) {
    if (kernel_.kind == KernelKind::gemm)
      throw std::logic_error("sinter: gemm kernels are library calls");
    if (gpu()) {
      emit_gpu(name);
      return;
    }
    // The exported entry unpacks the buffer table and calls an always-inlined body whose
    // pointer parameters are noalias: after inlining, LLVM keeps that as alias scopes, which
    // lets the vectoriser skip runtime overlap checks.
    auto* ptr = b_.getPtrTy();
    auto* i64 = b_.getInt64Ty();
    std::vector<llvm::Type*> body_params(1 + kernel_.reads.size(), ptr);
    body_params.push_back(i64);
    body_params.push_back(i64);
    auto* body_type = llvm::FunctionType::get(b_.getVoidTy(), body_params, false);
    auto* body =
        llvm::Function::Create(body_type, llvm::Function::InternalLinkage, name + ".body", module_);
    body->addFnAttr(llvm::Attribute::AlwaysInline);
    // An in-place kernel reads and writes one buffer, so its pointers may alias.
    if (!kernel_.in_place())
      for (std::size_t i = 0; i + 2 < body_params.size(); ++i)
        body->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::NoAlias);

    auto* entry_type = llvm::FunctionType::get(b_.getVoidTy(), {ptr, i64, i64}, false);
    auto* entry =
        llvm::Function::Create(entry_type, llvm::Function::ExternalLinkage, name, module_);
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", entry));
    std::vector<llvm::Value*> args;
    for (std::size_t i = 0; i <= kernel_.reads.size(); ++i)
      args.push_back(b_.CreateLoad(ptr, b_.CreateConstGEP1_64(ptr, entry->getArg(0), i)));
    args.push_back(entry->getArg(1));
    args.push_back(entry->getArg(2));
    b_.CreateCall(body, args);
    b_.CreateRetVoid();

    fn_ = body;
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", body));
    out_ = body->getArg(0);
    for (std::size_t i = 0; i < kernel_.reads.size(); ++i)
      buffers_[kernel_.reads[i]] = body->getArg(static_cast<unsigned>(i + 1));
    llvm::Value* begin = body->getArg(static_cast<unsigned>(kernel_.reads.size() + 1));
    llvm::Value* end = body->getArg(static_cast<unsigned>(kernel_.reads.size() + 2));
    switch (kernel_.kind) {
    case KernelKind::loop: emit_loop(begin, end); break;
    case KernelKind::reduce: emit_reduce(begin, end); break;
    case KernelKind::scatter_add: emit_scatter(begin, end); break;
    case KernelKind::gemm: break;
    }
    b_.CreateRetVoid();
  }

private:
  // ---- types ------------------------------------------------------------------------------
  llvm::Type* compute_type(DType t) {
    switch (t) {
    case DType::f64: return b_.getDoubleTy();
    case DType::f32:
    case DType::bf16:
    case DType::f16: return b_.getFloatTy();
    case DType::i32: return b_.getInt32Ty();
    case DType::i64: return b_.getInt64Ty();
    case DType::boolean: return b_.getInt1Ty();
    }
    return nullptr;
  }

  llvm::Type* storage_type(DType t) {
    switch (t) {
    case DType::bf16:
    case DType::f16: return b_.getInt16Ty();
    case DType::boolean: return b_.getInt8Ty();
    default: return compute_type(t);
    }
  }

  llvm::Value* i64(int64_t v) { return b_.getInt64(static_cast<uint64_t>(v)); }

  // ---- bf16 / f16 conversions (compute in f32) -------------------------------------------
  llvm::Value* round_to_bf16(llvm::Value* f) {
    llvm::Value* bits = b_.CreateBitCast(f, b_.getInt32Ty());
    llvm::Value* lsb = b_.CreateAnd(b_.CreateLShr(bits, 16), b_.getInt32(1));
    llvm::Value* rounded = b_.CreateAdd(bits, b_.CreateAdd(b_.getInt32(0x7fff), lsb));
    return b_.CreateBitCast(b_.CreateAnd(rounded, b_.getInt32(0xffff0000u)), b_.getFloatTy());
  }
  llvm::Value* round_to_f16(llvm::Value* f) {
    return b_.CreateFPExt(b_.CreateFPTrunc(f, b_.getHalfTy()), b_.getFloatTy());
  }

  llvm::Value* to_storage(llvm::Value* v, DType t) {
    switch (t) {
    case DType::bf16:
      return b_.CreateTrunc(b_.CreateLShr(b_.CreateBitCast(round_to_bf16(v), b_.getInt32Ty()), 16),
                            b_.getInt16Ty());
    case DType::f16: return b_.CreateBitCast(b_.CreateFPTrunc(v, b_.getHalfTy()), b_.getInt16Ty());
    case DType::boolean: return b_.CreateZExt(v, b_.getInt8Ty());
    default: return v;
    }
  }

  llvm::Value* from_storage(llvm::Value* v, DType t) {
    switch (t) {
    case DType::bf16:
      return b_.CreateBitCast(b_.CreateShl(b_.CreateZExt(v, b_.getInt32Ty()), 16), b_.getFloatTy());
    case DType::f16: return b_.CreateFPExt(b_.CreateBitCast(v, b_.getHalfTy()), b_.getFloatTy());
    case DType::boolean: return b_.CreateICmpNE(v, b_.getInt8(0));
    default: return v;
    }
  }

  // ---- indexing ---------------------------------------------------------------------------
  llvm::Value* linear(const Index& idx, const Shape& shape) {
    llvm::Value* flat = i64(0);
    auto strides = strides_of(shape);
    for (std::size_t d = 0; d < shape.size(); ++d)
      if (shape[d] != 1) flat = b_.CreateAdd(flat, b_.CreateMul(idx[d], i64(strides[d])));
    return flat;
  }

  Index delinearize(llvm::Value* flat, const Shape& shape) {
    Index idx(shape.size());
    for (std::size_t d = shape.size(); d-- > 0;) {
      if (shape[d] == 1) {
        idx[d] = i64(0);
        continue;
      }
      idx[d] = d == 0 ? flat : b_.CreateURem(flat, i64(shape[d]));
      if (d > 0) flat = b_.CreateUDiv(flat, i64(shape[d]));
    }
    return idx;
  }

  /// The operand index of a reshape from `in` to `out` at output index `idx`. Dims are matched
  /// in groups whose sizes multiply to the same product, so splitting a dim costs only
  /// multiply-adds and merging costs a div/mod on that group alone (not a full flat index).
  Index reshape_index(const Index& idx, const Shape& out, const Shape& in) {
    Index result(in.size());
    std::size_t o = 0, i = 0;
    while (o < out.size() || i < in.size()) {
      std::size_t o_end = o, i_end = i;
      int64_t po = 1, pi = 1;
      // Grow the group on whichever side has the smaller product until they match.
      do {
        if ((po <= pi && o_end < out.size()) || i_end == in.size())
          po *= out[o_end++];
        else
          pi *= in[i_end++];
      } while (po != pi && (o_end < out.size() || i_end < in.size()));
      // Trailing size-1 dims join this group.
      while (o_end < out.size() && out[o_end] == 1 && po == pi && i_end == in.size())
        ++o_end;
      while (i_end < in.size() && in[i_end] == 1 && po == pi && o_end == out.size())
        ++i_end;
      Shape out_group(out.begin() + static_cast<std::ptrdiff_t>(o),
                      out.begin() + static_cast<std::ptrdiff_t>(o_end));
      Shape in_group(in.begin() + static_cast<std::ptrdiff_t>(i),
                     in.begin() + static_cast<std::ptrdiff_t>(i_end));
      Index out_idx(idx.begin() + static_cast<std::ptrdiff_t>(o),
                    idx.begin() + static_cast<std::ptrdiff_t>(o_end));
      llvm::Value* flat = linear(out_idx, out_group);
      Index in_idx = in_group.size() == 1 ? Index{flat} : delinearize(flat, in_group);
      for (std::size_t k = 0; k < in_idx.size(); ++k)
        result[i + k] = in_idx[k];
      o = o_end;
      i = i_end;
    }
    return result;
  }

  llvm::Value* clamp(llvm::Value* v, int64_t lo, int64_t hi) {
    v = b_.CreateSelect(b_.CreateICmpSLT(v, i64(lo)), i64(lo), v);
    return b_.CreateSelect(b_.CreateICmpSGT(v, i64(hi)), i64(hi), v);
  }

  /// The flat offset of `idx` in a row-major tensor of `shape`. At the element the kernel is
  /// writing, it is the output's own offset, which keeps addresses of neighbouring elements
  /// visibly adjacent (the NVPTX load/store vectoriser needs that).
  llvm::Value* flat_offset(const Index& idx, const Shape& shape) {
    if (current_flat_ && shape == g_.type(kernel_.root).shape && idx == current_index_)
      return current_flat_;
    return linear(idx, shape);
  }

  llvm::Value* load_flat(ValueId buffer_node, llvm::Value* flat, DType t) {
    llvm::Value* base = buffers_.at(buffer_node);
    llvm::Value* p = b_.CreateGEP(storage_type(t), base, flat);
    return from_storage(b_.CreateLoad(storage_type(t), p), t);
  }

  bool in_memory(ValueId v) const {
    return v != kernel_.root && (plan_.materialized[v] || plan_.view_of[v] != v);
  }

  // ---- loops ------------------------------------------------------------------------------
  /// for (iv = begin; iv < end; iv += step); `step` null means 1.
  template <class Body>
  void emit_for(llvm::Value* begin, llvm::Value* end, Body body, llvm::Value* step = nullptr) {
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* header = llvm::BasicBlock::Create(ctx_, "loop", fn_);
    auto* inside = llvm::BasicBlock::Create(ctx_, "body", fn_);
    auto* exit = llvm::BasicBlock::Create(ctx_, "exit", fn_);
    b_.CreateBr(header);
    b_.SetInsertPoint(header);
    llvm::PHINode* iv = b_.CreatePHI(b_.getInt64Ty(), 2);
    iv->addIncoming(begin, pre);
    b_.CreateCondBr(b_.CreateICmpSLT(iv, end), inside, exit);
    b_.SetInsertPoint(inside);
    body(static_cast<llvm::Value*>(iv));
    llvm::Value* next = b_.CreateAdd(iv, step ? step : i64(1), "", true, true);
    iv->addIncoming(next, b_.GetInsertBlock());
    b_.CreateBr(header);
    b_.SetInsertPoint(exit);
  }

  /// Nested loops over `dims` (outermost first); `body` gets one induction variable per dim.
  template <class Body> void emit_nest(const Shape& dims, std::size_t d, Index& ivs, Body body) {
    if (d == dims.size()) {
      body(ivs);
      return;
    }
    emit_for(i64(0), i64(dims[d]), [&](llvm::Value* iv) {
      ivs.push_back(iv);
      emit_nest(dims, d + 1, ivs, body);
      ivs.pop_back();
    });
  }

  void store_out(llvm::Value* v, llvm::Value* flat, DType t) {
    b_.CreateStore(to_storage(v, t), b_.CreateGEP(storage_type(t), out_, flat));
  }

  void emit_loop(llvm::Value* begin, llvm::Value* end) {
    const Node& root = g_.node(kernel_.root);
    Shape s = root.type.shape;
    Shape rows_shape(s.begin(), s.end() - (s.empty() ? 0 : 1));
    int64_t inner = s.empty() ? 1 : s.back();
    emit_for(begin, end, [&](llvm::Value* row) {
      Index row_idx = delinearize(row, rows_shape);
      llvm::Value* row_base = b_.CreateMul(row, i64(inner));
      emit_for(i64(0), i64(inner), [&](llvm::Value* j) {
        memo_.clear();
        Index idx = row_idx;
        if (!s.empty()) idx.push_back(j);
        llvm::Value* v = compute(kernel_.root, idx);
        store_out(v, b_.CreateAdd(row_base, j), root.type.dtype);
      });
    });
  }

  llvm::Value* reduce_init(const Node& root) {
    llvm::Type* t = compute_type(root.type.dtype);
    if (root.op == OpId::reduce_sum)
      return t->isFloatingPointTy() ? llvm::ConstantFP::get(t, 0.0) : llvm::ConstantInt::get(t, 0);
    if (t->isFloatingPointTy()) return llvm::ConstantFP::getInfinity(t, true);
    return llvm::ConstantInt::get(t, llvm::APInt::getSignedMinValue(t->getIntegerBitWidth()));
  }

  llvm::Value* combine(const Node& root, llvm::Value* acc, llvm::Value* x) {
    bool fp = acc->getType()->isFloatingPointTy();
    if (root.op == OpId::reduce_sum) {
      if (!fp) return b_.CreateAdd(acc, x);
      // Reassociation lets the vectoriser keep several partial sums.
      llvm::FastMathFlags fmf;
      fmf.setAllowReassoc();
      auto* sum = b_.CreateFAdd(acc, x);
      llvm::cast<llvm::Instruction>(sum)->setFastMathFlags(fmf);
      return sum;
    }
    llvm::Value* less = fp ? b_.CreateFCmpOLT(acc, x) : b_.CreateICmpSLT(acc, x);
    return b_.CreateSelect(less, x, acc);
  }

  bool reduced_axis(std::size_t d) const {
    const auto& axes = g_.node(kernel_.root).attrs.ints;
    return std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) != axes.end();
  }

  /// The reduced dims of the operand, outermost first.
  Shape reduced_dims() const {
    Shape xs = g_.type(g_.node(kernel_.root).inputs[0]).shape, dims;
    for (std::size_t d = 0; d < xs.size(); ++d)
      if (reduced_axis(d)) dims.push_back(xs[d]);
    return dims;
  }

  /// Assembles the operand index from the output index and the reduced loop variables.
  Index operand_index(const Index& out_idx, const Index& red_idx) const {
    std::size_t rank = g_.type(g_.node(kernel_.root).inputs[0]).shape.size();
    Index idx;
    std::size_t o = 0, r = 0;
    for (std::size_t d = 0; d < rank; ++d)
      idx.push_back(reduced_axis(d) ? red_idx[r++] : out_idx[o++]);
    return idx;
  }

  llvm::AllocaInst* entry_alloca(llvm::Type* t) {
    llvm::IRBuilderBase::InsertPoint ip = b_.saveIP();
    b_.SetInsertPoint(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
    llvm::AllocaInst* slot = b_.CreateAlloca(t);
    b_.restoreIP(ip);
    return slot;
  }

  void emit_reduce(llvm::Value* begin, llvm::Value* end) {
    const Node& root = g_.node(kernel_.root);
    ValueId operand = root.inputs[0];
    Shape xs = g_.type(operand).shape;
    auto reduced = [&](std::size_t d) { return reduced_axis(d); };
    Shape out_shape = root.type.shape;
    Shape reduced_dims = this->reduced_dims();
    DType t = root.type.dtype;
    llvm::AllocaInst* acc = entry_alloca(compute_type(t));

    if (xs.empty() || reduced(xs.size() - 1)) {
      // Contiguous reduction: each output element folds its lanes, innermost loop contiguous.
      emit_for(begin, end, [&](llvm::Value* flat_out) {
        Index out_idx = delinearize(flat_out, out_shape);
        b_.CreateStore(reduce_init(root), acc);
        Index red;
        emit_nest(reduced_dims, 0, red, [&](const Index& red_idx) {
          memo_.clear();
          llvm::Value* x = compute(operand, operand_index(out_idx, red_idx));
          b_.CreateStore(combine(root, b_.CreateLoad(acc->getAllocatedType(), acc), x), acc);
        });
        store_out(b_.CreateLoad(acc->getAllocatedType(), acc), flat_out, t);
      });
      return;
    }
    // The last axis is kept: accumulate whole output rows, innermost loop over that axis.
    Shape rows_shape(out_shape.begin(), out_shape.end() - 1);
    int64_t inner = out_shape.back();
    emit_for(begin, end, [&](llvm::Value* row) {
      Index row_idx = delinearize(row, rows_shape);
      llvm::Value* base = b_.CreateMul(row, i64(inner));
      emit_for(i64(0), i64(inner),
               [&](llvm::Value* j) { store_out(reduce_init(root), b_.CreateAdd(base, j), t); });
      Index red;
      emit_nest(reduced_dims, 0, red, [&](const Index& red_idx) {
        emit_for(i64(0), i64(inner), [&](llvm::Value* j) {
          memo_.clear();
          Index out_idx = row_idx;
          out_idx.push_back(j);
          llvm::Value* x = compute(operand, operand_index(out_idx, red_idx));
          llvm::Value* slot = b_.CreateGEP(storage_type(t), out_, b_.CreateAdd(base, j));
          llvm::Value* old = from_storage(b_.CreateLoad(storage_type(t), slot), t);
          b_.CreateStore(to_storage(combine(root, old, x), t), slot);
        });
      });
    });
  }

  /// Scatter: the update element at (index position `at`, element `k` of its row) and the
  /// output slot it adds to, row `row`.
  std::pair<llvm::Value*, llvm::Value*> scatter_update(const Index& at, llvm::Value* row,
                                                       llvm::Value* k) {
    const Node& root = g_.node(kernel_.root);
    Shape out_shape = root.type.shape;
    Shape row_shape(out_shape.begin() + 1, out_shape.end());
    Index update = at;
    for (llvm::Value* v : delinearize(k, row_shape))
      update.push_back(v);
    llvm::Value* x = compute(root.inputs[1], update);
    llvm::Value* flat = b_.CreateAdd(b_.CreateMul(row, i64(numel(row_shape))), k);
    return {x, b_.CreateGEP(storage_type(root.type.dtype), out_, flat)};
  }

  void emit_scatter(llvm::Value* begin, llvm::Value* end) {
    // Serial over the parallel range (1): rows may repeat, so updates must not race.
    const Node& root = g_.node(kernel_.root);
    Shape out_shape = root.type.shape, idx_shape = g_.type(root.inputs[0]).shape;
    Shape row_shape(out_shape.begin() + 1, out_shape.end());
    int64_t rows = out_shape[0], width = numel(row_shape);
    DType t = root.type.dtype;
    emit_for(begin, end, [&](llvm::Value*) {
      emit_for(i64(0), i64(numel(out_shape)), [&](llvm::Value* i) {
        store_out(llvm::Constant::getNullValue(compute_type(t)), i, t);
      });
      emit_for(i64(0), i64(numel(idx_shape)), [&](llvm::Value* i) {
        memo_.clear();
        Index at = delinearize(i, idx_shape);
        llvm::Value* row = b_.CreateSExt(compute(root.inputs[0], at), b_.getInt64Ty());
        llvm::Value* valid =
            b_.CreateAnd(b_.CreateICmpSGE(row, i64(0)), b_.CreateICmpSLT(row, i64(rows)));
        emit_if(valid, [&] {
          emit_for(i64(0), i64(width), [&](llvm::Value* k) {
            memo_.clear();
            auto [x, slot] = scatter_update(at, row, k);
            llvm::Value* old = from_storage(b_.CreateLoad(storage_type(t), slot), t);
            llvm::Value* sum =
                x->getType()->isFloatingPointTy() ? b_.CreateFAdd(old, x) : b_.CreateAdd(old, x);
            b_.CreateStore(to_storage(sum, t), slot);
          });
        });
      });
    });
  }

  // ---- NVPTX ------------------------------------------------------------------------------
  void emit_gpu(const std::string& name) {
    launch_ = gpu_launch(g_, kernel_);
    auto* global_ptr = b_.getPtrTy(1);
    std::vector<llvm::Type*> params(1 + kernel_.reads.size(), global_ptr);
    auto* fn = llvm::Function::Create(llvm::FunctionType::get(b_.getVoidTy(), params, false),
                                      llvm::Function::ExternalLinkage, name, module_);
    for (unsigned i = 0; i < params.size(); ++i) {
      // The runtime passes 16-byte aligned buffers (arena slots are 64-byte aligned), which
      // lets the load/store vectoriser form 16-byte accesses.
      fn->addParamAttr(i, llvm::Attribute::getWithAlignment(ctx_, llvm::Align(16)));
      if (kernel_.in_place()) continue;
      fn->addParamAttr(i, llvm::Attribute::NoAlias);
      if (i > 0) fn->addParamAttr(i, llvm::Attribute::ReadOnly); // → ld.global.nc
    }
    auto* annotations = module_.getOrInsertNamedMetadata("nvvm.annotations");
    auto annotate = [&](const char* key, int value) {
      annotations->addOperand(llvm::MDNode::get(
          ctx_, {llvm::ValueAsMetadata::get(fn), llvm::MDString::get(ctx_, key),
                 llvm::ValueAsMetadata::get(b_.getInt32(static_cast<uint32_t>(value)))}));
    };
    annotate("kernel", 1);
    annotate("maxntidx", static_cast<int>(launch_.threads));
    fn_ = fn;
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn));
    out_ = fn->getArg(0);
    for (std::size_t i = 0; i < kernel_.reads.size(); ++i)
      buffers_[kernel_.reads[i]] = fn->getArg(static_cast<unsigned>(i + 1));
    switch (kernel_.kind) {
    case KernelKind::loop: emit_gpu_loop(); break;
    case KernelKind::reduce: emit_gpu_reduce(); break;
    case KernelKind::scatter_add: emit_gpu_scatter(); break;
    case KernelKind::gemm: break;
    }
    b_.CreateRetVoid();
  }

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
    return b_.CreateAdd(b_.CreateMul(block_in_grid(), i64(launch_.threads)), thread_in_block());
  }
  llvm::Value* threads_in_grid() { return b_.CreateMul(blocks_in_grid(), i64(launch_.threads)); }

  template <class Body> void emit_if(llvm::Value* condition, Body body) {
    auto* then = llvm::BasicBlock::Create(ctx_, "then", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "endif", fn_);
    b_.CreateCondBr(condition, then, done);
    b_.SetInsertPoint(then);
    body();
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
  }

  void emit_gpu_loop() {
    const Node& root = g_.node(kernel_.root);
    Shape s = root.type.shape;
    Shape rows_shape(s.begin(), s.end() - (s.empty() ? 0 : 1));
    int64_t inner = s.empty() ? 1 : s.back();
    int64_t width = launch_.vector_width, groups = inner / width;
    emit_for(
        global_thread(), i64(launch_.items),
        [&](llvm::Value* item) {
          llvm::Value* row = groups == 1 ? item : b_.CreateUDiv(item, i64(groups));
          llvm::Value* first = groups == 1 ? i64(0)
                                           : b_.CreateMul(b_.CreateURem(item, i64(groups)),
                                                          i64(width), "", true, true);
          Index row_idx = delinearize(row, rows_shape);
          // `width` consecutive elements per thread: adjacent, aligned accesses that the
          // load/store vectoriser turns into 16-byte ld/st.v4.
          llvm::Value* item_base = b_.CreateMul(item, i64(width), "", true, true);
          for (int64_t k = 0; k < width; ++k) {
            memo_.clear();
            llvm::Value* j = b_.CreateAdd(first, i64(k), "", true, true);
            current_index_ = row_idx;
            if (!s.empty()) current_index_.push_back(j);
            // row * inner + j, written so that consecutive k are visibly consecutive.
            current_flat_ = b_.CreateAdd(item_base, i64(k), "", true, true);
            store_out(compute(kernel_.root, current_index_), current_flat_, root.type.dtype);
          }
          current_flat_ = nullptr;
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
      v = combine(root, v, shuffle_xor(v, mask));
    return v;
  }

  /// Warp shuffles, then one partial per warp through shared memory, then one more warp
  /// reduction. Every thread of the block must call it; thread 0 gets the result.
  llvm::Value* block_reduce(const Node& root, llvm::Value* v) {
    if (!partials_) {
      auto* slots = llvm::ArrayType::get(b_.getInt64Ty(), 32); // 8 bytes hold any compute type
      partials_ = new llvm::GlobalVariable(
          module_, slots, false, llvm::GlobalValue::InternalLinkage, llvm::UndefValue::get(slots),
          fn_->getName() + ".partials", nullptr, llvm::GlobalValue::NotThreadLocal, 3);
      partials_->setAlignment(llvm::Align(8));
    }
    llvm::Value* tid = thread_in_block();
    llvm::Value* lane = b_.CreateAnd(tid, i64(31));
    llvm::Value* warp = b_.CreateLShr(tid, 5);
    v = warp_reduce(root, v);
    emit_if(b_.CreateICmpEQ(lane, i64(0)),
            [&] { b_.CreateStore(v, b_.CreateGEP(b_.getInt64Ty(), partials_, warp)); });
    b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
    int64_t warps = launch_.threads / 32;
    llvm::Value* slot = b_.CreateSelect(b_.CreateICmpULT(tid, i64(warps)), tid, i64(0));
    llvm::Value* partial =
        b_.CreateLoad(v->getType(), b_.CreateGEP(b_.getInt64Ty(), partials_, slot));
    v = b_.CreateSelect(b_.CreateICmpULT(tid, i64(warps)), partial, reduce_init(root));
    v = warp_reduce(root, v);
    // The next output's partials must not overwrite these before every warp has read them.
    b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
    return v;
  }

  void emit_gpu_reduce() {
    const Node& root = g_.node(kernel_.root);
    ValueId operand = root.inputs[0];
    Shape out_shape = root.type.shape, dims = reduced_dims();
    DType t = root.type.dtype;
    llvm::AllocaInst* acc = entry_alloca(compute_type(t));
    auto load_acc = [&] { return b_.CreateLoad(acc->getAllocatedType(), acc); };
    auto fold = [&](const Index& out_idx, const Index& red_idx) {
      memo_.clear();
      llvm::Value* x = compute(operand, operand_index(out_idx, red_idx));
      b_.CreateStore(combine(root, load_acc(), x), acc);
    };
    auto outputs = i64(launch_.items);
    if (launch_.strategy == GpuStrategy::thread_per_output) {
      emit_for(
          global_thread(), outputs,
          [&](llvm::Value* o) {
            Index out_idx = delinearize(o, out_shape);
            b_.CreateStore(reduce_init(root), acc);
            Index red;
            emit_nest(dims, 0, red, [&](const Index& red_idx) { fold(out_idx, red_idx); });
            store_out(load_acc(), o, t);
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
    llvm::Value* lane = per_warp ? b_.CreateAnd(tid, i64(31)) : tid;
    llvm::Value* first = per_warp ? b_.CreateLShr(global_thread(), 5) : block_in_grid();
    llvm::Value* step = per_warp ? b_.CreateLShr(threads_in_grid(), 5) : blocks_in_grid();
    int64_t helpers = per_warp ? 32 : launch_.threads;
    emit_for(
        first, outputs,
        [&](llvm::Value* o) {
          Index out_idx = delinearize(o, out_shape);
          b_.CreateStore(reduce_init(root), acc);
          emit_for(
              lane, i64(numel(dims)), [&](llvm::Value* r) { fold(out_idx, delinearize(r, dims)); },
              i64(helpers));
          llvm::Value* total =
              per_warp ? warp_reduce(root, load_acc()) : block_reduce(root, load_acc());
          emit_if(b_.CreateICmpEQ(lane, i64(0)), [&] { store_out(total, o, t); });
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
          module_, slots, false, llvm::GlobalValue::InternalLinkage, llvm::UndefValue::get(slots),
          fn_->getName() + ".columns", nullptr, llvm::GlobalValue::NotThreadLocal, 3);
      column_partials_->setAlignment(llvm::Align(8));
    }
    ValueId operand = root.inputs[0];
    Shape out_shape = root.type.shape, dims = reduced_dims();
    DType t = root.type.dtype;
    llvm::Type* value_type = acc->getAllocatedType();
    llvm::Value* tid = thread_in_block();
    llvm::Value* lane = b_.CreateAnd(tid, i64(lanes - 1));
    llvm::Value* group = b_.CreateLShr(tid, 5);
    auto slot = [&](llvm::Value* g) {
      return b_.CreateGEP(b_.getInt64Ty(), column_partials_,
                          b_.CreateAdd(b_.CreateMul(g, i64(lanes)), lane));
    };
    emit_for(
        b_.CreateMul(block_in_grid(), i64(lanes)), i64(launch_.items),
        [&](llvm::Value* tile) {
          llvm::Value* o = b_.CreateAdd(tile, lane);
          llvm::Value* valid = b_.CreateICmpULT(o, i64(launch_.items));
          b_.CreateStore(reduce_init(root), acc);
          emit_if(valid, [&] {
            Index out_idx = delinearize(o, out_shape);
            emit_for(
                group, i64(numel(dims)),
                [&](llvm::Value* r) {
                  memo_.clear();
                  llvm::Value* x = compute(operand, operand_index(out_idx, delinearize(r, dims)));
                  b_.CreateStore(combine(root, b_.CreateLoad(value_type, acc), x), acc);
                },
                i64(groups));
          });
          b_.CreateStore(b_.CreateLoad(value_type, acc), slot(group));
          b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
          emit_if(b_.CreateAnd(valid, b_.CreateICmpEQ(group, i64(0))), [&] {
            llvm::Value* total = b_.CreateLoad(value_type, slot(i64(0)));
            for (int64_t g = 1; g < groups; ++g)
              total = combine(root, total, b_.CreateLoad(value_type, slot(i64(g))));
            store_out(total, o, t);
          });
          // The next tile's partials must wait until group 0 has read these.
          b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
        },
        b_.CreateMul(blocks_in_grid(), i64(lanes)));
  }

  void emit_gpu_scatter() {
    if (launch_.strategy == GpuStrategy::serial_scatter) {
      // One thread clears the output and applies every update in order.
      llvm::Value* only = b_.CreateICmpEQ(global_thread(), i64(0));
      emit_scatter(i64(0), b_.CreateSelect(only, i64(1), i64(0)));
      return;
    }
    const Node& root = g_.node(kernel_.root);
    Shape out_shape = root.type.shape, idx_shape = g_.type(root.inputs[0]).shape;
    Shape row_shape(out_shape.begin() + 1, out_shape.end());
    int64_t rows = out_shape[0], width = numel(row_shape);
    DType t = root.type.dtype;
    emit_for(
        global_thread(), i64(launch_.items),
        [&](llvm::Value* item) {
          memo_.clear();
          llvm::Value* position = b_.CreateUDiv(item, i64(width));
          llvm::Value* k = b_.CreateURem(item, i64(width));
          Index at = delinearize(position, idx_shape);
          llvm::Value* row = b_.CreateSExt(compute(root.inputs[0], at), b_.getInt64Ty());
          llvm::Value* valid =
              b_.CreateAnd(b_.CreateICmpSGE(row, i64(0)), b_.CreateICmpSLT(row, i64(rows)));
          emit_if(valid, [&] {
            auto [x, slot] = scatter_update(at, row, k);
            b_.CreateAtomicRMW(x->getType()->isFloatingPointTy() ? llvm::AtomicRMWInst::FAdd
                                                                 : llvm::AtomicRMWInst::Add,
                               slot, x, llvm::MaybeAlign(dtype_bytes(t)),
                               llvm::AtomicOrdering::Monotonic);
          });
        },
        threads_in_grid());
  }

  // ---- elemental computation --------------------------------------------------------------
  llvm::Value* compute(ValueId v, const Index& idx) {
    auto key = std::make_pair(v, idx);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    llvm::Value* result = compute_uncached(v, idx);
    memo_[key] = result;
    return result;
  }

  bool gpu() const { return target_ == CodegenTarget::nvptx; }

  /// libdevice's function for x's type: `__nv_expf` for f32, `__nv_exp` for f64.
  llvm::Value* call_libdevice(const std::string& base, std::vector<llvm::Value*> args) {
    llvm::Type* t = args[0]->getType();
    std::vector<llvm::Type*> types(args.size(), t);
    auto callee = module_.getOrInsertFunction("__nv_" + base + (t->isFloatTy() ? "f" : ""),
                                              llvm::FunctionType::get(t, types, false));
    return b_.CreateCall(callee, args);
  }

  llvm::Value* power(llvm::Value* a, llvm::Value* e) {
    return gpu() ? call_libdevice("pow", {a, e})
                 : b_.CreateBinaryIntrinsic(llvm::Intrinsic::pow, a, e);
  }

  llvm::Value* call_libm(const char* f32_name, const char* f64_name, llvm::Value* x) {
    bool is_double = x->getType()->isDoubleTy();
    auto callee =
        module_.getOrInsertFunction(is_double ? f64_name : f32_name, x->getType(), x->getType());
    return b_.CreateCall(callee, {x});
  }

  /// tanh without a scalar libm call for f32, so loops stay vectorised (exp is vectorised
  /// through libmvec): an odd Taylor polynomial near 0, where 1 - 2/(e^2x + 1) would cancel,
  /// and that formula elsewhere. Both within a few f32 ulps. f64 keeps libm's tanh.
  llvm::Value* tanh_of(llvm::Value* x) {
    if (x->getType()->isDoubleTy()) return call_libm("tanhf", "tanh", x);
    llvm::Type* t = x->getType();
    auto c = [&](double v) { return llvm::ConstantFP::get(t, v); };
    llvm::Value* ax = b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
    // tanh x = Σ T_k x^(2k+1); T_k from the Bernoulli numbers: 1, -1/3, 2/15, -17/315, ...
    static constexpr double taylor[] = {1.0,
                                        -1.0 / 3.0,
                                        2.0 / 15.0,
                                        -17.0 / 315.0,
                                        62.0 / 2835.0,
                                        -1382.0 / 155925.0,
                                        21844.0 / 6081075.0,
                                        -929569.0 / 638512875.0,
                                        6404582.0 / 10854718875.0};
    llvm::Value* x2 = b_.CreateFMul(x, x);
    llvm::Value* poly = c(taylor[8]);
    for (int k = 7; k >= 0; --k)
      poly = b_.CreateFAdd(b_.CreateFMul(poly, x2), c(taylor[k]));
    llvm::Value* near_zero = b_.CreateFMul(poly, x);
    // 1 - 2 / (e^(2|x|) + 1), with the sign of x; e^(2|x|) overflows to inf → exactly 1.
    llvm::Value* e = b_.CreateUnaryIntrinsic(llvm::Intrinsic::exp, b_.CreateFMul(ax, c(2.0)));
    llvm::Value* far = b_.CreateFSub(c(1.0), b_.CreateFDiv(c(2.0), b_.CreateFAdd(e, c(1.0))));
    far = b_.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, far, x);
    return b_.CreateSelect(b_.CreateFCmpOLT(ax, c(0.55)), near_zero, far);
  }

  llvm::Value* convert(llvm::Value* v, DType from, DType to) {
    llvm::Type* target = compute_type(to);
    llvm::Type* source = v->getType();
    if (to == DType::boolean) {
      return source->isFloatingPointTy() ? b_.CreateFCmpUNE(v, llvm::ConstantFP::get(source, 0.0))
             : source->isIntegerTy(1)    ? v
                                         : b_.CreateICmpNE(v, llvm::ConstantInt::get(source, 0));
    }
    llvm::Value* out = v;
    if (source->isFloatingPointTy() && target->isFloatingPointTy()) {
      out = b_.CreateFPCast(v, target);
    } else if (source->isFloatingPointTy()) {
      out = b_.CreateFPToSI(v, target);
    } else if (target->isFloatingPointTy()) {
      out = from == DType::boolean ? b_.CreateUIToFP(v, target) : b_.CreateSIToFP(v, target);
    } else {
      out = from == DType::boolean ? b_.CreateZExt(v, target) : b_.CreateSExtOrTrunc(v, target);
    }
    if (to == DType::bf16) out = round_to_bf16(out);
    if (to == DType::f16) out = round_to_f16(out);
    return out;
  }

  llvm::Value* compute_uncached(ValueId v, const Index& idx) {
    const Node& n = g_.node(v);
    const Shape& shape = n.type.shape;
    if (in_memory(v)) return load_flat(plan_.view_of[v], flat_offset(idx, shape), n.type.dtype);
    auto operand = [&](std::size_t i, const Index& at) { return compute(n.inputs[i], at); };
    auto same = [&](std::size_t i) { return operand(i, idx); };
    llvm::Type* t = compute_type(n.type.dtype);
    bool fp = t->isFloatingPointTy();
    switch (n.op) {
    case OpId::constant:
      return fp ? llvm::ConstantFP::get(t, n.attrs.real)
             : t->isIntegerTy(1)
                 ? b_.getInt1(n.attrs.real != 0)
                 : llvm::ConstantInt::get(
                       t, static_cast<uint64_t>(static_cast<int64_t>(n.attrs.real)), true);
    case OpId::iota: {
      int64_t axis = *normalize_axis(n.attrs.ints2[0], shape.size());
      return convert(idx[axis], DType::i64, n.type.dtype);
    }
    case OpId::add: return fp ? b_.CreateFAdd(same(0), same(1)) : b_.CreateAdd(same(0), same(1));
    case OpId::sub: return fp ? b_.CreateFSub(same(0), same(1)) : b_.CreateSub(same(0), same(1));
    case OpId::mul: return fp ? b_.CreateFMul(same(0), same(1)) : b_.CreateMul(same(0), same(1));
    case OpId::div: {
      if (fp) return b_.CreateFDiv(same(0), same(1));
      // Integer division by zero would trap; the interpreter gives a truncated infinity.
      llvm::Value* d = same(1);
      llvm::Value* zero = llvm::ConstantInt::get(t, 0);
      llvm::Value* safe =
          b_.CreateSelect(b_.CreateICmpEQ(d, zero), llvm::ConstantInt::get(t, 1), d);
      return b_.CreateSelect(b_.CreateICmpEQ(d, zero), zero, b_.CreateSDiv(same(0), safe));
    }
    case OpId::neg: return fp ? b_.CreateFNeg(same(0)) : b_.CreateNeg(same(0));
    case OpId::pow: {
      if (fp) return power(same(0), same(1));
      llvm::Value* a = b_.CreateSIToFP(same(0), b_.getDoubleTy());
      llvm::Value* e = b_.CreateSIToFP(same(1), b_.getDoubleTy());
      return b_.CreateFPToSI(power(a, e), t);
    }
    case OpId::maximum: { // std::max: (a < b) ? b : a
      llvm::Value *a = same(0), *c = same(1);
      return b_.CreateSelect(fp ? b_.CreateFCmpOLT(a, c) : b_.CreateICmpSLT(a, c), c, a);
    }
    case OpId::minimum: { // std::min: (b < a) ? b : a
      llvm::Value *a = same(0), *c = same(1);
      return b_.CreateSelect(fp ? b_.CreateFCmpOLT(c, a) : b_.CreateICmpSLT(c, a), c, a);
    }
    case OpId::exp:
      return gpu() ? call_libdevice("exp", {same(0)})
                   : b_.CreateUnaryIntrinsic(llvm::Intrinsic::exp, same(0));
    case OpId::log:
      return gpu() ? call_libdevice("log", {same(0)})
                   : b_.CreateUnaryIntrinsic(llvm::Intrinsic::log, same(0));
    case OpId::sqrt: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, same(0));
    case OpId::rsqrt:
      return b_.CreateFDiv(llvm::ConstantFP::get(t, 1.0),
                           b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, same(0)));
    case OpId::tanh: return gpu() ? call_libdevice("tanh", {same(0)}) : tanh_of(same(0));
    case OpId::erf:
      return gpu() ? call_libdevice("erf", {same(0)}) : call_libm("erff", "erf", same(0));
    case OpId::abs:
      if (fp) return b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, same(0));
      return b_.CreateSelect(b_.CreateICmpSLT(same(0), llvm::ConstantInt::get(t, 0)),
                             b_.CreateNeg(same(0)), same(0));
    case OpId::less:
    case OpId::less_equal:
    case OpId::equal:
    case OpId::not_equal: return compare(n.op, same(0), same(1));
    case OpId::where: return b_.CreateSelect(same(0), same(1), same(2));
    case OpId::cast: return convert(same(0), g_.type(n.inputs[0]).dtype, n.type.dtype);
    case OpId::stop_gradient: return same(0);
    case OpId::broadcast: {
      Shape in = g_.type(n.inputs[0]).shape;
      std::size_t offset = shape.size() - in.size();
      Index at;
      for (std::size_t d = 0; d < in.size(); ++d)
        at.push_back(in[d] == 1 ? i64(0) : idx[offset + d]);
      return operand(0, at);
    }
    case OpId::reshape: {
      ValueId src = n.inputs[0];
      if (in_memory(src))
        return load_flat(plan_.view_of[src], flat_offset(idx, shape), n.type.dtype);
      return operand(0, reshape_index(idx, shape, g_.type(src).shape));
    }
    case OpId::permute: {
      Index at(idx.size());
      for (std::size_t d = 0; d < idx.size(); ++d)
        at[n.attrs.ints[d]] = idx[d];
      return operand(0, at);
    }
    case OpId::slice: {
      Index at;
      for (std::size_t d = 0; d < idx.size(); ++d)
        at.push_back(b_.CreateAdd(idx[d], i64(n.attrs.ints[d])));
      return operand(0, at);
    }
    case OpId::pad: {
      Shape in = g_.type(n.inputs[0]).shape;
      llvm::Value* inside = b_.getTrue();
      Index at;
      for (std::size_t d = 0; d < idx.size(); ++d) {
        llvm::Value* p = b_.CreateSub(idx[d], i64(n.attrs.ints[d]));
        inside = b_.CreateAnd(
            inside, b_.CreateAnd(b_.CreateICmpSGE(p, i64(0)), b_.CreateICmpSLT(p, i64(in[d]))));
        at.push_back(clamp(p, 0, in[d] - 1)); // in bounds even where the select drops it
      }
      return b_.CreateSelect(inside, operand(0, at), llvm::Constant::getNullValue(t));
    }
    case OpId::concat: {
      int64_t axis = *normalize_axis(n.attrs.ints[0], shape.size());
      llvm::Value* result = nullptr;
      int64_t offset = 0;
      for (std::size_t i = 0; i < n.inputs.size(); ++i) {
        int64_t size = g_.type(n.inputs[i]).shape[axis];
        Index at = idx;
        at[axis] = clamp(b_.CreateSub(idx[axis], i64(offset)), 0, size - 1);
        llvm::Value* part = operand(i, at);
        result =
            result ? b_.CreateSelect(b_.CreateICmpSGE(idx[axis], i64(offset)), part, result) : part;
        offset += size;
      }
      return result;
    }
    case OpId::gather: {
      Shape table = g_.type(n.inputs[0]).shape, indices = g_.type(n.inputs[1]).shape;
      Index at_index(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(indices.size()));
      llvm::Value* row = b_.CreateSExt(operand(1, at_index), b_.getInt64Ty());
      Index at{clamp(row, 0, table[0] - 1)}; // out-of-range ids read the nearest row
      at.insert(at.end(), idx.begin() + static_cast<std::ptrdiff_t>(indices.size()), idx.end());
      return operand(0, at);
    }
    default:
      throw std::logic_error("sinter: cannot inline " + std::string(op_name(n.op)) + " at %" +
                             std::to_string(v) + " into a loop kernel");
    }
  }

  llvm::Value* compare(OpId op, llvm::Value* a, llvm::Value* c) {
    if (a->getType()->isFloatingPointTy()) {
      switch (op) {
      case OpId::less: return b_.CreateFCmpOLT(a, c);
      case OpId::less_equal: return b_.CreateFCmpOLE(a, c);
      case OpId::equal: return b_.CreateFCmpOEQ(a, c);
      default: return b_.CreateFCmpUNE(a, c);
      }
    }
    bool unsigned_bool = a->getType()->isIntegerTy(1);
    switch (op) {
    case OpId::less: return unsigned_bool ? b_.CreateICmpULT(a, c) : b_.CreateICmpSLT(a, c);
    case OpId::less_equal: return unsigned_bool ? b_.CreateICmpULE(a, c) : b_.CreateICmpSLE(a, c);
    case OpId::equal: return b_.CreateICmpEQ(a, c);
    default: return b_.CreateICmpNE(a, c);
    }
  }

  llvm::Module& module_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<> b_;
  const FusionPlan& plan_;
  const Graph& g_;
  const Kernel& kernel_;
  CodegenTarget target_;
  GpuLaunch launch_{};
  llvm::Function* fn_ = nullptr;
  llvm::Value* out_ = nullptr;
  std::map<ValueId, llvm::Value*> buffers_;
  std::map<std::pair<ValueId, Index>, llvm::Value*> memo_;
  llvm::GlobalVariable* partials_ = nullptr;        ///< NVPTX block reductions: one slot per warp
  llvm::GlobalVariable* column_partials_ = nullptr; ///< NVPTX column reductions: per thread
  Index current_index_;                             ///< NVPTX loops: the element being written...
  llvm::Value* current_flat_ = nullptr;             ///< ...and its flat offset
};

} // namespace

/// Identifies the build of the code generator: the size and modification time of the binary
/// that contains it (libsinter.so, or the executable it is linked into). Any rebuild changes
/// it, so a changed emitter never reuses objects compiled by an older one.
std::string emitter_build_id() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&emit_kernel), &info) && info.dli_fname) {
    struct stat st{};
    if (stat(info.dli_fname, &st) == 0)
      return std::to_string(st.st_size) + "@" + std::to_string(st.st_mtim.tv_sec) + "." +
             std::to_string(st.st_mtim.tv_nsec);
  }
  return "unknown-" __DATE__ " " __TIME__;
}

int64_t parallel_range(const Graph& g, const Kernel& k) {
  Shape s = g.type(k.root).shape;
  switch (k.kind) {
  case KernelKind::loop: return s.empty() ? 1 : product(s, 0, s.size() - 1);
  case KernelKind::reduce: {
    const Node& root = g.node(k.root);
    Shape xs = g.type(root.inputs[0]).shape;
    bool contiguous =
        xs.empty() || std::find(root.attrs.ints.begin(), root.attrs.ints.end(),
                                static_cast<int64_t>(xs.size() - 1)) != root.attrs.ints.end();
    return contiguous ? numel(s) : product(s, 0, s.size() - 1);
  }
  case KernelKind::scatter_add: return 1;
  case KernelKind::gemm: return 1;
  }
  return 1;
}

int64_t work_per_step(const Graph& g, const Kernel& k) {
  int64_t range = std::max<int64_t>(1, parallel_range(g, k));
  int64_t elements = numel(g.type(k.root).shape);
  if (k.kind == KernelKind::reduce) elements = numel(g.type(g.node(k.root).inputs[0]).shape);
  return std::max<int64_t>(1, elements / range);
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
    bool contiguous =
        xs.empty() || std::find(root.attrs.ints.begin(), root.attrs.ints.end(),
                                static_cast<int64_t>(xs.size() - 1)) != root.attrs.ints.end();
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
  case KernelKind::gemm: break;
  }
  throw std::logic_error("sinter: gemm kernels are library calls, not GPU launches");
}

void emit_kernel(llvm::Module& module, const FusionPlan& plan, const Kernel& kernel,
                 const std::string& name, CodegenTarget target) {
  KernelEmitter(module, plan, kernel, target).emit(name);
}

} // namespace sinter
