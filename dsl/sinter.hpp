// dsl/sinter.hpp — the header a model author includes: Tensor, Var, the op vocabulary, jit/grad,
// modules, compile_step
#pragma once
#include "dsl/checkpoint.hpp"
#include "dsl/dims.hpp"
#include "dsl/distill.hpp"
#include "dsl/expr.hpp"
#include "dsl/nn/layers.hpp"
#include "dsl/nn/losses.hpp"
#include "dsl/nn/parameter.hpp"
#include "dsl/nn/transformer.hpp"
#include "dsl/operators.hpp"
#include "dsl/pretrained.hpp" // Hugging Face GPT-2, ViT, BERT configs and weights
#include "dsl/tensor.hpp"
#include "dsl/trace.hpp"
#include "dsl/train.hpp"
// Data loading sits beside the compiler; models that train from files use it.
#include "jit/data/fashion_mnist.hpp"
#include "jit/data/loader.hpp"
#include "jit/data/synthetic.hpp"
#include "jit/data/text.hpp"
#include "jit/io/metrics_log.hpp" // sinter::Logger: metrics.csv and TensorBoard events
