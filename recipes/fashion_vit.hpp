// recipes/fashion_vit.hpp — the Fashion-MNIST ViT (vit recipe, distill's teacher and student)
#pragma once
#include "dsl/sinter.hpp"
#include "recipe_support.hpp"

namespace recipe {

/// Standardised images [B, 28, 28] → ViT → 10 logits.
struct FashionViT {
  BOOST_HANA_DEFINE_STRUCT(FashionViT, (sinter::ViT, vit));
  // Fashion-MNIST's pixel mean and standard deviation; a Hugging Face teacher's own
  // (preprocessor_config.json) when it was trained with other ones.
  double pixel_mean = 0.2860, pixel_std = 0.3530;

  FashionViT(const sinter::ViTConfig& config, sinter::Init& init) : vit(config, init) {}
  sinter::Var operator()(const sinter::Var& images) const {
    return vit(sinter::Var((images.value() - pixel_mean) * (1.0 / pixel_std)));
  }
};

/// Whether `--teacher PATH` names a Hugging Face ViT (a folder, or a weights file, with a
/// config.json whose model_type is "vit") rather than a file the vit recipe wrote.
inline bool is_hf_vit(const std::string& path) {
  if (path.empty()) return false;
  std::filesystem::path config = sinter::ModelConfigFile::locate(path);
  return std::filesystem::exists(config) &&
         sinter::ModelConfigFile(config).text("model_type", "") == "vit";
}

/// The configuration of a Hugging Face ViTForImageClassification teacher, which must read
/// Fashion-MNIST: 28×28 images of 1 channel, 10 classes; anything else exits 2 naming it.
inline sinter::ViTConfig hf_teacher_config(const Flags& flags) {
  sinter::ViTConfig config = sinter::hf::vit_config(flags.str("teacher"));
  if (config.image != 28 || config.channels != 1 || config.classes != 10)
    flags.fail("--teacher " + flags.str("teacher") + " is a ViT for " +
               std::to_string(config.image) + "x" + std::to_string(config.image) + " images of " +
               std::to_string(config.channels) + " channel(s) and " +
               std::to_string(config.classes) +
               " classes; distill needs one for Fashion-MNIST: image_size 28, num_channels 1, "
               "num_labels 10 (a ViTForImageClassification)");
  return config;
}

/// Loads --teacher into `teacher`: the vit recipe's weights, or a Hugging Face ViT's (whose
/// preprocessor_config.json, when there is one, gives the pixel mean and deviation it was
/// trained with).
inline void load_teacher(const Flags& flags, FashionViT& teacher) {
  const std::string& path = flags.str("teacher");
  if (!is_hf_vit(path)) {
    sinter::load_weights(path, teacher);
    return;
  }
  sinter::load_weights(sinter::hf::weights_file(path), teacher,
                       {.names = sinter::hf::vit, .under = "vit"});
  std::filesystem::path folder = sinter::ModelConfigFile::locate(path).parent_path();
  if (!std::filesystem::exists(folder / "preprocessor_config.json")) return;
  sinter::ModelConfigFile pre(folder / "preprocessor_config.json");
  if (!pre.flag("do_normalize", true)) {
    teacher.pixel_mean = 0.0, teacher.pixel_std = 1.0;
    return;
  }
  std::vector<double> mean = pre.reals("image_mean"), deviation = pre.reals("image_std");
  if (mean.empty() || deviation.empty() || deviation[0] <= 0)
    pre.refuse("image_std", "and \"image_mean\" must be lists of numbers, deviations above 0");
  teacher.pixel_mean = mean[0], teacher.pixel_std = deviation[0];
}

/// The ViT of `--<prefix>patch/dim/depth/heads` for 28×28 images and 10 classes; bad values
/// exit 2 naming the flags.
inline sinter::ViTConfig vit_config(const Flags& flags, const std::string& prefix = "") {
  sinter::ViTConfig config{.image = 28,
                           .patch = flags.integer(prefix + "patch"),
                           .dim = flags.integer(prefix + "dim"),
                           .depth = flags.integer(prefix + "depth"),
                           .heads = flags.integer(prefix + "heads"),
                           .classes = 10};
  if (config.patch <= 0 || 28 % config.patch != 0)
    flags.fail("--" + prefix + "patch must divide 28");
  if (config.dim <= 0 || config.depth <= 0 || config.heads <= 0 || config.dim % config.heads != 0)
    flags.fail("--" + prefix + "dim, --" + prefix + "depth and --" + prefix +
               "heads must be positive, and the heads must divide the dim");
  return config;
}

} // namespace recipe
