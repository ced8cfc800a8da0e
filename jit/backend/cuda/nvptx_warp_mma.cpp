// jit/backend/cuda/nvptx_warp_mma.cpp — a warp's tensor-core products in a hand-built NVPTX
// kernel: mma.sync fragments, ldmatrix from shared tiles, and the products made of them
#include "jit/backend/cuda/nvptx_warp_mma.hpp"

#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsNVPTX.h>

namespace sinter {

WarpMma::WarpMma(KernelEmitter& emitter, BlockMemory& memory, DType dtype)
    : e_(emitter), b_(emitter.builder()), mem_(memory), dtype_(dtype) {
  lane_ = b_.CreateAnd(mem_.thread(), 31);
  group_ = b_.CreateLShr(lane_, 2);
  lane_col_ = b_.CreateShl(b_.CreateAnd(lane_, 3), 1);
}

std::vector<Frag> WarpMma::a_frags(const GlobalMatrix& m, llvm::Value* first, int64_t cols_padded) {
  std::vector<Frag> frags;
  for (int64_t ks = 0; ks < cols_padded / 16; ++ks)
    frags.push_back(a_from_global(m, first, ks * 16));
  return frags;
}

/// Column of accumulator element `e` of n-tile `j`, from column `first`.
llvm::Value* WarpMma::element_col(llvm::Value* first, int64_t j, int e) {
  return b_.CreateAdd(first, b_.CreateAdd(lane_col_, ix(j * 8 + (e & 1))));
}

/// The A operand of rows [first, first + 16) and columns [col0, col0 + 16) of `m`, zero
/// outside it. Rows of an even length (an even row stride) hold each lane's column pair in one
/// aligned 32-bit word (slices start at even elements of 16-byte aligned buffers): one load a pair,
/// not two.
Frag WarpMma::a_from_global(const GlobalMatrix& m, llvm::Value* first, int64_t col0) {
  llvm::Value* r0 = b_.CreateAdd(first, group_);
  llvm::Value* r1 = b_.CreateAdd(r0, ix(8));
  llvm::Value* c0 = b_.CreateAdd(lane_col_, ix(col0));
  auto pair = [&](llvm::Value* r, int64_t dc) {
    llvm::Value* c = b_.CreateAdd(c0, ix(dc));
    if (m.cols % 2 == 0 && m.row_stride % 2 == 0) return mem_.load_pair_or_zero(m, r, c);
    return mem_.pack(mem_.load_or_zero(m, r, c), mem_.load_or_zero(m, r, b_.CreateAdd(c, ix(1))));
  };
  return {pair(r0, 0), pair(r1, 0), pair(r0, 8), pair(r1, 8)};
}

// B operands come from shared memory through ldmatrix: one instruction gives a lane its part
// of four 8 × 8 matrices, the B operands of two n-tiles (where a load per 16-bit element or
// per pair would take four to eight). The lane's own row address plus a constant: no address
// registers per fragment (they would be hoisted out of the tile loop and fill the register
// file).

/// The B operands of n-tiles n0 and n0 + 8 whose (k, n) element is tile[n0 + n][k0 + k] (k
/// runs along a row).
std::array<BFrag, 2> WarpMma::b_pair_from_rows(const SharedTile& t, int64_t n0, int64_t k0) {
  auto m = mem_.ldmatrix_x4(staged(t, lane_base(t, true)), (n0 * t.stride + k0) * 2, false);
  return {BFrag{m[0], m[1]}, BFrag{m[2], m[3]}};
}

/// The B operands of n-tiles n0 and n0 + 8 whose (k, n) element is tile[k0 + k][n0 + n] (k
/// runs down a column).
std::array<BFrag, 2> WarpMma::b_pair_from_columns(const SharedTile& t, int64_t k0, int64_t n0) {
  auto m = mem_.ldmatrix_x4(staged(t, lane_base(t, false)), (k0 * t.stride + n0) * 2, true);
  return {BFrag{m[0], m[1]}, BFrag{m[2], m[3]}};
}

/// `base` moved to the stage of `t` being used.
llvm::Value* WarpMma::staged(const SharedTile& t, llvm::Value* base) {
  return t.shift ? b_.CreateGEP(b_.getInt8Ty(), base, t.shift) : base;
}

/// A · tileᵀ over the tile's first 8 · `n_tiles` rows: `a` holds 16 rows' A operands per
/// k-step, the tile's rows are the product's columns (S = Q Kᵀ from K's tile and the like).
std::vector<Frag> WarpMma::multiply_rows(const std::vector<Frag>& a, const SharedTile& t,
                                         int64_t n_tiles) {
  std::vector<Frag> acc(static_cast<std::size_t>(n_tiles), zero_frag());
  for (int64_t j = 0; j + 1 < n_tiles; j += 2)
    for (std::size_t ks = 0; ks < a.size(); ++ks) {
      auto [first, second] = b_pair_from_rows(t, j * 8, static_cast<int64_t>(ks) * 16);
      acc[j] = mma(a[ks], first, acc[j]);
      acc[j + 1] = mma(a[ks], second, acc[j + 1]);
    }
  return acc;
}

/// The A operand (16 rows × keys [16·kk, 16·kk + 16)) made of accumulators: n-tiles 2·kk
/// and 2·kk + 1 rounded to 16 bits.
Frag WarpMma::a_from_accumulators(const std::vector<Frag>& s, int64_t kk) {
  const Frag& lo = s[static_cast<std::size_t>(2 * kk)];
  const Frag& hi = s[static_cast<std::size_t>(2 * kk + 1)];
  return {mem_.narrow_pair(lo[0], lo[1], dtype_), mem_.narrow_pair(lo[2], lo[3], dtype_),
          mem_.narrow_pair(hi[0], hi[1], dtype_), mem_.narrow_pair(hi[2], hi[3], dtype_)};
}

/// acc += left · tile: `left` is accumulator tiles used as A operands (16 columns per
/// k-step), the tile is B by columns, one n-tile of 8 columns per tile of `acc`.
void WarpMma::multiply_add(std::vector<Frag>& acc, const std::vector<Frag>& left,
                           const SharedTile& tile) {
  for (int64_t kk = 0; kk < static_cast<int64_t>(left.size()) / 2; ++kk) {
    Frag a = a_from_accumulators(left, kk);
    for (std::size_t nt = 0; nt + 1 < acc.size(); nt += 2) {
      auto [first, second] = b_pair_from_columns(tile, kk * 16, static_cast<int64_t>(nt) * 8);
      acc[nt] = mma(a, first, acc[nt]);
      acc[nt + 1] = mma(a, second, acc[nt + 1]);
    }
  }
}

/// d = a · b + c on the tensor cores, for the whole warp.
Frag WarpMma::mma(const Frag& a, const BFrag& bf, const Frag& c) {
  std::vector<llvm::Value*> args;
  bool bf16 = dtype_ == DType::bf16;
  auto* half2 = llvm::FixedVectorType::get(b_.getHalfTy(), 2);
  auto operand = [&](llvm::Value* v) { return bf16 ? v : b_.CreateBitCast(v, half2); };
  for (llvm::Value* v : a)
    args.push_back(operand(v));
  for (llvm::Value* v : bf)
    args.push_back(operand(v));
  args.insert(args.end(), c.begin(), c.end());
  llvm::Value* d = b_.CreateIntrinsic(bf16 ? llvm::Intrinsic::nvvm_mma_m16n8k16_row_col_bf16
                                           : llvm::Intrinsic::nvvm_mma_m16n8k16_row_col_f32_f32,
                                      {}, args);
  Frag out{};
  for (unsigned i = 0; i < 4; ++i)
    out[i] = b_.CreateExtractValue(d, {i});
  return out;
}

WarpMma::Slots WarpMma::slots(int64_t tiles) {
  Slots s(static_cast<std::size_t>(tiles));
  for (auto& tile : s)
    for (llvm::AllocaInst*& slot : tile) {
      slot = e_.entry_alloca(b_.getFloatTy());
      b_.CreateStore(llvm::ConstantFP::get(b_.getFloatTy(), 0.0), slot);
    }
  return s;
}

std::vector<Frag> WarpMma::load(const Slots& s) {
  std::vector<Frag> out(s.size());
  for (std::size_t t = 0; t < s.size(); ++t)
    for (std::size_t e = 0; e < 4; ++e)
      out[t][e] = b_.CreateLoad(b_.getFloatTy(), s[t][e]);
  return out;
}

void WarpMma::store(const Slots& s, const std::vector<Frag>& v) {
  for (std::size_t t = 0; t < s.size(); ++t)
    for (std::size_t e = 0; e < 4; ++e)
      b_.CreateStore(v[t][e], s[t][e]);
}

Frag WarpMma::zero_frag() {
  llvm::Constant* zero = llvm::ConstantFP::get(b_.getFloatTy(), 0.0);
  return {zero, zero, zero, zero};
}

/// The row address this lane gives ldmatrix for B operands of n-tiles 0 and 8 and k-steps
/// [0, 16) of `t`: lanes 8i to 8i + 7 address the rows of matrix i, which is (k 0–7, n 0–7),
/// (k 8–15, n 0–7), (k 0–7, n 8–15), (k 8–15, n 8–15); k runs along the tile's rows
/// (`by_rows`) or down its columns. Made once per pass (before its loops).
llvm::Value* WarpMma::lane_base(const SharedTile& t, bool by_rows) {
  auto key = std::make_tuple(t.offset, t.stride, by_rows);
  auto [it, added] = lane_bases_.try_emplace(key, nullptr);
  if (added) {
    llvm::IRBuilderBase::InsertPointGuard keep(b_);
    b_.SetInsertPoint(pass_start_);
    llvm::Value* matrix = b_.CreateLShr(lane_, 3);
    llvm::Value* k_half = b_.CreateMul(b_.CreateAnd(matrix, 1), ix(8));
    llvm::Value* n_half = b_.CreateMul(b_.CreateLShr(matrix, 1), ix(8));
    llvm::Value* r = b_.CreateAnd(lane_, 7);
    SharedTile fixed{t.offset, t.stride}; // the stage's shift is added per tile
    it->second = by_rows ? mem_.shared_at(fixed, b_.CreateAdd(r, n_half), k_half)
                         : mem_.shared_at(fixed, b_.CreateAdd(r, k_half), n_half);
  }
  return it->second;
}

void WarpMma::begin_pass() {
  lane_bases_.clear();
  pass_start_ = b_.CreateIntrinsic(llvm::Intrinsic::donothing, {}, {});
}

llvm::Value* WarpMma::lanes_reduce(llvm::Value* v, int64_t lanes, bool max) {
  for (int offset = 1; offset < lanes; offset *= 2) {
    llvm::Value* other =
        b_.CreateIntrinsic(llvm::Intrinsic::nvvm_shfl_sync_bfly_f32, {},
                           {b_.getInt32(0xffffffffu), v, b_.getInt32(static_cast<uint32_t>(offset)),
                            b_.getInt32(0x1f)});
    v = max ? b_.CreateMaxNum(v, other) : b_.CreateFAdd(v, other);
  }
  return v;
}

} // namespace sinter
