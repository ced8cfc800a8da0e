// kernels/cuda/nvjitlink.hpp — PTX assembled into a cubin inside the process by libnvJitLink
// (dlopen), a handle per call, so that every host thread can assemble at once
#pragma once
#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace sinter::kernels {

/// The CUDA toolkit's in-process PTX assembler (libnvJitLink, CUDA 12 and 13): the PTX compiler
/// the driver's JIT runs, called here on the compiling thread with a handle of its own. Through
/// the driver's JIT (cuLinkComplete) GPT-2 small's 55 kernels took 6.3–6.7 s cold on the H200's
/// 16 host cores (2026-11-29), no less than on an H100's 2: the driver apparently assembles one
/// at a time. Header-only: the null CUDA driver assembles with it too.
struct NvJitLink {
  using Handle = void*;
  int (*create)(Handle*, uint32_t, const char**) = nullptr;
  int (*add_data)(Handle, int, const void*, std::size_t, const char*) = nullptr;
  int (*complete)(Handle) = nullptr;
  int (*cubin_size)(Handle, std::size_t*) = nullptr;
  int (*cubin)(Handle, void*) = nullptr;
  int (*error_log_size)(Handle, std::size_t*) = nullptr;
  int (*error_log)(Handle, char*) = nullptr;
  int (*destroy)(Handle*) = nullptr;
  static constexpr int input_ptx = 2; // NVJITLINK_INPUT_PTX

  /// Where the CUDA toolkit keeps it: $CUDA_HOME/lib64, then /usr/local/cuda/lib64.
  static std::vector<std::string> toolkit_paths() {
    std::vector<std::string> paths;
    if (const char* home = std::getenv("CUDA_HOME"); home && *home)
      paths.push_back(std::string(home) + "/lib64/libnvJitLink.so.13");
    paths.emplace_back("/usr/local/cuda/lib64/libnvJitLink.so.13");
    return paths;
  }

  /// The first of `candidates` (paths or sonames) that loads with every entry point; the
  /// library stays loaded for the process.
  static std::optional<NvJitLink> load(const std::vector<std::string>& candidates) {
    for (const std::string& path : candidates) {
      void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!library) continue;
      NvJitLink j;
      bool all = true;
      auto bind = [&](auto& function, const char* name) {
        function =
            reinterpret_cast<std::remove_reference_t<decltype(function)>>(dlsym(library, name));
        all = all && function;
      };
      bind(j.create, "nvJitLinkCreate");
      bind(j.add_data, "nvJitLinkAddData");
      bind(j.complete, "nvJitLinkComplete");
      bind(j.cubin_size, "nvJitLinkGetLinkedCubinSize");
      bind(j.cubin, "nvJitLinkGetLinkedCubin");
      bind(j.error_log_size, "nvJitLinkGetErrorLogSize");
      bind(j.error_log, "nvJitLinkGetErrorLog");
      bind(j.destroy, "nvJitLinkDestroy");
      if (all) return j;
      dlclose(library);
    }
    return std::nullopt;
  }

  /// What to assemble `ptx` for on a device of compute capability `capability` (90: sm_90, or
  /// sm_90a where the PTX's .target asks for the architecture's own instructions).
  static std::string arch_for(const std::string& ptx, int capability) {
    std::string arch = "sm_" + std::to_string(capability);
    std::size_t target = ptx.find(".target");
    if (target != std::string::npos) {
      std::size_t end = ptx.find_first_of("\n,", target);
      if (ptx.substr(target, end - target).find(arch + "a") != std::string::npos) arch += "a";
    }
    return arch;
  }

  /// `ptx` assembled for `arch` (e.g. "sm_90") into `cubin`; false with the assembler's log in
  /// `errors` when it refuses the PTX.
  bool assemble(const std::string& ptx, const std::string& arch, std::string& cubin,
                std::string& errors) const {
    std::string option = "-arch=" + arch;
    const char* options[] = {option.c_str()};
    Handle handle = nullptr;
    bool ok = create(&handle, 1, options) == 0;
    ok = ok && add_data(handle, input_ptx, ptx.data(), ptx.size(), "kernel") == 0;
    ok = ok && complete(handle) == 0;
    std::size_t size = 0;
    if (ok && cubin_size(handle, &size) == 0 && size > 0) {
      cubin.resize(size);
      ok = this->cubin(handle, cubin.data()) == 0;
    } else {
      ok = false;
    }
    if (!ok && handle) {
      std::size_t log = 0;
      if (error_log_size(handle, &log) == 0 && log > 1) {
        errors.resize(log);
        error_log(handle, errors.data());
        errors.resize(std::strlen(errors.c_str()));
      }
    }
    if (!ok && errors.empty()) errors = "libnvJitLink refused the PTX";
    if (handle) destroy(&handle);
    return ok;
  }
};

} // namespace sinter::kernels
