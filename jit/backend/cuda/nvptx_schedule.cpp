// jit/backend/cuda/nvptx_schedule.cpp — NVPTX kernels: grid-stride loops with 16-byte vector
// access, warp/block reductions, row kernels, libdevice math (columns, scatters: own files)
#include "jit/backend/cuda/nvptx_schedule.hpp"

#include "jit/backend/cuda/nvptx_attention.hpp"
#include "jit/backend/cuda/nvptx_block_memory.hpp"
#include "jit/backend/cuda/nvptx_columns.hpp"
#include "jit/backend/cuda/nvptx_grid.hpp"
#include "jit/backend/cuda/nvptx_scatter.hpp"

#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <stdexcept>

namespace sinter {
namespace {

/// Emits the body of one NVPTX kernel for its launch.
class NvptxBody : NvptxGrid {
public:
  NvptxBody(KernelEmitter& e, const GpuLaunch& launch)
      : NvptxGrid(e.builder(), launch.threads), e_(e), b_(e.builder()), launch_(launch) {}

  /// `width` consecutive elements, every element's values first (compute(k)), then every
  /// store (store(k, values)): the loads come before any store even where an output may alias
  /// a read (in place), so both sides join into 16-byte accesses.
  template <class Compute, class Store>
  void values_then_stores(int64_t width, Compute&& compute, Store&& store) {
    std::vector<std::vector<llvm::Value*>> values;
    for (int64_t k = 0; k < width; ++k) {
      e_.clear_memo();
      values.push_back(compute(k));
    }
    for (int64_t k = 0; k < width; ++k)
      store(k, values[static_cast<std::size_t>(k)]);
  }

  void loop() {
    const Node& root = e_.root();
    Shape s = root.type.shape;
    Shape rows_shape(s.begin(), s.end() - (s.empty() ? 0 : 1));
    int64_t inner = s.empty() ? 1 : s.back();
    int64_t width = launch_.vector_width, groups = inner / width;
    // numel(s) / width items (the rows parameter may scale the count).
    Shape groups_shape = s;
    if (!s.empty()) groups_shape.back() = groups;
    llvm::Value* items = e_.count(groups_shape);
    e_.emit_for(
        global_thread(), items,
        [&](llvm::Value* item) {
          llvm::Value* row = groups == 1 ? item : b_.CreateUDiv(item, e_.extent(groups));
          llvm::Value* first = groups == 1 ? e_.i64(0)
                                           : b_.CreateMul(b_.CreateURem(item, e_.extent(groups)),
                                                          e_.i64(width), "", true, true);
          Index row_idx = e_.delinearize(row, rows_shape);
          // `width` consecutive elements per thread: adjacent, aligned accesses that the
          // load/store vectoriser turns into 16-byte ld/st.v4.
          llvm::Value* item_base = b_.CreateMul(item, e_.i64(width), "", true, true);
          // row * inner + j, written so that consecutive k are visibly consecutive.
          auto flat = [&](int64_t k) { return b_.CreateAdd(item_base, e_.i64(k), "", true, true); };
          values_then_stores(
              width,
              [&](int64_t k) {
                Index element = row_idx;
                if (!s.empty()) element.push_back(b_.CreateAdd(first, e_.i64(k), "", true, true));
                e_.set_current_element(element, flat(k));
                return e_.compute_outputs(element);
              },
              [&](int64_t k, const std::vector<llvm::Value*>& values) {
                e_.store_outputs(values, flat(k));
              });
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
  /// reduction in every warp. Every thread of the block must call it; every thread gets the
  /// result (row kernels use it in the row's later work).
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
    llvm::Value* has_partial = b_.CreateICmpULT(lane, e_.i64(warps));
    llvm::Value* slot = b_.CreateSelect(has_partial, lane, e_.i64(0));
    llvm::Value* partial =
        b_.CreateLoad(v->getType(), b_.CreateGEP(b_.getInt64Ty(), partials_, slot));
    v = b_.CreateSelect(has_partial, partial, e_.reduce_init(root));
    v = warp_reduce(root, v);
    // The next output's partials must not overwrite these before every warp has read them.
    b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
    return v;
  }

  /// Every output is a reduction over the same axes of a same-shaped operand (siblings merged
  /// by fusion): one pass folds them all, one accumulator each.
  void reduce() {
    const Graph& g = e_.graph();
    std::vector<const Node*> reductions;
    for (ValueId out : e_.kernel().outputs())
      reductions.push_back(&g.node(out));
    const Node& root = e_.root();
    Shape out_shape = root.type.shape, dims = e_.reduced_dims();
    std::vector<llvm::AllocaInst*> accs;
    for (const Node* r : reductions)
      accs.push_back(e_.entry_alloca(e_.compute_type(r->type.dtype)));
    auto load_acc = [&](std::size_t p) {
      return b_.CreateLoad(accs[p]->getAllocatedType(), accs[p]);
    };
    auto init = [&] {
      for (std::size_t p = 0; p < reductions.size(); ++p)
        b_.CreateStore(e_.reduce_init(*reductions[p]), accs[p]);
    };
    // Every operand first, then every fold: the operands may share inlined work.
    auto fold = [&](const Index& out_idx, const Index& red_idx) {
      e_.clear_memo();
      Index at = e_.operand_index(out_idx, red_idx);
      std::vector<llvm::Value*> xs;
      for (const Node* r : reductions)
        xs.push_back(e_.compute(r->inputs[0], at));
      for (std::size_t p = 0; p < reductions.size(); ++p)
        b_.CreateStore(e_.combine(*reductions[p], load_acc(p), xs[p]), accs[p]);
    };
    auto store_all = [&](const std::vector<llvm::Value*>& totals, llvm::Value* o) {
      for (std::size_t p = 0; p < reductions.size(); ++p)
        e_.store_output(p, totals[p], o);
    };
    llvm::Value* outputs = e_.count(out_shape);
    if (launch_.strategy == GpuStrategy::thread_per_output) {
      e_.emit_for(
          global_thread(), outputs,
          [&](llvm::Value* o) {
            Index out_idx = e_.delinearize(o, out_shape);
            init();
            e_.emit_nest(dims, [&](const Index& red_idx) { fold(out_idx, red_idx); });
            std::vector<llvm::Value*> totals;
            for (std::size_t p = 0; p < reductions.size(); ++p)
              totals.push_back(load_acc(p));
            store_all(totals, o);
          },
          threads_in_grid());
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
          init();
          e_.emit_for(
              lane, e_.count(dims), [&](llvm::Value* r) { fold(out_idx, e_.delinearize(r, dims)); },
              e_.i64(helpers));
          std::vector<llvm::Value*> totals;
          for (std::size_t p = 0; p < reductions.size(); ++p)
            totals.push_back(per_warp ? warp_reduce(*reductions[p], load_acc(p))
                                      : block_reduce(*reductions[p], load_acc(p)));
          e_.emit_if(b_.CreateICmpEQ(lane, e_.i64(0)), [&] { store_all(totals, o); });
        },
        step);
  }

  /// Row kernels: a warp (rows up to warp_row_limit long) or a block per row. Each pass over
  /// the row (RowLayout::passes) folds its reductions together, every thread a strided share of
  /// `vector_width` consecutive elements, and each is combined so that every thread holds it
  /// (later passes and the writes use it); then the threads write the row's elements, and lane 0
  /// its per-row outputs. With column partials, a block takes one group of rows and sums their
  /// values per column.
  void row() {
    const Graph& g = e_.graph();
    const Kernel& k = e_.kernel();
    RowLayout layout = row_layout(g, k);
    const std::vector<ValueId>& reductions = layout.reductions;
    const std::vector<std::size_t>&full = layout.full, &per_row = layout.per_row;
    int64_t length = layout.length;
    std::vector<ValueId> outputs = k.outputs();
    std::vector<llvm::AllocaInst*> accs;
    for (ValueId r : reductions)
      accs.push_back(e_.entry_alloca(e_.compute_type(g.type(r).dtype)));
    bool per_warp = launch_.strategy == GpuStrategy::warp_per_output;
    llvm::Value* tid = thread_in_block();
    llvm::Value* lane = per_warp ? b_.CreateAnd(tid, e_.i64(31)) : tid;
    llvm::Value* first = per_warp ? b_.CreateLShr(global_thread(), 5) : block_in_grid();
    llvm::Value* step = per_warp ? b_.CreateLShr(threads_in_grid(), 5) : blocks_in_grid();
    llvm::Value* helpers = e_.i64(per_warp ? 32 : launch_.threads);
    int64_t width = launch_.vector_width, groups = length / width;
    // Element k of the `width` consecutive ones of group `group`, in row `row` (idx's prefix).
    auto for_elements = [&](const Index& row_idx, auto&& body) {
      e_.emit_for(
          lane, e_.extent(groups),
          [&](llvm::Value* group) {
            llvm::Value* group_first = b_.CreateMul(group, e_.i64(width), "", true, true);
            for (int64_t j = 0; j < width; ++j) {
              e_.clear_memo();
              llvm::Value* column = b_.CreateAdd(group_first, e_.i64(j), "", true, true);
              Index idx = row_idx;
              idx.push_back(column);
              body(idx, column);
            }
          },
          helpers);
    };
    // Column sums per group of consecutive rows (RowLayout::partials), a group a block
    // (gpu_launch): each warp adds its rows' values into its own row of shared memory,
    // [partial][warp][column] f32, as it writes the row's outputs (the values are at hand then:
    // no registers held across the row), and at the end the block adds the warps' rows in warp
    // order (the same sums every run).
    std::vector<const Node*> partials;
    for (std::size_t p : layout.partials) {
      partials.push_back(&g.node(outputs[p]));
      if (e_.compute_type(partials.back()->type.dtype) != b_.getFloatTy())
        throw std::logic_error("sinter: a row kernel's column partials are f32");
    }
    if (!partials.empty() && !per_warp)
      throw std::logic_error("sinter: a row kernel's column partials need a warp per row");
    const int64_t warps = launch_.threads / 32;
    llvm::Value* warp = b_.CreateLShr(tid, 5);
    llvm::Value* block = block_in_grid();
    if (!partials.empty() && !row_group_values_) {
      auto* slots = llvm::ArrayType::get(
          b_.getFloatTy(),
          static_cast<uint64_t>(static_cast<int64_t>(partials.size()) * warps * length));
      row_group_values_ = new llvm::GlobalVariable(
          e_.module(), slots, false, llvm::GlobalValue::InternalLinkage,
          llvm::UndefValue::get(slots), e_.function()->getName() + ".group_rows", nullptr,
          llvm::GlobalValue::NotThreadLocal, 3);
      row_group_values_->setAlignment(llvm::Align(16));
    }
    auto slot = [&](std::size_t p, llvm::Value* of_warp, llvm::Value* column) {
      llvm::Value* row_of_slots =
          b_.CreateAdd(e_.i64(static_cast<int64_t>(p) * warps), of_warp, "", true, true);
      llvm::Value* at = b_.CreateAdd(b_.CreateMul(row_of_slots, e_.i64(length)), column);
      return b_.CreateGEP(b_.getFloatTy(), row_group_values_, at);
    };
    // Row `row`'s values of every partial at `column`, into this warp's slots.
    auto add_partials = [&](llvm::Value* row, llvm::Value* column) {
      Index at{block, b_.CreateSub(row, b_.CreateMul(block, e_.extent(layout.group))), column};
      for (std::size_t p = 0; p < partials.size(); ++p) {
        llvm::Value* x = e_.compute(partials[p]->inputs[0], at);
        llvm::Value* into = slot(p, warp, column);
        b_.CreateStore(e_.combine(*partials[p], b_.CreateLoad(b_.getFloatTy(), into), x), into);
      }
    };
    // A block per row passing over it more than once keeps the rows it reads in dynamic
    // shared memory (gpu_row_cache): the first pass fills it, the later ones read it.
    RowCache cache = launch_.shared_bytes ? gpu_row_cache(g, k) : RowCache{};
    if (cache.bytes != launch_.shared_bytes || (cache.bytes && per_warp))
      throw std::logic_error("sinter: a row kernel's launch and its row cache disagree");
    llvm::GlobalVariable* dynamic_shared =
        cache.bytes
            ? dynamic_shared_memory(e_.module(), e_.function()->getName().str() + "_row_cache")
            : nullptr;
    auto use_cache = [&](llvm::Value* row, bool fill) {
      llvm::Value* row_start = b_.CreateMul(row, e_.extent(length), "", true, true);
      for (auto [buffer, offset] : cache.buffers)
        e_.cache_row(buffer, b_.CreateConstInBoundsGEP1_64(b_.getInt8Ty(), dynamic_shared, offset),
                     row_start, fill);
    };
    auto process_row = [&](llvm::Value* row) {
      e_.clear_row_values();
      // Every thread is done with the previous row's cache before this row fills it; each
      // pass's block reduction (a barrier) comes before the next pass reads it.
      if (cache.bytes) b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
      bool filled = false;
      // One read of the row per pass: its reductions' operands first, then their folds.
      for (const std::vector<std::size_t>& pass : layout.passes) {
        if (cache.bytes) use_cache(row, !filled);
        filled = true;
        std::vector<Index> row_idx = e_.start_row_pass(reductions, pass, accs, row);
        for_elements(Index{}, [&](const Index&, llvm::Value* column) {
          e_.fold_row_element(reductions, pass, accs, row_idx, column);
        });
        for (std::size_t p : pass) {
          const Node& reduction = g.node(reductions[p]);
          llvm::Value* partial = b_.CreateLoad(accs[p]->getAllocatedType(), accs[p]);
          e_.set_row_value(reductions[p], per_warp ? warp_reduce(reduction, partial)
                                                   : block_reduce(reduction, partial));
        }
      }
      if (!full.empty() && partials.empty()) {
        if (cache.bytes) use_cache(row, false);
        // Each thread's `width` elements are all computed before any is stored: a kernel
        // written over a buffer it reads (in place) still joins them into 16-byte accesses.
        const Shape& s = g.type(outputs[full.front()]).shape;
        Index row_idx = e_.delinearize(row, Shape(s.begin(), s.end() - 1));
        llvm::Value* base = b_.CreateMul(row, e_.extent(length), "", true, true);
        e_.emit_for(
            lane, e_.extent(groups),
            [&](llvm::Value* group) {
              llvm::Value* group_first = b_.CreateMul(group, e_.i64(width), "", true, true);
              auto column = [&](int64_t j) {
                return b_.CreateAdd(group_first, e_.i64(j), "", true, true);
              };
              values_then_stores(
                  width,
                  [&](int64_t j) {
                    Index idx = row_idx;
                    idx.push_back(column(j));
                    return e_.compute_at(full, idx, s);
                  },
                  [&](int64_t j, const std::vector<llvm::Value*>& values) {
                    e_.store_at(full, values, b_.CreateAdd(base, column(j), "", true, true));
                  });
            },
            helpers);
      } else if (!full.empty()) {
        // Column partials add each element's values as it is written (they are at hand then).
        const Shape& s = g.type(outputs[full.front()]).shape;
        Index row_idx = e_.delinearize(row, Shape(s.begin(), s.end() - 1));
        llvm::Value* base = b_.CreateMul(row, e_.extent(length), "", true, true);
        for_elements(row_idx, [&](const Index& idx, llvm::Value* column) {
          e_.compute_and_store_at(full, idx, s, b_.CreateAdd(base, column, "", true, true));
          add_partials(row, column);
        });
      } else if (!partials.empty()) {
        for_elements(Index{},
                     [&](const Index&, llvm::Value* column) { add_partials(row, column); });
      }
      e_.clear_row_cache(); // what follows reads single elements, from memory
      if (!per_row.empty())
        e_.emit_if(b_.CreateICmpEQ(lane, e_.i64(0)), [&] {
          e_.clear_memo();
          const Shape& s = g.type(outputs[per_row.front()]).shape;
          e_.compute_and_store_at(per_row, e_.delinearize(row, s), s, row);
        });
    };
    if (partials.empty()) {
      e_.emit_for(first, e_.count(g.type(reductions.front()).shape), process_row, step);
      return;
    }
    // Each lane clears its own columns of its warp's slots (the columns it adds into later).
    for_elements(Index{}, [&](const Index&, llvm::Value* column) {
      for (std::size_t p = 0; p < partials.size(); ++p)
        b_.CreateStore(e_.reduce_init(*partials[p]), slot(p, warp, column));
    });
    e_.emit_for(
        warp, e_.extent(layout.group),
        [&](llvm::Value* r) {
          process_row(b_.CreateAdd(b_.CreateMul(block, e_.extent(layout.group)), r));
        },
        e_.i64(warps));
    b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
    e_.emit_for(
        tid, e_.i64(length),
        [&](llvm::Value* column) {
          for (std::size_t p = 0; p < partials.size(); ++p) {
            llvm::Value* total = b_.CreateLoad(b_.getFloatTy(), slot(p, e_.i64(0), column));
            for (int64_t w = 1; w < warps; ++w)
              total = e_.combine(*partials[p], total,
                                 b_.CreateLoad(b_.getFloatTy(), slot(p, e_.i64(w), column)));
            e_.store_output(layout.partials[p], total,
                            b_.CreateAdd(b_.CreateMul(block, e_.i64(length)), column));
          }
        },
        e_.i64(launch_.threads));
  }

private:
  KernelEmitter& e_;
  llvm::IRBuilder<>& b_;
  GpuLaunch launch_;
  llvm::GlobalVariable* partials_ = nullptr;         ///< block reductions: one slot per warp
  llvm::GlobalVariable* row_group_values_ = nullptr; ///< row kernels' partials: [p][warp][length]
};

} // namespace

void NvptxSchedule::emit(KernelEmitter& e, const std::string& name) {
  const Kernel& kernel = e.kernel();
  llvm::IRBuilder<>& b = e.builder();
  GpuLaunch launch = runtime_rows_launch_ ? *runtime_rows_launch_ : gpu_launch(e.graph(), kernel);
  auto* global_ptr = b.getPtrTy(1);
  std::size_t outputs = 1 + kernel.extra_outputs.size();
  std::vector<llvm::Type*> params(outputs + kernel.reads.size(), global_ptr);
  std::size_t buffers = params.size();
  if (runtime_rows_launch_) params.push_back(b.getInt64Ty());
  auto* fn = llvm::Function::Create(llvm::FunctionType::get(b.getVoidTy(), params, false),
                                    llvm::Function::ExternalLinkage, name, e.module());
  // An in-place kernel's root is written over one of its reads, an output stored over a
  // donated input over that read: those pairs may alias, every other buffer is its own.
  std::vector<bool> may_alias(buffers, false);
  auto alias = [&](std::size_t output, ValueId read) {
    auto found = std::find(kernel.reads.begin(), kernel.reads.end(), read);
    if (found == kernel.reads.end()) return;
    may_alias[output] = true;
    may_alias[outputs + static_cast<std::size_t>(found - kernel.reads.begin())] = true;
  };
  if (kernel.in_place()) {
    may_alias[0] = true;
    alias(0, kernel.overwrites);
  }
  std::vector<ValueId> written = kernel.outputs();
  for (auto [out, in] : kernel.over_inputs)
    alias(
        static_cast<std::size_t>(std::find(written.begin(), written.end(), out) - written.begin()),
        in);
  for (unsigned i = 0; i < buffers; ++i) {
    // The runtime passes 16-byte aligned buffers (arena slots are 64-byte aligned), which
    // lets the load/store vectoriser form 16-byte accesses.
    fn->addParamAttr(i, llvm::Attribute::getWithAlignment(e.context(), llvm::Align(16)));
    if (may_alias[i]) continue;
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
  if (runtime_rows_launch_)
    e.set_runtime_size(fn->getArg(static_cast<unsigned>(buffers)), rows_extent_);
  NvptxBody body(e, launch);
  switch (kernel.kind) {
  case KernelKind::loop: body.loop(); break;
  case KernelKind::reduce:
    if (launch.strategy == GpuStrategy::column_split)
      emit_nvptx_column_split(e, launch);
    else
      body.reduce();
    break;
  case KernelKind::row: body.row(); break;
  case KernelKind::scatter_add: emit_nvptx_scatter(e, launch); break;
  case KernelKind::attention: emit_nvptx_attention(e, launch); break;
  case KernelKind::gemm: throw std::logic_error("sinter: GEMMs are cuBLASLt calls, not kernels");
  case KernelKind::collective:
    throw std::logic_error("sinter: collectives are communicator calls, not kernels");
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
  // Pure math that always returns, so the load/store vectoriser may join loads on either side
  // of a call (vectorize_memory_access runs before libdevice replaces the declaration).
  auto* declaration = llvm::cast<llvm::Function>(callee.getCallee());
  declaration->setDoesNotAccessMemory();
  declaration->setDoesNotThrow();
  declaration->setWillReturn();
  return e.builder().CreateCall(callee, std::vector<llvm::Value*>(args.begin(), args.end()));
}

} // namespace sinter
