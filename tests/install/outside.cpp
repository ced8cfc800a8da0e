// tests/install/outside.cpp — a program outside sinter's tree, built against an installed sinter
// (pkg-config and CMake): a small MLP trained on Gaussian blobs, its loss before and after
#include "dsl/sinter.hpp"

#include <cstdio>

using namespace sinter;

int main() {
  auto blobs = data::gaussian_blobs(256, 4, 3, 1);
  Init init(2);
  MLP model({4, 16, 3}, init);
  auto loss = [](MLP& m, Var x, Var y) { return cross_entropy_mean(m(x), y); };
  auto step = compile_step(model, loss, adamw{.lr = 0.05});
  data::DataLoader loader(*blobs, {.batch_size = 64, .seed = 3, .prefetch_threads = 0});
  data::Batch batch;
  double first = 0, last = 0;
  for (int i = 0; i < 40; ++i) {
    if (!loader.next(batch)) {
      loader.start_epoch(loader.position().epoch + 1);
      loader.next(batch);
    }
    last = step(batch.examples, batch.labels).loss.value();
    if (i == 0) first = last;
  }
  std::printf("outside: loss %.4f -> %.4f\n", first, last);
  return last < first ? 0 : 1;
}
