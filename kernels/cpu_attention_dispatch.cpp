// kernels/cpu_attention_dispatch.cpp — picks the build of the CPU attention kernel that matches
// the processor (AVX-512, AVX2+FMA or the x86-64 baseline), once per process
#include "kernels/cpu_attention.hpp"

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

AttentionBuild select_build() {
#if SINTER_ATTENTION_X86_LEVELS
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return {"x86-64-v4 (AVX-512)", isa_v4::forward, isa_v4::backward};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return {"x86-64-v3 (AVX2, FMA)", isa_v3::forward, isa_v3::backward};
#endif
  return {"baseline", isa_baseline::forward, isa_baseline::backward};
}

const AttentionBuild& build() {
  static const AttentionBuild chosen = select_build();
  return chosen;
}

} // namespace

const char* attention_kernel_build() { return build().name; }

void attention_forward(const AttentionProblem& p, const AttentionForwardArgs& args, int64_t begin,
                       int64_t end) {
  build().forward(p, args, begin, end);
}

void attention_backward(const AttentionProblem& p, const AttentionBackwardArgs& args, int64_t begin,
                        int64_t end) {
  build().backward(p, args, begin, end);
}

} // namespace sinter::kernels
