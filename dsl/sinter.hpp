// dsl/sinter.hpp — the header a model author includes: Tensor, Var, the op vocabulary, jit/grad
#pragma once
#include "dsl/dims.hpp"
#include "dsl/expr.hpp"
#include "dsl/operators.hpp"
#include "dsl/tensor.hpp"
#include "dsl/trace.hpp"
