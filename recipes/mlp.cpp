// recipes/mlp.cpp — an MLP trained on Fashion-MNIST: the whole step compiled, AdamW, checkpoints
#include "fashion_mlp.hpp"
#include "fashion_training.hpp"

using namespace sinter;

namespace {

std::vector<int64_t> parse_widths(const recipe::Flags& flags) {
  std::vector<int64_t> widths{784};
  std::string spec = flags.str("hidden");
  std::size_t at = 0;
  for (;;) {
    std::size_t comma = spec.find(',', at);
    std::string part = spec.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    std::size_t used = 0;
    try {
      widths.push_back(std::stoll(part, &used));
    } catch (...) {
      used = 0;
    }
    // The whole number, or `12abc` would be 12 and `1e3` would be 1.
    if (used == 0 || used != part.size())
      flags.fail("--hidden must be comma-separated widths such as 512,256, got '" + spec + "'");
    if (widths.back() < 1 || widths.back() > 65536)
      flags.fail("--hidden widths must be from 1 to 65536, got '" + spec + "'");
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  widths.push_back(10);
  return widths;
}

} // namespace

int main(int argc, char** argv) {
  recipe::Flags flags(
      "mlp", "Trains an MLP on Fashion-MNIST (CPU or GPU) and reports test accuracy.",
      recipe::fashion_flags({}, {{"hidden", "512,256", "hidden layer widths"}}), argc, argv);
  recipe::apply_runtime_flags(flags);
  return recipe::run("mlp", [&] {
    Init init(static_cast<uint64_t>(flags.integer("seed")));
    recipe::FashionMLP model(parse_widths(flags), init);
    return recipe::train_fashion("mlp", flags, model);
  });
}
