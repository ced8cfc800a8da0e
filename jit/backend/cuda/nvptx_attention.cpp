// jit/backend/cuda/nvptx_attention.cpp — fused attention on NVIDIA tensor cores: the bodies of the
// flash-attention forward and backward kernels in LLVM IR (mma.sync m16n8k16 on bf16/f16, f32
// accumulators)
#include "jit/backend/cuda/nvptx_attention.hpp"

#include "jit/backend/attention_layout.hpp"
#include "jit/backend/cuda/nvptx_attention_tiling.hpp"
#include "jit/backend/cuda/nvptx_block_memory.hpp"
#include "jit/backend/cuda/nvptx_warp_mma.hpp"
#include "jit/settings.hpp"

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
constexpr float log2e = std::numbers::log2e_v<float>;

class AttentionKernel {
public:
  explicit AttentionKernel(KernelEmitter& e)
      : e_(e), b_(e.builder()), g_(e.graph()), root_(e.root()),
        l_(attention_layout(e.plan(), e.kernel())), out_(output_positions(g_, e.kernel())),
        dtype_(g_.type(root_.inputs[0]).dtype), dp_(round_up(l_.d, 16)), dvp_(round_up(l_.dv, 16)),
        key_stages_(stages(key_stage_bytes())), query_stages_(stages(query_stage_bytes())),
        mem_(e, threads_per_block,
             std::max(key_stages_ * key_stage_bytes(),
                      l_.backward ? query_stages_ * query_stage_bytes() : 0)),
        mma_(e, mem_, dtype_) {
    i8_ = b_.getInt8Ty();
    f32_ = b_.getFloatTy();
    tid_ = mem_.thread();
    warp_ = b_.CreateLShr(tid_, 5);
    quad_ = b_.CreateAnd(tid_, 3);
  }

  void emit(const GpuLaunch& launch) {
    // The forward fits three blocks an SM in 168 registers a thread (65536 / 3 / 128, in
    // ptxas's steps of 8); left alone ptxas takes a few more and only two blocks fit.
    if (!l_.backward) {
      llvm::LLVMContext& ctx = e_.context();
      e_.module()
          .getOrInsertNamedMetadata("nvvm.annotations")
          ->addOperand(llvm::MDNode::get(ctx, {llvm::ValueAsMetadata::get(e_.function()),
                                               llvm::MDString::get(ctx, "minctasm"),
                                               llvm::ValueAsMetadata::get(b_.getInt32(3))}));
    }
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
    std::vector<Frag> q_frags = mma_.a_frags(pass.q, pass.first, dp_);
    WarpMma::Slots o_acc = mma_.slots(dvp_ / 8);
    std::array<llvm::AllocaInst*, 2> row_max{}, row_sum{};
    for (int h = 0; h < 2; ++h) {
      row_max[h] = scalar_slot(negative_infinity());
      row_sum[h] = scalar_slot(f(0));
    }
    std::array<llvm::Value*, 2> rows = pass.rows;
    key_tile_loop(pass, [&](llvm::Value* key0, const SharedTile& k_tile, const SharedTile& v_tile) {
      std::vector<Frag> dots = mma_.multiply_rows(q_frags, k_tile, key_tile / 8);
      // The tile's weights e^(x − max) into `s`, the row max and sum, and O += P V. `on_dots`:
      // `s` holds the raw dot products of a tile without masks, and the scale rides in the
      // max and the exponent's fma (3 operations an element instead of about 10).
      auto softmax_tile = [&](std::vector<Frag> s, bool on_dots) {
        std::array<llvm::Value*, 2> tile_max{negative_infinity(), negative_infinity()};
        for (const Frag& frag : s)
          for (int e = 0; e < 4; ++e)
            tile_max[e / 2] = b_.CreateMaxNum(tile_max[e / 2], frag[e]);
        std::array<llvm::Value*, 2> alpha{}, base{}, neg_base{}, sum{f(0), f(0)};
        for (int h = 0; h < 2; ++h) {
          llvm::Value* top = mma_.quad_reduce(tile_max[h], true);
          if (on_dots) top = b_.CreateFMul(top, f(scale())); // the scale is positive
          llvm::Value* old_max = load(row_max[h]);
          llvm::Value* new_max = b_.CreateMaxNum(old_max, top);
          // A row with no key seen yet keeps -inf: subtract 0 then, never inf - inf.
          base[h] = b_.CreateSelect(b_.CreateFCmpOEQ(new_max, negative_infinity()), f(0), new_max);
          alpha[h] = exp(b_.CreateFSub(old_max, base[h]));
          neg_base[h] = b_.CreateFMul(base[h], f(-log2e));
          b_.CreateStore(new_max, row_max[h]);
        }
        for (Frag& frag : s)
          for (int e = 0; e < 4; ++e) {
            // Masked scores (−1e9) subtract exactly: an fma would leave the rounding of
            // 1e9 · log₂e in a row the mask empties.
            frag[e] = on_dots ? exp_scaled(frag[e], neg_base[e / 2])
                              : exp(b_.CreateFSub(frag[e], base[e / 2]));
            sum[e / 2] = b_.CreateFAdd(sum[e / 2], frag[e]);
          }
        for (int h = 0; h < 2; ++h)
          b_.CreateStore(b_.CreateFAdd(b_.CreateFMul(load(row_sum[h]), alpha[h]), sum[h]),
                         row_sum[h]);
        std::vector<Frag> o = mma_.load(o_acc);
        for (Frag& frag : o)
          for (int e = 0; e < 4; ++e)
            frag[e] = b_.CreateFMul(frag[e], alpha[e / 2]);
        mma_.multiply_add(o, s, v_tile);
        mma_.store(o_acc, o);
      };
      auto masked_tile = [&] {
        std::vector<Frag> s = dots;
        for (int64_t j = 0; j < key_tile / 8; ++j)
          for (int e = 0; e < 4; ++e) {
            llvm::Value* key = mma_.element_col(key0, j, e);
            llvm::Value* x = score(s[j][e], mask_base, rows[e / 2], key).value;
            s[j][e] = b_.CreateSelect(b_.CreateICmpSLT(key, ix(l_.tk)), x, negative_infinity());
          }
        softmax_tile(s, false);
      };
      split_by_masks(key_full(key0, pass.first), [&] { softmax_tile(dots, true); }, masked_tile);
    });
    // o is the sum over the row's weights: one division a row, then a multiply an element
    // (a division each is about 10 instructions, and at T = 196 the epilogue is a fifth of a
    // block's work).
    std::array<llvm::Value*, 2> total{}, inverse{};
    for (int h = 0; h < 2; ++h) {
      total[h] = mma_.quad_reduce(load(row_sum[h]), false);
      inverse[h] = b_.CreateFDiv(f(1), total[h]);
    }
    if (out_.o >= 0)
      store_tiles(out_.o, l_.o_result, mma_.load(o_acc), batch, rows, l_.tq, l_.dv,
                  [&](llvm::Value* x, int e) { return b_.CreateFMul(x, inverse[e / 2]); });
    if (out_.lse >= 0) {
      DType lse_type = g_.type(e_.kernel().outputs()[static_cast<std::size_t>(out_.lse)]).dtype;
      const AttentionOperand lse_place; // contiguous [batches, tq]
      e_.emit_if(b_.CreateICmpEQ(quad_, ix(0)), [&] {
        for (int h = 0; h < 2; ++h) {
          // A row the mask leaves no key scores 0 everywhere (the op's definition), not -1e9:
          // the same uniform weights, another log-sum-exp.
          llvm::Value* top = load(row_max[h]);
          top = b_.CreateSelect(b_.CreateFCmpOEQ(top, f(masked_score)), f(0), top);
          store_element(out_.lse, lse_type, element(lse_place, batch, l_.tq, 1, rows[h], ix(0)),
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
    std::vector<Frag> k_frags = mma_.a_frags(pass.k, pass.first, dp_);
    std::vector<Frag> v_frags = mma_.a_frags(pass.v, pass.first, dvp_);
    WarpMma::Slots dk_acc = mma_.slots(dp_ / 8), dv_acc = mma_.slots(dvp_ / 8);
    int64_t tile_rows = backward_query_tile(l_);
    // A stage: the query tile of q, of dO and of o, then per query row lse, dO·O and (masked)
    // whether the row keeps any key.
    auto stage_at = [&](llvm::Value* shift) {
      SharedTile q{0, dp_ + row_padding, shift};
      SharedTile d_o{tile_bytes(tile_rows, dp_), dvp_ + row_padding, shift};
      SharedTile o{tile_bytes(tile_rows, dp_) + tile_bytes(tile_rows, dvp_), dvp_ + row_padding,
                   shift};
      return std::tuple{q, d_o, o};
    };
    int64_t stats = tile_bytes(tile_rows, dp_) + 2 * tile_bytes(tile_rows, dvp_);
    std::array<llvm::Value*, 2> keys = pass.rows;
    llvm::Value* first_tile = ix(0);
    // Causal without a mask: query tiles before the block's first key attend to none of them.
    if (l_.causal && !l_.has_mask)
      first_tile = b_.CreateUDiv(b_.CreateMul(key_block, ix(block_rows)), ix(tile_rows));
    // The rows' statistics by copies: o's tile comes by cp.async beside dO's, each thread adds
    // up dO·O over the pieces it copied itself once they land (before the barrier that shows
    // the tile), and the log-sum-exp comes by cp.async too. Made from global memory in the
    // fill, they stalled every tile on two loads' latency before its products could start.
    auto [q_static, do_static, o_static] = stage_at(nullptr);
    BlockMemory::ThreadPieces mine = mem_.own_pieces(pass.o, o_static, tile_rows, dvp_);
    bool by_copies = stats_by_copies(mine, mem_.own_pieces(pass.d_o, do_static, tile_rows, dvp_));
    llvm::Value* copies_aligned =
        by_copies ? b_.CreateAnd(mem_.aligned16(pass.o), mem_.aligned16(pass.d_o)) : nullptr;
    // dO·O of the tile's rows from global memory: `lanes` consecutive lanes share a row, each
    // its share of the columns, and add up by shuffles (one thread per row made it a chain of
    // 2 · dv dependent loads on a quarter of the threads).
    auto stats_from_global = [&](llvm::Value* query0, llvm::Value* shift) {
      int64_t lanes = threads_per_block / tile_rows;
      llvm::Value* i = b_.CreateUDiv(tid_, ix(lanes));
      llvm::Value* part = b_.CreateURem(tid_, ix(lanes));
      llvm::Value* query = b_.CreateAdd(query0, i);
      llvm::Value* valid = b_.CreateICmpSLT(query, ix(l_.tq));
      llvm::Value* row = b_.CreateSelect(valid, query, ix(0));
      llvm::Value* delta =
          mma_.lanes_reduce(mem_.row_dot(pass.o, pass.d_o, row, part, lanes, dtype_), lanes, false);
      llvm::Value* keeps = nullptr;
      if (l_.has_mask)
        keeps = mma_.lanes_reduce(keeps_any(mask_base, row, part, lanes), lanes, true);
      e_.emit_if(b_.CreateICmpEQ(part, ix(0)), [&] {
        if (!by_copies)
          mem_.store_shared_f32(stats, i, b_.CreateSelect(valid, load_lse(batch, row), f(0)),
                                shift);
        mem_.store_shared_f32(stats + 4 * tile_rows, i, b_.CreateSelect(valid, delta, f(0)), shift);
        if (keeps) mem_.store_shared_f32(stats + 8 * tile_rows, i, keeps, shift);
      });
    };
    auto fill_stage = [&](llvm::Value* tile, llvm::Value* shift) {
      llvm::Value* query0 = b_.CreateMul(tile, ix(tile_rows));
      auto [q_tile, do_tile, o_tile] = stage_at(shift);
      mem_.copy_tile(pass.q, query0, q_tile, tile_rows, dp_, true);
      mem_.copy_tile(pass.d_o, query0, do_tile, tile_rows, dvp_, true);
      if (!by_copies) return stats_from_global(query0, shift);
      e_.emit_if(copies_aligned,
                 [&] { mem_.copy_tile(pass.o, query0, o_tile, tile_rows, dvp_, true); });
      e_.emit_if(b_.CreateICmpULT(tid_, ix(tile_rows)), [&] {
        llvm::Value* query = b_.CreateAdd(query0, tid_);
        llvm::Value* inside = b_.CreateICmpSLT(query, ix(l_.tq));
        llvm::Value* at =
            b_.CreateAdd(b_.CreateMul(batch, ix(l_.tq)), b_.CreateSelect(inside, query, ix(0)));
        mem_.copy_f32_async(stats, tid_, shift, b_.CreateGEP(f32_, read(4), at), inside);
      });
      e_.emit_if(b_.CreateNot(copies_aligned), [&] { stats_from_global(query0, shift); });
    };
    auto land_stage = [&](llvm::Value*, llvm::Value* shift) {
      auto [q_tile, do_tile, o_tile] = stage_at(shift);
      e_.emit_if(copies_aligned, [&] {
        for (int64_t k = 0; k < mine.count; ++k) {
          llvm::Value* r = b_.CreateAdd(mine.first_row, ix(k * mine.row_step));
          llvm::Value* sum = mem_.piece_dot(mem_.load_shared_piece(o_tile, r, mine.col),
                                            mem_.load_shared_piece(do_tile, r, mine.col), dtype_);
          // Rows past the end were zero-filled: their dO·O is 0.
          llvm::Value* delta = mma_.lanes_reduce(sum, mine.lanes_per_row, false);
          e_.emit_if(b_.CreateICmpEQ(mine.col, ix(0)),
                     [&] { mem_.store_shared_f32(stats + 4 * tile_rows, r, delta, shift); });
        }
      });
    };
    auto use_stage = [&](llvm::Value* tile, llvm::Value* shift) {
      llvm::Value* query0 = b_.CreateMul(tile, ix(tile_rows));
      auto [q_tile, do_tile, o_tile] = stage_at(shift);
      int64_t query_tiles = tile_rows / 8;
      // Sᵀ = K Qᵀ (16 keys × the tile's queries) → Pᵀ from the saved log-sum-exp.
      std::vector<Frag> dots = mma_.multiply_rows(k_frags, q_tile, query_tiles);
      auto run_tile = [&](bool unmasked) {
        std::vector<Frag> p = dots;
        std::vector<std::array<llvm::Value*, 4>> masked(query_tiles);
        for (int64_t j = 0; j < query_tiles; ++j) {
          for (int e = 0; e < 4; ++e) {
            llvm::Value* local = mma_.element_col(ix(0), j, e);
            llvm::Value* lse = mem_.load_shared_f32(stats, local, shift);
            if (unmasked) {
              p[j][e] = exp_scaled(p[j][e], b_.CreateFMul(lse, f(-log2e)));
              continue;
            }
            llvm::Value* query = b_.CreateAdd(query0, local);
            llvm::Value* fill = nullptr;
            if (l_.has_mask)
              fill = masked_fill(mem_.load_shared_f32(stats + 8 * tile_rows, local, shift));
            Score s = score(p[j][e], mask_base, query, keys[e / 2], fill);
            masked[j][e] = s.masked;
            llvm::Value* weight = exp(b_.CreateFSub(s.value, lse));
            llvm::Value* real = b_.CreateAnd(b_.CreateICmpSLT(keys[e / 2], ix(l_.tk)),
                                             b_.CreateICmpSLT(query, ix(l_.tq)));
            p[j][e] = b_.CreateSelect(real, weight, f(0));
          }
        }
        // dV += Pᵀ dO.
        std::vector<Frag> dv = mma_.load(dv_acc);
        mma_.multiply_add(dv, p, do_tile);
        mma_.store(dv_acc, dv);
        // dPᵀ = V dOᵀ; dSᵀ = Pᵀ ∘ (dPᵀ − dO·O), zero where the op's where() masked the score.
        std::vector<Frag> ds = mma_.multiply_rows(v_frags, do_tile, query_tiles);
        for (int64_t j = 0; j < query_tiles; ++j) {
          for (int e = 0; e < 4; ++e) {
            llvm::Value* delta =
                mem_.load_shared_f32(stats + 4 * tile_rows, mma_.element_col(ix(0), j, e), shift);
            llvm::Value* g = b_.CreateFMul(p[j][e], b_.CreateFSub(ds[j][e], delta));
            ds[j][e] = unmasked ? g : b_.CreateSelect(masked[j][e], f(0), g);
          }
        }
        // dK += dSᵀ Q (scaled at the end).
        std::vector<Frag> dk = mma_.load(dk_acc);
        mma_.multiply_add(dk, ds, q_tile);
        mma_.store(dk_acc, dk);
      };
      // Every query of the tile and key of the warp exist, and (causal) every query comes at
      // or after every key.
      llvm::Value* full =
          b_.CreateAnd(b_.CreateICmpSLE(b_.CreateAdd(query0, ix(tile_rows)), ix(l_.tq)),
                       b_.CreateICmpSLE(b_.CreateAdd(pass.first, ix(warp_rows)), ix(l_.tk)));
      if (l_.causal)
        full = b_.CreateAnd(full,
                            b_.CreateICmpSGE(query0, b_.CreateAdd(pass.first, ix(warp_rows - 1))));
      split_by_masks(full, [&] { run_tile(true); }, [&] { run_tile(false); });
    };
    mem_.pipelined_tiles(first_tile, ix(ceil_div(l_.tq, tile_rows)),
                         query_stages_ == 2 ? query_stage_bytes() : 0, fill_stage, use_stage,
                         by_copies ? BlockMemory::TileStep(land_stage) : BlockMemory::TileStep());
    if (out_.dk >= 0)
      store_tiles(out_.dk, l_.dk_result, mma_.load(dk_acc), batch, keys, l_.tk, l_.d, scaled());
    if (out_.dv >= 0)
      store_tiles(out_.dv, l_.dv_result, mma_.load(dv_acc), batch, keys, l_.tk, l_.dv,
                  [](llvm::Value* x, int) { return x; });
  }

  /// Backward, query side: dQ of 64 query rows of one slice, over every key tile.
  void query_pass(llvm::Value* work) {
    Pass pass = start_pass(work, l_.tq);
    llvm::Value *batch = pass.batch, *mask_base = pass.mask_base;
    std::vector<Frag> q_frags = mma_.a_frags(pass.q, pass.first, dp_);
    std::vector<Frag> do_frags = mma_.a_frags(pass.d_o, pass.first, dvp_);
    std::array<llvm::Value*, 2> rows = pass.rows;
    std::array<llvm::Value*, 2> lse{}, neg_lse{}, delta{}, fill{}; // neg_lse: −lse·log₂e
    for (int h = 0; h < 2; ++h) {
      llvm::Value* valid = b_.CreateICmpSLT(rows[h], ix(l_.tq));
      llvm::Value* row = b_.CreateSelect(valid, rows[h], ix(0));
      lse[h] = load_lse(batch, row);
      neg_lse[h] = b_.CreateFMul(lse[h], f(-log2e));
      // dO·O of the row: the quad's four lanes take every fourth column, then add up.
      delta[h] = mma_.quad_reduce(mem_.row_dot(pass.o, pass.d_o, row, quad_, 4, dtype_), false);
      if (l_.has_mask)
        fill[h] = masked_fill(mma_.quad_reduce(keeps_any(mask_base, row, quad_, 4), true));
    }
    WarpMma::Slots dq_acc = mma_.slots(dp_ / 8);
    key_tile_loop(pass, [&](llvm::Value* key0, const SharedTile& k_tile, const SharedTile& v_tile) {
      // S = Q Kᵀ and dP = dO Vᵀ; each score becomes its dS = P ∘ (dP − dO·O).
      std::vector<Frag> dots = mma_.multiply_rows(q_frags, k_tile, key_tile / 8);
      std::vector<Frag> dp = mma_.multiply_rows(do_frags, v_tile, key_tile / 8);
      auto run_tile = [&](bool unmasked) {
        std::vector<Frag> ds = dots;
        for (int64_t j = 0; j < key_tile / 8; ++j) {
          for (int e = 0; e < 4; ++e) {
            llvm::Value* rest = b_.CreateFSub(dp[j][e], delta[e / 2]);
            if (unmasked) {
              ds[j][e] = b_.CreateFMul(exp_scaled(dots[j][e], neg_lse[e / 2]), rest);
              continue;
            }
            llvm::Value* key = mma_.element_col(key0, j, e);
            Score x = score(dots[j][e], mask_base, rows[e / 2], key, fill[e / 2]);
            llvm::Value* weight = exp(b_.CreateFSub(x.value, lse[e / 2]));
            llvm::Value* real = b_.CreateAnd(b_.CreateICmpSLT(key, ix(l_.tk)),
                                             b_.CreateICmpSLT(rows[e / 2], ix(l_.tq)));
            ds[j][e] = b_.CreateSelect(b_.CreateAnd(real, b_.CreateNot(x.masked)),
                                       b_.CreateFMul(weight, rest), f(0));
          }
        }
        std::vector<Frag> dq = mma_.load(dq_acc);
        mma_.multiply_add(dq, ds, k_tile);
        mma_.store(dq_acc, dq);
      };
      // Rows past the end only make dQ rows nobody stores: a full key tile needs no mask.
      split_by_masks(key_full(key0, pass.first), [&] { run_tile(true); }, [&] { run_tile(false); });
    });
    store_tiles(out_.dq, l_.dq_result, mma_.load(dq_acc), batch, rows, l_.tq, l_.d, scaled());
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
    mma_.begin_pass();
    Pass p{};
    int64_t blocks = ceil_div(rows, block_rows);
    p.batch = b_.CreateUDiv(work, ix(blocks));
    p.block = b_.CreateURem(work, ix(blocks));
    p.first =
        b_.CreateAdd(b_.CreateMul(p.block, ix(block_rows)), b_.CreateMul(warp_, ix(warp_rows)));
    p.rows = {b_.CreateAdd(p.first, mma_.group()), nullptr};
    p.rows[1] = b_.CreateAdd(p.rows[0], ix(8));
    p.mask_base = l_.has_mask ? slice_offset(p.batch, 0, l_.mask_batch_stride) : ix(0);
    p.q = matrix(0, p.batch, l_.tq, l_.d);
    p.k = matrix(1, p.batch, l_.tk, l_.d);
    p.v = matrix(2, p.batch, l_.tk, l_.dv);
    if (l_.backward) {
      p.o = matrix(3, p.batch, l_.tq, l_.dv);
      p.d_o = matrix(5, p.batch, l_.tq, l_.dv);
    }
    return p;
  }

  /// The key tiles a block of query rows reads. Causal without a mask: tiles past the block's
  /// last row hold only masked scores, whose weights are exactly 0 (a row always keeps key 0).
  llvm::Value* key_tiles(llvm::Value* query_block) {
    llvm::Value* tiles = ix(ceil_div(l_.tk, key_tile));
    if (!l_.causal || l_.has_mask) return tiles;
    return b_.CreateBinaryIntrinsic(llvm::Intrinsic::umin, tiles, b_.CreateAdd(query_block, ix(1)));
  }

  /// Runs `use(first key, k tile, v tile)` over the key tiles of the pass's query block, each
  /// tile of k and v in shared memory.
  using UseKeyTiles = std::function<void(llvm::Value*, const SharedTile&, const SharedTile&)>;
  void key_tile_loop(const Pass& pass, const UseKeyTiles& use) {
    auto tiles_at = [&](llvm::Value* shift) {
      SharedTile k{0, dp_ + row_padding, shift};
      SharedTile v{tile_bytes(key_tile, dp_), dvp_ + row_padding, shift};
      return std::pair{k, v};
    };
    mem_.pipelined_tiles(
        ix(0), key_tiles(pass.block), key_stages_ == 2 ? key_stage_bytes() : 0,
        [&](llvm::Value* tile, llvm::Value* shift) {
          llvm::Value* key0 = b_.CreateMul(tile, ix(key_tile));
          auto [k, v] = tiles_at(shift);
          mem_.copy_tile(pass.k, key0, k, key_tile, dp_, true);
          mem_.copy_tile(pass.v, key0, v, key_tile, dvp_, true);
        },
        [&](llvm::Value* tile, llvm::Value* shift) {
          auto [k, v] = tiles_at(shift);
          use(b_.CreateMul(tile, ix(key_tile)), k, v);
        });
  }

  /// Stores accumulator tiles `acc` (this lane's `rows`, every column) to output `position`,
  /// its slices [rows_total, cols] where `place` puts them, each value through `finish(value,
  /// element)`. A lane's two neighbouring columns go as one 32-bit word where every row starts
  /// at an even element (aligned: the buffers start at even elements).
  using Finish = std::function<llvm::Value*(llvm::Value*, int)>;
  void store_tiles(int position, const AttentionOperand& place, const std::vector<Frag>& acc,
                   llvm::Value* batch, const std::array<llvm::Value*, 2>& rows, int64_t rows_total,
                   int64_t cols, const Finish& finish) {
    auto is_even = [](int64_t n) { return n % 2 == 0; };
    bool even = is_even(cols) &&
                (place.contiguous ||
                 (is_even(place.offset) && is_even(place.row_stride) &&
                  std::all_of(place.batch_stride.begin(), place.batch_stride.end(), is_even)));
    for (std::size_t nt = 0; nt < acc.size(); ++nt)
      for (int h = 0; h < 2; ++h) {
        llvm::Value* col = mma_.element_col(ix(0), static_cast<int64_t>(nt), 2 * h);
        llvm::Value* low = finish(acc[nt][2 * h], 2 * h);
        llvm::Value* high = finish(acc[nt][2 * h + 1], 2 * h + 1);
        auto at = [&](llvm::Value* c) {
          return element(place, batch, rows_total, cols, rows[h], c);
        };
        if (!even) {
          store_element(position, dtype_, at(col), low);
          store_element(position, dtype_, at(b_.CreateAdd(col, ix(1))), high);
          continue;
        }
        Element first = at(col);
        e_.emit_if(first.inside, [&] {
          llvm::Value* word = mem_.narrow_pair(low, high, dtype_);
          b_.CreateAlignedStore(word, b_.CreateGEP(b_.getInt16Ty(), argument(position), first.at),
                                llvm::Align(4));
        });
      }
  }
  /// dQ and dK carry the scale of the scores.
  Finish scaled() {
    return
        [this](llvm::Value* x, int) { return b_.CreateFMul(x, f(static_cast<float>(l_.scale))); };
  }

  // ---- scores ------------------------------------------------------------------------------

  float scale() const { return static_cast<float>(l_.scale); }

  /// Whether key tile `key0` is whole for the warp whose rows start at `warp_first`: every key
  /// exists and (causal) comes at or before every row of the warp, so no score is masked.
  llvm::Value* key_full(llvm::Value* key0, llvm::Value* warp_first) {
    llvm::Value* full = b_.CreateICmpSLE(b_.CreateAdd(key0, ix(key_tile)), ix(l_.tk));
    if (!l_.causal) return full;
    return b_.CreateAnd(full, b_.CreateICmpSLE(b_.CreateAdd(key0, ix(key_tile - 1)), warp_first));
  }

  /// Runs `unmasked` for tiles `full` says need no masks, `masked` for the others (a branch
  /// the whole warp takes alike: the products inside are warp-wide). Without a positive scale
  /// or with a mask operand, every tile takes `masked`. Most tiles of a long sequence are
  /// full, and their softmax drops the index arithmetic, compares and selects per element.
  void split_by_masks(llvm::Value* full, const std::function<void()>& unmasked,
                      const std::function<void()>& masked) {
    if (l_.has_mask || !(l_.scale > 0)) return masked();
    e_.emit_if(full, unmasked);
    e_.emit_if(b_.CreateNot(full), masked);
  }

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

  /// first + Σ b_n · batch_stride[n], b_n slice `batch`'s index over the batch dims.
  llvm::Value* slice_offset(llvm::Value* batch, int64_t first,
                            const std::vector<int64_t>& batch_stride) {
    llvm::Value* offset = ix(first);
    for (std::size_t i = l_.batch_dims.size(); i-- > 0;) {
      llvm::Value* index = b_.CreateURem(batch, ix(l_.batch_dims[i]));
      offset = b_.CreateAdd(offset, b_.CreateMul(index, ix(batch_stride[i])));
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

  // ---- memory ------------------------------------------------------------------------------

  static int64_t tile_bytes(int64_t rows, int64_t cols) { return rows * (cols + row_padding) * 2; }
  /// A stage of the forward's and dQ's shared memory: a key tile of k and one of v.
  int64_t key_stage_bytes() const { return tile_bytes(key_tile, dp_) + tile_bytes(key_tile, dvp_); }
  /// A stage of the dK/dV pass's: a query tile of q, one of dO and one of o, and the rows'
  /// statistics.
  int64_t query_stage_bytes() const {
    int64_t rows = backward_query_tile(l_);
    return tile_bytes(rows, dp_) + 2 * tile_bytes(rows, dvp_) + 3 * 4 * rows;
  }
  /// Whether the dK/dV pass takes its rows' statistics from copies (o's tile and the
  /// log-sum-exp by cp.async, dO·O added up by the threads that copied each piece): every
  /// thread copies the same pieces of o (`o_pieces`) and of dO (`do_pieces`), a power of two of
  /// lanes shares a row, the log-sum-exp is f32, and there is no mask (whose per-row flags come
  /// from global memory anyway).
  bool stats_by_copies(const BlockMemory::ThreadPieces& o_pieces,
                       const BlockMemory::ThreadPieces& do_pieces) const {
    int64_t lanes = o_pieces.lanes_per_row;
    return !l_.has_mask && o_pieces.count > 0 && do_pieces.count == o_pieces.count &&
           do_pieces.lanes_per_row == lanes && lanes <= 32 && (lanes & (lanes - 1)) == 0 &&
           g_.type(root_.inputs[4]).dtype == DType::f32;
  }
  /// Two stages where both fit a block's static shared memory (and SINTER_ATTENTION_PIPELINE
  /// is not 0), else one.
  static int64_t stages(int64_t stage_bytes) {
    constexpr int64_t static_shared_limit = 48 * 1024;
    return attention_pipeline_enabled() && 2 * stage_bytes <= static_shared_limit ? 2 : 1;
  }

  llvm::Value* argument(int position) {
    return e_.function()->getArg(static_cast<unsigned>(position));
  }
  /// The buffer of the root's operand `operand` (under its views, for a strided one).
  llvm::Value* read(std::size_t operand) {
    const Kernel& kernel = e_.kernel();
    ValueId buffer = l_.operands[operand].buffer;
    auto at = std::find(kernel.reads.begin(), kernel.reads.end(), buffer);
    return argument(static_cast<int>(kernel.outputs().size()) +
                    static_cast<int>(at - kernel.reads.begin()));
  }
  /// Slice `batch` of operand `operand`, [rows, cols], where its layout puts it.
  GlobalMatrix matrix(std::size_t operand, llvm::Value* batch, int64_t rows, int64_t cols) {
    const AttentionOperand& o = l_.operands[operand];
    if (o.contiguous)
      return {read(operand), b_.CreateMul(batch, ix(rows * cols)), rows, cols, cols};
    return {read(operand), slice_offset(batch, o.offset, o.batch_stride), rows, cols, o.row_stride};
  }

  /// Element [row, col] of the [rows, cols] slice `batch` of a result placed as `place`, and
  /// whether it exists.
  struct Element {
    llvm::Value *at, *inside;
  };
  Element element(const AttentionOperand& place, llvm::Value* batch, int64_t rows, int64_t cols,
                  llvm::Value* row, llvm::Value* col) {
    llvm::Value* inside =
        b_.CreateAnd(b_.CreateICmpSLT(row, ix(rows)), b_.CreateICmpSLT(col, ix(cols)));
    llvm::Value* start = place.contiguous ? b_.CreateMul(batch, ix(rows * cols))
                                          : slice_offset(batch, place.offset, place.batch_stride);
    llvm::Value* stride = ix(place.contiguous ? cols : place.row_stride);
    return {b_.CreateAdd(start, b_.CreateAdd(b_.CreateMul(row, stride), col)), inside};
  }
  /// Stores f32 `v` as `t` at element `e` of output `position`, when it exists.
  void store_element(int position, DType t, const Element& e, llvm::Value* v) {
    e_.emit_if(e.inside, [&] { mem_.store_float(argument(position), t, e.at, v); });
  }

  // ---- values ------------------------------------------------------------------------------

  /// e^(dot·scale − shift) as ex2(dot·scale·log₂e + neg_shift) in one fma, `neg_shift` being
  /// −shift·log₂e (tiles without masks: the raw dot product, the scale folded in).
  llvm::Value* exp_scaled(llvm::Value* dot, llvm::Value* neg_shift) {
    llvm::Value* arg =
        b_.CreateIntrinsic(llvm::Intrinsic::fma, {f32_}, {dot, f(scale() * log2e), neg_shift});
    return ex2(arg);
  }
  /// e^x through ex2.approx (the scores are rounded to 16 bits before they are used anyway).
  llvm::Value* exp(llvm::Value* x) { return ex2(b_.CreateFMul(x, f(log2e))); }
  /// 2^x flushing subnormals to 0: one MUFU.EX2. Without .ftz ptxas wraps each in a compare
  /// and two multiplies (for results below 2⁻¹²⁶, weights no sum can tell from 0).
  llvm::Value* ex2(llvm::Value* x) {
    return b_.CreateIntrinsic(llvm::Intrinsic::nvvm_ex2_approx_ftz_f, {}, {x});
  }
  llvm::Value* log(llvm::Value* x) {
    return b_.CreateFMul(b_.CreateIntrinsic(llvm::Intrinsic::nvvm_lg2_approx_f, {}, {x}),
                         f(static_cast<float>(std::numbers::ln2)));
  }

  llvm::Value* ix(int64_t v) { return e_.i64(v); }
  llvm::Constant* f(float v) { return llvm::ConstantFP::get(f32_, v); }
  llvm::Constant* negative_infinity() { return llvm::ConstantFP::getInfinity(f32_, true); }

  // Values that live across loop iterations sit in allocas, which SROA turns into registers.
  llvm::AllocaInst* scalar_slot(llvm::Value* init) {
    llvm::AllocaInst* slot = e_.entry_alloca(f32_);
    b_.CreateStore(init, slot);
    return slot;
  }
  llvm::Value* load(llvm::AllocaInst* slot) { return b_.CreateLoad(f32_, slot); }

  KernelEmitter& e_;
  llvm::IRBuilder<>& b_;
  const Graph& g_;
  const Node& root_;
  AttentionLayout l_;
  OutputPositions out_;
  DType dtype_;
  int64_t dp_, dvp_;                  ///< feature dims rounded up to whole mma k-steps
  int64_t key_stages_, query_stages_; ///< shared-memory stages of key and query tiles (1 or 2)
  BlockMemory mem_;                   ///< the shared tiles and the copies into them
  llvm::Type *i8_ = nullptr, *f32_ = nullptr;
  WarpMma mma_; ///< the warps' tensor-core products
  llvm::Value *tid_ = nullptr, *warp_ = nullptr, *quad_ = nullptr;
};

} // namespace

bool attention_pipeline_enabled() { return switch_setting("SINTER_ATTENTION_PIPELINE", true); }

void emit_nvptx_attention(KernelEmitter& emitter, const GpuLaunch& launch) {
  AttentionKernel(emitter).emit(launch);
}

} // namespace sinter
