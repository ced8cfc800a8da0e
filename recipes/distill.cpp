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

/// Both models as one, for the sifting loader's scoring forward (the distillation loss of each
/// sample needs the student's and the teacher's logits).
struct DistillPair {
  BOOST_HANA_DEFINE_STRUCT(DistillPair, (FashionViT, student), (FashionViT, teacher));
  DistillPair(FashionViT s, FashionViT t) : student(std::move(s)), teacher(std::move(t)) {}
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
            "the teacher's weights: a safetensors file the vit recipe wrote, or a Hugging Face "
            "ViTForImageClassification folder (config.json beside model.safetensors; "
            "docs/pretrained.md) (default: train a teacher first)"},
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
  std::optional<SiftOptions> sift = recipe::sift_options(flags);
  const bool in_step = sift && recipe::sift_in_step(flags);
  return recipe::run("distill", [&] {
    std::filesystem::path dir = flags.str("data-dir").empty()
                                    ? data::default_fashion_mnist_dir()
                                    : std::filesystem::path(flags.str("data-dir"));
    auto train = data::fashion_mnist(data::Split::train, dir);
    auto test = data::fashion_mnist(data::Split::test, dir);
    auto seed = static_cast<uint64_t>(flags.integer("seed"));
    KdOptions kd{.temperature = flags.real("temperature"), .alpha = flags.real("alpha")};
    Init teacher_init(seed + 1), student_init(seed);
    // A Hugging Face teacher brings its own configuration (config.json beside its weights).
    DistillPair pair(FashionViT(recipe::vit_config(flags), student_init),
                     FashionViT(recipe::is_hf_vit(flags.str("teacher"))
                                    ? recipe::hf_teacher_config(flags)
                                    : recipe::vit_config(flags, "teacher-"),
                                teacher_init));
    FashionViT& teacher = pair.teacher;
    FashionViT& student = pair.student;
    // --eval-only: the distilled student's checkpoint (and the teacher's, when there is one).
    if (flags.on("eval-only")) {
      recipe::load_for_evaluation("student", flags, student);
      double student_accuracy = test_accuracy(student, *test);
      std::string teacher_field;
      std::filesystem::path teacher_ckpt =
          std::filesystem::path(flags.str("checkpoint-dir")) / "teacher.safetensors";
      if (!flags.str("teacher").empty() || std::filesystem::exists(teacher_ckpt)) {
        if (flags.str("teacher").empty())
          load_weights(teacher_ckpt, teacher);
        else
          recipe::load_teacher(flags, teacher);
        char text[64];
        std::snprintf(text, sizeof text, "teacher_accuracy=%.4f ", test_accuracy(teacher, *test));
        teacher_field = text;
      }
      if (recipe::leader())
        std::printf("result: %sstudent_accuracy=%.4f\n", teacher_field.c_str(), student_accuracy);
      return 0;
    }
    FashionViT initial_student = student; // the baseline starts from the same weights
    auto distill_loss = [kd](FashionViT& s, const FashionViT& t, Var images, Var labels) {
      return kd_loss(s(images), t(images), labels, kd);
    };
    // Sifting scores each sample by its distillation loss.
    auto distill_loss_per_row = [kd](FashionViT& s, const FashionViT& t, Var images,
                                     Var labels) -> Var {
      return kd_loss(s(images), t(images), labels, kd, Reduction::none);
    };
    auto step_options = [&](int64_t total) {
      return recipe::parallel(flags, {.batch_names = {"images", "labels"},
                                      .schedule = schedule_for(flags, total),
                                      .amp = recipe::amp_flag(flags)});
    };
    auto make_step = [&](int64_t total) {
      return compile_distill_step(student, teacher, distill_loss, optimizer_for(flags),
                                  {.step = step_options(total)});
    };
    // The largest batch is the distillation step's: it holds both models.
    int64_t batch = recipe::batch_size(flags, [&](int64_t budget) {
      return make_step(1).max_batch(recipe::example_batch(*train), budget);
    });
    if (batch == 0) return 0; // --max-batch printed its line

    // In-step sifting scores batches of about batch·(1+beta) rows and trains on `batch` of them.
    data::DataLoader loader(
        *train,
        recipe::sharded(
            {.batch_size = in_step ? recipe::sift_scored_batch(flags, batch, sift->beta) : batch,
             .shuffle = true,
             .seed = seed}));
    int64_t per_epoch = loader.batches_per_epoch();
    auto at_epoch_end = [&](int64_t, const auto& l) { return l.position().batch == per_epoch; };

    // The teacher: from a file, or trained here first.
    if (!flags.str("teacher").empty()) {
      recipe::load_teacher(flags, teacher);
      if (recipe::leader())
        std::fprintf(stderr, "distill: teacher (%lld parameters) loaded from %s\n",
                     static_cast<long long>(parameter_count(teacher)),
                     flags.str("teacher").c_str());
    } else {
      data::DataLoader teacher_loader(
          *train, recipe::sharded({.batch_size = batch, .shuffle = true, .seed = seed + 1}));
      const int64_t teacher_per_epoch = teacher_loader.batches_per_epoch();
      int64_t teacher_total = flags.integer("teacher-steps") > 0
                                  ? flags.integer("teacher-steps")
                                  : flags.integer("teacher-epochs") * teacher_per_epoch;
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
      recipe::run_training(
          "teacher", flags, teacher, teacher_step, teacher_loader, teacher_total,
          [&](int64_t, const data::DataLoader& l) {
            return l.position().batch == teacher_per_epoch;
          },
          true);
    }
    double teacher_accuracy = test_accuracy(teacher, *test);
    if (recipe::leader())
      std::fprintf(stderr, "distill: teacher test accuracy %.4f\n", teacher_accuracy);

    // The sifting loader trains on about 1/(1+beta) of each epoch's batches (see the mlp and vit
    // recipes); in-step sifting scores each batch in its own step.
    int64_t total = flags.integer("steps") > 0
                        ? flags.integer("steps")
                        : recipe::sifted_steps(per_epoch, flags.integer("epochs"), sift, in_step);
    const int64_t until_epoch =
        recipe::sifting_ends_with_epochs(flags, sift, in_step) ? flags.integer("epochs") : 0;
    if (recipe::leader())
      std::fprintf(stderr,
                   "distill: student %lld parameters, %lld steps of batch %lld, T=%g, "
                   "alpha=%g\n",
                   static_cast<long long>(parameter_count(student)), static_cast<long long>(total),
                   static_cast<long long>(batch), kd.temperature, kd.alpha);
    recipe::LoopResult run;
    std::string sifted;
    int64_t steps_done = 0;
    // --log-dir records the student's training (not the teacher's or the baseline's).
    recipe::open_run_log(flags, {"teacher_accuracy", "student_accuracy"});
    if (in_step) {
      StepOptions options = step_options(total);
      options.sift = sift;
      options.sift_rows = batch / world().size();
      auto step = compile_distill_step(student, teacher, distill_loss_per_row, optimizer_for(flags),
                                       {.step = options});
      run =
          recipe::run_training("student", flags, student, step, loader, total, at_epoch_end, true);
      SiftCounts counts = step.runtime().sift_counts();
      sifted = recipe::sifted_result(counts.kept_fraction(), counts.kept * world().size());
      steps_done = step.steps();
    } else if (sift) {
      auto step = make_step(total);
      auto per_sample = compile_eval(pair,
                                     [kd](DistillPair& p, Var images, Var labels) -> Var {
                                       return kd_loss(p.student(images), p.teacher(images), labels,
                                                      kd, Reduction::none);
                                     },
                                     {"images", "labels"});
      SiftingLoader sifting(
          loader, [&](const data::Batch& b) { return per_sample(b.examples, b.labels); }, *sift);
      run = recipe::run_training("student", flags, student, step, sifting, total, at_epoch_end,
                                 true, {}, {}, until_epoch);
      sifted = recipe::sifted_result(sifting.rule().kept_fraction(), sifting.delivered());
      steps_done = step.steps();
    } else {
      auto step = make_step(total);
      run =
          recipe::run_training("student", flags, student, step, loader, total, at_epoch_end, true);
      steps_done = step.steps();
    }
    double student_accuracy = test_accuracy(student, *test);
    recipe::log_metrics(steps_done, {{"teacher_accuracy", teacher_accuracy},
                                     {"student_accuracy", student_accuracy}});
    recipe::run_log().reset();

    std::string baseline;
    if (!flags.on("no-baseline")) {
      // The same epochs of plain training (never sifted), at the same batch.
      FashionViT& alone = initial_student;
      data::DataLoader alone_loader(
          *train, recipe::sharded({.batch_size = batch, .shuffle = true, .seed = seed}));
      const int64_t alone_per_epoch = alone_loader.batches_per_epoch();
      const int64_t alone_total = flags.integer("steps") > 0
                                      ? flags.integer("steps")
                                      : flags.integer("epochs") * alone_per_epoch;
      auto alone_step =
          compile_step(alone, classification_loss, optimizer_for(flags),
                       recipe::parallel(flags, {.batch_names = {"images", "labels"},
                                                .schedule = schedule_for(flags, alone_total),
                                                .amp = recipe::amp_flag(flags)}));
      if (recipe::leader())
        std::fprintf(stderr, "distill: the same student alone (cross-entropy only), %lld steps\n",
                     static_cast<long long>(alone_total));
      recipe::run_training(
          "student_alone", flags, alone, alone_step, alone_loader, alone_total,
          [&](int64_t, const data::DataLoader& l) { return l.position().batch == alone_per_epoch; },
          true);
      char text[64];
      std::snprintf(text, sizeof text, " student_alone_accuracy=%.4f", test_accuracy(alone, *test));
      baseline = text;
    }
    if (!recipe::leader()) return 0;
    std::printf("result: teacher_accuracy=%.4f student_accuracy=%.4f%s train_loss=%.4f "
                "steps=%lld steps_per_second=%.1f seconds=%.1f%s\n",
                teacher_accuracy, student_accuracy, baseline.c_str(), run.last_loss,
                static_cast<long long>(steps_done),
                static_cast<double>(run.steps_run) / std::max(run.seconds, 1e-9), run.seconds,
                sifted.c_str());
    return 0;
  });
}
