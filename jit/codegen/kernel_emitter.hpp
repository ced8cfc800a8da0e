// jit/codegen/kernel_emitter.hpp — the shared LLVM IR emitter: what each op computes at an index,
// index algebra and 16-bit storage; a backend's KernelSchedule decides how the work is walked
#pragma once
#include "jit/passes/fuse.hpp"

#include <llvm/ADT/STLFunctionalExtras.h>
#include <llvm/IR/IRBuilder.h>

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace llvm {
class Module;
}

namespace sinter {

/// Identifies this build of the code generator (size and mtime of the binary holding it), so
/// kernels cached by an older emitter are never reused. Part of every target fingerprint.
std::string emitter_build_id();

/// Math functions whose implementation a target chooses (intrinsics, libm, libdevice, ...).
enum class MathFunction { exp, log, tanh, erf, pow };

class KernelEmitter;

/// A backend's half of code generation: the kernel's entry point and how its work maps to the
/// hardware (loops for a thread pool, grids of blocks, ...), plus the target's math functions.
/// The schedule calls back into the KernelEmitter for everything an op means.
class KernelSchedule {
public:
  virtual ~KernelSchedule() = default;
  /// Creates the function `name` in the emitter's module and emits the kernel's body.
  virtual void emit(KernelEmitter& emitter, const std::string& name) = 0;
  /// `function` applied to `args` (all of one floating-point type).
  virtual llvm::Value* math(KernelEmitter& emitter, MathFunction function,
                            std::span<llvm::Value* const> args) = 0;
  /// Whether f32 → bf16 rounds with the target's own instruction (LLVM's fptrunc to bfloat:
  /// AVX-512 BF16's vcvtneps2bf16); otherwise the emitter rounds to nearest even on the bits.
  virtual bool native_bf16_rounding() const { return false; }
};

using Index = std::vector<llvm::Value*>;

/// Emits one fused kernel: the elemental meaning of every primitive at an index, index
/// algebra (broadcast, reshape, permute, slice, pad, concat, gather), bf16/f16 storage and
/// reductions' combine rules. Schedules use its building blocks; it never asks which target
/// it emits for.
class KernelEmitter {
public:
  KernelEmitter(llvm::Module& module, const FusionPlan& plan, const Kernel& kernel,
                KernelSchedule& schedule);

  /// Emits the kernel through the schedule. GEMM kernels are library calls: std::logic_error.
  void emit(const std::string& name);

  // ---- what the schedule works with ---------------------------------------------------------
  llvm::Module& module() { return module_; }
  llvm::LLVMContext& context() { return ctx_; }
  llvm::IRBuilder<>& builder() { return b_; }
  const Graph& graph() const { return g_; }
  const Kernel& kernel() const { return kernel_; }
  const FusionPlan& plan() const { return plan_; }
  const Node& root() const { return g_.node(kernel_.root); }

  /// Starts emitting into `function`: `outputs[i]` is the buffer of kernel().outputs()[i]
  /// (the root first), `reads[i]` the buffer of kernel().reads[i].
  void begin_function(llvm::Function* function, std::span<llvm::Value* const> outputs,
                      std::span<llvm::Value* const> reads);
  llvm::Function* function() { return fn_; }

  llvm::Type* compute_type(DType t);
  llvm::Type* storage_type(DType t);
  llvm::Value* i64(int64_t v) { return b_.getInt64(static_cast<uint64_t>(v)); }

  /// Kernels with a runtime size (RuntimeRowsKernel: a row count, or a dim such as a sequence
  /// length): `size` is that parameter and `extent` the value the kernel's graph was built
  /// with for it, a prime above every real dim. A shape number c·extent^p (a dim, a stride, an
  /// element count, an offset) then reads c·size^p, every other number stays a constant.
  void set_runtime_size(llvm::Value* size, int64_t extent) {
    size_ = size;
    size_extent_ = extent;
  }
  /// A shape number: c·size^p for c·extent^p with a runtime size, else the constant.
  llvm::Value* extent(int64_t n);
  /// Elements of `shape` (a multiple of the runtime size where the shape holds it).
  llvm::Value* count(const Shape& shape) { return extent(numel(shape)); }

  /// The value of node `v` at index `idx` (memoised until clear_memo()).
  llvm::Value* compute(ValueId v, const Index& idx);
  /// Forgets memoised values: call at the start of every element's code.
  void clear_memo() { memo_.clear(); }
  /// Declares the element being written (index and flat offset), so reads of same-shaped
  /// buffers at that index reuse its offset; null `flat` clears it.
  void set_current_element(Index idx, llvm::Value* flat);

  /// Row kernels: the value of a reduction for the row being emitted. compute() returns it at
  /// any index (fusion checked that every use of it keeps to the row).
  void set_row_value(ValueId reduction, llvm::Value* value) { row_values_[reduction] = value; }
  void clear_row_values() { row_values_.clear(); }
  /// Row kernels: loads of `buffer` (a read of whole rows) come from `cache` (memory holding
  /// the row that starts at flat offset `row_start`, in the buffer's storage type), at `flat -
  /// row_start`; with `fill`, each element is loaded from the buffer and kept there first.
  void cache_row(ValueId buffer, llvm::Value* cache, llvm::Value* row_start, bool fill) {
    row_cache_[buffer] = CachedRow{cache, row_start, fill};
  }
  /// Loads come from the buffers again.
  void clear_row_cache() { row_cache_.clear(); }
  /// Row kernels: the outputs at `positions` (of kernel().outputs()) at element `flat` of their
  /// own buffers. Each is computed at `idx` when its shape is `idx_shape`, else at idx
  /// reshaped to its shape (same flat order); all values first, then the stores.
  void compute_and_store_at(std::span<const std::size_t> positions, const Index& idx,
                            const Shape& idx_shape, llvm::Value* flat);
  /// The two halves of it, for a schedule that computes several elements before it stores any
  /// (a row kernel written over a buffer it reads: every element's loads before its stores).
  std::vector<llvm::Value*> compute_at(std::span<const std::size_t> positions, const Index& idx,
                                       const Shape& idx_shape);
  void store_at(std::span<const std::size_t> positions, std::span<llvm::Value* const> values,
                llvm::Value* flat);

  Index delinearize(llvm::Value* flat, const Shape& shape);
  /// Row kernels: the index of row `row` of a last-axis reduction's operand (all but its last
  /// dim), with the reduction's accumulator `acc` set to its identity, ready to fold the row.
  Index start_row_reduction(const Node& reduction, llvm::AllocaInst* acc, llvm::Value* row);
  /// Row kernels: a pass over row `row` folding the reductions at positions `pass` of
  /// `reductions` (RowLayout::passes), each into its accumulator in `accs`: every one set to
  /// its identity, and their row indices returned for fold_row_element.
  std::vector<Index> start_row_pass(std::span<const ValueId> reductions,
                                    std::span<const std::size_t> pass,
                                    std::span<llvm::AllocaInst* const> accs, llvm::Value* row);
  /// One element of that pass, at `column` of the row: every operand first (they may share
  /// work), then every fold.
  void fold_row_element(std::span<const ValueId> reductions, std::span<const std::size_t> pass,
                        std::span<llvm::AllocaInst* const> accs, std::span<const Index> row_idx,
                        llvm::Value* column);
  llvm::Value* linear(const Index& idx, const Shape& shape);
  void store_out(llvm::Value* v, llvm::Value* flat, DType t);
  /// Loop kernels: every output's value at `idx`, then every store at `flat` (all values
  /// first, so an output written over a buffer in place never changes what the others read).
  void compute_and_store_outputs(const Index& idx, llvm::Value* flat);
  /// The two halves of it: every output's value at `idx`, then their stores at `flat`.
  std::vector<llvm::Value*> compute_outputs(const Index& idx);
  void store_outputs(std::span<llvm::Value* const> values, llvm::Value* flat);
  /// Address of element `flat` of output `position` of kernel().outputs() (stored as `t`).
  llvm::Value* output_address(llvm::Value* flat, DType t, std::size_t position = 0);
  /// Stores / loads element `flat` of output `position` in its own dtype (reductions that
  /// accumulate in their outputs).
  void store_output(std::size_t position, llvm::Value* v, llvm::Value* flat);
  llvm::Value* load_output(std::size_t position, llvm::Value* flat);

  // Reductions
  llvm::Value* reduce_init(const Node& root);
  llvm::Value* combine(const Node& root, llvm::Value* acc, llvm::Value* x);
  /// *acc = combine(reduction, *acc, x), `acc` an alloca of the reduction's compute type.
  void accumulate(const Node& reduction, llvm::AllocaInst* acc, llvm::Value* x) {
    b_.CreateStore(combine(reduction, b_.CreateLoad(acc->getAllocatedType(), acc), x), acc);
  }
  /// The reduced dims of the reduction's operand, outermost first.
  Shape reduced_dims() const;
  /// Whether the reduction reduces its operand's last axis (rows are contiguous).
  bool reduces_last_axis() const;
  /// Assembles the operand index from the output index and the reduced loop variables.
  Index operand_index(const Index& out_idx, const Index& red_idx) const;
  llvm::AllocaInst* entry_alloca(llvm::Type* t);

  // Scatter-add
  /// The update element at (index position `at`, element `k` of its row) and the address of
  /// the output slot it adds to, row `row`.
  std::pair<llvm::Value*, llvm::Value*> scatter_update(const Index& at, llvm::Value* row,
                                                       llvm::Value* k);
  /// Whether `row` (i64) is a row of the output (out-of-range indices are dropped).
  llvm::Value* scatter_row_valid(llvm::Value* row);
  /// Adds `x` (compute type) to the element of type `t` at `slot`: load, add, store rounded to
  /// the storage type (no atomics: the caller makes sure no other thread writes that slot).
  void add_to_slot(llvm::Value* slot, llvm::Value* x, DType t) {
    llvm::Value* old = from_storage(b_.CreateLoad(storage_type(t), slot), t);
    llvm::Value* sum =
        x->getType()->isFloatingPointTy() ? b_.CreateFAdd(old, x) : b_.CreateAdd(old, x);
    b_.CreateStore(to_storage(sum, t), slot);
  }
  /// The whole scatter in order, for iterations [begin, end) of a range of 1: clear the
  /// output, then add every update. Correct with repeated indices, without atomics.
  void emit_serial_scatter(llvm::Value* begin, llvm::Value* end);

  // Control flow
  /// for (iv = begin; iv < end; iv += step); `step` null means 1.
  void emit_for(llvm::Value* begin, llvm::Value* end, llvm::function_ref<void(llvm::Value*)> body,
                llvm::Value* step = nullptr);
  /// Nested loops over `dims` (outermost first); `body` gets one induction variable per dim.
  void emit_nest(const Shape& dims, llvm::function_ref<void(const Index&)> body);
  void emit_if(llvm::Value* condition, llvm::function_ref<void()> body);

private:
  void emit_nest_from(const Shape& dims, std::size_t d, Index& ivs,
                      llvm::function_ref<void(const Index&)> body);
  llvm::Value* compute_uncached(ValueId v, const Index& idx);
  llvm::Value* compare(OpId op, llvm::Value* a, llvm::Value* c);
  llvm::Value* convert(llvm::Value* v, DType from, DType to);
  llvm::Value* math(MathFunction f, std::initializer_list<llvm::Value*> args);
  llvm::Value* round_to_bf16(llvm::Value* f);
  llvm::Value* round_to_f16(llvm::Value* f);
  llvm::Value* to_storage(llvm::Value* v, DType t);
  llvm::Value* from_storage(llvm::Value* v, DType t);
  Index reshape_index(const Index& idx, const Shape& out, const Shape& in);
  /// `v` clamped to [0, size - 1] (`size` a shape number).
  llvm::Value* clamp_below(llvm::Value* v, int64_t size);
  llvm::Value* flat_offset(const Index& idx, const Shape& shape);
  llvm::Value* load_flat(ValueId buffer_node, llvm::Value* flat, DType t);
  bool in_memory(ValueId v) const;
  bool reduced_axis(std::size_t d) const;

  llvm::Module& module_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<> b_;
  const FusionPlan& plan_;
  const Graph& g_;
  const Kernel& kernel_;
  KernelSchedule& schedule_;
  llvm::Function* fn_ = nullptr;
  std::vector<llvm::Value*> outputs_; ///< every output's buffer, root first
  std::map<ValueId, llvm::Value*> buffers_;
  std::map<std::pair<ValueId, Index>, llvm::Value*> memo_;
  std::map<ValueId, llvm::Value*> row_values_;
  struct CachedRow {
    llvm::Value* cache;
    llvm::Value* row_start;
    bool fill;
  };
  std::map<ValueId, CachedRow> row_cache_; ///< cache_row
  Index current_index_;                    ///< the element being written, when declared...
  llvm::Value* current_flat_ = nullptr;    ///< ...and its flat offset
  llvm::Value* size_ = nullptr;            ///< set_runtime_size
  int64_t size_extent_ = 0;
};

/// Adds the kernel's function, named `name`, to `module`: loop, reduce and scatter_add kernels,
/// walked as `schedule` decides. Verifies the module; invalid IR is a std::logic_error.
void emit_kernel(llvm::Module& module, const FusionPlan& plan, const Kernel& kernel,
                 const std::string& name, KernelSchedule& schedule);

} // namespace sinter
