// jit/backend/cuda/nvptx_scatter.cpp — scatter_add kernels: atomic adds, or a block owning its
// output rows and adding their updates in position order, without atomics
#include "jit/backend/cuda/nvptx_scatter.hpp"
#include "jit/backend/cuda/nvptx_grid.hpp"

#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/Module.h>

namespace sinter {
namespace {

class ScatterBody : NvptxGrid {
public:
  ScatterBody(KernelEmitter& e, const GpuLaunch& launch)
      : NvptxGrid(e.builder(), launch.threads), e_(e), b_(e.builder()), launch_(launch),
        root_(e.root()), idx_shape_(e.graph().type(root_.inputs[0]).shape) {}

  void serial() {
    llvm::Value* only = b_.CreateICmpEQ(global_thread(), e_.i64(0));
    e_.emit_serial_scatter(e_.i64(0), b_.CreateSelect(only, e_.i64(1), e_.i64(0)));
  }

  void atomic() {
    Shape out_shape = root_.type.shape;
    int64_t width = numel(Shape(out_shape.begin() + 1, out_shape.end()));
    DType t = root_.type.dtype;
    e_.emit_for(
        global_thread(), e_.count(e_.graph().type(root_.inputs[1]).shape),
        [&](llvm::Value* item) {
          e_.clear_memo();
          llvm::Value* position = b_.CreateUDiv(item, e_.i64(width));
          llvm::Value* k = b_.CreateURem(item, e_.i64(width));
          Index at = e_.delinearize(position, idx_shape_);
          llvm::Value* row = b_.CreateSExt(e_.compute(root_.inputs[0], at), b_.getInt64Ty());
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

  void owned() {
    Shape out_shape = root_.type.shape;
    DType t = root_.type.dtype;
    llvm::Type* i64 = b_.getInt64Ty();
    llvm::Type* i32 = b_.getInt32Ty();
    int64_t threads = launch_.threads, warps = threads / 32;
    llvm::Value* width = e_.extent(numel(Shape(out_shape.begin() + 1, out_shape.end())));
    llvm::Value* tid = thread_in_block();
    llvm::Value* lane = b_.CreateTrunc(b_.CreateAnd(tid, e_.i64(31)), i32);
    llvm::Value* warp = b_.CreateLShr(tid, 5);
    llvm::Value* first = b_.CreateMul(block_in_grid(), e_.i64(launch_.owned_rows));
    llvm::Value* table_rows = e_.extent(out_shape.empty() ? 1 : out_shape[0]);
    llvm::Value* end = b_.CreateBinaryIntrinsic(
        llvm::Intrinsic::umin, b_.CreateAdd(first, e_.i64(launch_.owned_rows)), table_rows);
    llvm::Value* owned_rows = b_.CreateBinaryIntrinsic(llvm::Intrinsic::usub_sat, end, first);
    // Thread j owns columns j, j + threads, ... of every owned row: it clears them and later
    // adds to them, so no output element is ever touched by two threads.
    auto each_column = [&](llvm::function_ref<void(llvm::Value*)> body) {
      e_.emit_for(tid, width, body, e_.i64(threads));
    };
    e_.emit_for(first, end, [&](llvm::Value* row) {
      each_column([&](llvm::Value* k) {
        e_.store_out(llvm::Constant::getNullValue(e_.compute_type(t)),
                     b_.CreateAdd(b_.CreateMul(row, width), k), t);
      });
    });
    llvm::GlobalVariable* list = shared_array(i64, threads, ".owned_positions");
    llvm::GlobalVariable* counts = shared_array(i32, warps, ".owned_counts");
    llvm::AllocaInst* hit = e_.entry_alloca(b_.getInt1Ty());
    llvm::Value* positions = e_.count(idx_shape_);
    e_.emit_for(
        e_.i64(0), positions,
        [&](llvm::Value* tile) {
          // Whether this thread's position of the tile adds to one of the block's rows.
          llvm::Value* p = b_.CreateAdd(tile, tid);
          b_.CreateStore(b_.getFalse(), hit);
          e_.emit_if(b_.CreateICmpULT(p, positions), [&] {
            e_.clear_memo();
            llvm::Value* row =
                b_.CreateSExt(e_.compute(root_.inputs[0], e_.delinearize(p, idx_shape_)), i64);
            // Other blocks' rows and invalid ones (negative: far above) fall outside.
            b_.CreateStore(b_.CreateICmpULT(b_.CreateSub(row, first), owned_rows), hit);
          });
          e_.clear_memo();
          llvm::Value* hits = b_.CreateLoad(b_.getInt1Ty(), hit);
          // The hits' places in the block's list, in position order: the warps before this
          // one's hits, then this warp's lanes below this one.
          llvm::Value* ballot = b_.CreateIntrinsic(llvm::Intrinsic::nvvm_vote_ballot_sync, {},
                                                   {b_.getInt32(0xffffffffu), hits});
          llvm::Value* lanes_below =
              b_.CreateSub(b_.CreateShl(b_.getInt32(1), lane), b_.getInt32(1));
          llvm::Value* in_warp = popcount(b_.CreateAnd(ballot, lanes_below));
          e_.emit_if(b_.CreateICmpEQ(lane, b_.getInt32(0)), [&] {
            b_.CreateStore(b_.CreateTrunc(popcount(ballot), i32), b_.CreateGEP(i32, counts, warp));
          });
          barrier();
          llvm::Value* before = e_.i64(0);
          llvm::Value* total = e_.i64(0);
          for (int64_t w = 0; w < warps; ++w) {
            llvm::Value* c =
                b_.CreateZExt(b_.CreateLoad(i32, b_.CreateGEP(i32, counts, e_.i64(w))), i64);
            total = b_.CreateAdd(total, c);
            before = b_.CreateAdd(before,
                                  b_.CreateSelect(b_.CreateICmpULT(e_.i64(w), warp), c, e_.i64(0)));
          }
          e_.emit_if(hits, [&] {
            b_.CreateStore(p, b_.CreateGEP(i64, list, b_.CreateAdd(before, in_warp)));
          });
          barrier();
          e_.emit_for(e_.i64(0), total, [&](llvm::Value* j) {
            e_.clear_memo();
            llvm::Value* q = b_.CreateLoad(i64, b_.CreateGEP(i64, list, j));
            Index at = e_.delinearize(q, idx_shape_);
            llvm::Value* row = b_.CreateSExt(e_.compute(root_.inputs[0], at), i64);
            each_column([&](llvm::Value* k) {
              e_.clear_memo();
              auto [x, slot] = e_.scatter_update(at, row, k);
              e_.add_to_slot(slot, x, t);
            });
          });
          barrier(); // the next tile rewrites the list and the counts
        },
        e_.i64(threads));
  }

private:
  void barrier() { b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {}); }
  /// The number of set bits of an i32, as an i64.
  llvm::Value* popcount(llvm::Value* bits) {
    return b_.CreateZExt(b_.CreateUnaryIntrinsic(llvm::Intrinsic::ctpop, bits), b_.getInt64Ty());
  }
  llvm::GlobalVariable* shared_array(llvm::Type* element, int64_t count, const char* suffix) {
    auto* type = llvm::ArrayType::get(element, static_cast<uint64_t>(count));
    auto* array = new llvm::GlobalVariable(
        e_.module(), type, false, llvm::GlobalValue::InternalLinkage, llvm::UndefValue::get(type),
        e_.function()->getName() + suffix, nullptr, llvm::GlobalValue::NotThreadLocal, 3);
    array->setAlignment(llvm::Align(8));
    return array;
  }

  KernelEmitter& e_;
  llvm::IRBuilder<>& b_;
  GpuLaunch launch_;
  const Node& root_;
  Shape idx_shape_;
};

} // namespace

void emit_nvptx_scatter(KernelEmitter& e, const GpuLaunch& launch) {
  ScatterBody body(e, launch);
  switch (launch.strategy) {
  case GpuStrategy::serial_scatter: body.serial(); break;
  case GpuStrategy::owned_scatter: body.owned(); break;
  default: body.atomic(); break;
  }
}

} // namespace sinter
