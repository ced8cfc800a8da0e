// tests/support/nvptx_emulator.cpp — runs a generated NVPTX kernel's LLVM IR on the CPU, one OS
// thread per GPU thread, so kernels written for tensor cores are checked on machines without a GPU
#include "tests/support/nvptx_emulator.hpp"

#include "jit/dist/collective_launch.hpp"

#include "jit/backend/cuda/gpu_launch.hpp"
#include "jit/backend/cuda/nvptx_schedule.hpp"
#include "jit/backend/cuda/nvptx_target.hpp"
#include "jit/codegen/kernel_emitter.hpp"
#include "jit/ir/half.hpp"
#include "jit/runtime/memory_plan.hpp"

#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>

#include <array>
#include <barrier>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace sinter {
namespace {

/// Runs one emulated GPU thread's code. Clang's -fsanitize=function (the sanitizer build) checks
/// a type signature placed before every function the compiler emits; JIT code has none.
#if defined(__clang__)
[[clang::no_sanitize("function")]]
#endif
void run_thread(void (*entry)(void* const*), void* const* arguments) {
  entry(arguments);
}

constexpr int warp_size = 32;

/// What the threads of one warp exchange at shfl.sync and mma.sync: each lane deposits its
/// part, all meet, each reads what it needs, all meet again before the slots are reused.
struct Warp {
  std::barrier<> meet{warp_size};
  std::array<float, warp_size> values{};
  std::array<int32_t, warp_size> votes{};
  std::array<std::array<uint32_t, 4>, warp_size> a{};
  std::array<std::array<uint32_t, 2>, warp_size> b{};
  std::array<const std::byte*, warp_size> rows{}; ///< ldmatrix's row addresses
};

/// The block being run.
struct Block {
  explicit Block(int threads)
      : meet(threads), warps(static_cast<std::size_t>(threads / warp_size)) {}
  std::barrier<> meet;
  std::vector<Warp> warps;
  int32_t index = 0, count = 1;
  bool f16 = false; ///< mma operands are f16 (else bf16)
};

Block* block = nullptr;
thread_local int32_t thread_index = 0;

Warp& my_warp() { return block->warps[static_cast<std::size_t>(thread_index / warp_size)]; }
int my_lane() { return thread_index % warp_size; }

int32_t tid_x() { return thread_index; }
int32_t ctaid_x() { return block->index; }
int32_t nctaid_x() { return block->count; }
void barrier0() { block->meet.arrive_and_wait(); }
float shfl_bfly(int32_t, float value, int32_t lane_mask, int32_t) {
  Warp& w = my_warp();
  int lane = my_lane();
  w.values[static_cast<std::size_t>(lane)] = value;
  w.meet.arrive_and_wait();
  float other = w.values[static_cast<std::size_t>(lane ^ lane_mask)];
  w.meet.arrive_and_wait();
  return other;
}
int32_t shfl_bfly_i32(int32_t mask, int32_t value, int32_t lane_mask, int32_t clamp) {
  return std::bit_cast<int32_t>(shfl_bfly(mask, std::bit_cast<float>(value), lane_mask, clamp));
}
/// vote.sync.ballot.b32 over the whole warp: bit i set where lane i's predicate is.
int32_t vote_ballot(int32_t, int32_t predicate) {
  Warp& w = my_warp();
  w.votes[static_cast<std::size_t>(my_lane())] = predicate & 1;
  w.meet.arrive_and_wait();
  uint32_t bits = 0;
  for (int lane = 0; lane < warp_size; ++lane)
    bits |= static_cast<uint32_t>(w.votes[static_cast<std::size_t>(lane)]) << lane;
  w.meet.arrive_and_wait();
  return static_cast<int32_t>(bits);
}
float ex2(float x) { return std::exp2(x); }
/// ex2.approx.ftz: subnormal arguments and results are 0.
float ex2_ftz(float x) {
  float r = std::exp2(std::fpclassify(x) == FP_SUBNORMAL ? 0.0f : x);
  return std::fpclassify(r) == FP_SUBNORMAL ? 0.0f : r;
}
// libdevice's functions, which the NVPTX target links, on the host.
float nv_expf(float x) { return std::exp(x); }
double nv_exp(double x) { return std::exp(x); }
float nv_logf(float x) { return std::log(x); }
double nv_log(double x) { return std::log(x); }
float nv_tanhf(float x) { return std::tanh(x); }
double nv_tanh(double x) { return std::tanh(x); }
float nv_erff(float x) { return std::erf(x); }
double nv_erf(double x) { return std::erf(x); }
float nv_powf(float x, float y) { return std::pow(x, y); }
double nv_pow(double x, double y) { return std::pow(x, y); }
// 16-bit conversions (cvt.rn on the GPU), so the host code needs no compiler runtime for them.
uint16_t round_bf16(float x) { return bf16_bits(x); }
uint16_t round_f16(float x) { return f16_bits(x); }
float widen_f16(uint16_t bits) { return f16_value(bits); }
float lg2(float x) { return std::log2(x); }

float element(uint32_t word, int k) {
  auto bits = static_cast<uint16_t>(k % 2 ? word >> 16 : word & 0xffffu);
  return block->f16 ? f16_value(bits) : bf16_value(bits);
}

/// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}: the warp's A (16×16) and B (16×8) from
/// every lane's fragments, this lane's four results (PTX ISA fragment layouts).
void mma(uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1, float c0,
         float c1, float c2, float c3, float* d) {
  Warp& w = my_warp();
  auto lane = static_cast<std::size_t>(my_lane());
  w.a[lane] = {a0, a1, a2, a3};
  w.b[lane] = {b0, b1};
  w.meet.arrive_and_wait();
  auto a_at = [&](int row, int k) { // a0,a1: (g, 2t+{0,1}); a2,a3: row+8; a4..a7: k+8
    std::size_t from = static_cast<std::size_t>((row % 8) * 4 + (k % 8) / 2);
    int reg = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
    return element(w.a[from][static_cast<std::size_t>(reg)], k);
  };
  auto b_at = [&](int k, int col) { // b0,b1: (2t+{0,1}, g); b2,b3: k+8
    std::size_t from = static_cast<std::size_t>(col * 4 + (k % 8) / 2);
    return element(w.b[from][k >= 8 ? 1 : 0], k);
  };
  int group = static_cast<int>(lane) / 4, pair = 2 * (static_cast<int>(lane) % 4);
  std::array<float, 4> c{c0, c1, c2, c3};
  for (int i = 0; i < 4; ++i) {
    int row = group + (i >= 2 ? 8 : 0), col = pair + (i & 1);
    float sum = c[static_cast<std::size_t>(i)];
    for (int k = 0; k < 16; ++k)
      sum += a_at(row, k) * b_at(k, col);
    d[i] = sum;
  }
  w.meet.arrive_and_wait();
}

/// A check the hardware makes (misaligned addresses fault): the thread cannot throw across the
/// barriers its warp waits at, so the whole test stops, naming the fault.
[[noreturn]] void fault(const char* what) {
  std::fprintf(stderr, "emulator: %s\n", what);
  std::abort();
}

/// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lanes 8i to 8i + 7 give the addresses of
/// the 8 rows (16 bytes each) of matrix i; every lane receives its part of each matrix, laid
/// out as an mma fragment: row lane / 4, columns 2·(lane % 4) and + 1, or (.trans) rows
/// 2·(lane % 4) and + 1 of column lane / 4.
void ldmatrix(const std::byte* row, int32_t transposed, uint32_t* out) {
  if (reinterpret_cast<uintptr_t>(row) % 16 != 0) fault("ldmatrix row address not 16-byte aligned");
  Warp& w = my_warp();
  int lane = my_lane();
  w.rows[static_cast<std::size_t>(lane)] = row;
  w.meet.arrive_and_wait();
  int group = lane / 4, pair = 2 * (lane % 4);
  for (int i = 0; i < 4; ++i) {
    auto at = [&](int r, int c) {
      uint16_t bits;
      std::memcpy(&bits, w.rows[static_cast<std::size_t>(8 * i + r)] + 2 * c, 2);
      return static_cast<uint32_t>(bits);
    };
    uint32_t low = transposed ? at(pair, group) : at(group, pair);
    uint32_t high = transposed ? at(pair + 1, group) : at(group, pair + 1);
    out[i] = low | high << 16;
  }
  w.meet.arrive_and_wait();
}

/// cp.async.cg.shared.global 16 bytes: the copy happens when a later wait needs it, not when it
/// is issued, so a kernel that reads the tile before waiting reads stale data, as a GPU may.
struct AsyncCopy {
  std::byte* to;
  const std::byte* from;
  int32_t size;         ///< 16 (cp.async.cg) or 4 (cp.async.ca … 4)
  int32_t source_bytes; ///< the rest of the copy's bytes are zero-filled
};
thread_local std::vector<AsyncCopy> uncommitted_copies;
thread_local std::deque<std::vector<AsyncCopy>> copy_groups;
void cp_async(std::byte* to, const std::byte* from, int32_t size, int32_t source_bytes) {
  auto size_bytes = static_cast<uintptr_t>(size);
  if (reinterpret_cast<uintptr_t>(to) % size_bytes != 0 ||
      reinterpret_cast<uintptr_t>(from) % size_bytes != 0)
    fault("cp.async address not aligned to the copy's size");
  uncommitted_copies.push_back({to, from, size, source_bytes});
}
void cp_async_commit() {
  copy_groups.push_back(std::move(uncommitted_copies));
  uncommitted_copies.clear();
}
void cp_async_wait_group(int32_t pending) {
  while (static_cast<int32_t>(copy_groups.size()) > pending) {
    for (const AsyncCopy& c : copy_groups.front()) {
      std::memset(c.to, 0, static_cast<std::size_t>(c.size));
      std::memcpy(c.to, c.from, static_cast<std::size_t>(c.source_bytes));
    }
    copy_groups.pop_front();
  }
}
void cp_async_wait_all() {
  cp_async_commit();
  cp_async_wait_group(0);
}

template <class F> void throw_on(llvm::Expected<F>& e, const char* what) {
  if (!e)
    throw std::runtime_error(std::string("emulator: ") + what + ": " +
                             llvm::toString(e.takeError()));
}

/// A host function the emulated module calls: the emulation of an NVPTX intrinsic that maps
/// one to one (`intrinsic`), a helper of the other rewrites, or a libdevice function.
struct HostFunction {
  const char* intrinsic; ///< null: called by its symbol
  const char* symbol;
  void* address;
};

template <class F> void* address_of(F* function) { return reinterpret_cast<void*>(function); }

const std::vector<HostFunction>& host_functions() {
  static const std::vector<HostFunction> table = {
      {"llvm.nvvm.read.ptx.sreg.tid.x", "emu_tid_x", address_of(&tid_x)},
      {"llvm.nvvm.read.ptx.sreg.ctaid.x", "emu_ctaid_x", address_of(&ctaid_x)},
      {"llvm.nvvm.read.ptx.sreg.nctaid.x", "emu_nctaid_x", address_of(&nctaid_x)},
      {"llvm.nvvm.barrier0", "emu_barrier0", address_of(&barrier0)},
      {"llvm.nvvm.shfl.sync.bfly.f32", "emu_shfl_bfly", address_of(&shfl_bfly)},
      {"llvm.nvvm.shfl.sync.bfly.i32", "emu_shfl_bfly_i32", address_of(&shfl_bfly_i32)},
      {nullptr, "emu_vote_ballot", address_of(&vote_ballot)},
      {"llvm.nvvm.ex2.approx.f", "emu_ex2", address_of(&ex2)},
      {"llvm.nvvm.ex2.approx.ftz.f", "emu_ex2_ftz", address_of(&ex2_ftz)},
      {"llvm.nvvm.lg2.approx.f", "emu_lg2", address_of(&lg2)},
      {nullptr, "emu_mma", address_of(&mma)},
      {nullptr, "emu_ldmatrix", address_of(&ldmatrix)},
      {nullptr, "emu_cp_async", address_of(&cp_async)},
      {"llvm.nvvm.cp.async.commit.group", "emu_cp_async_commit", address_of(&cp_async_commit)},
      {"llvm.nvvm.cp.async.wait.group", "emu_cp_async_wait_group",
       address_of(&cp_async_wait_group)},
      {"llvm.nvvm.cp.async.wait.all", "emu_cp_async_wait_all", address_of(&cp_async_wait_all)},
      {nullptr, "emu_round_bf16", address_of(&round_bf16)},
      {nullptr, "emu_round_f16", address_of(&round_f16)},
      {nullptr, "emu_widen_f16", address_of(&widen_f16)},
      {nullptr, "__nv_expf", address_of(&nv_expf)},
      {nullptr, "__nv_exp", address_of(&nv_exp)},
      {nullptr, "__nv_logf", address_of(&nv_logf)},
      {nullptr, "__nv_log", address_of(&nv_log)},
      {nullptr, "__nv_tanhf", address_of(&nv_tanhf)},
      {nullptr, "__nv_tanh", address_of(&nv_tanh)},
      {nullptr, "__nv_erff", address_of(&nv_erff)},
      {nullptr, "__nv_erf", address_of(&nv_erf)},
      {nullptr, "__nv_powf", address_of(&nv_powf)},
      {nullptr, "__nv_pow", address_of(&nv_pow)},
  };
  return table;
}

/// Replaces each call of an NVPTX intrinsic with a call of its emulation.
void replace_intrinsics(llvm::Module& module) {
  llvm::LLVMContext& ctx = module.getContext();
  auto* i32 = llvm::Type::getInt32Ty(ctx);
  auto* f32 = llvm::Type::getFloatTy(ctx);
  auto* ptr = llvm::PointerType::get(ctx, 0);
  std::vector<llvm::CallInst*> calls;
  for (llvm::Function& f : module)
    for (llvm::BasicBlock& bb : f)
      for (llvm::Instruction& inst : bb)
        if (auto* call = llvm::dyn_cast<llvm::CallInst>(&inst))
          if (call->getCalledFunction() &&
              call->getCalledFunction()->getName().starts_with("llvm.nvvm."))
            calls.push_back(call);
  // Conversions to and from bf16/f16 become calls too.
  std::vector<llvm::Instruction*> conversions;
  for (llvm::Function& f : module)
    for (llvm::BasicBlock& bb : f)
      for (llvm::Instruction& inst : bb)
        if ((llvm::isa<llvm::FPTruncInst>(inst) && inst.getType()->is16bitFPTy()) ||
            (llvm::isa<llvm::FPExtInst>(inst) && inst.getOperand(0)->getType()->isHalfTy()))
          conversions.push_back(&inst);
  auto* i16 = llvm::Type::getInt16Ty(ctx);
  for (llvm::Instruction* inst : conversions) {
    llvm::IRBuilder<> b(inst);
    llvm::Value* replacement = nullptr;
    if (llvm::isa<llvm::FPTruncInst>(inst)) {
      const char* name = inst->getType()->isBFloatTy() ? "emu_round_bf16" : "emu_round_f16";
      auto callee = module.getOrInsertFunction(name, llvm::FunctionType::get(i16, {f32}, false));
      replacement = b.CreateBitCast(b.CreateCall(callee, {inst->getOperand(0)}), inst->getType());
    } else {
      auto callee =
          module.getOrInsertFunction("emu_widen_f16", llvm::FunctionType::get(f32, {i16}, false));
      replacement = b.CreateCall(callee, {b.CreateBitCast(inst->getOperand(0), i16)});
    }
    inst->replaceAllUsesWith(replacement);
    inst->eraseFromParent();
  }
  for (llvm::CallInst* call : calls) {
    std::string name = call->getCalledFunction()->getName().str();
    llvm::IRBuilder<> b(call);
    std::vector<llvm::Value*> args(call->arg_begin(), call->arg_end());
    auto simple = [&](const char* emulation) {
      std::vector<llvm::Type*> types;
      for (llvm::Value* a : args)
        types.push_back(a->getType());
      auto callee = module.getOrInsertFunction(
          emulation, llvm::FunctionType::get(call->getType(), types, false));
      return b.CreateCall(callee, args);
    };
    // The intrinsic's result (a struct of four) from the four values an emulation wrote.
    auto four_results = [&](llvm::Value* out, llvm::Type* element) {
      llvm::Value* result = llvm::PoisonValue::get(call->getType());
      for (unsigned i = 0; i < 4; ++i)
        result = b.CreateInsertValue(
            result, b.CreateLoad(element, b.CreateConstGEP1_32(element, out, i)), {i});
      return result;
    };
    llvm::Value* replacement = nullptr;
    for (const HostFunction& f : host_functions())
      if (f.intrinsic && name == f.intrinsic) replacement = simple(f.symbol);
    if (name == "llvm.nvvm.vote.ballot.sync") { // the predicate travels as an i32
      args[1] = b.CreateZExt(args[1], i32);
      replacement = simple("emu_vote_ballot");
    }
    if (!replacement && name.starts_with("llvm.nvvm.mma.m16n8k16.row.col.")) {
      std::vector<llvm::Value*> words;
      for (std::size_t i = 0; i < 6; ++i)
        words.push_back(b.CreateBitCast(args[i], i32));
      for (std::size_t i = 6; i < 10; ++i)
        words.push_back(args[i]);
      llvm::IRBuilder<> entry(&*call->getFunction()->getEntryBlock().getFirstInsertionPt());
      llvm::Value* out = entry.CreateAlloca(llvm::ArrayType::get(f32, 4));
      words.push_back(out);
      std::vector<llvm::Type*> types(6, i32);
      types.insert(types.end(), 4, f32);
      types.push_back(ptr);
      b.CreateCall(module.getOrInsertFunction("emu_mma",
                                              llvm::FunctionType::get(b.getVoidTy(), types, false)),
                   words);
      replacement = four_results(out, f32);
    }
    if (!replacement && name.starts_with("llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.")) {
      bool transposed = name.starts_with("llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.trans.");
      llvm::IRBuilder<> entry(&*call->getFunction()->getEntryBlock().getFirstInsertionPt());
      llvm::Value* out = entry.CreateAlloca(llvm::ArrayType::get(i32, 4));
      b.CreateCall(
          module.getOrInsertFunction(
              "emu_ldmatrix", llvm::FunctionType::get(b.getVoidTy(), {ptr, i32, ptr}, false)),
          {b.CreateAddrSpaceCast(args[0], ptr), b.getInt32(transposed ? 1 : 0), out});
      replacement = four_results(out, i32);
    }
    // cvt.rn.{bf16,f16}x2.f32 d, a, b: b rounded into the low half, a into the high.
    if (!replacement && (name == "llvm.nvvm.ff2bf16x2.rn" || name == "llvm.nvvm.ff2f16x2.rn")) {
      auto round = module.getOrInsertFunction(name == "llvm.nvvm.ff2bf16x2.rn" ? "emu_round_bf16"
                                                                               : "emu_round_f16",
                                              llvm::FunctionType::get(i16, {f32}, false));
      llvm::Value* high = b.CreateZExt(b.CreateCall(round, {args[0]}), i32);
      llvm::Value* low = b.CreateZExt(b.CreateCall(round, {args[1]}), i32);
      replacement = b.CreateBitCast(b.CreateOr(low, b.CreateShl(high, 16)), call->getType());
    }
    int32_t copy_size = name.starts_with("llvm.nvvm.cp.async.cg.shared.global.16")  ? 16
                        : name.starts_with("llvm.nvvm.cp.async.ca.shared.global.4") ? 4
                                                                                    : 0;
    if (!replacement && copy_size) {
      llvm::Value* source_bytes = args.size() > 2 ? args[2] : b.getInt32(copy_size);
      replacement = b.CreateCall(
          module.getOrInsertFunction(
              "emu_cp_async", llvm::FunctionType::get(b.getVoidTy(), {ptr, ptr, i32, i32}, false)),
          {b.CreateAddrSpaceCast(args[0], ptr), b.CreateAddrSpaceCast(args[1], ptr),
           b.getInt32(copy_size), source_bytes});
    }
    if (!replacement) throw std::runtime_error("emulator: no emulation of " + name);
    call->replaceAllUsesWith(replacement);
    call->eraseFromParent();
  }
}

/// Generated kernels compiled for the host, with the emulations bound.
struct HostKernels {
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::vector<void (*)(void* const*)> entries; ///< `entry(arguments)` runs one GPU thread
};

/// A kernel to emulate: a step's kernel compiled for its shape, or (`rows` set) its
/// RuntimeRowsKernel with the rows as the last argument, as the CUDA backend compiles it.
struct EmulatedKernel {
  const FusionPlan* plan = nullptr;
  const Kernel* kernel = nullptr;
  std::optional<RuntimeRowsKernel> rows;
};

HostKernels compile_for_host(std::span<const EmulatedKernel> kernels,
                             std::optional<GpuLaunch> rows_launch = std::nullopt) {
  static std::once_flag native;
  std::call_once(native, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
  auto context = std::make_unique<llvm::LLVMContext>();
  auto module = std::make_unique<llvm::Module>("emulated", *context);
  NvptxSchedule schedule;
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    const EmulatedKernel& k = kernels[i];
    std::string name = "kernel" + std::to_string(i);
    if (k.rows)
      emit_rows_kernel(*module, *k.rows,
                       rows_launch ? *rows_launch : gpu_launch(*k.plan->graph, *k.kernel), name);
    else
      emit_kernel(*module, *k.plan, *k.kernel, name, schedule);
  }
  replace_intrinsics(*module);
  // Dynamic shared memory (`extern .shared`, a row cache): one block's worth, as much as an
  // H100 gives a block; blocks run one after another, so each has it to itself.
  std::vector<llvm::GlobalVariable*> dynamic_shared;
  for (llvm::GlobalVariable& v : module->globals())
    if (v.isDeclaration() && v.getAddressSpace() == 3) dynamic_shared.push_back(&v);
  for (llvm::GlobalVariable* v : dynamic_shared) {
    auto* bytes = llvm::ArrayType::get(llvm::Type::getInt8Ty(*context), 232448);
    auto* block = new llvm::GlobalVariable(
        *module, bytes, false, llvm::GlobalValue::InternalLinkage,
        llvm::ConstantAggregateZero::get(bytes), v->getName() + ".emulated", nullptr,
        llvm::GlobalValue::NotThreadLocal, 3);
    block->setAlignment(llvm::Align(16));
    v->replaceAllUsesWith(block);
    v->eraseFromParent();
  }
  // The entries the host calls: void emulatedN(void** arguments).
  auto* ptr = llvm::PointerType::get(*context, 0);
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    llvm::Function* fn = module->getFunction("kernel" + std::to_string(i));
    auto* entry = llvm::Function::Create(
        llvm::FunctionType::get(llvm::Type::getVoidTy(*context), {ptr}, false),
        llvm::Function::ExternalLinkage, "emulated" + std::to_string(i), *module);
    llvm::IRBuilder<> b(llvm::BasicBlock::Create(*context, "entry", entry));
    std::vector<llvm::Value*> args;
    for (unsigned a = 0; a < fn->arg_size(); ++a) {
      llvm::Value* p = b.CreateLoad(ptr, b.CreateConstGEP1_32(ptr, entry->getArg(0), a));
      llvm::Type* type = fn->getArg(a)->getType();
      // Buffers come as pointers, the rows parameter as its value in a pointer's place.
      args.push_back(type->isPointerTy() ? b.CreateAddrSpaceCast(p, type)
                                         : b.CreatePtrToInt(p, type));
    }
    b.CreateCall(fn, args);
    b.CreateRetVoid();
  }
  std::string errors;
  llvm::raw_string_ostream err(errors);
  if (llvm::verifyModule(*module, &err)) throw std::logic_error("emulator: invalid IR: " + errors);

  auto jit = llvm::orc::LLJITBuilder().create();
  throw_on(jit, "create LLJIT");
  module->setDataLayout((*jit)->getDataLayout());
  module->setTargetTriple((*jit)->getTargetTriple().str());
  llvm::orc::MangleAndInterner mangle((*jit)->getExecutionSession(), (*jit)->getDataLayout());
  llvm::orc::SymbolMap symbols;
  for (const HostFunction& f : host_functions())
    symbols[mangle(f.symbol)] = {llvm::orc::ExecutorAddr::fromPtr(f.address),
                                 llvm::JITSymbolFlags::Exported};
  if (auto e = (*jit)->getMainJITDylib().define(llvm::orc::absoluteSymbols(std::move(symbols))))
    throw std::runtime_error("emulator: " + llvm::toString(std::move(e)));
  if (auto e =
          (*jit)->addIRModule(llvm::orc::ThreadSafeModule(std::move(module), std::move(context))))
    throw std::runtime_error("emulator: " + llvm::toString(std::move(e)));
  HostKernels compiled;
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    auto address = (*jit)->lookup("emulated" + std::to_string(i));
    throw_on(address, "lookup");
    compiled.entries.push_back(address->toPtr<void (*)(void* const*)>());
  }
  compiled.jit = std::move(*jit);
  return compiled;
}

EmulatedBlockOrder block_order = EmulatedBlockOrder::ascending;

/// Runs the whole grid of one kernel, block after block, each block's threads at once.
void run_launch(const GpuLaunch& launch, const Graph& g, const Kernel& kernel,
                void (*entry)(void* const*), std::span<void* const> arguments) {
  if (launch.items == 0) return; // the runtime launches nothing
  if (launch.zero_output_first) std::memset(arguments[0], 0, byte_size(g.type(kernel.root)));
  int threads = static_cast<int>(launch.threads);
  Block state(threads);
  state.count = static_cast<int32_t>(launch.blocks);
  state.f16 = kernel.kind == KernelKind::attention &&
              g.type(g.node(kernel.root).inputs[0]).dtype == DType::f16;
  block = &state;
  for (int32_t index = 0; index < state.count; ++index) {
    state.index = block_order == EmulatedBlockOrder::descending ? state.count - 1 - index : index;
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        thread_index = t;
        run_thread(entry, arguments.data());
      });
    for (std::thread& t : pool)
      t.join();
  }
  block = nullptr;
}

void run_grid(const FusionPlan& plan, const Kernel& kernel, void (*entry)(void* const*),
              std::span<void* const> arguments) {
  run_launch(gpu_launch(*plan.graph, kernel), *plan.graph, kernel, entry, arguments);
}

/// Element `i` of a buffer of type `t`, as a double.
double element_at(const std::byte* data, DType t, int64_t i) {
  auto read = [&]<class T>(T) {
    T v;
    std::memcpy(&v, data + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
    return v;
  };
  switch (t) {
  case DType::f64: return read(double{});
  case DType::f32: return read(float{});
  case DType::bf16: return bf16_value(read(uint16_t{}));
  case DType::f16: return f16_value(read(uint16_t{}));
  default: throw std::logic_error("emulator: a GEMM on " + std::string(dtype_name(t)));
  }
}

void set_element(std::byte* data, DType t, int64_t i, double value) {
  auto write = [&]<class T>(T v) {
    std::memcpy(data + i * static_cast<int64_t>(sizeof(T)), &v, sizeof(T));
  };
  switch (t) {
  case DType::f64: write(value); break;
  case DType::f32: write(static_cast<float>(value)); break;
  case DType::bf16: write(bf16_bits(static_cast<float>(value))); break;
  case DType::f16: write(f16_bits(static_cast<float>(value))); break;
  default: throw std::logic_error("emulator: a GEMM on " + std::string(dtype_name(t)));
  }
}

/// A GEMM kernel as cuBLASLt runs it (strided batches, operands transposed as planned), on the
/// host with float64 accumulation.
void host_gemm(const Graph& g, const Kernel& kernel, std::byte* c, const std::byte* a,
               const std::byte* b) {
  Shape as = g.type(kernel.gemm_a.logical).shape, cs = g.type(kernel.root).shape;
  int64_t m = cs[cs.size() - 2], n = cs.back();
  int64_t k = kernel.gemm_a.transposed ? as[as.size() - 2] : as.back();
  int64_t batches = numel(cs) / std::max<int64_t>(1, m * n);
  DType t = g.type(kernel.root).dtype;
  for (int64_t batch = 0; batch < batches; ++batch)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          int64_t ai = kernel.gemm_a.transposed ? p * m + i : i * k + p;
          int64_t bi = kernel.gemm_b.transposed ? j * k + p : p * n + j;
          sum += element_at(a, t, batch * m * k + ai) * element_at(b, t, batch * k * n + bi);
        }
        set_element(c, t, batch * m * n + i * n + j, sum);
      }
}

} // namespace

void emulate_nvptx_kernel(const FusionPlan& plan, const Kernel& kernel,
                          std::span<void* const> arguments) {
  EmulatedKernel kernels[] = {{&plan, &kernel, std::nullopt}};
  HostKernels compiled = compile_for_host(kernels);
  std::size_t expected = kernel.outputs().size() + kernel.reads.size();
  if (arguments.size() != expected)
    throw std::invalid_argument("emulator: the kernel takes " + std::to_string(expected) +
                                " buffers, got " + std::to_string(arguments.size()));
  run_grid(plan, kernel, compiled.entries[0], arguments);
}

void emulate_nvptx_rows_kernel(const RuntimeRowsKernel& kernel, const GpuLaunch& launch,
                               int64_t rows, std::span<void* const> buffers) {
  RowsInstance compiled_for = kernel.instance(nvptx_rows_extent);
  EmulatedKernel kernels[] = {{&compiled_for.plan, &compiled_for.kernel(), kernel}};
  HostKernels compiled = compile_for_host(kernels, launch);
  RowsInstance instance = kernel.instance(rows);
  GpuLaunch run = launch; // the compiled schedule, on the grid this row count gets
  run.blocks = gpu_launch(*instance.graph, instance.kernel()).blocks;
  run.items = rows;
  std::vector<void*> arguments(buffers.begin(), buffers.end());
  arguments.push_back(reinterpret_cast<void*>(static_cast<intptr_t>(rows)));
  run_launch(run, *instance.graph, instance.kernel(), compiled.entries[0], arguments);
}

void set_emulated_block_order(EmulatedBlockOrder order) { block_order = order; }

std::vector<HostTensor> emulate_nvptx_step(const Graph& optimized,
                                           std::span<const HostTensor> inputs, int capability,
                                           bool keeps_operands) {
  CompileRun run("emulated step", false, DumpSelection(""));
  Prepared prepared = keeps_operands
                          ? prepare(optimized,
                                    nvptx_graph_stages(optimized, capability, nullptr, {},
                                                       [](const FusionPlan&) { return true; }),
                                    run)
                          : prepare_for_nvptx(optimized, capability, run);
  const Graph& g = *prepared.graph;
  if (inputs.size() != g.inputs().size())
    throw std::invalid_argument("emulator: the step takes " + std::to_string(g.inputs().size()) +
                                " inputs, got " + std::to_string(inputs.size()));
  const FusionPlan& plan = prepared.fusion;
  const MemoryPlan& memory = prepared.memory;
  // Buffers as the CUDA executable lays them out: inputs in their own buffers, intermediates
  // in one arena (shared where lifetimes allow), outputs the arena does not hold on their own.
  std::vector<std::byte> arena(
      static_cast<std::size_t>(std::max<int64_t>(memory.arena_bytes(), 0)));
  std::vector<std::byte*> pointer(g.size(), nullptr);
  std::vector<std::vector<std::byte>> owned;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const TensorType& t = g.type(g.inputs()[i].id);
    if (!(inputs[i].dtype() == t.dtype && inputs[i].shape() == t.shape))
      throw std::invalid_argument("emulator: input " + g.inputs()[i].name + " must be " +
                                  to_string(t));
    owned.emplace_back(inputs[i].bytes().begin(), inputs[i].bytes().end());
    pointer[g.inputs()[i].id] = owned.back().data();
  }
  for (const BufferSlot& slot : memory.slots())
    pointer[slot.node] = arena.data() + slot.offset;
  const std::vector<ValueId> storage = storage_over_inputs(plan); // outputs over inputs
  for (ValueId v = 0; v < storage.size(); ++v)
    if (storage[v] != v) pointer[v] = pointer[storage[v]];
  for (const NamedValue& out : g.outputs())
    if (!pointer[out.id]) {
      owned.emplace_back(std::max<std::size_t>(byte_size(g.type(out.id)), 16));
      pointer[out.id] = owned.back().data();
    }
  // Kernels whose rows split as the CUDA backend's do take their row count as a parameter
  // (unless their code depends on it: then, as there, they are compiled for their shape).
  std::vector<EmulatedKernel> generated;
  for (const Kernel& kernel : plan.kernels)
    if (kernel.kind != KernelKind::gemm && kernel.kind != KernelKind::collective) {
      generated.push_back({&plan, &kernel, RuntimeRowsKernel::of(plan, kernel)});
      if (generated.back().rows &&
          !rows_kernel_emits(*generated.back().rows, gpu_launch(g, kernel)))
        generated.back().rows.reset();
    }
  HostKernels compiled = compile_for_host(generated);
  std::size_t next = 0;
  for (const Kernel& kernel : plan.kernels) {
    if (kernel.kind == KernelKind::gemm) {
      host_gemm(g, kernel, pointer[kernel.root], pointer[kernel.gemm_a.buffer],
                pointer[kernel.gemm_b.buffer]);
      continue;
    }
    if (kernel.kind == KernelKind::collective) { // what NCCL does, on the host's communicator
      check_collective_ranks(collective_ranks(g), world());
      world().wait(
          start_collective(world(), g, kernel, pointer[kernel.reads[0]], pointer[kernel.root]));
      continue;
    }
    std::vector<void*> arguments;
    for (ValueId out : kernel.outputs())
      arguments.push_back(pointer[out]);
    for (ValueId read : kernel.reads)
      arguments.push_back(pointer[read]);
    if (const auto& rows = generated[next].rows)
      arguments.push_back(reinterpret_cast<void*>(static_cast<intptr_t>(rows->rows())));
    run_grid(plan, kernel, compiled.entries[next++], arguments);
  }
  std::vector<HostTensor> outputs;
  for (const NamedValue& out : g.outputs()) {
    const TensorType& t = g.type(out.id);
    outputs.emplace_back(t.dtype, t.shape);
    if (std::size_t n = byte_size(t))
      std::memcpy(outputs.back().bytes().data(), pointer[out.id], n);
  }
  return outputs;
}

} // namespace sinter
