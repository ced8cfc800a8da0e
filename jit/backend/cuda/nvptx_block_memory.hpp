// jit/backend/cuda/nvptx_block_memory.hpp — a thread block's memory in a hand-built NVPTX
// kernel: 16-bit matrices in global memory, tiles in shared memory, the block's copies between
// them, and the conversions of its element types
#pragma once
#include "jit/codegen/kernel_emitter.hpp"
#include "jit/ir/dtype.hpp"

#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/IRBuilder.h>

#include <cstdint>

namespace sinter {

/// A [rows, cols] row-major matrix of one slice in global memory (16-bit elements).
struct GlobalMatrix {
  llvm::Value* pointer = nullptr;
  llvm::Value* first = nullptr; ///< the slice's first element
  int64_t rows = 0, cols = 0;
};

/// A tile in shared memory: 16-bit elements, `stride` elements per row, from byte `offset`.
struct SharedTile {
  int64_t offset = 0, stride = 0;
};

/// The shared memory of a block of `threads` threads (`shared_bytes`, 16-byte aligned) and the
/// loads, stores and copies a kernel body makes with it, emitted through `emitter`.
class BlockMemory {
public:
  BlockMemory(KernelEmitter& emitter, int64_t threads, int64_t shared_bytes);

  /// This thread's index in its block (i64).
  llvm::Value* thread() const { return thread_; }

  /// Element `at` (from the slice's first) of `m`, as 16 bits.
  llvm::Value* load16(const GlobalMatrix& m, llvm::Value* at);
  /// m[row, col], or 0 outside the matrix (then the slice's first element is read instead).
  llvm::Value* load_or_zero(const GlobalMatrix& m, llvm::Value* row, llvm::Value* col);
  /// Rows [first, first + rows) of `m` into `tile`, zero-padded to `cols_padded` columns and
  /// past m's last row; the whole block copies, consecutive threads on consecutive elements.
  /// Rows of whole 16-byte pieces (8 elements, no column padding) go 16 bytes at a time when
  /// the slice is 16-byte aligned: a tile's copy is then 8 times fewer loads and stores, which
  /// at short sequences (few tiles per block) is much of a block's time.
  void copy_tile(const GlobalMatrix& m, llvm::Value* first, const SharedTile& tile, int64_t rows,
                 int64_t cols_padded);

  /// The address of element [row, col] of `t`.
  llvm::Value* shared_at(const SharedTile& t, llvm::Value* row, llvm::Value* col);
  /// Loads a `type` at byte `offset` from `base` (2- or 4-byte aligned by construction).
  llvm::Value* load_shared(llvm::Type* type, llvm::Value* base, int64_t offset);
  /// Element `i` of the f32 array at byte `offset` of shared memory.
  void store_shared_f32(int64_t offset, llvm::Value* i, llvm::Value* v);
  llvm::Value* load_shared_f32(int64_t offset, llvm::Value* i);

  /// Element `at` of a `t` buffer as f32, and f32 `v` stored there as `t`.
  llvm::Value* load_float(llvm::Value* pointer, DType t, llvm::Value* at);
  void store_float(llvm::Value* pointer, DType t, llvm::Value* at, llvm::Value* v);

  /// 16-bit element bits (bf16 or f16) → f32.
  llvm::Value* widen(llvm::Value* bits, DType t);
  /// f32 → 16-bit element bits, rounding to nearest even (cvt.rn).
  llvm::Value* narrow(llvm::Value* v, DType t);
  /// Two 16-bit elements in one 32-bit register, `low` first.
  llvm::Value* pack(llvm::Value* low, llvm::Value* high);

private:
  llvm::Value* shared_f32_at(int64_t offset, llvm::Value* i);
  llvm::Value* ix(int64_t v) { return e_.i64(v); }

  KernelEmitter& e_;
  llvm::IRBuilder<>& b_;
  int64_t threads_;
  llvm::GlobalVariable* shared_ = nullptr;
  llvm::Value* thread_ = nullptr;
  llvm::Type *i8_ = nullptr, *i16_ = nullptr, *i32_ = nullptr, *f32_ = nullptr;
};

} // namespace sinter
