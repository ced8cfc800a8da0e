// jit/codegen/llvm_pipeline.hpp — what both targets do with a module: O3, then machine code
#pragma once
#include <functional>
#include <vector>

namespace llvm {
class Function;
class Module;
class TargetMachine;
class TargetLibraryInfoImpl;
} // namespace llvm

namespace sinter {

/// Gives `module` the machine's data layout and target triple.
void target_module(llvm::Module& module, const llvm::TargetMachine& machine);

/// Runs LLVM's default O3 module pipeline for `machine` (which adds its own passes, e.g.
/// NVVMReflect for NVPTX). `library_info`, when given, adjusts the target library info
/// (vector math libraries).
void optimize_o3(llvm::Module& module, llvm::TargetMachine& machine,
                 const std::function<void(llvm::TargetLibraryInfoImpl&)>& library_info = {});

/// Joins adjacent loads and stores of `function` into vector accesses now, before the
/// optimiser inlines its math calls. Inlined, a libdevice function such as erff brings
/// branches, and the vectoriser that codegen runs later only joins accesses within a block.
void vectorize_memory_access(llvm::Function& function, llvm::TargetMachine& machine);

/// The module as an object file (`assembly` false) or as assembly text (PTX for NVPTX).
std::vector<char> emit_machine_code(llvm::Module& module, llvm::TargetMachine& machine,
                                    bool assembly);

} // namespace sinter
