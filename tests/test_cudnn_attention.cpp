// tests/test_cudnn_attention.cpp — cuDNN's fused attention graphs, built against the real libcudnn
// where it is installed (no GPU needed), and the reasons sinter gives when it cannot use them
#include "kernels/cuda/cudnn_attention.hpp"

#include <catch2/catch.hpp>

#include <filesystem>

namespace sinter::testing {
namespace {

kernels::CudnnAttentionShape gpt2_layer(bool causal, bool backward) {
  kernels::CudnnAttentionShape s;
  s.dtype = DType::bf16;
  s.b = 8;
  s.h = 12;
  s.tq = s.tk = 1024;
  s.d = s.dv = 64;
  s.scale = 0.125f;
  s.causal = causal;
  s.backward = backward;
  return s;
}

bool cudnn_installed() {
  for (const char* dir : {"/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu"})
    if (std::filesystem::exists(std::filesystem::path(dir) / "libcudnn.so.9")) return true;
  return false;
}

} // namespace

TEST_CASE("cudnn attention: libcudnn accepts every operation of the forward and backward graphs",
          "[cudnn]") {
  if (!kernels::CudnnAttention::get()) {
    // Without the library the graphs cannot be built, and the error says how to get it.
    REQUIRE_FALSE(cudnn_installed());
    REQUIRE_THROWS_WITH(kernels::build_cudnn_attention_operations(gpt2_layer(true, false)),
                        Catch::Contains("libcudnn"));
    return;
  }
  REQUIRE(kernels::CudnnAttention::get()->version() >= 90000);
  // matmul, scale, row max, minus max, exp, row sum, log, lse, normalise, matmul; the causal
  // mask adds two index generators, a comparison and a select.
  CHECK(kernels::build_cudnn_attention_operations(gpt2_layer(false, false)) == 10);
  CHECK(kernels::build_cudnn_attention_operations(gpt2_layer(true, false)) == 14);
  kernels::CudnnAttentionShape inference = gpt2_layer(true, false);
  inference.saves_lse = false;
  CHECK(kernels::build_cudnn_attention_operations(inference) == 14);
  // do·o (three), the probabilities again (four), dv, dp, ds (three), dk, k's rows, dq (two).
  CHECK(kernels::build_cudnn_attention_operations(gpt2_layer(false, true)) == 18);
  CHECK(kernels::build_cudnn_attention_operations(gpt2_layer(true, true)) == 22);
  kernels::CudnnAttentionShape vit = gpt2_layer(false, true);
  vit.b = 256;
  vit.tq = vit.tk = 197;
  vit.dtype = DType::f16;
  CHECK(kernels::build_cudnn_attention_operations(vit) == 18);
  // q, k and v read where a packed [b, t, 3·h·d] projection holds them, dO from [b, t, h·d].
  kernels::CudnnAttentionShape packed = gpt2_layer(true, true);
  const int64_t width = packed.h * packed.d;
  packed.q_strides = packed.k_strides =
      packed.v_strides = {packed.tq * 3 * width, packed.d, 3 * width};
  packed.do_strides = {packed.tq * width, packed.d, width};
  CHECK(packed.strided());
  CHECK(packed.key() != gpt2_layer(true, true).key());
  CHECK(kernels::build_cudnn_attention_operations(packed) == 22);
  packed.backward = false;
  CHECK(kernels::build_cudnn_attention_operations(packed) == 14);
  // And written where their readers want them: o token-major [b, t, h·d], dq, dk and dv the
  // parts of one packed gradient [b, t, 3·h·d] (each call binds its part's first element).
  packed.o_strides = packed.do_strides;
  packed.dq_strides = packed.dk_strides = packed.dv_strides = packed.q_strides;
  CHECK(packed.key() != [&] {
    kernels::CudnnAttentionShape copies = packed;
    copies.o_strides = {};
    return copies.key();
  }());
  CHECK(kernels::build_cudnn_attention_operations(packed) == 14);
  packed.backward = true;
  CHECK(kernels::build_cudnn_attention_operations(packed) == 22);
}

TEST_CASE("cudnn attention: a descriptor libcudnn refuses is named in the error", "[cudnn]") {
  if (!kernels::CudnnAttention::get()) {
    REQUIRE_FALSE(cudnn_installed());
    return;
  }
  kernels::CudnnAttentionShape empty = gpt2_layer(false, false);
  empty.d = -64; // a negative dim
  REQUIRE_THROWS_WITH(kernels::build_cudnn_attention_operations(empty),
                      Catch::Contains("cuDNN") && Catch::Contains("tensor q"));
}

TEST_CASE("cudnn attention: the shapes cuDNN's fused attention cannot take say why", "[cudnn]") {
  kernels::CudnnAttentionShape s = gpt2_layer(true, false);
  CHECK(kernels::cudnn_attention_unsupported(s, 90).empty());
  CHECK(kernels::cudnn_attention_unsupported(s, 80).empty());
  CHECK_THAT(kernels::cudnn_attention_unsupported(s, 75), Catch::Contains("sm_80"));
  s.dtype = DType::f32;
  CHECK_THAT(kernels::cudnn_attention_unsupported(s, 90), Catch::Contains("bf16 or f16"));
  s.dtype = DType::f16;
  s.d = 60;
  CHECK_THAT(kernels::cudnn_attention_unsupported(s, 90), Catch::Contains("multiples of 8"));
  s.d = 64;
  s.dv = 256;
  CHECK_THAT(kernels::cudnn_attention_unsupported(s, 90), Catch::Contains("256"));
}

} // namespace sinter::testing
