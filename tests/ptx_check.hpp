// tests/ptx_check.hpp — compiles a graph's kernels to PTX and validates them with ptxas
#pragma once
#include "jit/backend/cuda/gpu_launch.hpp"
#include "jit/backend/cuda/nvptx_target.hpp"
#include "jit/runtime/kernel_cache.hpp"
#include "temp_dir.hpp"

#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

namespace sinter::testing {

/// `$SINTER_PTXAS`, `$CUDA_HOME/bin/ptxas`, /usr/local/cuda/bin/ptxas or ptxas on PATH.
inline std::optional<std::filesystem::path> find_ptxas() {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
  if (const char* p = std::getenv("SINTER_PTXAS")) candidates.emplace_back(p);
  if (const char* home = std::getenv("CUDA_HOME"))
    candidates.push_back(fs::path(home) / "bin/ptxas");
  candidates.emplace_back("/usr/local/cuda/bin/ptxas");
  if (const char* path = std::getenv("PATH")) {
    std::string all = path;
    for (std::size_t start = 0; start <= all.size();) {
      std::size_t end = all.find(':', start);
      if (end == std::string::npos) end = all.size();
      if (end > start) candidates.push_back(fs::path(all.substr(start, end - start)) / "ptxas");
      start = end + 1;
    }
  }
  for (const fs::path& p : candidates)
    if (std::error_code ec; fs::is_regular_file(p, ec)) return p;
  return std::nullopt;
}

struct PtxasResult {
  bool ok = false;
  std::string log; ///< ptxas's messages
};

/// Assembles `ptx` for `arch` (e.g. sm_90) into a cubin, as the driver would.
inline PtxasResult run_ptxas(const std::filesystem::path& ptxas, const std::string& ptx,
                             const std::string& arch, const std::filesystem::path& dir) {
  static int serial = 0;
  std::filesystem::path file = dir / ("kernel" + std::to_string(serial++) + ".ptx");
  std::ofstream(file) << ptx;
  std::string command = ptxas.string() + " -arch=" + arch + " " + file.string() + " -o " +
                        file.string() + ".cubin 2>&1";
  PtxasResult result;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) return {false, "cannot run " + command};
  std::array<char, 512> chunk{};
  while (std::fgets(chunk.data(), chunk.size(), pipe.get()))
    result.log += chunk.data();
  int status = pclose(pipe.release());
  result.ok = status == 0;
  std::filesystem::remove(file);
  std::filesystem::remove(file.string() + ".cubin");
  return result;
}

/// The NVPTX targets CI checks (A100 and H100 class), built once per process.
inline NvptxTarget& nvptx_target(int capability) {
  static NvptxTarget sm80(80), sm90(90);
  return capability == 80 ? sm80 : sm90;
}

/// Compiles every generated kernel of `graph` for sm_80 and sm_90 and assembles each one with
/// ptxas (tests/main.cpp skips [ptx] runs where there is none). Returns the number of kernels.
inline std::size_t check_ptx(const Graph& graph) {
  static TempDir dir("sinter-ptx");
  static std::optional<std::filesystem::path> ptxas = find_ptxas();
  REQUIRE(ptxas); // assembling nothing must not pass
  CompileRun run("ptx check", false, DumpSelection(""));
  Prepared prepared = prepare_for_nvptx(graph, 80, run); // sm_80 and sm_90 fuse alike
  const FusionPlan& plan = prepared.fusion;
  std::size_t checked = 0;
  for (std::size_t i = 0; i < plan.kernels.size(); ++i) {
    const Kernel& kernel = plan.kernels[i];
    if (kernel.kind == KernelKind::gemm || kernel.kind == KernelKind::collective) continue;
    for (int capability : {80, 90}) {
      NvptxTarget& target = nvptx_target(capability);
      std::string symbol = "k" + std::to_string(i);
      std::string ptx = target.compile(plan, kernel, symbol);
      INFO("kernel " << i << " for " << target.arch() << ":\n" << ptx);
      REQUIRE(ptx.find(".entry " + symbol) != std::string::npos);
      PtxasResult assembled = run_ptxas(*ptxas, ptx, target.arch(), dir.path);
      INFO("ptxas: " << assembled.log);
      REQUIRE(assembled.ok);
    }
    ++checked;
  }
  return checked;
}

} // namespace sinter::testing
