// recipes/distill.cpp — a ViT teacher distilled into a smaller ViT on Fashion-MNIST, one
// compiled step per update (student forward, backward, AdamW and the teacher's forward)
#include "fashion_training.hpp"
#include "fashion_vit.hpp"

using namespace sinter;
using recipe::FashionViT;

namespace {

double test_accuracy(FashionViT& model, const data::Dataset& test) {
  auto logits =
      compile_eval(model, [](FashionViT& m, Var images) { return m(images); }, {"images"});
  return recipe::accuracy(logits, test, 500);
}

Schedule schedule_for(const recipe::Flags& flags, int64_t total) {
  return warmup_cosine(flags.real("lr"), std::min<int64_t>(200, total / 10 + 1), total);
}

adamw optimizer_for(const recipe::Flags& flags) {
  return adamw{.lr = flags.real("lr"), .weight_decay = flags.real("weight-decay")};
}

auto classification_loss = [](FashionViT& m, Var images, Var labels) {
  return cross_entropy_mean(m(images), labels);
};

} // namespace

int main(int argc, char** argv) {
  recipe::Flags flags(
      "distill",
      "Distills a ViT teacher into a smaller ViT student on Fashion-MNIST (CPU or GPU) and "
      "compares the student with the same student trained alone.",
      recipe::fashion_flags(
          {{"epochs", "3"}, {"lr", "0.003"}, {"weight-decay", "0.05"}},
          {{"teacher", "",
            "the teacher's weights: a safetensors file the vit recipe wrote "
            "(default: train a teacher first)"},
           {"teacher-epochs", "12",
            "epochs of the teacher trained first (without --teacher; the vit recipe's 12)"},
           {"teacher-steps", "0", "steps of the teacher trained first instead (0: epochs)"},
           {"teacher-patch", "7", "teacher patch size (as the vit recipe's --patch)"},
           {"teacher-dim", "64", "teacher token width (the vit recipe's --dim)"},
           {"teacher-depth", "4", "teacher transformer blocks (the vit recipe's --depth)"},
           {"teacher-heads", "4", "teacher attention heads (the vit recipe's --heads)"},
           {"patch", "7", "student patch size (divides 28)"},
           {"dim", "32", "student token width"},
           {"depth", "2", "student transformer blocks"},
           {"heads", "2", "student attention heads"},
           {"temperature", "2", "distillation temperature T"},
           {"alpha", "0.5", "weight of the T²·KL term; 1 - alpha weighs cross-entropy"},
           {"no-baseline", "0", "switch: skip training the student alone for comparison"}}),
      argc, argv);
  recipe::apply_runtime_flags(flags);
  if (recipe::sift_options(flags))
    flags.fail("--sift-beta on distill is not built yet (issue 13): sifting runs on mlp and vit");
  return recipe::run("distill", [&] {
    std::filesystem::path dir = flags.str("data-dir").empty()
                                    ? data::default_fashion_mnist_dir()
                                    : std::filesystem::path(flags.str("data-dir"));
    auto train = data::fashion_mnist(data::Split::train, dir);
    auto test = data::fashion_mnist(data::Split::test, dir);
    auto seed = static_cast<uint64_t>(flags.integer("seed"));
    KdOptions kd{.temperature = flags.real("temperature"), .alpha = flags.real("alpha")};
    if (!(kd.temperature > 0)) flags.fail("--temperature must be positive");
    if (!(kd.alpha >= 0 && kd.alpha <= 1)) flags.fail("--alpha must be in [0, 1]");
    Init teacher_init(seed + 1), student_init(seed);
    FashionViT teacher(recipe::vit_config(flags, "teacher-"), teacher_init);
    FashionViT student(recipe::vit_config(flags), student_init);
    FashionViT initial_student = student; // the baseline starts from the same weights
    auto distill_loss = [kd](FashionViT& s, const FashionViT& t, Var images, Var labels) {
      return kd_loss(s(images), t(images), labels, kd);
    };
    auto make_step = [&](int64_t total) {
      return compile_distill_step(
          student, teacher, distill_loss, optimizer_for(flags),
          {.step = recipe::parallel(flags, {.batch_names = {"images", "labels"},
                                            .schedule = schedule_for(flags, total),
                                            .amp = recipe::amp_flag(flags)})});
    };
    // The largest batch is the distillation step's: it holds both models.
    int64_t batch = recipe::batch_size(flags, [&](int64_t budget) {
      return make_step(1).max_batch(recipe::example_batch(*train), budget);
    });
    if (batch == 0) return 0; // --max-batch printed its line

    data::DataLoader loader(*train,
                            recipe::sharded({.batch_size = batch, .shuffle = true, .seed = seed}));
    int64_t per_epoch = loader.batches_per_epoch();
    auto at_epoch_end = [&](int64_t, const data::DataLoader& l) {
      return l.position().batch == per_epoch;
    };

    // The teacher: from a file, or trained here first.
    if (!flags.str("teacher").empty()) {
      load_weights(flags.str("teacher"), teacher);
      if (recipe::leader())
        std::fprintf(stderr, "distill: teacher (%lld parameters) loaded from %s\n",
                     static_cast<long long>(parameter_count(teacher)),
                     flags.str("teacher").c_str());
    } else {
      int64_t teacher_total = flags.integer("teacher-steps") > 0
                                  ? flags.integer("teacher-steps")
                                  : flags.integer("teacher-epochs") * per_epoch;
      if (teacher_total <= 0) flags.fail("--teacher-epochs must be positive (or give --teacher)");
      if (recipe::leader())
        std::fprintf(stderr,
                     "distill: no --teacher given: training a teacher first (%lld parameters, "
                     "%lld steps of batch %lld)\n",
                     static_cast<long long>(parameter_count(teacher)),
                     static_cast<long long>(teacher_total), static_cast<long long>(batch));
      auto teacher_step =
          compile_step(teacher, classification_loss, optimizer_for(flags),
                       recipe::parallel(flags, {.batch_names = {"images", "labels"},
                                                .schedule = schedule_for(flags, teacher_total),
                                                .amp = recipe::amp_flag(flags)}));
      data::DataLoader teacher_loader(
          *train, recipe::sharded({.batch_size = batch, .shuffle = true, .seed = seed + 1}));
      recipe::run_training("teacher", flags, teacher, teacher_step, teacher_loader, teacher_total,
                           at_epoch_end, true);
    }
    double teacher_accuracy = test_accuracy(teacher, *test);
    if (recipe::leader())
      std::fprintf(stderr, "distill: teacher test accuracy %.4f\n", teacher_accuracy);

    int64_t total =
        flags.integer("steps") > 0 ? flags.integer("steps") : flags.integer("epochs") * per_epoch;
    auto step = make_step(total);
    if (recipe::leader())
      std::fprintf(stderr,
                   "distill: student %lld parameters, %lld steps of batch %lld, T=%g, "
                   "alpha=%g\n",
                   static_cast<long long>(parameter_count(student)), static_cast<long long>(total),
                   static_cast<long long>(batch), kd.temperature, kd.alpha);
    recipe::LoopResult run =
        recipe::run_training("student", flags, student, step, loader, total, at_epoch_end, true);
    double student_accuracy = test_accuracy(student, *test);

    std::string baseline;
    if (!flags.on("no-baseline")) {
      FashionViT& alone = initial_student;
      auto alone_step =
          compile_step(alone, classification_loss, optimizer_for(flags),
                       recipe::parallel(flags, {.batch_names = {"images", "labels"},
                                                .schedule = schedule_for(flags, total),
                                                .amp = recipe::amp_flag(flags)}));
      data::DataLoader alone_loader(
          *train, recipe::sharded({.batch_size = batch, .shuffle = true, .seed = seed}));
      if (recipe::leader())
        std::fprintf(stderr, "distill: the same student alone (cross-entropy only), %lld steps\n",
                     static_cast<long long>(total));
      recipe::run_training("student_alone", flags, alone, alone_step, alone_loader, total,
                           at_epoch_end, true);
      char text[64];
      std::snprintf(text, sizeof text, " student_alone_accuracy=%.4f", test_accuracy(alone, *test));
      baseline = text;
    }
    if (!recipe::leader()) return 0;
    std::printf("result: teacher_accuracy=%.4f student_accuracy=%.4f%s train_loss=%.4f "
                "steps=%lld steps_per_second=%.1f seconds=%.1f\n",
                teacher_accuracy, student_accuracy, baseline.c_str(), run.last_loss,
                static_cast<long long>(step.steps()),
                static_cast<double>(run.steps_run) / std::max(run.seconds, 1e-9), run.seconds);
    return 0;
  });
}
