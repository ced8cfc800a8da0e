// jit/backend/cuda/nvptx_block_memory.hpp — a thread block's memory in a hand-built NVPTX
// kernel: 16-bit matrices in global memory, tiles in shared memory, the block's copies between
// them, and the conversions of its element types
#pragma once
#include "jit/codegen/kernel_emitter.hpp"
#include "jit/ir/dtype.hpp"

#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/IRBuilder.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

namespace sinter {

/// The block's dynamic shared memory (PTX `.extern .shared`, as many bytes as the launch
/// gives), declared in `module` as `name` (external: letters, digits and `_` only, which PTX
/// takes as they are), 16-byte aligned.
llvm::GlobalVariable* dynamic_shared_memory(llvm::Module& module, const std::string& name);

/// A [rows, cols] row-major matrix of one slice in global memory (16-bit elements), its rows
/// `row_stride` elements apart (cols when the matrix is contiguous; more when it is a view of
/// a wider buffer, a head of a packed qkv, say).
struct GlobalMatrix {
  llvm::Value* pointer = nullptr;
  llvm::Value* first = nullptr; ///< the slice's first element
  int64_t rows = 0, cols = 0, row_stride = 0;
};

/// A tile in shared memory: 16-bit elements, `stride` elements per row, from byte `offset`
/// (plus `shift` bytes at run time: the stage of a double-buffered tile).
struct SharedTile {
  int64_t offset = 0, stride = 0;
  llvm::Value* shift = nullptr;
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
  /// Whether `m`'s slice starts on a 16-byte boundary (the same for every thread of a block;
  /// with a row stride of whole 16-byte pieces, so does every row).
  llvm::Value* aligned16(const GlobalMatrix& m);
  /// Elements [at, at + 8) (from the slice's first; 16-byte aligned) of `m`, as 8 × 16 bits.
  llvm::Value* load8(const GlobalMatrix& m, llvm::Value* at);
  /// m[row, col] and m[row, col + 1] as one 32-bit word (col even, m.cols even), or 0 outside
  /// the matrix.
  llvm::Value* load_pair_or_zero(const GlobalMatrix& m, llvm::Value* row, llvm::Value* col);
  /// m[row, col], or 0 outside the matrix (then the slice's first element is read instead).
  llvm::Value* load_or_zero(const GlobalMatrix& m, llvm::Value* row, llvm::Value* col);
  /// Rows [first, first + rows) of `m` into `tile`, zero-padded to `cols_padded` columns and
  /// past m's last row; the whole block copies, consecutive threads on consecutive elements.
  /// Rows of whole 16-byte pieces (8 elements, no column padding, a row stride of whole pieces)
  /// go 16 bytes at a time when the slice is 16-byte aligned: a tile's copy is then 8 times fewer
  /// loads and stores, which at short sequences (few tiles per block) is much of a block's time.
  /// `async`: the 16-byte pieces go by cp.async (the copy overlaps what the block does next;
  /// commit_copies and wait_copies finish it, then a barrier shows it to the whole block); the
  /// other paths copy at once.
  void copy_tile(const GlobalMatrix& m, llvm::Value* first, const SharedTile& tile, int64_t rows,
                 int64_t cols_padded, bool async = false);
  /// Walks tiles [first, end): `fill(tile, shift)` brings a tile into shared memory (cp.async
  /// or plain copies, to byte `shift` onwards of its stage), `use(tile, shift)` computes with
  /// it. With two stages (`stage_bytes` > 0 apart) the next tile is filled while this one is
  /// used, and one barrier a tile both shows a tile to the block and frees the other stage;
  /// with one (`stage_bytes` 0), fill and use alternate between two barriers.
  /// `land(tile, shift)`, when given, runs once this thread's copies of the tile have landed
  /// and before the barrier that shows them to the block: what it computes from the pieces this
  /// thread copied and stores to shared memory reaches every warp with the tile.
  using TileStep = std::function<void(llvm::Value*, llvm::Value*)>;
  void pipelined_tiles(llvm::Value* first, llvm::Value* end, int64_t stage_bytes,
                       const TileStep& fill, const TileStep& use, const TileStep& land = {});
  /// Which pieces of 16 bytes (8 elements) this thread copies when copy_tile(m, …, tile, rows,
  /// cols_padded, …) copies whole pieces, every thread the same number in one column (the
  /// slice 16-byte aligned at run time, aligned16): `count` pieces, the k-th at row `first_row`
  /// + k · `row_step`, column `col`. `count` 0: copy_tile copies that tile another way (element
  /// by element, or pieces in a loop).
  struct ThreadPieces {
    int64_t count = 0, row_step = 0, lanes_per_row = 0;
    llvm::Value *first_row = nullptr, *col = nullptr;
  };
  ThreadPieces own_pieces(const GlobalMatrix& m, const SharedTile& tile, int64_t rows,
                          int64_t cols_padded);
  /// Σ a[row, c]·b[row, c] in f32 (16-bit `t` elements, a.cols columns) over this lane's
  /// share of the row: `lanes` lanes share it, `part` is this lane's place among them. Rows of
  /// whole 16-byte pieces per lane take contiguous pieces, 16 bytes a load (when the slices
  /// are aligned); others every `lanes`-th column from `part`. Unrolled: the loads are
  /// independent and all in flight.
  llvm::Value* row_dot(const GlobalMatrix& a, const GlobalMatrix& b, llvm::Value* row,
                       llvm::Value* part, int64_t lanes, DType t);
  /// Σ a[i]·b[i] in f32 over two pieces of 8 16-bit `t` elements.
  llvm::Value* piece_dot(llvm::Value* a, llvm::Value* b, DType t);
  /// The 8 16-bit elements [col, col + 8) of row `row` of `t`.
  llvm::Value* load_shared_piece(const SharedTile& t, llvm::Value* row, llvm::Value* col);
  /// cp.async of 4 bytes from `from` to f32 element `i` of the array at byte `offset` (+
  /// `shift`) of shared memory; 0 lands there when `inside` is false (nothing is read).
  void copy_f32_async(int64_t offset, llvm::Value* i, llvm::Value* shift, llvm::Value* from,
                      llvm::Value* inside);
  /// bar.sync 0: the whole block meets.
  void barrier();
  /// Closes the group of this thread's cp.async copies issued since the last one.
  void commit_copies();
  /// Waits until every group of this thread's cp.async copies has landed.
  void wait_copies();

  /// The address of element [row, col] of `t`.
  llvm::Value* shared_at(const SharedTile& t, llvm::Value* row, llvm::Value* col);
  /// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 from this lane's row address `base` plus
  /// `offset` bytes (16-byte aligned): the lane's part of four 8 × 8 matrices of 16-bit
  /// elements. The whole warp must run it.
  std::array<llvm::Value*, 4> ldmatrix_x4(llvm::Value* base, int64_t offset, bool transposed);
  /// Element `i` of the f32 array at byte `offset` (+ `shift` at run time) of shared memory.
  void store_shared_f32(int64_t offset, llvm::Value* i, llvm::Value* v,
                        llvm::Value* shift = nullptr);
  llvm::Value* load_shared_f32(int64_t offset, llvm::Value* i, llvm::Value* shift = nullptr);

  /// Element `at` of a `t` buffer as f32, and f32 `v` stored there as `t`.
  llvm::Value* load_float(llvm::Value* pointer, DType t, llvm::Value* at);
  void store_float(llvm::Value* pointer, DType t, llvm::Value* at, llvm::Value* v);

  /// 16-bit element bits (bf16 or f16) → f32.
  llvm::Value* widen(llvm::Value* bits, DType t);
  /// f32 → 16-bit element bits, rounding to nearest even (cvt.rn).
  llvm::Value* narrow(llvm::Value* v, DType t);
  /// Two 16-bit elements in one 32-bit register, `low` first.
  llvm::Value* pack(llvm::Value* low, llvm::Value* high);
  /// `low` and `high` (f32) rounded to bf16 or f16 and packed, `low` first: one
  /// cvt.rn.{bf16,f16}x2.f32 (narrowing each and packing them takes three instructions).
  llvm::Value* narrow_pair(llvm::Value* low, llvm::Value* high, DType t);

private:
  /// Whether copy_tile moves m's rows into `tile` in whole 16-byte pieces (when aligned).
  static bool whole_pieces(const GlobalMatrix& m, const SharedTile& tile, int64_t cols_padded);
  ThreadPieces thread_pieces(int64_t rows, int64_t cols);
  llvm::Value* shared_f32_at(int64_t offset, llvm::Value* i, llvm::Value* shift);
  /// Whether [row, col] is inside `m`, and its element offset (0 outside: a real element).
  std::pair<llvm::Value*, llvm::Value*> clamped_at(const GlobalMatrix& m, llvm::Value* row,
                                                   llvm::Value* col);
  llvm::Value* ix(int64_t v) { return e_.i64(v); }

  KernelEmitter& e_;
  llvm::IRBuilder<>& b_;
  int64_t threads_;
  llvm::GlobalVariable* shared_ = nullptr;
  llvm::Value* thread_ = nullptr;
  llvm::Type *i8_ = nullptr, *i16_ = nullptr, *i32_ = nullptr, *f32_ = nullptr;
};

} // namespace sinter
