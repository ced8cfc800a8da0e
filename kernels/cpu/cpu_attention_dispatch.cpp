// kernels/cpu/cpu_attention_dispatch.cpp — picks the build of the CPU attention kernel that matches
// the processor (AVX-512, AVX2+FMA or the x86-64 baseline), once per process
#include "kernels/cpu/cpu_attention.hpp"

#include <atomic>
#include <stdexcept>
#include <string>

namespace sinter::kernels {

#define SINTER_DECLARE_ATTENTION_BUILD(isa)                                                        \
  namespace isa {                                                                                  \
  void forward(const AttentionProblem&, const AttentionForwardArgs&, int64_t, int64_t);            \
  void backward(const AttentionProblem&, const AttentionBackwardArgs&, int64_t, int64_t);          \
  }
SINTER_DECLARE_ATTENTION_BUILD(isa_baseline)
#if SINTER_ATTENTION_X86_LEVELS
SINTER_DECLARE_ATTENTION_BUILD(isa_v3)
SINTER_DECLARE_ATTENTION_BUILD(isa_v4)
#endif
#undef SINTER_DECLARE_ATTENTION_BUILD

namespace {

struct AttentionBuild {
  const char* name;
  void (*forward)(const AttentionProblem&, const AttentionForwardArgs&, int64_t, int64_t);
  void (*backward)(const AttentionProblem&, const AttentionBackwardArgs&, int64_t, int64_t);
};

/// The builds this processor can run, best first.
std::vector<AttentionBuild> supported_builds() {
  std::vector<AttentionBuild> builds;
#if SINTER_ATTENTION_X86_LEVELS
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    builds.push_back({"x86-64-v4", isa_v4::forward, isa_v4::backward});
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    builds.push_back({"x86-64-v3", isa_v3::forward, isa_v3::backward});
#endif
  builds.push_back({"baseline", isa_baseline::forward, isa_baseline::backward});
  return builds;
}

const std::vector<AttentionBuild>& builds() {
  static const std::vector<AttentionBuild> supported = supported_builds();
  return supported;
}

std::atomic<const AttentionBuild*>& current() {
  static std::atomic<const AttentionBuild*> chosen{&builds().front()};
  return chosen;
}

const AttentionBuild& build() { return *current().load(std::memory_order_relaxed); }

} // namespace

const char* attention_kernel_build() { return build().name; }

std::vector<std::string> attention_kernel_builds() {
  std::vector<std::string> names;
  for (const AttentionBuild& b : builds())
    names.emplace_back(b.name);
  return names;
}

void use_attention_kernel_build(const std::string& name) {
  for (const AttentionBuild& b : builds())
    if (name == b.name) {
      current().store(&b);
      return;
    }
  std::string known;
  for (const AttentionBuild& b : builds())
    known += std::string(known.empty() ? "" : ", ") + b.name;
  throw std::invalid_argument("sinter: no CPU attention build '" + name +
                              "' on this processor (it runs: " + known + ")");
}

void attention_forward(const AttentionProblem& p, const AttentionForwardArgs& args, int64_t begin,
                       int64_t end) {
  build().forward(p, args, begin, end);
}

void attention_backward(const AttentionProblem& p, const AttentionBackwardArgs& args, int64_t begin,
                        int64_t end) {
  build().backward(p, args, begin, end);
}

} // namespace sinter::kernels
