// examples/mlp_gradients.cpp — a 2-layer MLP's mean cross-entropy and its gradients, via the DSL
// Build and run: ninja -C build examples/mlp_gradients && build/examples/mlp_gradients
#include "dsl/sinter.hpp"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

using namespace sinter;

namespace {

constexpr std::size_t features = 4, hidden = 8, classes = 3;
constexpr int64_t batch = 5;

/// The loss of a 4 -> 8 -> 3 MLP with a GELU hidden layer; the batch size is left dynamic.
auto mlp_loss(Tensor<f32, dyn, features> x, Tensor<i64, dyn> labels,
              Tensor<f32, features, hidden> w1, Tensor<f32, hidden> b1,
              Tensor<f32, hidden, classes> w2, Tensor<f32, classes> b2) {
  Tensor<f32, dyn, hidden> h = [&] {
    scope fc1("mlp.fc1");
    return gelu(matmul(x, w1) + b1);
  }();
  scope fc2("mlp.fc2");
  Tensor<f32, dyn, classes> logits = matmul(h, w2) + b2;
  return cross_entropy_mean(logits, labels);
}

/// Deterministic values in [-scale, scale].
HostTensor pattern(Shape shape, double scale, double phase) {
  std::vector<double> v(static_cast<std::size_t>(numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = scale * std::sin(0.9 * static_cast<double>(i) + phase);
  return HostTensor::from_doubles(DType::f32, std::move(shape), v);
}

std::string first_values(const HostTensor& t, std::size_t count) {
  std::string out;
  std::vector<double> v = t.to_doubles();
  for (std::size_t i = 0; i < v.size() && i < count; ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%+.5f", i ? " " : "", v[i]);
    out += buf;
  }
  return out + (v.size() > count ? " ..." : "");
}

} // namespace

int main() {
  auto step = value_and_grad(mlp_loss, {.names = {"x", "labels", "w1", "b1", "w2", "b2"},
                                        .wrt = {"w1", "b1", "w2", "b2"}});
  std::vector<HostTensor> args{
      pattern({batch, features}, 1.0, 0.0),
      HostTensor::from_doubles(DType::i64, {batch}, std::vector<double>{0, 2, 1, 1, 0}),
      pattern({features, hidden}, 0.5, 1.0),
      pattern({hidden}, 0.1, 2.0),
      pattern({hidden, classes}, 0.5, 3.0),
      pattern({classes}, 0.1, 4.0),
  };
  GradResult result = step.call(args);

  std::printf("mean cross-entropy over %lld samples: %.6f\n", static_cast<long long>(batch),
              result.value.at(0));
  for (const NamedTensor& g : result.grads)
    std::printf("  grad %-3s %-8s %s\n", g.name.c_str(), to_string(g.tensor.shape()).c_str(),
                first_values(g.tensor, 6).c_str());
  std::printf("compiled graph (forward + backward, optimised): %zu nodes\n",
              step.compile(args).graph().size());
}
