// jit/codegen/llvm_pipeline.cpp — the new pass manager's O3 pipeline and the codegen pass
#include "jit/codegen/llvm_pipeline.hpp"

#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Transforms/Scalar/EarlyCSE.h>
#include <llvm/Transforms/Scalar/InferAlignment.h>
#include <llvm/Transforms/Vectorize/LoadStoreVectorizer.h>

#include <stdexcept>

namespace sinter {

namespace {

/// The new pass manager's four analysis managers, registered for `machine` and linked.
struct Analyses {
  llvm::LoopAnalysisManager loops;
  llvm::FunctionAnalysisManager functions;
  llvm::CGSCCAnalysisManager cgsccs;
  llvm::ModuleAnalysisManager modules;
  llvm::PassBuilder builder;

  /// `before_registering` may register analyses that replace the defaults (target library
  /// info).
  explicit Analyses(
      llvm::TargetMachine& machine,
      const std::function<void(llvm::FunctionAnalysisManager&)>& before_registering = {})
      : builder(&machine) {
    if (before_registering) before_registering(functions);
    builder.registerModuleAnalyses(modules);
    builder.registerCGSCCAnalyses(cgsccs);
    builder.registerFunctionAnalyses(functions);
    builder.registerLoopAnalyses(loops);
    builder.crossRegisterProxies(loops, functions, cgsccs, modules);
  }
};

} // namespace

void optimize_o3(llvm::Module& module, llvm::TargetMachine& machine,
                 const std::function<void(llvm::TargetLibraryInfoImpl&)>& library_info) {
  Analyses analyses(machine, [&](llvm::FunctionAnalysisManager& functions) {
    if (!library_info) return;
    llvm::Triple triple(module.getTargetTriple());
    functions.registerPass([&] {
      llvm::TargetLibraryInfoImpl tlii(triple);
      library_info(tlii);
      return llvm::TargetLibraryAnalysis(tlii);
    });
  });
  analyses.builder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3)
      .run(module, analyses.modules);
}

void vectorize_memory_access(llvm::Function& function, llvm::TargetMachine& machine) {
  Analyses analyses(machine);
  llvm::FunctionPassManager passes;
  passes.addPass(llvm::EarlyCSEPass());       // one address per element, so neighbours compare
  passes.addPass(llvm::InferAlignmentPass()); // 16-byte aligned buffers: aligned neighbours
  passes.addPass(llvm::LoadStoreVectorizerPass());
  passes.run(function, analyses.functions);
}

std::vector<char> emit_machine_code(llvm::Module& module, llvm::TargetMachine& machine,
                                    bool assembly) {
  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream os(buffer);
  llvm::legacy::PassManager pm;
  auto type = assembly ? llvm::CodeGenFileType::AssemblyFile : llvm::CodeGenFileType::ObjectFile;
  if (machine.addPassesToEmitFile(pm, os, nullptr, type))
    throw std::runtime_error("sinter: LLVM's " + machine.getTargetTriple().str() +
                             " backend cannot emit this file type");
  pm.run(module);
  return std::vector<char>(buffer.begin(), buffer.end());
}

void target_module(llvm::Module& module, const llvm::TargetMachine& machine) {
  module.setDataLayout(machine.createDataLayout());
  module.setTargetTriple(machine.getTargetTriple().str());
}

} // namespace sinter
