// jit/backend/cuda/nvptx_warp_mma.hpp — a warp's products on the tensor cores in a hand-built NVPTX
// kernel: mma.sync m16n8k16 fragments (bf16/f16 operands, f32 accumulators), their loads from
// global memory and from shared tiles (ldmatrix), the products made of them, lane reductions,
// accumulator slots
#pragma once
#include "jit/backend/cuda/nvptx_block_memory.hpp"

#include <array>
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

namespace sinter {

using Frag = std::array<llvm::Value*, 4>;  ///< an A operand (4 × b32) or a 16×8 f32 accumulator
using BFrag = std::array<llvm::Value*, 2>; ///< a B operand (2 × b32)

// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"): a lane's
// group is lane / 4 and its column pair 2 · (lane % 4). An A operand (16 × 16) holds rows group
// and group + 8 at columns pair, pair + 1 and pair + 8, pair + 9; a B operand (16 × 8) holds
// column group at rows pair, pair + 1, pair + 8, pair + 9; an accumulator (16 × 8) holds rows
// group and group + 8 at columns pair and pair + 1.
class WarpMma {
public:
  /// Products on operands of `dtype` (bf16 or f16), for the thread `memory` names.
  WarpMma(KernelEmitter& emitter, BlockMemory& memory, DType dtype);

  /// The lane's group (lane / 4) and first column of its pair (2 · (lane % 4)), i64.
  llvm::Value* group() const { return group_; }
  llvm::Value* lane_col() const { return lane_col_; }

  /// Starts a pass: the lanes' ldmatrix addresses are made at this point, ahead of its loops
  /// (addresses made per fragment would be hoisted out of the loops and fill the registers).
  void begin_pass();

  /// Column of accumulator element `e` of n-tile `j`, from column `first`.
  llvm::Value* element_col(llvm::Value* first, int64_t j, int e);

  /// The A operand of rows [first, first + 16) and columns [col0, col0 + 16) of `m`, zero
  /// outside it.
  Frag a_from_global(const GlobalMatrix& m, llvm::Value* first, int64_t col0);
  /// The A operands of rows [first, first + 16) of `m`, for k-steps over `cols_padded`.
  std::vector<Frag> a_frags(const GlobalMatrix& m, llvm::Value* first, int64_t cols_padded);

  /// A · tileᵀ over the tile's first 8 · `n_tiles` rows (`n_tiles` even): `a` holds 16 rows'
  /// A operands per k-step, the tile's rows are the product's columns (S = Q Kᵀ from K's tile
  /// and the like).
  std::vector<Frag> multiply_rows(const std::vector<Frag>& a, const SharedTile& t, int64_t n_tiles);
  /// acc += left · tile: `left` is accumulator tiles used as A operands (16 columns per
  /// k-step, rounded to 16 bits), the tile is B by columns, one n-tile of 8 columns per tile
  /// of `acc` (an even number).
  void multiply_add(std::vector<Frag>& acc, const std::vector<Frag>& left, const SharedTile& tile);

  /// The max or sum of `v` over the four lanes that hold an accumulator's rows.
  llvm::Value* quad_reduce(llvm::Value* v, bool max) { return lanes_reduce(v, 4, max); }
  /// The max or sum of `v` (f32) over each run of `lanes` (a power of two ≤ 32) aligned lanes.
  llvm::Value* lanes_reduce(llvm::Value* v, int64_t lanes, bool max);

  /// Accumulator tiles that live across loop iterations: allocas (SROA turns them into
  /// registers), every element starting at 0.
  using Slots = std::vector<std::array<llvm::AllocaInst*, 4>>;
  Slots slots(int64_t tiles);
  std::vector<Frag> load(const Slots& s);
  void store(const Slots& s, const std::vector<Frag>& v);

  /// d = a · b + c on the tensor cores, for the whole warp.
  Frag mma(const Frag& a, const BFrag& b, const Frag& c);
  Frag zero_frag();

private:
  std::array<BFrag, 2> b_pair_from_rows(const SharedTile& t, int64_t n0, int64_t k0);
  std::array<BFrag, 2> b_pair_from_columns(const SharedTile& t, int64_t k0, int64_t n0);
  Frag a_from_accumulators(const std::vector<Frag>& s, int64_t kk);
  llvm::Value* lane_base(const SharedTile& t, bool by_rows);
  llvm::Value* staged(const SharedTile& t, llvm::Value* base);
  llvm::Value* ix(int64_t v) { return e_.i64(v); }

  KernelEmitter& e_;
  llvm::IRBuilder<>& b_;
  BlockMemory& mem_;
  DType dtype_;
  llvm::Value *lane_ = nullptr, *group_ = nullptr, *lane_col_ = nullptr;
  std::map<std::tuple<int64_t, int64_t, bool>, llvm::Value*> lane_bases_; ///< this pass's
  llvm::Instruction* pass_start_ = nullptr; ///< where this pass's lane addresses go
};

} // namespace sinter
