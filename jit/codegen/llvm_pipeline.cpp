// jit/codegen/llvm_pipeline.cpp — the new pass manager's O3 pipeline and the codegen pass
#include "jit/codegen/llvm_pipeline.hpp"

#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include <stdexcept>

namespace sinter {

void optimize_o3(llvm::Module& module, llvm::TargetMachine& machine,
                 const std::function<void(llvm::TargetLibraryInfoImpl&)>& library_info) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(&machine);
  if (library_info) {
    llvm::Triple triple(module.getTargetTriple());
    fam.registerPass([&] {
      llvm::TargetLibraryInfoImpl tlii(triple);
      library_info(tlii);
      return llvm::TargetLibraryAnalysis(tlii);
    });
  }
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(module, mam);
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
