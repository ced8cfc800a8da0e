// jit/backend/cpu/cpu_schedule.cpp — CPU loop nests over a parallel slice: loops, row and
// column reductions, serial scatter; math through intrinsics, libm and a vector-friendly tanh
#include "jit/backend/cpu/cpu_schedule.hpp"

#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <stdexcept>

namespace sinter {
namespace {

int64_t product(const Shape& s, std::size_t from, std::size_t to) {
  int64_t p = 1;
  for (std::size_t i = from; i < to; ++i)
    p *= s[i];
  return p;
}

/// Emits the body of one CPU kernel over [begin, end) of its parallel range.
class CpuBody {
public:
  explicit CpuBody(KernelEmitter& e) : e_(e), b_(e.builder()), root_(e.root()) {}

  void loop(llvm::Value* begin, llvm::Value* end) {
    Shape s = root_.type.shape;
    Shape rows_shape(s.begin(), s.end() - (s.empty() ? 0 : 1));
    int64_t inner = s.empty() ? 1 : s.back();
    e_.emit_for(begin, end, [&](llvm::Value* row) {
      Index row_idx = e_.delinearize(row, rows_shape);
      llvm::Value* row_base = b_.CreateMul(row, e_.i64(inner));
      e_.emit_for(e_.i64(0), e_.i64(inner), [&](llvm::Value* j) {
        e_.clear_memo();
        Index idx = row_idx;
        if (!s.empty()) idx.push_back(j);
        e_.compute_and_store_outputs(idx, b_.CreateAdd(row_base, j));
      });
    });
  }

  /// Reductions: every output is a reduction over the same axes of an operand of the same
  /// shape (siblings merged by fusion), folded in the same pass with one accumulator each.
  void reduce(llvm::Value* begin, llvm::Value* end) {
    const Graph& g = e_.graph();
    std::vector<ValueId> outputs = e_.kernel().outputs();
    std::vector<const Node*> reductions;
    for (ValueId out : outputs)
      reductions.push_back(&g.node(out));
    Shape out_shape = root_.type.shape;
    Shape reduced_dims = e_.reduced_dims();
    // Every operand first, then every fold: the operands may share inlined work.
    auto fold = [&](const Index& operand_idx, auto&& current, auto&& update) {
      e_.clear_memo();
      std::vector<llvm::Value*> xs;
      for (const Node* r : reductions)
        xs.push_back(e_.compute(r->inputs[0], operand_idx));
      for (std::size_t p = 0; p < reductions.size(); ++p)
        update(p, e_.combine(*reductions[p], current(p), xs[p]));
    };

    if (e_.reduces_last_axis()) {
      // Contiguous reduction: each output element folds its lanes, innermost loop contiguous.
      std::vector<llvm::AllocaInst*> accs;
      for (const Node* r : reductions)
        accs.push_back(e_.entry_alloca(e_.compute_type(r->type.dtype)));
      auto load_acc = [&](std::size_t p) {
        return b_.CreateLoad(accs[p]->getAllocatedType(), accs[p]);
      };
      e_.emit_for(begin, end, [&](llvm::Value* flat_out) {
        Index out_idx = e_.delinearize(flat_out, out_shape);
        for (std::size_t p = 0; p < reductions.size(); ++p)
          b_.CreateStore(e_.reduce_init(*reductions[p]), accs[p]);
        e_.emit_nest(reduced_dims, [&](const Index& red_idx) {
          fold(e_.operand_index(out_idx, red_idx), load_acc,
               [&](std::size_t p, llvm::Value* v) { b_.CreateStore(v, accs[p]); });
        });
        for (std::size_t p = 0; p < reductions.size(); ++p)
          e_.store_output(p, load_acc(p), flat_out);
      });
      return;
    }
    // The last axis is kept: accumulate whole output rows, innermost loop over that axis.
    Shape rows_shape(out_shape.begin(), out_shape.end() - 1);
    int64_t inner = out_shape.back();
    bool narrow = std::any_of(reductions.begin(), reductions.end(), [](const Node* r) {
      return r->type.dtype == DType::bf16 || r->type.dtype == DType::f16;
    });
    if (narrow) {
      columns_in_f32(begin, end, reductions, rows_shape, inner, reduced_dims, fold);
      return;
    }
    e_.emit_for(begin, end, [&](llvm::Value* row) {
      Index row_idx = e_.delinearize(row, rows_shape);
      llvm::Value* base = b_.CreateMul(row, e_.i64(inner));
      e_.emit_for(e_.i64(0), e_.i64(inner), [&](llvm::Value* j) {
        for (std::size_t p = 0; p < reductions.size(); ++p)
          e_.store_output(p, e_.reduce_init(*reductions[p]), b_.CreateAdd(base, j));
      });
      e_.emit_nest(reduced_dims, [&](const Index& red_idx) {
        e_.emit_for(e_.i64(0), e_.i64(inner), [&](llvm::Value* j) {
          Index out_idx = row_idx;
          out_idx.push_back(j);
          llvm::Value* slot = b_.CreateAdd(base, j);
          fold(
              e_.operand_index(out_idx, red_idx),
              [&](std::size_t p) { return e_.load_output(p, slot); },
              [&](std::size_t p, llvm::Value* v) { e_.store_output(p, v, slot); });
        });
      });
    });
  }

  /// Column sums (the last axis kept) into 16-bit outputs: the outputs cannot be the
  /// accumulators, since a bf16 sum stops growing once an addend is under half its last
  /// place (512 ones summed to 256). Each output row is walked in chunks of
  /// `column_chunk` columns, folded over every reduced index into f32 accumulators on the
  /// stack and rounded once, as PyTorch's and cuBLASLt's 16-bit sums are.
  template <class Fold>
  void columns_in_f32(llvm::Value* begin, llvm::Value* end,
                      const std::vector<const Node*>& reductions, const Shape& rows_shape,
                      int64_t inner, const Shape& reduced_dims, Fold& fold) {
    constexpr int64_t column_chunk = 256;
    const int64_t chunk = std::min(inner, column_chunk);
    const int64_t chunks = (inner + chunk - 1) / chunk;
    std::vector<llvm::AllocaInst*> accs;
    std::vector<llvm::Type*> acc_types;
    for (const Node* r : reductions) {
      acc_types.push_back(e_.compute_type(r->type.dtype));
      accs.push_back(e_.entry_alloca(llvm::ArrayType::get(acc_types.back(), chunk)));
    }
    auto slot = [&](std::size_t p, llvm::Value* j) {
      return b_.CreateInBoundsGEP(accs[p]->getAllocatedType(), accs[p], {e_.i64(0), j});
    };
    e_.emit_for(begin, end, [&](llvm::Value* row) {
      Index row_idx = e_.delinearize(row, rows_shape);
      llvm::Value* base = b_.CreateMul(row, e_.i64(inner));
      e_.emit_for(e_.i64(0), e_.i64(chunks), [&](llvm::Value* c) {
        llvm::Value* first = b_.CreateMul(c, e_.i64(chunk));
        llvm::Value* left = b_.CreateSub(e_.i64(inner), first);
        llvm::Value* width =
            b_.CreateSelect(b_.CreateICmpSLT(left, e_.i64(chunk)), left, e_.i64(chunk));
        e_.emit_for(e_.i64(0), width, [&](llvm::Value* j) {
          for (std::size_t p = 0; p < reductions.size(); ++p)
            b_.CreateStore(e_.reduce_init(*reductions[p]), slot(p, j));
        });
        e_.emit_nest(reduced_dims, [&](const Index& red_idx) {
          e_.emit_for(e_.i64(0), width, [&](llvm::Value* j) {
            Index out_idx = row_idx;
            out_idx.push_back(b_.CreateAdd(first, j));
            fold(
                e_.operand_index(out_idx, red_idx),
                [&](std::size_t p) { return b_.CreateLoad(acc_types[p], slot(p, j)); },
                [&](std::size_t p, llvm::Value* v) { b_.CreateStore(v, slot(p, j)); });
          });
        });
        e_.emit_for(e_.i64(0), width, [&](llvm::Value* j) {
          llvm::Value* flat = b_.CreateAdd(base, b_.CreateAdd(first, j));
          for (std::size_t p = 0; p < reductions.size(); ++p)
            e_.store_output(p, b_.CreateLoad(acc_types[p], slot(p, j)), flat);
        });
      });
    });
  }

  /// Row kernels: per row, each reduction folds the row in turn (later ones may use earlier
  /// ones), then the row's elements and its per-row values are written.
  void row(llvm::Value* begin, llvm::Value* end) {
    const Graph& g = e_.graph();
    const Kernel& k = e_.kernel();
    RowLayout layout = row_layout(g, k);
    // The CPU's fusion options ask for none (FusionOptions::row_partial_max_values).
    if (!layout.partials.empty())
      throw std::logic_error("sinter: the CPU schedule has no row kernels with column partials");
    const std::vector<ValueId>& reductions = layout.reductions;
    const std::vector<std::size_t>&full = layout.full, &per_row = layout.per_row;
    int64_t length = layout.length;
    std::vector<ValueId> outputs = k.outputs();
    std::vector<llvm::AllocaInst*> accs;
    for (ValueId r : reductions)
      accs.push_back(e_.entry_alloca(e_.compute_type(g.type(r).dtype)));
    e_.emit_for(begin, end, [&](llvm::Value* row) {
      e_.clear_row_values();
      // One read of the row per pass: its reductions' operands first, then their folds.
      for (const std::vector<std::size_t>& pass : layout.passes) {
        std::vector<Index> row_idx = e_.start_row_pass(reductions, pass, accs, row);
        e_.emit_for(e_.i64(0), e_.i64(length), [&](llvm::Value* j) {
          e_.clear_memo();
          e_.fold_row_element(reductions, pass, accs, row_idx, j);
        });
        for (std::size_t p : pass)
          e_.set_row_value(reductions[p], b_.CreateLoad(accs[p]->getAllocatedType(), accs[p]));
      }
      if (!full.empty()) {
        const Shape& s = g.type(outputs[full.front()]).shape;
        Index row_idx = e_.delinearize(row, Shape(s.begin(), s.end() - 1));
        llvm::Value* base = b_.CreateMul(row, e_.i64(length));
        e_.emit_for(e_.i64(0), e_.i64(length), [&](llvm::Value* j) {
          e_.clear_memo();
          Index idx = row_idx;
          idx.push_back(j);
          e_.compute_and_store_at(full, idx, s, b_.CreateAdd(base, j));
        });
      }
      if (!per_row.empty()) {
        e_.clear_memo();
        const Shape& s = g.type(outputs[per_row.front()]).shape;
        e_.compute_and_store_at(per_row, e_.delinearize(row, s), s, row);
      }
    });
  }

private:
  KernelEmitter& e_;
  llvm::IRBuilder<>& b_;
  const Node& root_;
};

llvm::Value* call_libm(KernelEmitter& e, const char* f32_name, const char* f64_name,
                       llvm::Value* x) {
  bool is_double = x->getType()->isDoubleTy();
  auto callee =
      e.module().getOrInsertFunction(is_double ? f64_name : f32_name, x->getType(), x->getType());
  return e.builder().CreateCall(callee, {x});
}

/// tanh without a scalar libm call for f32, so loops stay vectorised (exp is vectorised
/// through libmvec): an odd Taylor polynomial near 0, where 1 - 2/(e^2x + 1) would cancel,
/// and that formula elsewhere. Both within a few f32 ulps. f64 keeps libm's tanh.
llvm::Value* vector_friendly_tanh(KernelEmitter& e, llvm::Value* x) {
  if (x->getType()->isDoubleTy()) return call_libm(e, "tanhf", "tanh", x);
  llvm::IRBuilder<>& b = e.builder();
  llvm::Type* t = x->getType();
  auto c = [&](double v) { return llvm::ConstantFP::get(t, v); };
  llvm::Value* ax = b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
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
  llvm::Value* x2 = b.CreateFMul(x, x);
  llvm::Value* poly = c(taylor[8]);
  for (int k = 7; k >= 0; --k)
    poly = b.CreateFAdd(b.CreateFMul(poly, x2), c(taylor[k]));
  llvm::Value* near_zero = b.CreateFMul(poly, x);
  // 1 - 2 / (e^(2|x|) + 1), with the sign of x; e^(2|x|) overflows to inf → exactly 1.
  llvm::Value* ex = b.CreateUnaryIntrinsic(llvm::Intrinsic::exp, b.CreateFMul(ax, c(2.0)));
  llvm::Value* far = b.CreateFSub(c(1.0), b.CreateFDiv(c(2.0), b.CreateFAdd(ex, c(1.0))));
  far = b.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, far, x);
  return b.CreateSelect(b.CreateFCmpOLT(ax, c(0.55)), near_zero, far);
}

} // namespace

void CpuSchedule::emit(KernelEmitter& e, const std::string& name) {
  // The exported entry unpacks the buffer table and calls an always-inlined body whose
  // pointer parameters are noalias: after inlining, LLVM keeps that as alias scopes, which
  // lets the vectoriser skip runtime overlap checks.
  llvm::IRBuilder<>& b = e.builder();
  const Kernel& kernel = e.kernel();
  auto* ptr = b.getPtrTy();
  auto* i64 = b.getInt64Ty();
  std::size_t outputs = 1 + kernel.extra_outputs.size();
  std::vector<llvm::Type*> body_params(outputs + kernel.reads.size(), ptr);
  body_params.push_back(i64);
  body_params.push_back(i64);
  auto* body_type = llvm::FunctionType::get(b.getVoidTy(), body_params, false);
  auto* body = llvm::Function::Create(body_type, llvm::Function::InternalLinkage, name + ".body",
                                      e.module());
  body->addFnAttr(llvm::Attribute::AlwaysInline);
  // An in-place kernel reads and writes one buffer, so its pointers may alias.
  if (!kernel.in_place())
    for (std::size_t i = 0; i + 2 < body_params.size(); ++i)
      body->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::NoAlias);

  auto* entry_type = llvm::FunctionType::get(b.getVoidTy(), {ptr, i64, i64}, false);
  auto* entry =
      llvm::Function::Create(entry_type, llvm::Function::ExternalLinkage, name, e.module());
  b.SetInsertPoint(llvm::BasicBlock::Create(e.context(), "entry", entry));
  std::vector<llvm::Value*> args;
  for (std::size_t i = 0; i < outputs + kernel.reads.size(); ++i)
    args.push_back(b.CreateLoad(ptr, b.CreateConstGEP1_64(ptr, entry->getArg(0), i)));
  args.push_back(entry->getArg(1));
  args.push_back(entry->getArg(2));
  b.CreateCall(body, args);
  b.CreateRetVoid();

  std::vector<llvm::Value*> outs, reads;
  for (std::size_t i = 0; i < outputs; ++i)
    outs.push_back(body->getArg(static_cast<unsigned>(i)));
  for (std::size_t i = 0; i < kernel.reads.size(); ++i)
    reads.push_back(body->getArg(static_cast<unsigned>(outputs + i)));
  e.begin_function(body, outs, reads);
  llvm::Value* begin = body->getArg(static_cast<unsigned>(outputs + kernel.reads.size()));
  llvm::Value* end = body->getArg(static_cast<unsigned>(outputs + kernel.reads.size() + 1));
  CpuBody emit_body(e);
  switch (kernel.kind) {
  case KernelKind::loop: emit_body.loop(begin, end); break;
  case KernelKind::reduce: emit_body.reduce(begin, end); break;
  case KernelKind::row: emit_body.row(begin, end); break;
  // Serial over the parallel range (1): rows may repeat, so updates must not race.
  case KernelKind::scatter_add: e.emit_serial_scatter(begin, end); break;
  case KernelKind::gemm:
  case KernelKind::attention:
  case KernelKind::collective: break; // library calls, no generated code
  }
  b.CreateRetVoid();
}

llvm::Value* CpuSchedule::math(KernelEmitter& e, MathFunction function,
                               std::span<llvm::Value* const> args) {
  llvm::IRBuilder<>& b = e.builder();
  switch (function) {
  case MathFunction::exp: return b.CreateUnaryIntrinsic(llvm::Intrinsic::exp, args[0]);
  case MathFunction::log: return b.CreateUnaryIntrinsic(llvm::Intrinsic::log, args[0]);
  case MathFunction::tanh: return vector_friendly_tanh(e, args[0]);
  case MathFunction::erf: return call_libm(e, "erff", "erf", args[0]);
  case MathFunction::pow: return b.CreateBinaryIntrinsic(llvm::Intrinsic::pow, args[0], args[1]);
  }
  return nullptr;
}

int64_t parallel_range(const Graph& g, const Kernel& k) {
  Shape s = g.type(k.root).shape;
  switch (k.kind) {
  case KernelKind::loop: return s.empty() ? 1 : product(s, 0, s.size() - 1);
  case KernelKind::reduce: return reduces_last_axis(g, k) ? numel(s) : product(s, 0, s.size() - 1);
  case KernelKind::row: return numel(g.type(row_reductions(g, k).front()).shape);
  case KernelKind::scatter_add: return 1;
  case KernelKind::gemm:
  case KernelKind::attention:
  case KernelKind::collective: return 1;
  }
  return 1;
}

int64_t work_per_step(const Graph& g, const Kernel& k) {
  int64_t range = std::max<int64_t>(1, parallel_range(g, k));
  int64_t elements = numel(g.type(k.root).shape);
  if (k.kind == KernelKind::reduce) elements = numel(g.type(g.node(k.root).inputs[0]).shape);
  if (k.kind == KernelKind::row) { // each reduction, then the writes, pass over the rows
    std::vector<ValueId> reductions = row_reductions(g, k);
    elements = numel(g.type(g.node(reductions.front()).inputs[0]).shape) *
               static_cast<int64_t>(reductions.size() + 1);
  }
  return std::max<int64_t>(1, elements / range);
}

} // namespace sinter
