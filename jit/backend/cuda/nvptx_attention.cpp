// jit/backend/cuda/nvptx_attention.cpp — fused attention on NVIDIA tensor cores: the bodies of the
// flash-attention forward and backward kernels in LLVM IR (mma.sync m16n8k16 on bf16/f16, f32
// accumulators)
#include "jit/backend/cuda/nvptx_attention.hpp"

#include "jit/backend/attention_layout.hpp"
#include "jit/backend/cuda/nvptx_attention_tiling.hpp"
#include "jit/backend/cuda/nvptx_block_memory.hpp"

#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <numbers>
#include <tuple>

namespace sinter {
namespace {

using namespace attention_tiling;

constexpr float masked_score = -1e9f; ///< what the op's definition puts in masked scores

using Frag = std::array<llvm::Value*, 4>;  ///< an A operand (4 × b32) or a 16×8 f32 accumulator
using BFrag = std::array<llvm::Value*, 2>; ///< a B operand (2 × b32)

class AttentionKernel {
public:
  explicit AttentionKernel(KernelEmitter& e)
      : e_(e), b_(e.builder()), g_(e.graph()), root_(e.root()),
        l_(attention_layout(e.graph(), e.root())), out_(output_positions(g_, e.kernel())),
        dtype_(g_.type(root_.inputs[0]).dtype), dp_(round_up(l_.d, 16)), dvp_(round_up(l_.dv, 16)),
        mem_(e, threads_per_block,
             std::max(tile_bytes(key_tile, dp_) + tile_bytes(key_tile, dvp_),
                      l_.backward ? key_side_bytes() : 0)) {
    i8_ = b_.getInt8Ty();
    i16_ = b_.getInt16Ty();
    i32_ = b_.getInt32Ty();
    f32_ = b_.getFloatTy();
    tid_ = mem_.thread();
    llvm::Value* lane = b_.CreateAnd(tid_, 31);
    warp_ = b_.CreateLShr(tid_, 5);
    group_ = b_.CreateLShr(lane, 2);
    quad_ = b_.CreateAnd(lane, 3);
    lane_col_ = b_.CreateShl(quad_, 1);
    k_tile_ = {0, dp_ + row_padding};
    v_tile_ = {tile_bytes(key_tile, dp_), dvp_ + row_padding};
  }

  void emit(const GpuLaunch& launch) {
    auto special = [&](llvm::Intrinsic::ID id) {
      return b_.CreateZExt(b_.CreateIntrinsic(id, {}, {}), b_.getInt64Ty());
    };
    llvm::Value* block = special(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
    llvm::Value* grid = special(llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x);
    // Blocks walk the work items grid-stride; every thread of a block has the same item, so
    // the barriers inside are reached by all of them.
    e_.emit_for(
        block, ix(launch.items),
        [&](llvm::Value* work) {
          if (!l_.backward) return forward(work);
          int64_t key_items = work_items(l_, out_).key_side;
          if (key_items) e_.emit_if(b_.CreateICmpSLT(work, ix(key_items)), [&] { key_pass(work); });
          if (out_.dq >= 0)
            e_.emit_if(b_.CreateICmpSGE(work, ix(key_items)),
                       [&] { query_pass(b_.CreateSub(work, ix(key_items))); });
        },
        grid);
  }

private:
  // ---- the three passes ---------------------------------------------------------------------

  /// Forward: 64 query rows of one slice; every key tile once, through shared memory; the
  /// softmax is online (running row max and sum), so the scores never leave registers.
  void forward(llvm::Value* work) {
    Pass pass = start_pass(work, l_.tq);
    llvm::Value *batch = pass.batch, *mask_base = pass.mask_base;
    std::vector<Frag> q_frags = a_frags(pass.q, pass.first, dp_);
    Slots o_acc = slots(dvp_ / 8);
    std::array<llvm::AllocaInst*, 2> row_max{}, row_sum{};
    for (int h = 0; h < 2; ++h) {
      row_max[h] = scalar_slot(negative_infinity());
      row_sum[h] = scalar_slot(f(0));
    }
    std::array<llvm::Value*, 2> rows = pass.rows;
    e_.emit_for(ix(0), key_tiles(pass.block), [&](llvm::Value* tile) {
      llvm::Value* key0 = load_key_tiles(pass, tile);
      std::vector<Frag> s(key_tile / 8);
      for (int64_t j = 0; j < key_tile / 8; ++j) {
        s[j] = zero_frag();
        for (int64_t ks = 0; ks < dp_ / 16; ++ks)
          s[j] = mma(q_frags[ks], b_from_rows(k_tile_, j * 8, ks * 16), s[j]);
      }
      for (int64_t j = 0; j < key_tile / 8; ++j)
        for (int e = 0; e < 4; ++e) {
          llvm::Value* key = element_col(key0, j, e);
          llvm::Value* x = score(s[j][e], mask_base, rows[e / 2], key).value;
          s[j][e] = b_.CreateSelect(b_.CreateICmpSLT(key, ix(l_.tk)), x, negative_infinity());
        }
      std::array<llvm::Value*, 2> tile_max{negative_infinity(), negative_infinity()};
      for (const Frag& frag : s)
        for (int e = 0; e < 4; ++e)
          tile_max[e / 2] = b_.CreateMaxNum(tile_max[e / 2], frag[e]);
      std::array<llvm::Value*, 2> base{}, alpha{}, sum{f(0), f(0)};
      for (int h = 0; h < 2; ++h) {
        llvm::Value* old_max = load(row_max[h]);
        llvm::Value* new_max = b_.CreateMaxNum(old_max, quad_reduce(tile_max[h], true));
        // A row with no key seen yet keeps -inf: subtract 0 then, never inf - inf.
        base[h] = b_.CreateSelect(b_.CreateFCmpOEQ(new_max, negative_infinity()), f(0), new_max);
        alpha[h] = exp(b_.CreateFSub(old_max, base[h]));
        b_.CreateStore(new_max, row_max[h]);
      }
      for (Frag& frag : s)
        for (int e = 0; e < 4; ++e) {
          frag[e] = exp(b_.CreateFSub(frag[e], base[e / 2]));
          sum[e / 2] = b_.CreateFAdd(sum[e / 2], frag[e]);
        }
      for (int h = 0; h < 2; ++h)
        b_.CreateStore(b_.CreateFAdd(b_.CreateFMul(load(row_sum[h]), alpha[h]), sum[h]),
                       row_sum[h]);
      std::vector<Frag> o = load(o_acc);
      for (Frag& frag : o)
        for (int e = 0; e < 4; ++e)
          frag[e] = b_.CreateFMul(frag[e], alpha[e / 2]);
      multiply_add(o, s, v_tile_);
      store(o_acc, o);
    });
    std::array<llvm::Value*, 2> total{};
    for (int h = 0; h < 2; ++h)
      total[h] = quad_reduce(load(row_sum[h]), false);
    if (out_.o >= 0)
      store_tiles(out_.o, load(o_acc), batch, rows, l_.tq, l_.dv,
                  [&](llvm::Value* x, int e) { return b_.CreateFDiv(x, total[e / 2]); });
    if (out_.lse >= 0) {
      DType lse_type = g_.type(e_.kernel().outputs()[static_cast<std::size_t>(out_.lse)]).dtype;
      e_.emit_if(b_.CreateICmpEQ(quad_, ix(0)), [&] {
        for (int h = 0; h < 2; ++h) {
          // A row the mask leaves no key scores 0 everywhere (the op's definition), not -1e9:
          // the same uniform weights, another log-sum-exp.
          llvm::Value* top = load(row_max[h]);
          top = b_.CreateSelect(b_.CreateFCmpOEQ(top, f(masked_score)), f(0), top);
          store_element(out_.lse, lse_type, batch, l_.tq, 1, rows[h], ix(0),
                        b_.CreateFAdd(top, log(total[h])));
        }
      });
    }
  }

  /// Backward, key side: dK and dV of 64 keys of one slice, over every query tile that can
  /// attend to them (shared memory: q and dO tiles, the rows' log-sum-exp and dO·O).
  void key_pass(llvm::Value* work) {
    Pass pass = start_pass(work, l_.tk);
    llvm::Value *batch = pass.batch, *mask_base = pass.mask_base, *key_block = pass.block;
    std::vector<Frag> k_frags = a_frags(pass.k, pass.first, dp_);
    std::vector<Frag> v_frags = a_frags(pass.v, pass.first, dvp_);
    Slots dk_acc = slots(dp_ / 8), dv_acc = slots(dvp_ / 8);
    int64_t tile_rows = backward_query_tile(l_);
    SharedTile q_tile{0, dp_ + row_padding};
    SharedTile do_tile{tile_bytes(tile_rows, dp_), dvp_ + row_padding};
    // Per query row of the tile: lse, dO·O, and (masked) whether the row keeps any key.
    int64_t stats = do_tile.offset + tile_bytes(tile_rows, dvp_);
    std::array<llvm::Value*, 2> keys = pass.rows;
    llvm::Value* first_tile = ix(0);
    // Causal without a mask: query tiles before the block's first key attend to none of them.
    if (l_.causal && !l_.has_mask)
      first_tile = b_.CreateUDiv(b_.CreateMul(key_block, ix(block_rows)), ix(tile_rows));
    e_.emit_for(first_tile, ix(ceil_div(l_.tq, tile_rows)), [&](llvm::Value* tile) {
      llvm::Value* query0 = b_.CreateMul(tile, ix(tile_rows));
      barrier();
      mem_.copy_tile(pass.q, query0, q_tile, tile_rows, dp_);
      mem_.copy_tile(pass.d_o, query0, do_tile, tile_rows, dvp_);
      e_.emit_for(
          tid_, ix(tile_rows),
          [&](llvm::Value* i) {
            llvm::Value* query = b_.CreateAdd(query0, i);
            llvm::Value* valid = b_.CreateICmpSLT(query, ix(l_.tq));
            llvm::Value* row = b_.CreateSelect(valid, query, ix(0));
            llvm::Value* lse = load_lse(batch, row);
            llvm::Value* delta = row_dot(pass.o, pass.d_o, row, ix(0), 1);
            mem_.store_shared_f32(stats, i, b_.CreateSelect(valid, lse, f(0)));
            mem_.store_shared_f32(stats + 4 * tile_rows, i, b_.CreateSelect(valid, delta, f(0)));
            if (l_.has_mask)
              mem_.store_shared_f32(stats + 8 * tile_rows, i, keeps_any(mask_base, row, ix(0), 1));
          },
          ix(threads_per_block));
      barrier();
      int64_t query_tiles = tile_rows / 8;
      // Sᵀ = K Qᵀ (16 keys × the tile's queries) → Pᵀ from the saved log-sum-exp.
      std::vector<Frag> p(query_tiles), ds(query_tiles);
      std::vector<std::array<llvm::Value*, 4>> masked(query_tiles);
      for (int64_t j = 0; j < query_tiles; ++j) {
        p[j] = zero_frag();
        for (int64_t ks = 0; ks < dp_ / 16; ++ks)
          p[j] = mma(k_frags[ks], b_from_rows(q_tile, j * 8, ks * 16), p[j]);
        for (int e = 0; e < 4; ++e) {
          llvm::Value* local = element_col(ix(0), j, e);
          llvm::Value* query = b_.CreateAdd(query0, local);
          llvm::Value* fill = nullptr;
          if (l_.has_mask) fill = masked_fill(mem_.load_shared_f32(stats + 8 * tile_rows, local));
          Score s = score(p[j][e], mask_base, query, keys[e / 2], fill);
          masked[j][e] = s.masked;
          llvm::Value* weight = exp(b_.CreateFSub(s.value, mem_.load_shared_f32(stats, local)));
          llvm::Value* real = b_.CreateAnd(b_.CreateICmpSLT(keys[e / 2], ix(l_.tk)),
                                           b_.CreateICmpSLT(query, ix(l_.tq)));
          p[j][e] = b_.CreateSelect(real, weight, f(0));
        }
      }
      // dV += Pᵀ dO.
      std::vector<Frag> dv = load(dv_acc);
      multiply_add(dv, p, do_tile);
      store(dv_acc, dv);
      // dPᵀ = V dOᵀ; dSᵀ = Pᵀ ∘ (dPᵀ − dO·O), zero where the op's where() masked the score.
      for (int64_t j = 0; j < query_tiles; ++j) {
        ds[j] = zero_frag();
        for (int64_t ks = 0; ks < dvp_ / 16; ++ks)
          ds[j] = mma(v_frags[ks], b_from_rows(do_tile, j * 8, ks * 16), ds[j]);
        for (int e = 0; e < 4; ++e) {
          llvm::Value* delta =
              mem_.load_shared_f32(stats + 4 * tile_rows, element_col(ix(0), j, e));
          llvm::Value* g = b_.CreateFMul(p[j][e], b_.CreateFSub(ds[j][e], delta));
          ds[j][e] = b_.CreateSelect(masked[j][e], f(0), g);
        }
      }
      // dK += dSᵀ Q (scaled at the end).
      std::vector<Frag> dk = load(dk_acc);
      multiply_add(dk, ds, q_tile);
      store(dk_acc, dk);
    });
    if (out_.dk >= 0) store_tiles(out_.dk, load(dk_acc), batch, keys, l_.tk, l_.d, scaled());
    if (out_.dv >= 0)
      store_tiles(out_.dv, load(dv_acc), batch, keys, l_.tk, l_.dv,
                  [](llvm::Value* x, int) { return x; });
  }

  /// Backward, query side: dQ of 64 query rows of one slice, over every key tile.
  void query_pass(llvm::Value* work) {
    Pass pass = start_pass(work, l_.tq);
    llvm::Value *batch = pass.batch, *mask_base = pass.mask_base;
    std::vector<Frag> q_frags = a_frags(pass.q, pass.first, dp_);
    std::vector<Frag> do_frags = a_frags(pass.d_o, pass.first, dvp_);
    std::array<llvm::Value*, 2> rows = pass.rows;
    std::array<llvm::Value*, 2> lse{}, delta{}, fill{};
    for (int h = 0; h < 2; ++h) {
      llvm::Value* valid = b_.CreateICmpSLT(rows[h], ix(l_.tq));
      llvm::Value* row = b_.CreateSelect(valid, rows[h], ix(0));
      lse[h] = load_lse(batch, row);
      // dO·O of the row: the quad's four lanes take every fourth column, then add up.
      delta[h] = quad_reduce(row_dot(pass.o, pass.d_o, row, quad_, 4), false);
      if (l_.has_mask)
        fill[h] = masked_fill(quad_reduce(keeps_any(mask_base, row, quad_, 4), true));
    }
    Slots dq_acc = slots(dp_ / 8);
    e_.emit_for(ix(0), key_tiles(pass.block), [&](llvm::Value* tile) {
      llvm::Value* key0 = load_key_tiles(pass, tile);
      std::vector<Frag> ds(key_tile / 8);
      for (int64_t j = 0; j < key_tile / 8; ++j) {
        Frag s = zero_frag(), dp = zero_frag();
        for (int64_t ks = 0; ks < dp_ / 16; ++ks)
          s = mma(q_frags[ks], b_from_rows(k_tile_, j * 8, ks * 16), s);
        for (int64_t ks = 0; ks < dvp_ / 16; ++ks)
          dp = mma(do_frags[ks], b_from_rows(v_tile_, j * 8, ks * 16), dp);
        for (int e = 0; e < 4; ++e) {
          llvm::Value* key = element_col(key0, j, e);
          Score x = score(s[e], mask_base, rows[e / 2], key, fill[e / 2]);
          llvm::Value* weight = exp(b_.CreateFSub(x.value, lse[e / 2]));
          llvm::Value* real = b_.CreateAnd(b_.CreateICmpSLT(key, ix(l_.tk)),
                                           b_.CreateICmpSLT(rows[e / 2], ix(l_.tq)));
          llvm::Value* g = b_.CreateFMul(weight, b_.CreateFSub(dp[e], delta[e / 2]));
          ds[j][e] = b_.CreateSelect(b_.CreateAnd(real, b_.CreateNot(x.masked)), g, f(0));
        }
      }
      std::vector<Frag> dq = load(dq_acc);
      multiply_add(dq, ds, k_tile_);
      store(dq_acc, dq);
    });
    store_tiles(out_.dq, load(dq_acc), batch, rows, l_.tq, l_.d, scaled());
  }

  // ---- what the passes share --------------------------------------------------------------

  /// A pass's work item: its slice, its block of 64 rows (queries or keys) and this warp's
  /// first row and this lane's two rows, the slice's matrices.
  struct Pass {
    llvm::Value *batch, *block, *first, *mask_base;
    std::array<llvm::Value*, 2> rows;
    GlobalMatrix q, k, v, o, d_o; ///< o and d_o in the backward only
  };
  Pass start_pass(llvm::Value* work, int64_t rows) {
    begin_pass();
    Pass p{};
    int64_t blocks = ceil_div(rows, block_rows);
    p.batch = b_.CreateUDiv(work, ix(blocks));
    p.block = b_.CreateURem(work, ix(blocks));
    p.first =
        b_.CreateAdd(b_.CreateMul(p.block, ix(block_rows)), b_.CreateMul(warp_, ix(warp_rows)));
    p.rows = {b_.CreateAdd(p.first, group_), nullptr};
    p.rows[1] = b_.CreateAdd(p.rows[0], ix(8));
    p.mask_base = mask_offset(p.batch);
    p.q = matrix(0, p.batch, l_.tq, l_.d);
    p.k = matrix(1, p.batch, l_.tk, l_.d);
    p.v = matrix(2, p.batch, l_.tk, l_.dv);
    if (l_.backward) {
      p.o = matrix(3, p.batch, l_.tq, l_.dv);
      p.d_o = matrix(5, p.batch, l_.tq, l_.dv);
    }
    return p;
  }

  /// The A operands of rows [first, first + 16) of `m`, for k-steps over `cols_padded`.
  std::vector<Frag> a_frags(const GlobalMatrix& m, llvm::Value* first, int64_t cols_padded) {
    std::vector<Frag> frags;
    for (int64_t ks = 0; ks < cols_padded / 16; ++ks)
      frags.push_back(a_from_global(m, first, ks * 16));
    return frags;
  }

  /// The key tiles a block of query rows reads. Causal without a mask: tiles past the block's
  /// last row hold only masked scores, whose weights are exactly 0 (a row always keeps key 0).
  llvm::Value* key_tiles(llvm::Value* query_block) {
    llvm::Value* tiles = ix(ceil_div(l_.tk, key_tile));
    if (!l_.causal || l_.has_mask) return tiles;
    return b_.CreateBinaryIntrinsic(llvm::Intrinsic::umin, tiles, b_.CreateAdd(query_block, ix(1)));
  }

  /// Key tile `tile` of k and v into shared memory (k_tile_, v_tile_); returns its first key.
  llvm::Value* load_key_tiles(const Pass& pass, llvm::Value* tile) {
    llvm::Value* key0 = b_.CreateMul(tile, ix(key_tile));
    barrier(); // every warp is done with the previous tile
    mem_.copy_tile(pass.k, key0, k_tile_, key_tile, dp_);
    mem_.copy_tile(pass.v, key0, v_tile_, key_tile, dvp_);
    barrier();
    return key0;
  }

  /// Stores accumulator tiles `acc` (this lane's `rows`, every column) to output `position`,
  /// [rows_total, cols] per slice, each value through `finish(value, element)`.
  using Finish = std::function<llvm::Value*(llvm::Value*, int)>;
  void store_tiles(int position, const std::vector<Frag>& acc, llvm::Value* batch,
                   const std::array<llvm::Value*, 2>& rows, int64_t rows_total, int64_t cols,
                   const Finish& finish) {
    for (std::size_t nt = 0; nt < acc.size(); ++nt)
      for (int e = 0; e < 4; ++e)
        store_element(position, dtype_, batch, rows_total, cols, rows[e / 2],
                      element_col(ix(0), static_cast<int64_t>(nt), e), finish(acc[nt][e], e));
  }
  /// dQ and dK carry the scale of the scores.
  Finish scaled() {
    return
        [this](llvm::Value* x, int) { return b_.CreateFMul(x, f(static_cast<float>(l_.scale))); };
  }

  // ---- scores ------------------------------------------------------------------------------

  struct Score {
    llvm::Value* value;  ///< scaled, -1e9 where masked
    llvm::Value* masked; ///< i1: the op's where() replaced it (its gradient is 0)
  };

  /// The scaled score of (row, key) from its dot product, masked as the op defines it: -1e9
  /// where the mask says no or (causal) the key comes after the row, or `fill` instead (0 in a
  /// row the mask leaves no key: its weights are uniform).
  Score score(llvm::Value* dot, llvm::Value* mask_base, llvm::Value* row, llvm::Value* key,
              llvm::Value* fill = nullptr) {
    llvm::Value* x = b_.CreateFMul(dot, f(static_cast<float>(l_.scale)));
    llvm::Value* masked = b_.getFalse();
    if (l_.has_mask) {
      // Rows and keys past the ends read a real element (their results are discarded).
      llvm::Value* r = b_.CreateSelect(b_.CreateICmpSLT(row, ix(l_.tq)), row, ix(0));
      llvm::Value* c = b_.CreateSelect(b_.CreateICmpSLT(key, ix(l_.tk)), key, ix(0));
      llvm::Value* at =
          b_.CreateAdd(mask_base, b_.CreateAdd(b_.CreateMul(r, ix(l_.mask_row_stride)),
                                               b_.CreateMul(c, ix(l_.mask_col_stride))));
      llvm::Value* keep = b_.CreateLoad(i8_, b_.CreateGEP(i8_, read(l_.mask_operand), at));
      masked = b_.CreateICmpEQ(keep, b_.getInt8(0));
    }
    if (l_.causal) masked = b_.CreateOr(masked, b_.CreateICmpSGT(key, row));
    return {b_.CreateSelect(masked, fill ? fill : f(masked_score), x), masked};
  }

  /// 1 when `row` (in range) keeps one of keys first, first + step, ... < tk, else 0.
  llvm::Value* keeps_any(llvm::Value* mask_base, llvm::Value* row, llvm::Value* first,
                         int64_t step) {
    llvm::AllocaInst* any = scalar_slot(f(0));
    e_.emit_for(
        first, ix(l_.tk),
        [&](llvm::Value* key) {
          llvm::Value* masked = score(f(0), mask_base, row, key).masked;
          b_.CreateStore(b_.CreateSelect(masked, load(any), f(1)), any);
        },
        ix(step));
    return load(any);
  }
  /// What masked scores of a row become: -1e9, or 0 when the row keeps no key at all.
  llvm::Value* masked_fill(llvm::Value* keeps) {
    return b_.CreateSelect(b_.CreateFCmpOGT(keeps, f(0.5f)), f(masked_score), f(0));
  }

  /// Offset of slice `batch` in the mask (0 without one).
  llvm::Value* mask_offset(llvm::Value* batch) {
    llvm::Value* offset = ix(0);
    if (!l_.has_mask) return offset;
    for (std::size_t i = l_.batch_dims.size(); i-- > 0;) {
      llvm::Value* index = b_.CreateURem(batch, ix(l_.batch_dims[i]));
      offset = b_.CreateAdd(offset, b_.CreateMul(index, ix(l_.mask_batch_stride[i])));
      batch = b_.CreateUDiv(batch, ix(l_.batch_dims[i]));
    }
    return offset;
  }

  /// The saved log-sum-exp of `row` (in range) of slice `batch`, as f32.
  llvm::Value* load_lse(llvm::Value* batch, llvm::Value* row) {
    DType t = g_.type(root_.inputs[4]).dtype;
    llvm::Value* at = b_.CreateAdd(b_.CreateMul(batch, ix(l_.tq)), row);
    return mem_.load_float(read(4), t, at);
  }

  /// Σ o[row, c]·do[row, c] over c = first, first + step, ... < dv, in f32.
  llvm::Value* row_dot(const GlobalMatrix& o, const GlobalMatrix& d_o, llvm::Value* row,
                       llvm::Value* first, int64_t step) {
    llvm::AllocaInst* sum = scalar_slot(f(0));
    e_.emit_for(
        first, ix(l_.dv),
        [&](llvm::Value* c) {
          llvm::Value* at = b_.CreateAdd(b_.CreateMul(row, ix(l_.dv)), c);
          llvm::Value* x = b_.CreateFMul(widen(mem_.load16(o, at)), widen(mem_.load16(d_o, at)));
          b_.CreateStore(b_.CreateFAdd(load(sum), x), sum);
        },
        ix(step));
    return load(sum);
  }

  // ---- fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type") ----
  // A lane's group is lane / 4 and its column pair 2 · (lane % 4). An A operand (16 × 16)
  // holds rows group and group + 8 at columns pair, pair + 1 and pair + 8, pair + 9; a B operand
  // (16 × 8) holds column group at rows pair, pair + 1, pair + 8, pair + 9; an accumulator
  // (16 × 8) holds rows group and group + 8 at columns pair and pair + 1.

  /// Column of accumulator element `e` of n-tile `j`, from column `first`.
  llvm::Value* element_col(llvm::Value* first, int64_t j, int e) {
    return b_.CreateAdd(first, b_.CreateAdd(lane_col_, ix(j * 8 + (e & 1))));
  }

  /// The A operand of rows [first, first + 16) and columns [col0, col0 + 16) of `m`, zero
  /// outside it.
  Frag a_from_global(const GlobalMatrix& m, llvm::Value* first, int64_t col0) {
    llvm::Value* r0 = b_.CreateAdd(first, group_);
    llvm::Value* r1 = b_.CreateAdd(r0, ix(8));
    llvm::Value* c0 = b_.CreateAdd(lane_col_, ix(col0));
    auto at = [&](llvm::Value* r, int64_t dc) {
      return mem_.load_or_zero(m, r, b_.CreateAdd(c0, ix(dc)));
    };
    return {mem_.pack(at(r0, 0), at(r0, 1)), mem_.pack(at(r1, 0), at(r1, 1)),
            mem_.pack(at(r0, 8), at(r0, 9)), mem_.pack(at(r1, 8), at(r1, 9))};
  }

  /// The B operand whose (k, n) element is tile[n0 + n][k0 + k] (k runs along a row).
  BFrag b_from_rows(const SharedTile& t, int64_t n0, int64_t k0) {
    // The lane's own address plus a constant: ld.shared [reg + offset], no address registers
    // per fragment (they would be hoisted out of the tile loop and fill the register file).
    llvm::Value* base = lane_base(t, true);
    int64_t at = (n0 * t.stride + k0) * 2;
    return {mem_.load_shared(i32_, base, at), mem_.load_shared(i32_, base, at + 16)};
  }

  /// The B operand whose (k, n) element is tile[k0 + k][n0 + n] (k runs down a column).
  BFrag b_from_columns(const SharedTile& t, int64_t k0, int64_t n0) {
    llvm::Value* base = lane_base(t, false);
    auto at = [&](int64_t dr) {
      return mem_.load_shared(i16_, base, ((k0 + dr) * t.stride + n0) * 2);
    };
    return {mem_.pack(at(0), at(1)), mem_.pack(at(8), at(9))};
  }

  /// The A operand (16 rows × keys [16·kk, 16·kk + 16)) made of accumulators: n-tiles 2·kk
  /// and 2·kk + 1 rounded to 16 bits.
  Frag a_from_accumulators(const std::vector<Frag>& s, int64_t kk) {
    const Frag& lo = s[static_cast<std::size_t>(2 * kk)];
    const Frag& hi = s[static_cast<std::size_t>(2 * kk + 1)];
    return {mem_.pack(narrow(lo[0]), narrow(lo[1])), mem_.pack(narrow(lo[2]), narrow(lo[3])),
            mem_.pack(narrow(hi[0]), narrow(hi[1])), mem_.pack(narrow(hi[2]), narrow(hi[3]))};
  }

  /// acc += left · tile: `left` is accumulator tiles used as A operands (16 columns per
  /// k-step), the tile is B by columns, one n-tile of 8 columns per tile of `acc`.
  void multiply_add(std::vector<Frag>& acc, const std::vector<Frag>& left, const SharedTile& tile) {
    for (int64_t kk = 0; kk < static_cast<int64_t>(left.size()) / 2; ++kk) {
      Frag a = a_from_accumulators(left, kk);
      for (std::size_t nt = 0; nt < acc.size(); ++nt)
        acc[nt] = mma(a, b_from_columns(tile, kk * 16, static_cast<int64_t>(nt) * 8), acc[nt]);
    }
  }

  /// d = a · b + c on the tensor cores, for the whole warp.
  Frag mma(const Frag& a, const BFrag& bf, const Frag& c) {
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

  Frag zero_frag() { return {f(0), f(0), f(0), f(0)}; }

  // ---- memory ------------------------------------------------------------------------------

  static int64_t tile_bytes(int64_t rows, int64_t cols) { return rows * (cols + row_padding) * 2; }
  int64_t key_side_bytes() const {
    int64_t rows = backward_query_tile(l_);
    return tile_bytes(rows, dp_) + tile_bytes(rows, dvp_) + 3 * 4 * rows;
  }

  llvm::Value* argument(int position) {
    return e_.function()->getArg(static_cast<unsigned>(position));
  }
  /// The buffer of the root's operand `operand`.
  llvm::Value* read(std::size_t operand) {
    const Kernel& kernel = e_.kernel();
    ValueId buffer = e_.plan().view_of[root_.inputs[operand]];
    auto at = std::find(kernel.reads.begin(), kernel.reads.end(), buffer);
    return argument(static_cast<int>(kernel.outputs().size()) +
                    static_cast<int>(at - kernel.reads.begin()));
  }
  GlobalMatrix matrix(std::size_t operand, llvm::Value* batch, int64_t rows, int64_t cols) {
    return {read(operand), b_.CreateMul(batch, ix(rows * cols)), rows, cols};
  }

  /// The address of this lane's element of `t` in B operands: row group, column pair
  /// (`by_rows`), or row pair, column group. Made once per pass (before its loops).
  llvm::Value* lane_base(const SharedTile& t, bool by_rows) {
    auto key = std::make_tuple(t.offset, t.stride, by_rows);
    auto [it, added] = lane_bases_.try_emplace(key, nullptr);
    if (added) {
      llvm::IRBuilderBase::InsertPointGuard keep(b_);
      b_.SetInsertPoint(pass_start_);
      llvm::Value* row = by_rows ? group_ : lane_col_;
      llvm::Value* col = by_rows ? lane_col_ : group_;
      it->second = mem_.shared_at(t, row, col);
    }
    return it->second;
  }
  /// Starts a pass: B operand addresses are made at this point, ahead of the loops.
  void begin_pass() {
    lane_bases_.clear();
    pass_start_ = b_.CreateIntrinsic(llvm::Intrinsic::donothing, {}, {});
  }
  /// Stores f32 `v` as `t` at [row, col] of the [rows, cols] slice `batch` of output
  /// `position`, when the element exists.
  void store_element(int position, DType t, llvm::Value* batch, int64_t rows, int64_t cols,
                     llvm::Value* row, llvm::Value* col, llvm::Value* v) {
    llvm::Value* inside =
        b_.CreateAnd(b_.CreateICmpSLT(row, ix(rows)), b_.CreateICmpSLT(col, ix(cols)));
    e_.emit_if(inside, [&] {
      llvm::Value* at = b_.CreateAdd(b_.CreateMul(batch, ix(rows * cols)),
                                     b_.CreateAdd(b_.CreateMul(row, ix(cols)), col));
      mem_.store_float(argument(position), t, at, v);
    });
  }

  // ---- values ------------------------------------------------------------------------------

  llvm::Value* widen(llvm::Value* bits) { return mem_.widen(bits, dtype_); }
  llvm::Value* narrow(llvm::Value* v) { return mem_.narrow(v, dtype_); }

  /// e^x through ex2.approx (the scores are rounded to 16 bits before they are used anyway).
  llvm::Value* exp(llvm::Value* x) {
    return b_.CreateIntrinsic(llvm::Intrinsic::nvvm_ex2_approx_f, {},
                              {b_.CreateFMul(x, f(static_cast<float>(std::numbers::log2e)))});
  }
  llvm::Value* log(llvm::Value* x) {
    return b_.CreateFMul(b_.CreateIntrinsic(llvm::Intrinsic::nvvm_lg2_approx_f, {}, {x}),
                         f(static_cast<float>(std::numbers::ln2)));
  }
  /// The max or sum of `v` over the four lanes that hold the same rows.
  llvm::Value* quad_reduce(llvm::Value* v, bool max) {
    for (int offset : {1, 2}) {
      llvm::Value* other =
          b_.CreateIntrinsic(llvm::Intrinsic::nvvm_shfl_sync_bfly_f32, {},
                             {b_.getInt32(0xffffffffu), v,
                              b_.getInt32(static_cast<uint32_t>(offset)), b_.getInt32(0x1f)});
      v = max ? b_.CreateMaxNum(v, other) : b_.CreateFAdd(v, other);
    }
    return v;
  }
  void barrier() { b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {}); }

  llvm::Value* ix(int64_t v) { return e_.i64(v); }
  llvm::Constant* f(float v) { return llvm::ConstantFP::get(f32_, v); }
  llvm::Constant* negative_infinity() { return llvm::ConstantFP::getInfinity(f32_, true); }

  // Values that live across loop iterations sit in allocas, which SROA turns into registers.
  using Slots = std::vector<std::array<llvm::AllocaInst*, 4>>;
  Slots slots(int64_t tiles) {
    Slots s(static_cast<std::size_t>(tiles));
    for (auto& tile : s)
      for (llvm::AllocaInst*& slot : tile)
        slot = scalar_slot(f(0));
    return s;
  }
  llvm::AllocaInst* scalar_slot(llvm::Value* init) {
    llvm::AllocaInst* slot = e_.entry_alloca(f32_);
    b_.CreateStore(init, slot);
    return slot;
  }
  llvm::Value* load(llvm::AllocaInst* slot) { return b_.CreateLoad(f32_, slot); }
  std::vector<Frag> load(const Slots& s) {
    std::vector<Frag> out(s.size());
    for (std::size_t t = 0; t < s.size(); ++t)
      for (int e = 0; e < 4; ++e)
        out[t][e] = load(s[t][e]);
    return out;
  }
  void store(const Slots& s, const std::vector<Frag>& v) {
    for (std::size_t t = 0; t < s.size(); ++t)
      for (int e = 0; e < 4; ++e)
        b_.CreateStore(v[t][e], s[t][e]);
  }

  KernelEmitter& e_;
  llvm::IRBuilder<>& b_;
  const Graph& g_;
  const Node& root_;
  AttentionLayout l_;
  OutputPositions out_;
  DType dtype_;
  int64_t dp_, dvp_; ///< feature dims rounded up to whole mma k-steps
  BlockMemory mem_;  ///< the shared tiles and the copies into them
  llvm::Type *i8_ = nullptr, *i16_ = nullptr, *i32_ = nullptr, *f32_ = nullptr;
  llvm::Value *tid_ = nullptr, *warp_ = nullptr, *group_ = nullptr, *quad_ = nullptr,
              *lane_col_ = nullptr;
  SharedTile k_tile_{0, 0}, v_tile_{0, 0}; ///< the forward's and dQ's key tiles
  std::map<std::tuple<int64_t, int64_t, bool>, llvm::Value*> lane_bases_; ///< this pass's
  llvm::Instruction* pass_start_ = nullptr; ///< where this pass's lane addresses go
};

} // namespace

void emit_nvptx_attention(KernelEmitter& emitter, const GpuLaunch& launch) {
  AttentionKernel(emitter).emit(launch);
}

} // namespace sinter
