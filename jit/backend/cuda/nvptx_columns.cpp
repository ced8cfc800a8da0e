// jit/backend/cuda/nvptx_columns.cpp — column reductions on the GPU: lanes over neighbouring
// columns (16 bytes a lane where the columns allow), warps down the rows, shared-memory combine
#include "jit/backend/cuda/nvptx_columns.hpp"
#include "jit/backend/cuda/nvptx_grid.hpp"

#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/Module.h>

#include <algorithm>

namespace sinter {
namespace {

class ColumnBody : NvptxGrid {
public:
  ColumnBody(KernelEmitter& e, const GpuLaunch& launch)
      : NvptxGrid(e.builder(), launch.threads), e_(e), b_(e.builder()), launch_(launch),
        width_(std::max<int64_t>(1, launch.vector_width)), groups_(launch.threads / lanes) {
    for (ValueId out : e.kernel().outputs())
      reductions_.push_back(&e.graph().node(out));
  }

  void emit() {
    const std::size_t count = reductions_.size();
    // Accumulators [unroll][column][reduction]: the unrolled rows fold into their own, so their
    // loads are all issued before the first sum needs one.
    std::vector<llvm::AllocaInst*> accs(static_cast<std::size_t>(unroll * width_) * count);
    auto acc = [&](int64_t u, int64_t k, std::size_t p) -> llvm::AllocaInst*& {
      return accs[static_cast<std::size_t>(u * width_ + k) * count + p];
    };
    for (int64_t u = 0; u < unroll; ++u)
      for (int64_t k = 0; k < width_; ++k)
        for (std::size_t p = 0; p < count; ++p)
          acc(u, k, p) = e_.entry_alloca(e_.compute_type(reductions_[p]->type.dtype));
    llvm::GlobalVariable* partials = shared_partials(count);
    Shape out_shape = e_.root().type.shape, dims = e_.reduced_dims();
    llvm::Value* tid = thread_in_block();
    llvm::Value* lane = b_.CreateAnd(tid, e_.i64(lanes - 1));
    llvm::Value* group = b_.CreateLShr(tid, 5);
    // Slot of reduction p, column k of this lane, for warp g: consecutive lanes, consecutive
    // slots.
    auto slot = [&](std::size_t p, int64_t k, llvm::Value* g) {
      llvm::Value* within = b_.CreateAdd(b_.CreateMul(g, e_.i64(lanes)), lane);
      int64_t base = (static_cast<int64_t>(p) * width_ + k) * launch_.threads;
      return b_.CreateGEP(b_.getInt64Ty(), partials, b_.CreateAdd(e_.i64(base), within));
    };
    const int64_t tile_outputs = lanes * width_;
    llvm::Value* outputs = e_.count(out_shape);
    e_.emit_for(
        b_.CreateMul(block_in_grid(), e_.i64(tile_outputs)), outputs,
        [&](llvm::Value* tile) {
          // The lane's first output; its `width_` columns share a row of the outputs (the
          // launch's width divides the last dim).
          llvm::Value* first =
              b_.CreateAdd(tile, b_.CreateMul(lane, e_.i64(width_)), "", true, true);
          llvm::Value* valid = b_.CreateICmpULT(first, outputs);
          for (int64_t u = 0; u < unroll; ++u)
            for (int64_t k = 0; k < width_; ++k)
              for (std::size_t p = 0; p < count; ++p)
                b_.CreateStore(e_.reduce_init(*reductions_[p]), acc(u, k, p));
          e_.emit_if(valid, [&] { walk_rows(first, out_shape, dims, group, acc); });
          for (int64_t u = 1; u < unroll; ++u)
            for (int64_t k = 0; k < width_; ++k)
              for (std::size_t p = 0; p < count; ++p)
                e_.accumulate(*reductions_[p], acc(0, k, p), load(acc(u, k, p)));
          for (int64_t k = 0; k < width_; ++k)
            for (std::size_t p = 0; p < count; ++p)
              b_.CreateStore(load(acc(0, k, p)), slot(p, k, group));
          b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
          e_.emit_if(b_.CreateAnd(valid, b_.CreateICmpEQ(group, e_.i64(0))), [&] {
            for (int64_t k = 0; k < width_; ++k)
              for (std::size_t p = 0; p < count; ++p) {
                const Node& reduction = *reductions_[p];
                llvm::Type* type = acc(0, k, p)->getAllocatedType();
                llvm::Value* total = b_.CreateLoad(type, slot(p, k, e_.i64(0)));
                for (int64_t g = 1; g < groups_; ++g)
                  total = e_.combine(reduction, total, b_.CreateLoad(type, slot(p, k, e_.i64(g))));
                e_.store_output(p, total, b_.CreateAdd(first, e_.i64(k), "", true, true));
              }
          });
          // The next tile's partials must wait until the first warp has read these.
          b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
        },
        b_.CreateMul(blocks_in_grid(), e_.i64(tile_outputs)));
  }

private:
  static constexpr int64_t lanes = 32, unroll = gpu_column_split_unroll;

  llvm::Value* load(llvm::AllocaInst* a) { return b_.CreateLoad(a->getAllocatedType(), a); }

  /// [reductions][columns][threads] 8-byte slots (any compute type fits) in shared memory.
  llvm::GlobalVariable* shared_partials(std::size_t count) {
    int64_t bytes = gpu_column_partials_bytes(launch_.threads, width_, static_cast<int64_t>(count));
    auto* slots = llvm::ArrayType::get(b_.getInt64Ty(), static_cast<uint64_t>(bytes / 8));
    auto* partials = new llvm::GlobalVariable(
        e_.module(), slots, false, llvm::GlobalValue::InternalLinkage, llvm::UndefValue::get(slots),
        e_.function()->getName() + ".columns", nullptr, llvm::GlobalValue::NotThreadLocal, 3);
    partials->setAlignment(llvm::Align(8));
    return partials;
  }

  /// This warp's rows (group, group + groups, ...) folded into the lane's accumulators,
  /// `unroll` rows at a time. Rows past the end read row r instead and are not folded: no
  /// branches, so every load is in flight before the first sum needs one.
  template <class Acc>
  void walk_rows(llvm::Value* first, const Shape& out_shape, const Shape& dims, llvm::Value* group,
                 Acc& acc) {
    // The index of each of the lane's outputs: the first's, then one column further each, so
    // that their operands' addresses are visibly consecutive (16-byte loads).
    std::vector<Index> columns(static_cast<std::size_t>(width_), e_.delinearize(first, out_shape));
    for (int64_t k = 1; k < width_; ++k)
      columns[static_cast<std::size_t>(k)].back() =
          b_.CreateAdd(columns[0].back(), e_.i64(k), "", true, true);
    llvm::Value* rows = e_.count(dims);
    e_.emit_for(
        group, rows,
        [&](llvm::Value* r) {
          std::vector<llvm::Value*> inside(unroll, b_.getTrue());
          // xs[u][k][p]: every operand first (they may share inlined work), then every fold.
          std::vector<std::vector<std::vector<llvm::Value*>>> xs(unroll);
          for (int64_t u = 0; u < unroll; ++u) {
            llvm::Value* row = r;
            if (u > 0) {
              row = b_.CreateAdd(r, e_.i64(u * groups_));
              inside[u] = b_.CreateICmpULT(row, rows);
              row = b_.CreateSelect(inside[u], row, r);
            }
            Index reduced = e_.delinearize(row, dims);
            for (const Index& column : columns) {
              e_.clear_memo();
              Index at = e_.operand_index(column, reduced);
              std::vector<llvm::Value*> values;
              for (const Node* n : reductions_)
                values.push_back(e_.compute(n->inputs[0], at));
              xs[u].push_back(std::move(values));
            }
          }
          for (int64_t u = 0; u < unroll; ++u)
            for (int64_t k = 0; k < width_; ++k)
              for (std::size_t p = 0; p < reductions_.size(); ++p) {
                llvm::AllocaInst* slot = acc(u, k, p);
                llvm::Value* old = load(slot);
                llvm::Value* folded =
                    e_.combine(*reductions_[p], old,
                               xs[static_cast<std::size_t>(u)][static_cast<std::size_t>(k)][p]);
                b_.CreateStore(u > 0 ? b_.CreateSelect(inside[u], folded, old) : folded, slot);
              }
        },
        e_.i64(groups_ * unroll));
  }

  KernelEmitter& e_;
  llvm::IRBuilder<>& b_;
  GpuLaunch launch_;
  int64_t width_, groups_;
  std::vector<const Node*> reductions_;
};

} // namespace

void emit_nvptx_column_split(KernelEmitter& e, const GpuLaunch& launch) {
  ColumnBody(e, launch).emit();
}

} // namespace sinter
