// jit/notebook/tensor_display.hpp — how a notebook shows a HostTensor: dtype, shape and values,
// elided in the middle, as text and as an HTML table
#pragma once
#include "jit/runtime/host_tensor.hpp"

#include <string>

namespace sinter::notebook {

/// `f32[3,4]` then the values row by row; more than `edge`·2 rows or columns show the first and
/// last `edge` with `…` between.
std::string tensor_text(const HostTensor& tensor, int64_t edge = 3);
/// The same as an HTML table (a scalar or a vector is one row), headed by dtype and shape.
std::string tensor_html(const HostTensor& tensor, int64_t edge = 3);

} // namespace sinter::notebook
