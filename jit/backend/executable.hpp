// jit/backend/executable.hpp — what every backend's compiled step is: plan once, run many times
#pragma once
#include "jit/runtime/host_tensor.hpp"
#include "jit/runtime/kernel_lookup.hpp"
#include "jit/runtime/memory_plan.hpp"

#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace sinter {

class Communicator;

/// How a step keeps an input on a device between its runs (set_carried, set_resident), as
/// memory plans count it.
enum class InputKeeping : unsigned char {
  per_run,  ///< given with each run (the batch): a copy in each of the two input sets
  carried,  ///< replaced by an output of the run (parameters, optimizer state): one copy
  resident, ///< read by every run and written by none (a teacher's weights): one copy
};

/// A graph compiled for one backend. Inputs follow the graph's inputs and are already checked
/// (CompiledGraph checks dtypes and shapes); outputs are tensors of the graph's output types.
class Executable {
public:
  virtual ~Executable() = default;
  /// Runs one step, writing one tensor per graph output.
  virtual void run_into(std::span<const HostTensor* const> inputs,
                        std::span<HostTensor> outputs) const = 0;
  /// Memory the step needs; an empty plan where the backend has none (the interpreter).
  virtual const MemoryPlan& memory_plan() const = 0;
  /// Kernel counts and compile time; zeros where nothing is compiled.
  virtual const CompileReport& report() const = 0;
  /// (input index, output index) pairs whose output is the next run's input. Backends that
  /// keep state on a device use it to leave those values there; others ignore it.
  virtual void set_carried(std::span<const std::pair<std::size_t, std::size_t>>) {}
  /// Inputs every run reads and none writes. Device backends keep one copy of each and
  /// upload it again only when the host tensor's stamp changed; others ignore it.
  virtual void set_resident(std::span<const std::size_t>) {}
  /// The kernels the step runs; null where there are none (the interpreter).
  virtual const FusionPlan* fusion_plan() const { return nullptr; }
  /// What the program is, as profiles name it (`train step`, `eval`; default `program`).
  void set_label(std::string label) { label_ = std::move(label); }
  const std::string& label() const { return label_; }
  /// The ranks the step's collectives run between (default: sinter::world()).
  void set_communicator(Communicator& communicator) { communicator_ = &communicator; }
  Communicator& communicator() const;

private:
  Communicator* communicator_ = nullptr;
  std::string label_ = "program";
};

} // namespace sinter
