// jit/codegen/kernel_emitter.cpp — the shared emitter: every inlined node computed at an index
#include "jit/codegen/kernel_emitter.hpp"

#include "ops/registry.hpp"

#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace sinter {
namespace {

/// How the reduction `n` folds (its op's OpDef::reducer).
const Reducer& reducer_of(const Node& n) {
  const std::optional<Reducer>& reducer = op_def(n.op).reducer;
  if (!reducer)
    throw std::logic_error("sinter: " + std::string(op_name(n.op)) +
                           " is reduced in a kernel but its OpDef has no `reducer`");
  return *reducer;
}

} // namespace

KernelEmitter::KernelEmitter(llvm::Module& module, const FusionPlan& plan, const Kernel& kernel,
                             KernelSchedule& schedule)
    : module_(module), ctx_(module.getContext()), b_(ctx_), plan_(plan), g_(*plan.graph),
      kernel_(kernel), schedule_(schedule) {}

void KernelEmitter::emit(const std::string& name) {
  if (kernel_.kind == KernelKind::gemm)
    throw std::logic_error("sinter: gemm kernels are library calls");
  schedule_.emit(*this, name);
}

void KernelEmitter::begin_function(llvm::Function* function, std::span<llvm::Value* const> outputs,
                                   std::span<llvm::Value* const> reads) {
  fn_ = function;
  outputs_.assign(outputs.begin(), outputs.end());
  buffers_.clear();
  for (std::size_t i = 0; i < kernel_.reads.size(); ++i)
    buffers_[kernel_.reads[i]] = reads[i];
  b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", function));
}

void KernelEmitter::set_current_element(Index idx, llvm::Value* flat) {
  current_index_ = std::move(idx);
  current_flat_ = flat;
}

llvm::Value* KernelEmitter::math(MathFunction f, std::initializer_list<llvm::Value*> args) {
  return schedule_.math(*this, f, std::span<llvm::Value* const>(args.begin(), args.size()));
}

bool KernelEmitter::reduces_last_axis() const { return sinter::reduces_last_axis(g_, kernel_); }

llvm::Type* KernelEmitter::compute_type(DType t) {
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

llvm::Type* KernelEmitter::storage_type(DType t) {
  switch (t) {
  case DType::bf16:
  case DType::f16: return b_.getInt16Ty();
  case DType::boolean: return b_.getInt8Ty();
  default: return compute_type(t);
  }
}

// ---- bf16 / f16 conversions (compute in f32) -------------------------------------------
llvm::Value* KernelEmitter::round_to_bf16(llvm::Value* f) {
  if (schedule_.native_bf16_rounding())
    return b_.CreateFPExt(b_.CreateFPTrunc(f, b_.getBFloatTy()), b_.getFloatTy());
  llvm::Value* bits = b_.CreateBitCast(f, b_.getInt32Ty());
  llvm::Value* lsb = b_.CreateAnd(b_.CreateLShr(bits, 16), b_.getInt32(1));
  llvm::Value* rounded = b_.CreateAdd(bits, b_.CreateAdd(b_.getInt32(0x7fff), lsb));
  return b_.CreateBitCast(b_.CreateAnd(rounded, b_.getInt32(0xffff0000u)), b_.getFloatTy());
}
llvm::Value* KernelEmitter::round_to_f16(llvm::Value* f) {
  return b_.CreateFPExt(b_.CreateFPTrunc(f, b_.getHalfTy()), b_.getFloatTy());
}

llvm::Value* KernelEmitter::to_storage(llvm::Value* v, DType t) {
  switch (t) {
  case DType::bf16:
    if (schedule_.native_bf16_rounding())
      return b_.CreateBitCast(b_.CreateFPTrunc(v, b_.getBFloatTy()), b_.getInt16Ty());
    return b_.CreateTrunc(b_.CreateLShr(b_.CreateBitCast(round_to_bf16(v), b_.getInt32Ty()), 16),
                          b_.getInt16Ty());
  case DType::f16: return b_.CreateBitCast(b_.CreateFPTrunc(v, b_.getHalfTy()), b_.getInt16Ty());
  case DType::boolean: return b_.CreateZExt(v, b_.getInt8Ty());
  default: return v;
  }
}

llvm::Value* KernelEmitter::from_storage(llvm::Value* v, DType t) {
  switch (t) {
  case DType::bf16:
    return b_.CreateBitCast(b_.CreateShl(b_.CreateZExt(v, b_.getInt32Ty()), 16), b_.getFloatTy());
  case DType::f16: return b_.CreateFPExt(b_.CreateBitCast(v, b_.getHalfTy()), b_.getFloatTy());
  case DType::boolean: return b_.CreateICmpNE(v, b_.getInt8(0));
  default: return v;
  }
}

llvm::Value* KernelEmitter::extent(int64_t n) {
  if (!size_ || n == 0) return i64(n);
  int power = 0;
  while (n % size_extent_ == 0) {
    n /= size_extent_;
    ++power;
  }
  llvm::Value* out = power ? size_ : i64(n);
  for (int p = 1; p < power; ++p)
    out = b_.CreateMul(out, size_, "", true, true);
  return power && n != 1 ? b_.CreateMul(out, i64(n), "", true, true) : out;
}

llvm::Value* KernelEmitter::linear(const Index& idx, const Shape& shape) {
  llvm::Value* flat = i64(0);
  auto strides = strides_of(shape);
  for (std::size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1) flat = b_.CreateAdd(flat, b_.CreateMul(idx[d], extent(strides[d])));
  return flat;
}

Index KernelEmitter::start_row_reduction(const Node& reduction, llvm::AllocaInst* acc,
                                         llvm::Value* row) {
  const Shape& operand = g_.type(reduction.inputs[0]).shape;
  b_.CreateStore(reduce_init(reduction), acc);
  return delinearize(row, Shape(operand.begin(), operand.end() - 1));
}

std::vector<Index> KernelEmitter::start_row_pass(std::span<const ValueId> reductions,
                                                 std::span<const std::size_t> pass,
                                                 std::span<llvm::AllocaInst* const> accs,
                                                 llvm::Value* row) {
  std::vector<Index> row_idx;
  for (std::size_t p : pass)
    row_idx.push_back(start_row_reduction(g_.node(reductions[p]), accs[p], row));
  return row_idx;
}

void KernelEmitter::fold_row_element(std::span<const ValueId> reductions,
                                     std::span<const std::size_t> pass,
                                     std::span<llvm::AllocaInst* const> accs,
                                     std::span<const Index> row_idx, llvm::Value* column) {
  std::vector<llvm::Value*> xs;
  for (std::size_t i = 0; i < pass.size(); ++i) {
    Index idx = row_idx[i];
    idx.push_back(column);
    xs.push_back(compute(g_.node(reductions[pass[i]]).inputs[0], idx));
  }
  for (std::size_t i = 0; i < pass.size(); ++i)
    accumulate(g_.node(reductions[pass[i]]), accs[pass[i]], xs[i]);
}

Index KernelEmitter::delinearize(llvm::Value* flat, const Shape& shape) {
  Index idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    if (shape[d] == 1) {
      idx[d] = i64(0);
      continue;
    }
    idx[d] = d == 0 ? flat : b_.CreateURem(flat, extent(shape[d]));
    if (d > 0) flat = b_.CreateUDiv(flat, extent(shape[d]));
  }
  return idx;
}

/// The operand index of a reshape from `in` to `out` at output index `idx`. Dims are matched
/// in groups whose sizes multiply to the same product, so splitting a dim costs only
/// multiply-adds and merging costs a div/mod on that group alone (not a full flat index).
Index KernelEmitter::reshape_index(const Index& idx, const Shape& out, const Shape& in) {
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

llvm::Value* KernelEmitter::clamp_below(llvm::Value* v, int64_t size) {
  llvm::Value* last = b_.CreateSub(extent(size), i64(1));
  v = b_.CreateSelect(b_.CreateICmpSLT(v, i64(0)), i64(0), v);
  return b_.CreateSelect(b_.CreateICmpSGT(v, last), last, v);
}

/// The flat offset of `idx` in a row-major tensor of `shape`. At the element the kernel is
/// writing, it is the output's own offset, which keeps addresses of neighbouring elements
/// visibly adjacent (the NVPTX load/store vectoriser needs that).
llvm::Value* KernelEmitter::flat_offset(const Index& idx, const Shape& shape) {
  if (current_flat_ && shape == g_.type(kernel_.root).shape && idx == current_index_)
    return current_flat_;
  return linear(idx, shape);
}

llvm::Value* KernelEmitter::load_flat(ValueId buffer_node, llvm::Value* flat, DType t) {
  llvm::Value* base = buffers_.at(buffer_node);
  llvm::Type* stored = storage_type(t);
  auto cached = row_cache_.find(buffer_node);
  if (cached == row_cache_.end())
    return from_storage(b_.CreateLoad(stored, b_.CreateGEP(stored, base, flat)), t);
  const CachedRow& row = cached->second;
  llvm::Value* slot =
      b_.CreateGEP(stored, row.cache, b_.CreateSub(flat, row.row_start, "", true, true));
  if (!row.fill) return from_storage(b_.CreateLoad(stored, slot), t);
  llvm::Value* v = b_.CreateLoad(stored, b_.CreateGEP(stored, base, flat));
  b_.CreateStore(v, slot);
  return from_storage(v, t);
}

bool KernelEmitter::in_memory(ValueId v) const { return plan_.loads(kernel_, v); }

void KernelEmitter::compute_and_store_outputs(const Index& idx, llvm::Value* flat) {
  store_outputs(compute_outputs(idx), flat);
}

std::vector<llvm::Value*> KernelEmitter::compute_outputs(const Index& idx) {
  std::vector<llvm::Value*> values;
  for (ValueId out : kernel_.outputs())
    values.push_back(compute(out, idx));
  return values;
}

void KernelEmitter::store_outputs(std::span<llvm::Value* const> values, llvm::Value* flat) {
  std::vector<ValueId> outputs = kernel_.outputs();
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    DType t = g_.type(outputs[i]).dtype;
    b_.CreateStore(to_storage(values[i], t), output_address(flat, t, i));
  }
}

void KernelEmitter::compute_and_store_at(std::span<const std::size_t> positions, const Index& idx,
                                         const Shape& idx_shape, llvm::Value* flat) {
  store_at(positions, compute_at(positions, idx, idx_shape), flat);
}

std::vector<llvm::Value*> KernelEmitter::compute_at(std::span<const std::size_t> positions,
                                                    const Index& idx, const Shape& idx_shape) {
  std::vector<ValueId> outputs = kernel_.outputs();
  std::vector<llvm::Value*> values;
  for (std::size_t i : positions) {
    const Shape& shape = g_.type(outputs[i]).shape;
    // Another shape of the same elements ([B, T, C] beside [B·T, C]): its index follows from
    // idx dim group by dim group, so the trailing dims stay as they are (a bias read at
    // `flat % C` would hide from the vectoriser that neighbours are adjacent).
    values.push_back(
        compute(outputs[i], shape == idx_shape ? idx : reshape_index(idx, idx_shape, shape)));
  }
  return values;
}

void KernelEmitter::store_at(std::span<const std::size_t> positions,
                             std::span<llvm::Value* const> values, llvm::Value* flat) {
  std::vector<ValueId> outputs = kernel_.outputs();
  for (std::size_t k = 0; k < positions.size(); ++k) {
    DType t = g_.type(outputs[positions[k]]).dtype;
    b_.CreateStore(to_storage(values[k], t), output_address(flat, t, positions[k]));
  }
}

// ---- loops ------------------------------------------------------------------------------
/// for (iv = begin; iv < end; iv += step); `step` null means 1.
void KernelEmitter::emit_for(llvm::Value* begin, llvm::Value* end,
                             llvm::function_ref<void(llvm::Value*)> body, llvm::Value* step) {
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

void KernelEmitter::emit_nest(const Shape& dims, llvm::function_ref<void(const Index&)> body) {
  Index ivs;
  emit_nest_from(dims, 0, ivs, body);
}

void KernelEmitter::emit_nest_from(const Shape& dims, std::size_t d, Index& ivs,
                                   llvm::function_ref<void(const Index&)> body) {
  if (d == dims.size()) {
    body(ivs);
    return;
  }
  emit_for(i64(0), extent(dims[d]), [&](llvm::Value* iv) {
    ivs.push_back(iv);
    emit_nest_from(dims, d + 1, ivs, body);
    ivs.pop_back();
  });
}

llvm::Value* KernelEmitter::output_address(llvm::Value* flat, DType t, std::size_t position) {
  return b_.CreateGEP(storage_type(t), outputs_.at(position), flat);
}

void KernelEmitter::store_out(llvm::Value* v, llvm::Value* flat, DType t) {
  b_.CreateStore(to_storage(v, t), output_address(flat, t));
}

void KernelEmitter::store_output(std::size_t position, llvm::Value* v, llvm::Value* flat) {
  DType t = g_.type(kernel_.outputs()[position]).dtype;
  b_.CreateStore(to_storage(v, t), output_address(flat, t, position));
}

llvm::Value* KernelEmitter::load_output(std::size_t position, llvm::Value* flat) {
  DType t = g_.type(kernel_.outputs()[position]).dtype;
  return from_storage(b_.CreateLoad(storage_type(t), output_address(flat, t, position)), t);
}
llvm::Value* KernelEmitter::reduce_init(const Node& root) {
  double identity = reducer_of(root).identity;
  llvm::Type* t = compute_type(root.type.dtype);
  if (t->isFloatingPointTy()) return llvm::ConstantFP::get(t, identity);
  unsigned bits = t->getIntegerBitWidth();
  if (std::isinf(identity))
    return llvm::ConstantInt::get(t, identity < 0 ? llvm::APInt::getSignedMinValue(bits)
                                                  : llvm::APInt::getSignedMaxValue(bits));
  return llvm::ConstantInt::get(t, static_cast<uint64_t>(static_cast<int64_t>(identity)), true);
}

llvm::Value* KernelEmitter::combine(const Node& root, llvm::Value* acc, llvm::Value* x) {
  bool fp = acc->getType()->isFloatingPointTy();
  auto less = [&](llvm::Value* a, llvm::Value* c) {
    return fp ? b_.CreateFCmpOLT(a, c) : b_.CreateICmpSLT(a, c);
  };
  switch (reducer_of(root).combine) {
  case Reducer::Combine::add: {
    if (!fp) return b_.CreateAdd(acc, x);
    // Reassociation lets the vectoriser keep several partial sums.
    llvm::FastMathFlags fmf;
    fmf.setAllowReassoc();
    auto* sum = b_.CreateFAdd(acc, x);
    llvm::cast<llvm::Instruction>(sum)->setFastMathFlags(fmf);
    return sum;
  }
  case Reducer::Combine::max: return b_.CreateSelect(less(acc, x), x, acc);
  case Reducer::Combine::min: return b_.CreateSelect(less(x, acc), x, acc);
  }
  throw std::logic_error("sinter: " + std::string(op_name(root.op)) + " has an unknown combine");
}

bool KernelEmitter::reduced_axis(std::size_t d) const {
  const auto& axes = g_.node(kernel_.root).attrs.ints;
  return std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) != axes.end();
}

/// The reduced dims of the operand, outermost first.
Shape KernelEmitter::reduced_dims() const {
  Shape xs = g_.type(g_.node(kernel_.root).inputs[0]).shape, dims;
  for (std::size_t d = 0; d < xs.size(); ++d)
    if (reduced_axis(d)) dims.push_back(xs[d]);
  return dims;
}

/// Assembles the operand index from the output index and the reduced loop variables.
Index KernelEmitter::operand_index(const Index& out_idx, const Index& red_idx) const {
  std::size_t rank = g_.type(g_.node(kernel_.root).inputs[0]).shape.size();
  Index idx;
  std::size_t o = 0, r = 0;
  for (std::size_t d = 0; d < rank; ++d)
    idx.push_back(reduced_axis(d) ? red_idx[r++] : out_idx[o++]);
  return idx;
}

llvm::AllocaInst* KernelEmitter::entry_alloca(llvm::Type* t) {
  llvm::IRBuilderBase::InsertPoint ip = b_.saveIP();
  b_.SetInsertPoint(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
  llvm::AllocaInst* slot = b_.CreateAlloca(t);
  b_.restoreIP(ip);
  return slot;
}

std::pair<llvm::Value*, llvm::Value*>
KernelEmitter::scatter_update(const Index& at, llvm::Value* row, llvm::Value* k) {
  const Node& root = g_.node(kernel_.root);
  Shape out_shape = root.type.shape;
  Shape row_shape(out_shape.begin() + 1, out_shape.end());
  Index update = at;
  for (llvm::Value* v : delinearize(k, row_shape))
    update.push_back(v);
  llvm::Value* x = compute(root.inputs[1], update);
  llvm::Value* flat = b_.CreateAdd(b_.CreateMul(row, extent(numel(row_shape))), k);
  return {x, output_address(flat, root.type.dtype)};
}

llvm::Value* KernelEmitter::scatter_row_valid(llvm::Value* row) {
  llvm::Value* rows = extent(root().type.shape[0]);
  return b_.CreateAnd(b_.CreateICmpSGE(row, i64(0)), b_.CreateICmpSLT(row, rows));
}

void KernelEmitter::emit_serial_scatter(llvm::Value* begin, llvm::Value* end) {
  const Node& root = g_.node(kernel_.root);
  Shape out_shape = root.type.shape, idx_shape = g_.type(root.inputs[0]).shape;
  Shape row_shape(out_shape.begin() + 1, out_shape.end());
  int64_t width = numel(row_shape);
  DType t = root.type.dtype;
  emit_for(begin, end, [&](llvm::Value*) {
    emit_for(i64(0), count(out_shape), [&](llvm::Value* i) {
      store_out(llvm::Constant::getNullValue(compute_type(t)), i, t);
    });
    emit_for(i64(0), count(idx_shape), [&](llvm::Value* i) {
      memo_.clear();
      Index at = delinearize(i, idx_shape);
      llvm::Value* row = b_.CreateSExt(compute(root.inputs[0], at), b_.getInt64Ty());
      emit_if(scatter_row_valid(row), [&] {
        emit_for(i64(0), extent(width), [&](llvm::Value* k) {
          memo_.clear();
          auto [x, slot] = scatter_update(at, row, k);
          add_to_slot(slot, x, t);
        });
      });
    });
  });
}

void KernelEmitter::emit_if(llvm::Value* condition, llvm::function_ref<void()> body) {
  auto* then = llvm::BasicBlock::Create(ctx_, "then", fn_);
  auto* done = llvm::BasicBlock::Create(ctx_, "endif", fn_);
  b_.CreateCondBr(condition, then, done);
  b_.SetInsertPoint(then);
  body();
  b_.CreateBr(done);
  b_.SetInsertPoint(done);
}
llvm::Value* KernelEmitter::compute(ValueId v, const Index& idx) {
  if (auto row = row_values_.find(v); row != row_values_.end()) return row->second;
  auto key = std::make_pair(v, idx);
  if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  llvm::Value* result = compute_uncached(v, idx);
  memo_[key] = result;
  return result;
}
llvm::Value* KernelEmitter::convert(llvm::Value* v, DType from, DType to) {
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

llvm::Value* KernelEmitter::compute_uncached(ValueId v, const Index& idx) {
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
    llvm::Value* safe = b_.CreateSelect(b_.CreateICmpEQ(d, zero), llvm::ConstantInt::get(t, 1), d);
    return b_.CreateSelect(b_.CreateICmpEQ(d, zero), zero, b_.CreateSDiv(same(0), safe));
  }
  case OpId::neg: return fp ? b_.CreateFNeg(same(0)) : b_.CreateNeg(same(0));
  case OpId::pow: {
    if (fp) return math(MathFunction::pow, {same(0), same(1)});
    llvm::Value* a = b_.CreateSIToFP(same(0), b_.getDoubleTy());
    llvm::Value* e = b_.CreateSIToFP(same(1), b_.getDoubleTy());
    return b_.CreateFPToSI(math(MathFunction::pow, {a, e}), t);
  }
  case OpId::maximum: { // std::max: (a < b) ? b : a
    llvm::Value *a = same(0), *c = same(1);
    return b_.CreateSelect(fp ? b_.CreateFCmpOLT(a, c) : b_.CreateICmpSLT(a, c), c, a);
  }
  case OpId::minimum: { // std::min: (b < a) ? b : a
    llvm::Value *a = same(0), *c = same(1);
    return b_.CreateSelect(fp ? b_.CreateFCmpOLT(c, a) : b_.CreateICmpSLT(c, a), c, a);
  }
  case OpId::exp: return math(MathFunction::exp, {same(0)});
  case OpId::log: return math(MathFunction::log, {same(0)});
  case OpId::sqrt: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, same(0));
  case OpId::rsqrt:
    return b_.CreateFDiv(llvm::ConstantFP::get(t, 1.0),
                         b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, same(0)));
  case OpId::tanh: return math(MathFunction::tanh, {same(0)});
  case OpId::erf: return math(MathFunction::erf, {same(0)});
  case OpId::softplus: {
    // max(x, 0) + log1p(e^-|x|); log1p(u) = log(w) * u / (w - 1) with w = 1 + u keeps the
    // digits of a tiny u that log(1 + u) would round away (and is u itself when w == 1).
    llvm::Value* x = same(0);
    llvm::Value* zero = llvm::ConstantFP::get(t, 0.0);
    llvm::Value* u =
        math(MathFunction::exp, {b_.CreateFNeg(b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x))});
    llvm::Value* w = b_.CreateFAdd(llvm::ConstantFP::get(t, 1.0), u);
    llvm::Value* w_minus_1 = b_.CreateFSub(w, llvm::ConstantFP::get(t, 1.0));
    llvm::Value* log1p =
        b_.CreateSelect(b_.CreateFCmpOEQ(w_minus_1, zero), u,
                        b_.CreateFDiv(b_.CreateFMul(math(MathFunction::log, {w}), u), w_minus_1));
    llvm::Value* positive_part = b_.CreateSelect(b_.CreateFCmpOLT(x, zero), zero, x);
    return b_.CreateFAdd(positive_part, log1p);
  }
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
    if (in_memory(src)) return load_flat(plan_.view_of[src], flat_offset(idx, shape), n.type.dtype);
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
      at.push_back(b_.CreateAdd(idx[d], extent(n.attrs.ints[d])));
    return operand(0, at);
  }
  case OpId::pad: {
    Shape in = g_.type(n.inputs[0]).shape;
    llvm::Value* inside = b_.getTrue();
    Index at;
    for (std::size_t d = 0; d < idx.size(); ++d) {
      if (n.attrs.ints[d] == 0 && n.attrs.ints2[d] == 0) { // nothing added along this dim
        at.push_back(idx[d]);
        continue;
      }
      llvm::Value* p = b_.CreateSub(idx[d], extent(n.attrs.ints[d]));
      inside = b_.CreateAnd(
          inside, b_.CreateAnd(b_.CreateICmpSGE(p, i64(0)), b_.CreateICmpSLT(p, extent(in[d]))));
      at.push_back(clamp_below(p, in[d])); // in bounds even where the select drops it
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
      at[axis] = clamp_below(b_.CreateSub(idx[axis], extent(offset)), size);
      llvm::Value* part = operand(i, at);
      result = result ? b_.CreateSelect(b_.CreateICmpSGE(idx[axis], extent(offset)), part, result)
                      : part;
      offset += size;
    }
    return result;
  }
  case OpId::gather: {
    Shape table = g_.type(n.inputs[0]).shape, indices = g_.type(n.inputs[1]).shape;
    Index at_index(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(indices.size()));
    llvm::Value* row = b_.CreateSExt(operand(1, at_index), b_.getInt64Ty());
    Index at{clamp_below(row, table[0])}; // out-of-range ids read the nearest row
    at.insert(at.end(), idx.begin() + static_cast<std::ptrdiff_t>(indices.size()), idx.end());
    return operand(0, at);
  }
  default:
    throw std::logic_error("sinter: cannot inline " + std::string(op_name(n.op)) + " at %" +
                           std::to_string(v) + " into a loop kernel");
  }
}

llvm::Value* KernelEmitter::compare(OpId op, llvm::Value* a, llvm::Value* c) {
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

void emit_kernel(llvm::Module& module, const FusionPlan& plan, const Kernel& kernel,
                 const std::string& name, KernelSchedule& schedule) {
  KernelEmitter(module, plan, kernel, schedule).emit(name);
  std::string problems;
  llvm::raw_string_ostream problem_stream(problems);
  if (llvm::verifyModule(module, &problem_stream))
    throw std::logic_error("sinter: emitted invalid LLVM IR for " + name + " (" +
                           module.getTargetTriple() + "): " + problems);
}

} // namespace sinter
