// jit/api.cpp — CompiledGraph: pipeline at construction, checked inputs, interpreter execution
#include "jit/api.hpp"

#include "jit/interp/interpreter.hpp"
#include "jit/pipeline/pipeline.hpp"

#include <stdexcept>

namespace sinter {

F64Tensor to_f64(const HostTensor& t) { return F64Tensor{t.shape(), t.to_doubles()}; }

HostTensor from_f64(const F64Tensor& t, DType dtype) {
  return HostTensor::from_doubles(dtype, t.shape, t.data);
}

CompiledGraph::CompiledGraph(Graph traced, std::optional<AutodiffOptions> autodiff)
    : graph_(Pipeline::standard(std::move(autodiff)).run(std::move(traced))) {}

std::vector<HostTensor> CompiledGraph::run(std::span<const HostTensor> inputs) const {
  const auto& declared = graph_.inputs();
  if (inputs.size() != declared.size())
    throw std::invalid_argument("sinter: expected " + std::to_string(declared.size()) +
                                " inputs, got " + std::to_string(inputs.size()));
  std::vector<F64Tensor> values;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const TensorType& want = graph_.type(declared[i].id);
    if (inputs[i].dtype() != want.dtype || inputs[i].shape() != want.shape)
      throw std::invalid_argument("sinter: input '" + declared[i].name + "' expects " +
                                  to_string(want) + ", got " +
                                  to_string(TensorType{inputs[i].dtype(), inputs[i].shape()}));
    values.push_back(to_f64(inputs[i]));
  }
  std::vector<F64Tensor> results = interpret(graph_, values);
  std::vector<HostTensor> out;
  for (std::size_t i = 0; i < results.size(); ++i)
    out.push_back(from_f64(results[i], graph_.type(graph_.outputs()[i].id).dtype));
  return out;
}

} // namespace sinter
