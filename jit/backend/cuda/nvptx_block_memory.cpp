// jit/backend/cuda/nvptx_block_memory.cpp — a thread block's global matrices, shared tiles and
// copies in a hand-built NVPTX kernel
#include "jit/backend/cuda/nvptx_block_memory.hpp"

#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/Module.h>

namespace sinter {

llvm::GlobalVariable* dynamic_shared_memory(llvm::Module& module, const std::string& name) {
  auto* bytes = llvm::ArrayType::get(llvm::Type::getInt8Ty(module.getContext()), 0);
  auto* shared =
      new llvm::GlobalVariable(module, bytes, false, llvm::GlobalValue::ExternalLinkage, nullptr,
                               name, nullptr, llvm::GlobalValue::NotThreadLocal, 3);
  shared->setAlignment(llvm::Align(16));
  return shared;
}

BlockMemory::BlockMemory(KernelEmitter& emitter, int64_t threads, int64_t shared_bytes)
    : e_(emitter), b_(emitter.builder()), threads_(threads) {
  i8_ = b_.getInt8Ty();
  i16_ = b_.getInt16Ty();
  i32_ = b_.getInt32Ty();
  f32_ = b_.getFloatTy();
  auto* type = llvm::ArrayType::get(i8_, static_cast<uint64_t>(shared_bytes));
  shared_ = new llvm::GlobalVariable(e_.module(), type, false, llvm::GlobalValue::InternalLinkage,
                                     llvm::UndefValue::get(type), "block_tiles", nullptr,
                                     llvm::GlobalValue::NotThreadLocal, 3);
  shared_->setAlignment(llvm::Align(16));
  thread_ = b_.CreateZExt(b_.CreateIntrinsic(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x, {}, {}),
                          b_.getInt64Ty());
}

llvm::Value* BlockMemory::load16(const GlobalMatrix& m, llvm::Value* at) {
  return b_.CreateAlignedLoad(i16_, b_.CreateGEP(i16_, m.pointer, b_.CreateAdd(m.first, at)),
                              llvm::Align(2));
}

llvm::Value* BlockMemory::aligned16(const GlobalMatrix& m) {
  llvm::Value* slice_address =
      b_.CreateAdd(b_.CreatePtrToInt(m.pointer, b_.getInt64Ty()), b_.CreateMul(m.first, ix(2)));
  return b_.CreateICmpEQ(b_.CreateAnd(slice_address, ix(15)), ix(0));
}

llvm::Value* BlockMemory::load8(const GlobalMatrix& m, llvm::Value* at) {
  auto* vector = llvm::FixedVectorType::get(i16_, 8);
  return b_.CreateAlignedLoad(vector, b_.CreateGEP(i16_, m.pointer, b_.CreateAdd(m.first, at)),
                              llvm::Align(16));
}

std::pair<llvm::Value*, llvm::Value*> BlockMemory::clamped_at(const GlobalMatrix& m,
                                                              llvm::Value* row, llvm::Value* col) {
  llvm::Value* inside =
      b_.CreateAnd(b_.CreateICmpSLT(row, ix(m.rows)), b_.CreateICmpSLT(col, ix(m.cols)));
  llvm::Value* at =
      b_.CreateSelect(inside, b_.CreateAdd(b_.CreateMul(row, ix(m.row_stride)), col), ix(0));
  return {inside, at};
}

llvm::Value* BlockMemory::load_or_zero(const GlobalMatrix& m, llvm::Value* row, llvm::Value* col) {
  auto [inside, at] = clamped_at(m, row, col);
  return b_.CreateSelect(inside, load16(m, at), b_.getInt16(0));
}

llvm::Value* BlockMemory::load_pair_or_zero(const GlobalMatrix& m, llvm::Value* row,
                                            llvm::Value* col) {
  auto [inside, at] = clamped_at(m, row, col);
  llvm::Value* word = b_.CreateAlignedLoad(
      i32_, b_.CreateGEP(i16_, m.pointer, b_.CreateAdd(m.first, at)), llvm::Align(4));
  return b_.CreateSelect(inside, word, b_.getInt32(0));
}

void BlockMemory::copy_tile(const GlobalMatrix& m, llvm::Value* first, const SharedTile& tile,
                            int64_t rows, int64_t cols_padded, bool async) {
  auto by_element = [&] {
    e_.emit_for(
        thread_, ix(rows * cols_padded),
        [&](llvm::Value* i) {
          llvm::Value* r = b_.CreateUDiv(i, ix(cols_padded));
          llvm::Value* c = b_.CreateURem(i, ix(cols_padded));
          b_.CreateAlignedStore(load_or_zero(m, b_.CreateAdd(first, r), c), shared_at(tile, r, c),
                                llvm::Align(2));
        },
        ix(threads_));
  };
  constexpr int64_t piece = 8; // 16-bit elements in 16 bytes
  if (!whole_pieces(m, tile, cols_padded)) return by_element();
  // The pointer and slice offset are the same for every thread: the branch is uniform.
  llvm::Value* aligned = aligned16(m);
  e_.emit_if(b_.CreateNot(aligned), by_element);
  e_.emit_if(aligned, [&] {
    auto* vector = llvm::FixedVectorType::get(i32_, 4);
    int64_t per_row = m.cols / piece;
    // Piece (r, c) of the tile from `from` (row first + r of m, or a real element when that
    // row is past the end: `inside` false).
    auto copy_piece = [&](llvm::Value* r, llvm::Value* c, llvm::Value* inside, llvm::Value* from) {
      if (async) {
        // Rows past the end read 0 of their 16 bytes: the piece is zero-filled.
        b_.CreateIntrinsic(llvm::Intrinsic::nvvm_cp_async_cg_shared_global_16_s, {},
                           {shared_at(tile, r, c), from,
                            b_.CreateSelect(inside, b_.getInt32(16), b_.getInt32(0))});
        return;
      }
      llvm::Value* values = b_.CreateAlignedLoad(vector, from, llvm::Align(16));
      values = b_.CreateSelect(inside, values, llvm::Constant::getNullValue(vector));
      b_.CreateAlignedStore(values, shared_at(tile, r, c), llvm::Align(16));
    };
    llvm::Value* slice = b_.CreateGEP(i16_, m.pointer, m.first);
    int64_t pieces = rows * per_row;
    if (ThreadPieces mine = thread_pieces(rows, m.cols); mine.count) {
      // Unrolled, each copy is its row's check and a constant offset from the thread's first (a
      // loop over the pieces spent about 25 instructions of 64-bit index arithmetic on each, and
      // offsets made per piece would be hoisted out of the tile loop into registers).
      llvm::Value* row0 = b_.CreateAdd(first, mine.first_row);
      llvm::Value* from0 =
          b_.CreateGEP(i16_, slice, b_.CreateAdd(b_.CreateMul(row0, ix(m.row_stride)), mine.col));
      for (int64_t k = 0; k < mine.count; ++k) {
        llvm::Value* inside =
            b_.CreateICmpSLT(b_.CreateAdd(row0, ix(k * mine.row_step)), ix(m.rows));
        llvm::Value* from = b_.CreateConstGEP1_64(
            i16_, from0, static_cast<uint64_t>(k * mine.row_step * m.row_stride));
        copy_piece(b_.CreateAdd(mine.first_row, ix(k * mine.row_step)), mine.col, inside,
                   b_.CreateSelect(inside, from, slice));
      }
      return;
    }
    e_.emit_for(
        thread_, ix(pieces),
        [&](llvm::Value* i) {
          llvm::Value* r = b_.CreateUDiv(i, ix(per_row));
          llvm::Value* c = b_.CreateMul(b_.CreateURem(i, ix(per_row)), ix(piece));
          llvm::Value* row = b_.CreateAdd(first, r);
          llvm::Value* inside = b_.CreateICmpSLT(row, ix(m.rows));
          llvm::Value* at =
              b_.CreateSelect(inside, b_.CreateAdd(b_.CreateMul(row, ix(m.row_stride)), c), ix(0));
          copy_piece(r, c, inside, b_.CreateGEP(i16_, slice, at));
        },
        ix(threads_));
  });
}

bool BlockMemory::whole_pieces(const GlobalMatrix& m, const SharedTile& tile, int64_t cols_padded) {
  constexpr int64_t piece = 8;
  return m.cols % piece == 0 && m.row_stride % piece == 0 && cols_padded == m.cols &&
         (tile.stride * 2) % 16 == 0 && tile.offset % 16 == 0;
}

BlockMemory::ThreadPieces BlockMemory::own_pieces(const GlobalMatrix& m, const SharedTile& tile,
                                                  int64_t rows, int64_t cols_padded) {
  return whole_pieces(m, tile, cols_padded) ? thread_pieces(rows, m.cols) : ThreadPieces{};
}

BlockMemory::ThreadPieces BlockMemory::thread_pieces(int64_t rows, int64_t cols) {
  constexpr int64_t piece = 8;
  int64_t per_row = cols / piece;
  if (cols % piece != 0 || per_row == 0 || (rows * per_row) % threads_ != 0 ||
      threads_ % per_row != 0)
    return {};
  return {(rows * per_row) / threads_, threads_ / per_row, per_row,
          b_.CreateUDiv(thread_, ix(per_row)),
          b_.CreateMul(b_.CreateURem(thread_, ix(per_row)), ix(piece))};
}

llvm::Value* BlockMemory::row_dot(const GlobalMatrix& a, const GlobalMatrix& b, llvm::Value* row,
                                  llvm::Value* part, int64_t lanes, DType t) {
  llvm::Value* zero = llvm::ConstantFP::get(f32_, 0.0);
  llvm::Value* a_start = b_.CreateMul(row, ix(a.row_stride));
  llvm::Value* b_start = b_.CreateMul(row, ix(b.row_stride));
  auto strided = [&] {
    llvm::Value* sum = zero;
    for (int64_t k = 0; k * lanes < a.cols; ++k) {
      llvm::Value* c = b_.CreateAdd(part, ix(k * lanes));
      llvm::Value* inside =
          (k + 1) * lanes <= a.cols ? b_.getTrue() : b_.CreateICmpSLT(c, ix(a.cols));
      c = b_.CreateSelect(inside, c, ix(0));
      llvm::Value* x = b_.CreateFMul(widen(load16(a, b_.CreateAdd(a_start, c)), t),
                                     widen(load16(b, b_.CreateAdd(b_start, c)), t));
      sum = b_.CreateFAdd(sum, b_.CreateSelect(inside, x, zero));
    }
    return sum;
  };
  constexpr int64_t piece = 8; // 16-bit elements in 16 bytes
  if (a.cols % (piece * lanes) != 0 || a.row_stride % piece != 0 || b.row_stride % piece != 0)
    return strided();
  int64_t chunk = a.cols / lanes;
  llvm::AllocaInst* sum = e_.entry_alloca(f32_);
  llvm::Value* aligned = b_.CreateAnd(aligned16(a), aligned16(b));
  e_.emit_if(aligned, [&] {
    llvm::Value* part_start = b_.CreateMul(part, ix(chunk));
    llvm::Value* total = zero;
    for (int64_t k = 0; k < chunk; k += piece) {
      llvm::Value* c = b_.CreateAdd(part_start, ix(k));
      total = b_.CreateFAdd(total, piece_dot(load8(a, b_.CreateAdd(a_start, c)),
                                             load8(b, b_.CreateAdd(b_start, c)), t));
    }
    b_.CreateStore(total, sum);
  });
  e_.emit_if(b_.CreateNot(aligned), [&] { b_.CreateStore(strided(), sum); });
  return b_.CreateLoad(f32_, sum);
}

llvm::Value* BlockMemory::piece_dot(llvm::Value* a, llvm::Value* b, DType t) {
  llvm::Value* sum = llvm::ConstantFP::get(f32_, 0.0);
  for (unsigned i = 0; i < 8; ++i)
    sum = b_.CreateFAdd(sum, b_.CreateFMul(widen(b_.CreateExtractElement(a, i), t),
                                           widen(b_.CreateExtractElement(b, i), t)));
  return sum;
}

llvm::Value* BlockMemory::load_shared_piece(const SharedTile& t, llvm::Value* row,
                                            llvm::Value* col) {
  return b_.CreateAlignedLoad(llvm::FixedVectorType::get(i16_, 8), shared_at(t, row, col),
                              llvm::Align(16));
}

void BlockMemory::copy_f32_async(int64_t offset, llvm::Value* i, llvm::Value* shift,
                                 llvm::Value* from, llvm::Value* inside) {
  b_.CreateIntrinsic(llvm::Intrinsic::nvvm_cp_async_ca_shared_global_4_s, {},
                     {shared_f32_at(offset, i, shift), from,
                      b_.CreateSelect(inside, b_.getInt32(4), b_.getInt32(0))});
}

void BlockMemory::pipelined_tiles(llvm::Value* first, llvm::Value* end, int64_t stage_bytes,
                                  const TileStep& fill, const TileStep& use, const TileStep& land) {
  if (stage_bytes == 0) {
    e_.emit_for(first, end, [&](llvm::Value* tile) {
      barrier(); // every warp is done with the previous tile
      fill(tile, nullptr);
      commit_copies();
      wait_copies();
      if (land) land(tile, nullptr);
      barrier();
      use(tile, nullptr);
    });
    return;
  }
  auto shift_of = [&](llvm::Value* tile) {
    return b_.CreateMul(b_.CreateAnd(tile, ix(1)), ix(stage_bytes));
  };
  barrier(); // every warp is done with the block's previous work item
  e_.emit_if(b_.CreateICmpSLT(first, end), [&] { fill(first, shift_of(first)); });
  commit_copies();
  e_.emit_for(first, end, [&](llvm::Value* tile) {
    wait_copies();
    if (land) land(tile, shift_of(tile));
    // Every thread's copies of this tile have landed, and every warp is done with the
    // previous tile, whose stage the next tile fills.
    barrier();
    llvm::Value* next = b_.CreateAdd(tile, ix(1));
    e_.emit_if(b_.CreateICmpSLT(next, end), [&] { fill(next, shift_of(next)); });
    commit_copies();
    use(tile, shift_of(tile));
  });
}

void BlockMemory::barrier() { b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {}); }

void BlockMemory::commit_copies() {
  b_.CreateIntrinsic(llvm::Intrinsic::nvvm_cp_async_commit_group, {}, {});
}

void BlockMemory::wait_copies() {
  b_.CreateIntrinsic(llvm::Intrinsic::nvvm_cp_async_wait_group, {}, {b_.getInt32(0)});
}

llvm::Value* BlockMemory::shared_at(const SharedTile& t, llvm::Value* row, llvm::Value* col) {
  llvm::Value* element = b_.CreateAdd(b_.CreateMul(row, ix(t.stride)), col);
  llvm::Value* offset = b_.CreateAdd(ix(t.offset), b_.CreateMul(element, ix(2)));
  if (t.shift) offset = b_.CreateAdd(offset, t.shift);
  return b_.CreateGEP(i8_, shared_, offset);
}

std::array<llvm::Value*, 4> BlockMemory::ldmatrix_x4(llvm::Value* base, int64_t offset,
                                                     bool transposed) {
  llvm::Value* at = b_.CreateConstInBoundsGEP1_64(i8_, base, static_cast<uint64_t>(offset));
  auto* four = llvm::StructType::get(e_.context(), {i32_, i32_, i32_, i32_});
  llvm::Value* m =
      b_.CreateIntrinsic(four,
                         transposed ? llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x4_trans_b16
                                    : llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x4_b16,
                         {at});
  return {b_.CreateExtractValue(m, {0}), b_.CreateExtractValue(m, {1}),
          b_.CreateExtractValue(m, {2}), b_.CreateExtractValue(m, {3})};
}

llvm::Value* BlockMemory::shared_f32_at(int64_t offset, llvm::Value* i, llvm::Value* shift) {
  llvm::Value* at = b_.CreateAdd(ix(offset), b_.CreateMul(i, ix(4)));
  if (shift) at = b_.CreateAdd(at, shift);
  return b_.CreateGEP(i8_, shared_, at);
}
void BlockMemory::store_shared_f32(int64_t offset, llvm::Value* i, llvm::Value* v,
                                   llvm::Value* shift) {
  b_.CreateAlignedStore(v, shared_f32_at(offset, i, shift), llvm::Align(4));
}
llvm::Value* BlockMemory::load_shared_f32(int64_t offset, llvm::Value* i, llvm::Value* shift) {
  return b_.CreateAlignedLoad(f32_, shared_f32_at(offset, i, shift), llvm::Align(4));
}

llvm::Value* BlockMemory::load_float(llvm::Value* pointer, DType t, llvm::Value* at) {
  switch (t) {
  case DType::f64:
    return b_.CreateFPTrunc(
        b_.CreateLoad(b_.getDoubleTy(), b_.CreateGEP(b_.getDoubleTy(), pointer, at)), f32_);
  case DType::bf16:
  case DType::f16: {
    llvm::Value* bits = b_.CreateLoad(i16_, b_.CreateGEP(i16_, pointer, at));
    return widen(bits, t);
  }
  default: return b_.CreateLoad(f32_, b_.CreateGEP(f32_, pointer, at));
  }
}

void BlockMemory::store_float(llvm::Value* pointer, DType t, llvm::Value* at, llvm::Value* v) {
  switch (t) {
  case DType::f64:
    b_.CreateStore(b_.CreateFPExt(v, b_.getDoubleTy()),
                   b_.CreateGEP(b_.getDoubleTy(), pointer, at));
    return;
  case DType::bf16:
  case DType::f16: b_.CreateStore(narrow(v, t), b_.CreateGEP(i16_, pointer, at)); return;
  default: b_.CreateStore(v, b_.CreateGEP(f32_, pointer, at)); return;
  }
}

llvm::Value* BlockMemory::widen(llvm::Value* bits, DType t) {
  if (t == DType::bf16) return b_.CreateBitCast(b_.CreateShl(b_.CreateZExt(bits, i32_), 16), f32_);
  return b_.CreateFPExt(b_.CreateBitCast(bits, b_.getHalfTy()), f32_);
}

llvm::Value* BlockMemory::narrow(llvm::Value* v, DType t) {
  return b_.CreateBitCast(b_.CreateFPTrunc(v, t == DType::bf16 ? b_.getBFloatTy() : b_.getHalfTy()),
                          i16_);
}

llvm::Value* BlockMemory::pack(llvm::Value* low, llvm::Value* high) {
  return b_.CreateOr(b_.CreateZExt(low, i32_), b_.CreateShl(b_.CreateZExt(high, i32_), 16));
}

llvm::Value* BlockMemory::narrow_pair(llvm::Value* low, llvm::Value* high, DType t) {
  // cvt.rn.bf16x2.f32 d, a, b puts a in the upper half.
  auto id =
      t == DType::bf16 ? llvm::Intrinsic::nvvm_ff2bf16x2_rn : llvm::Intrinsic::nvvm_ff2f16x2_rn;
  return b_.CreateBitCast(b_.CreateIntrinsic(id, {}, {high, low}), i32_);
}

} // namespace sinter
