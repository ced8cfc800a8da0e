// jit/backend/cpu/cpu_target.cpp — LLVM ORC LLJIT: O3 pipeline, host CPU features, libmvec, objects
#include "jit/backend/cpu/cpu_target.hpp"

#include "jit/backend/cpu/cpu_schedule.hpp"
#include "jit/codegen/llvm_pipeline.hpp"

#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/Support/DynamicLibrary.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include <mutex>
#include <stdexcept>

namespace sinter {
namespace {

template <class T> T check(llvm::Expected<T> value, const char* what) {
  if (!value)
    throw std::runtime_error(std::string("sinter: ") + what + ": " +
                             llvm::toString(value.takeError()));
  return std::move(*value);
}

void check(llvm::Error error, const char* what) {
  if (error)
    throw std::runtime_error(std::string("sinter: ") + what + ": " +
                             llvm::toString(std::move(error)));
}

void initialize_llvm() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

} // namespace

struct CpuTarget::Impl {
  llvm::orc::JITTargetMachineBuilder machine_builder;
  std::unique_ptr<llvm::TargetMachine> machine;
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::string fingerprint;
  bool has_libmvec = false;
  std::mutex mutex; // LLVM compilation state is per call; the JIT's symbol table is shared

  bool native_bf16 = false;

  explicit Impl(llvm::orc::JITTargetMachineBuilder builder) : machine_builder(std::move(builder)) {
    machine_builder.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
    machine = check(machine_builder.createTargetMachine(), "create target machine");
    // The subtarget's features: the host's detected ones, or what a named CPU implies.
    const llvm::MCSubtargetInfo& subtarget = *machine->getMCSubtargetInfo();
    native_bf16 =
        subtarget.checkFeatures("+avx512bf16") || subtarget.checkFeatures("+avxneconvert");
    jit = check(llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(machine_builder).create(),
                "create LLJIT");
    auto prefix = jit->getDataLayout().getGlobalPrefix();
    // Kernels call libm (expf, tanhf, erff) and, once vectorised, glibc's libmvec.
    std::string error;
    has_libmvec = !llvm::sys::DynamicLibrary::LoadLibraryPermanently("libmvec.so.1", &error);
    jit->getMainJITDylib().addGenerator(check(
        llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(prefix), "process symbols"));
    fingerprint = "sinter " SINTER_VERSION ";" + machine->getTargetTriple().str() + ";" +
                  machine->getTargetCPU().str() + ";" + machine->getTargetFeatureString().str() +
                  ";llvm " LLVM_VERSION_STRING + ";libmvec " + (has_libmvec ? "1" : "0") +
                  ";build " + emitter_build_id();
  }

  void optimize(llvm::Module& module) {
    bool vector_math = has_libmvec;
    optimize_o3(module, *machine, [&](llvm::TargetLibraryInfoImpl& tlii) {
      if (vector_math)
        tlii.addVectorizableFunctionsFromVecLib(llvm::TargetLibraryInfoImpl::LIBMVEC_X86,
                                                llvm::Triple(machine->getTargetTriple()));
    });
  }

  std::vector<char> emit_object(llvm::Module& module, llvm::CodeGenFileType type) {
    return emit_machine_code(module, *machine, type == llvm::CodeGenFileType::AssemblyFile);
  }
};

CpuTarget::CpuTarget() {
  initialize_llvm();
  impl_ = std::make_unique<Impl>(
      check(llvm::orc::JITTargetMachineBuilder::detectHost(), "detect host"));
}

CpuTarget::CpuTarget(const std::string& cpu) {
  initialize_llvm();
  llvm::orc::JITTargetMachineBuilder builder{llvm::Triple("x86_64-unknown-linux-gnu")};
  builder.setCPU(cpu); // its features are the ones the name implies, as with clang's -march=
  impl_ = std::make_unique<Impl>(std::move(builder));
}

bool CpuTarget::native_bf16() const { return impl_->native_bf16; }

CpuTarget::~CpuTarget() = default;

const std::string& CpuTarget::fingerprint() const { return impl_->fingerprint; }

std::vector<char> CpuTarget::compile(const FusionPlan& plan, const Kernel& kernel,
                                     const std::string& symbol, std::string* assembly) {
  llvm::LLVMContext context;
  llvm::Module module(symbol, context);
  target_module(module, *impl_->machine);
  CpuSchedule schedule(impl_->native_bf16);
  emit_kernel(module, plan, kernel, symbol, schedule);
  std::lock_guard lock(impl_->mutex);
  impl_->optimize(module);
  if (assembly) {
    auto text = impl_->emit_object(module, llvm::CodeGenFileType::AssemblyFile);
    assembly->assign(text.begin(), text.end());
  }
  return impl_->emit_object(module, llvm::CodeGenFileType::ObjectFile);
}

KernelEntry CpuTarget::load(std::span<const char> object, const std::string& symbol) {
  std::lock_guard lock(impl_->mutex);
  auto buffer =
      llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(object.data(), object.size()), symbol);
  check(impl_->jit->addObjectFile(std::move(buffer)), "load kernel object");
  auto address = check(impl_->jit->lookup(symbol), "find kernel symbol");
  return address.toPtr<KernelEntry>();
}

} // namespace sinter
