// dsl/distill.hpp — teacher/student distillation compiled as one training step
#pragma once
#include "dsl/train.hpp"

#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace sinter {

struct DistillOptions {
  /// The student's step: batch names, schedule, clipping, accumulation, AMP.
  StepOptions step;
  /// How the step stores the teacher's weights: f32, or bf16 / f16 to halve them. Default:
  /// the AMP precision under AMP (the teacher's GEMMs then read them directly), else the
  /// teacher's own dtype.
  std::optional<DType> teacher_dtype;
};

namespace detail {

/// The teacher's weights as the step reads them (`teacher.<param>` inputs): the teacher's own
/// tensors, or copies in the storage dtype kept current by stamp.
template <class Teacher> class FrozenTeacher {
public:
  FrozenTeacher(Teacher& teacher, std::optional<DType> storage) : teacher_(teacher) {
    for_each_parameter(teacher_, [&](const std::string& name, Parameter& p) {
      if (!is_float(p.value.dtype()))
        throw std::invalid_argument("sinter: teacher parameter '" + name + "' is " +
                                    std::string(dtype_name(p.value.dtype())) +
                                    "; a teacher's weights must be floating point");
      DType stored = storage.value_or(p.value.dtype());
      entries_.push_back(
          {name, &p, stored,
           stored == p.value.dtype() ? HostTensor() : HostTensor(stored, p.value.shape()), 0});
    });
    if (entries_.empty())
      throw std::invalid_argument("sinter: the teacher has no Parameters — declare them in "
                                  "BOOST_HANA_DEFINE_STRUCT");
  }

  /// Refreshes the stored copies of teacher weights changed since (by HostTensor::stamp).
  void sync() {
    for (Entry& e : entries_) {
      if (e.stored == e.parameter->value.dtype() || e.parameter->value.stamp() == e.synced)
        continue;
      const HostTensor& from = e.parameter->value;
      for (int64_t k = 0; k < from.size(); ++k)
        e.copy.set(k, from.at(k));
      e.synced = e.parameter->value.stamp();
    }
  }

  /// What the step reads, by input name.
  std::vector<std::pair<std::string, const HostTensor*>> inputs() const {
    std::vector<std::pair<std::string, const HostTensor*>> out;
    for (const Entry& e : entries_)
      out.emplace_back("teacher." + e.name,
                       e.stored == e.parameter->value.dtype() ? &e.parameter->value : &e.copy);
    return out;
  }

  /// Inside a trace: each teacher Parameter becomes its frozen input (raised to the
  /// parameter's dtype when stored lower; autocast's casts back then cancel out).
  void bind(Graph& g) const {
    for (const Entry& e : entries_) {
      Value in = input(g, "teacher." + e.name, TensorType{e.stored, e.parameter->value.shape()});
      e.parameter->traced =
          Var(e.stored == e.parameter->value.dtype() ? in : cast(in, e.parameter->value.dtype()));
    }
  }
  void unbind() const {
    for (const Entry& e : entries_)
      e.parameter->traced = Var();
  }
  Teacher& teacher() const { return teacher_; }

private:
  struct Entry {
    std::string name;
    Parameter* parameter;
    DType stored;
    HostTensor copy; ///< when stored differs from the parameter's dtype
    uint64_t synced; ///< the parameter's stamp when copied (0: never)
  };
  Teacher& teacher_;
  std::vector<Entry> entries_;
};

/// `loss(student, teacher, batch...)` as a student-only loss, for CompiledStep: binds the
/// teacher's frozen inputs around the call.
template <class Student, class Teacher, class LossFn, class Batch> struct WithTeacher;
template <class Student, class Teacher, class LossFn, class... B>
struct WithTeacher<Student, Teacher, LossFn, std::tuple<B...>> {
  LossFn loss;
  std::shared_ptr<FrozenTeacher<Teacher>> frozen;

  auto operator()(Student& student, B... batch) const {
    frozen->bind(current_graph("sinter::compile_distill_step"));
    struct Unbind {
      const FrozenTeacher<Teacher>& f;
      ~Unbind() { f.unbind(); }
    } unbind{*frozen};
    return loss(student, static_cast<const Teacher&>(frozen->teacher()), batch...);
  }
};

template <class Tuple> struct drop_two;
template <class A, class B, class... Rest> struct drop_two<std::tuple<A, B, Rest...>> {
  using type = std::tuple<Rest...>;
};

} // namespace detail

/// One compiled step that distills `teacher` into `student`: `loss(student, teacher,
/// batch...)` (a scalar, typically kd_loss of both models' logits) traced as one graph with the
/// student's forward, backward and optimizer update and the teacher's forward. The teacher's
/// weights are frozen inputs (`teacher.<param>`): no gradient, no optimizer state, and none
/// of its activations kept for the backward pass. Both models must outlive the step; the
/// student's parameters hold the updated weights after each call, the teacher never changes.
/// Checkpoints (save_checkpoint / load_checkpoint) hold the student and its optimizer.
template <class Student, class Teacher, class LossFn, class Opt>
auto compile_distill_step(Student& student, Teacher& teacher, LossFn loss, Opt optimizer,
                          DistillOptions options = {}) {
  static_assert(std::tuple_size_v<typename detail::signature<LossFn>::params> >= 2,
                "sinter: the distillation loss takes (Student&, const Teacher&, batch...)");
  using Batch = typename detail::drop_two<typename detail::signature<LossFn>::params>::type;
  using Bound = detail::WithTeacher<Student, Teacher, LossFn, Batch>;
  std::optional<DType> storage = options.teacher_dtype;
  if (!storage && options.step.amp != AmpMode::off)
    storage = options.step.amp == AmpMode::bf16 ? DType::bf16 : DType::f16;
  if (storage && !is_float(*storage))
    throw std::invalid_argument("sinter: teacher_dtype must be a floating-point dtype, got " +
                                std::string(dtype_name(*storage)));
  options.step.parameter_updates = detail::parameter_updates(student, optimizer);
  auto frozen = std::make_shared<detail::FrozenTeacher<Teacher>>(teacher, storage);
  frozen->sync();
  auto inputs = frozen->inputs();
  return CompiledStep<Student, Bound>(
      student, Bound{std::move(loss), frozen}, detail::to_optimizer(optimizer), optimizer.lr,
      std::move(options.step), std::move(inputs), [frozen] { frozen->sync(); });
}

} // namespace sinter
