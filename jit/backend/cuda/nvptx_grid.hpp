// jit/backend/cuda/nvptx_grid.hpp — a generated kernel's place in its 1-D grid (thread, block,
// their counts) as i64 values, shared by the NVPTX schedules
#pragma once
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/IntrinsicsNVPTX.h>

#include <cstdint>

namespace sinter {

/// The special registers of a kernel launched with `threads` threads a block.
class NvptxGrid {
public:
  NvptxGrid(llvm::IRBuilder<>& b, int64_t threads) : grid_builder_(b), grid_threads_(threads) {}

  llvm::Value* special_register(llvm::Intrinsic::ID id) {
    return grid_builder_.CreateZExt(grid_builder_.CreateIntrinsic(id, {}, {}),
                                    grid_builder_.getInt64Ty());
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
    return grid_builder_.CreateAdd(grid_builder_.CreateMul(block_in_grid(), threads()),
                                   thread_in_block());
  }
  llvm::Value* threads_in_grid() { return grid_builder_.CreateMul(blocks_in_grid(), threads()); }

private:
  llvm::Value* threads() { return grid_builder_.getInt64(static_cast<uint64_t>(grid_threads_)); }
  llvm::IRBuilder<>& grid_builder_;
  int64_t grid_threads_;
};

} // namespace sinter
