// kernels/cuda/cudnn_attention.cpp — cuDNN SDPA graphs by the backend API: tensors, operations,
// engine heuristics and execution plans per shape, and their execution
#include "kernels/cuda/cudnn_attention.hpp"

#include "kernels/dynamic_library.hpp"

#include <algorithm>
#include <array>
#include <deque>
#include <limits>
#include <optional>
#include <stdexcept>
#include <vector>

namespace sinter::kernels {
namespace {

// cudnn_graph.h values, declared here so sinter builds without the cuDNN headers.
using Status = int;
enum DescriptorType : int {
  pointwise_descriptor = 0,
  engine_config_descriptor = 3,
  engine_heuristics_descriptor = 4,
  execution_plan_descriptor = 5,
  operation_pointwise = 13,
  operation_graph_descriptor = 15,
  variant_pack_descriptor = 16,
  tensor_descriptor = 17,
  matmul_descriptor = 18,
  operation_matmul = 19,
  reduction_descriptor = 21,
  operation_reduction = 22,
  operation_reshape = 31,
};
enum Attribute : int {
  pointwise_mode = 0,
  pointwise_math_precision = 1,
  pointwise_axis = 9,
  heuristics_mode = 200,
  heuristics_graph = 201,
  heuristics_results = 202,
  plan_handle = 400,
  plan_engine_config = 401,
  plan_workspace_size = 402,
  operation_pointwise_descriptor = 750,
  operation_pointwise_x = 751,
  operation_pointwise_b = 752,
  operation_pointwise_y = 753,
  operation_pointwise_t = 758,
  graph_handle = 800,
  graph_operations = 801,
  tensor_byte_alignment = 900,
  tensor_data_type = 901,
  tensor_dimensions = 902,
  tensor_strides = 903,
  tensor_unique_id = 906,
  tensor_is_virtual = 907,
  tensor_is_by_value = 908,
  variant_pack_unique_ids = 1000,
  variant_pack_data_pointers = 1001,
  variant_pack_workspace = 1003,
  matmul_compute_type = 1500,
  operation_matmul_a = 1520,
  operation_matmul_b = 1521,
  operation_matmul_c = 1522,
  operation_matmul_descriptor = 1523,
  reduction_operator = 1600,
  reduction_compute_type = 1601,
  operation_reduction_x = 1610,
  operation_reduction_y = 1611,
  operation_reduction_descriptor = 1612,
  operation_reshape_x = 2200,
  operation_reshape_y = 2201,
};
enum AttributeType : int {
  type_handle = 0,
  type_data_type = 1,
  type_boolean = 2,
  type_int64 = 3,
  type_void_pointer = 6,
  type_heuristics_mode = 8,
  type_pointwise_mode = 14,
  type_descriptor = 15,
  type_reduction_operator = 18,
};
enum DataType : int {
  data_float = 0,
  data_half = 2,
  data_int32 = 4,
  data_bfloat16 = 9,
  data_boolean = 11
};
enum PointwiseMode : int {
  pw_add = 0,
  pw_mul = 1,
  pw_div = 6,
  pw_sub = 9,
  pw_exp = 13,
  pw_log = 15,
  pw_identity = 21,
  pw_cmp_ge = 303,
  pw_gen_index = 501,
  pw_binary_select = 601,
};
enum ReductionOperator : int { reduce_add = 0, reduce_max = 3 };
constexpr int heuristics_mode_a = 3;
constexpr int64_t alignment = 16;

using Dims = std::array<int64_t, 4>;

Dims packed_strides(const Dims& dims) {
  return {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
}

/// Strides of an operand or result [b, h, t, d] in its buffer: the shape's (a view of a wider
/// buffer), or packed where it gives none.
Dims operand_strides(const CudnnAttentionShape::Strides& given, const Dims& dims) {
  if (given == CudnnAttentionShape::Strides{}) return packed_strides(dims);
  return {given[0], given[1], given[2], 1};
}

/// An operand [b, h, t, d] with strides `strides` as its transpose [b, h, d, t].
Dims transposed(const Dims& strides) { return {strides[0], strides[1], strides[3], strides[2]}; }

} // namespace

struct CudnnAttention::Api {
  std::size_t (*get_version)() = nullptr;
  const char* (*error_string)(Status) = nullptr;
  void (*last_error)(char*, std::size_t) = nullptr; ///< optional (cuDNN 9)
  Status (*create)(void**) = nullptr;
  Status (*destroy)(void*) = nullptr;
  Status (*set_stream)(void*, cuda::StreamHandle) = nullptr;
  Status (*descriptor_create)(int, void**) = nullptr;
  Status (*descriptor_destroy)(void*) = nullptr;
  Status (*set_attribute)(void*, int, int, int64_t, const void*) = nullptr;
  Status (*get_attribute)(void*, int, int, int64_t, int64_t*, void*) = nullptr;
  Status (*finalize)(void*) = nullptr;
  Status (*execute)(void*, void*, void*) = nullptr;

  /// Throws std::runtime_error naming the call, cuDNN's status and its last message.
  void check(Status s, const std::string& call) const {
    if (s == 0) return;
    std::string message = std::string("sinter: cuDNN ") + call +
                          " failed: " + (error_string ? error_string(s) : std::to_string(s));
    if (last_error) {
      std::array<char, 512> detail{};
      last_error(detail.data(), detail.size());
      if (detail[0]) message += " (" + std::string(detail.data()) + ")";
    }
    throw std::runtime_error(message);
  }
};

namespace {

/// One backend descriptor, destroyed with its owner.
class Descriptor {
public:
  Descriptor(const CudnnAttention::Api& api, int type, std::string what)
      : api_(&api), what_(std::move(what)) {
    api.check(api.descriptor_create(type, &raw_), "create " + what_);
  }
  Descriptor(Descriptor&& other) noexcept
      : api_(other.api_), raw_(std::exchange(other.raw_, nullptr)), what_(std::move(other.what_)) {}
  Descriptor& operator=(Descriptor&&) = delete;
  ~Descriptor() {
    if (raw_) api_->descriptor_destroy(raw_);
  }
  void* raw() const { return raw_; }

  Descriptor& set(int attribute, int type, int64_t count, const void* values) {
    api_->check(api_->set_attribute(raw_, attribute, type, count, values),
                "set attribute " + std::to_string(attribute) + " of " + what_);
    return *this;
  }
  Descriptor& set_int(int attribute, int64_t value) {
    return set(attribute, type_int64, 1, &value);
  }
  Descriptor& set_enum(int attribute, int type, int value) {
    return set(attribute, type, 1, &value);
  }
  Descriptor& set_descriptor(int attribute, void* descriptor) {
    return set(attribute, type_descriptor, 1, &descriptor);
  }
  Descriptor& finalize() {
    api_->check(api_->finalize(raw_), "finalize " + what_);
    return *this;
  }

private:
  const CudnnAttention::Api* api_;
  void* raw_ = nullptr;
  std::string what_;
};

/// A tensor of the graph: its descriptor and what later operations need of it.
struct GraphTensor {
  void* raw = nullptr;
  int64_t uid = 0;
  Dims dims{}, strides{};
};

/// Builds one SDPA graph's tensors and operations in order (the layout of cuDNN's fused
/// flash-attention patterns: virtual intermediates in f32, the probabilities in the operands'
/// type before the second product).
class GraphBuilder {
public:
  explicit GraphBuilder(const CudnnAttention::Api& api) : api_(api) {}

  GraphTensor tensor(const std::string& name, Dims dims, Dims strides, int dtype, bool is_virtual,
                     bool by_value = false) {
    Descriptor& t = keep(tensor_descriptor, "tensor " + name);
    GraphTensor out{t.raw(), next_uid_++, dims, strides};
    if (!is_virtual) external_.push_back(out.uid);
    t.set_enum(tensor_data_type, type_data_type, dtype)
        .set(tensor_dimensions, type_int64, 4, dims.data())
        .set(tensor_strides, type_int64, 4, strides.data())
        .set_int(tensor_unique_id, out.uid)
        .set_int(tensor_byte_alignment, alignment);
    bool virtual_flag = is_virtual, by_value_flag = by_value;
    t.set(tensor_is_virtual, type_boolean, 1, &virtual_flag);
    if (by_value) t.set(tensor_is_by_value, type_boolean, 1, &by_value_flag);
    t.finalize();
    return out;
  }
  /// A virtual intermediate shaped like `like` (or `dims`).
  GraphTensor temporary(const std::string& name, Dims dims, int dtype = data_float) {
    return tensor(name, dims, packed_strides(dims), dtype, true);
  }
  /// A host scalar passed by value at execution (f32).
  GraphTensor scalar(const std::string& name) {
    return tensor(name, {1, 1, 1, 1}, {1, 1, 1, 1}, data_float, false, true);
  }

  void pointwise(const std::string& name, int mode, const GraphTensor& x, const GraphTensor* b,
                 const GraphTensor& y, int math = data_float, const GraphTensor* t = nullptr,
                 std::optional<int64_t> axis = std::nullopt) {
    Descriptor& mode_descriptor = keep(pointwise_descriptor, "pointwise " + name);
    mode_descriptor.set_enum(pointwise_mode, type_pointwise_mode, mode)
        .set_enum(pointwise_math_precision, type_data_type, math);
    if (axis) mode_descriptor.set_int(pointwise_axis, *axis);
    mode_descriptor.finalize();
    Descriptor& op = keep(operation_pointwise, "operation " + name);
    op.set_descriptor(operation_pointwise_descriptor, mode_descriptor.raw())
        .set_descriptor(operation_pointwise_x, x.raw);
    if (b) op.set_descriptor(operation_pointwise_b, b->raw);
    if (t) op.set_descriptor(operation_pointwise_t, t->raw);
    op.set_descriptor(operation_pointwise_y, y.raw).finalize();
    operations_.push_back(op.raw());
  }
  void reduction(const std::string& name, int mode, const GraphTensor& x, const GraphTensor& y) {
    Descriptor& reduce = keep(reduction_descriptor, "reduction " + name);
    reduce.set_enum(reduction_operator, type_reduction_operator, mode)
        .set_enum(reduction_compute_type, type_data_type, data_float)
        .finalize();
    Descriptor& op = keep(operation_reduction, "operation " + name);
    op.set_descriptor(operation_reduction_descriptor, reduce.raw())
        .set_descriptor(operation_reduction_x, x.raw)
        .set_descriptor(operation_reduction_y, y.raw)
        .finalize();
    operations_.push_back(op.raw());
  }
  void matmul(const std::string& name, const GraphTensor& a, const GraphTensor& b,
              const GraphTensor& c) {
    Descriptor& product = keep(matmul_descriptor, "matmul " + name);
    product.set_enum(matmul_compute_type, type_data_type, data_float).finalize();
    Descriptor& op = keep(operation_matmul, "operation " + name);
    op.set_descriptor(operation_matmul_descriptor, product.raw())
        .set_descriptor(operation_matmul_a, a.raw)
        .set_descriptor(operation_matmul_b, b.raw)
        .set_descriptor(operation_matmul_c, c.raw)
        .finalize();
    operations_.push_back(op.raw());
  }
  void reshape(const std::string& name, const GraphTensor& x, const GraphTensor& y) {
    Descriptor& op = keep(operation_reshape, "operation " + name);
    op.set_descriptor(operation_reshape_x, x.raw).set_descriptor(operation_reshape_y, y.raw);
    op.finalize();
    operations_.push_back(op.raw());
  }

  const std::vector<void*>& operations() const { return operations_; }
  /// The tensors a call binds: every one not virtual, by-value scalars included.
  const std::vector<int64_t>& external() const { return external_; }
  std::deque<Descriptor> take_descriptors() { return std::move(descriptors_); }

private:
  Descriptor& keep(int type, std::string what) {
    descriptors_.emplace_back(api_, type, std::move(what));
    return descriptors_.back();
  }

  const CudnnAttention::Api& api_;
  std::deque<Descriptor> descriptors_; // a deque: keep() hands out references that must stay valid
  std::vector<void*> operations_;
  std::vector<int64_t> external_;
  int64_t next_uid_ = 1;
};

int operand_type(DType t) { return t == DType::f16 ? data_half : data_bfloat16; }

/// The tensors a call binds (by unique id) and the scalars it passes by value.
struct GraphIo {
  int64_t q = 0, k = 0, v = 0, o = 0, lse = 0, d_o = 0, dq = 0, dk = 0, dv = 0;
  int64_t scale = 0, negative_infinity = 0, one = 0;
  int64_t dq_accumulator = 0, softmax_sum = 0; ///< backward: f32 buffers in the workspace

  /// The unique ids a call binds (CudnnAttention::run binds each field that is set).
  std::vector<int64_t> bound() const {
    std::vector<int64_t> out;
    for (int64_t uid : {q, k, v, o, lse, d_o, dq, dk, dv, scale, negative_infinity, one,
                        dq_accumulator, softmax_sum})
      if (uid) out.push_back(uid);
    return out;
  }
};

/// Throws std::logic_error unless a call binds exactly the graph's tensors that are not virtual
/// (cuDNN refuses a variant pack with a missing or a foreign unique id, but only on a GPU).
void check_bindings(const GraphIo& io, const GraphBuilder& g) {
  std::vector<int64_t> bound = io.bound(), external = g.external();
  std::sort(bound.begin(), bound.end());
  std::sort(external.begin(), external.end());
  if (bound == external) return;
  auto list = [](const std::vector<int64_t>& uids) {
    std::string out;
    for (int64_t uid : uids)
      out += (out.empty() ? "" : " ") + std::to_string(uid);
    return out;
  };
  throw std::logic_error("sinter: a cuDNN attention call would bind tensors " + list(bound) +
                         " of a graph whose bound tensors are " + list(external));
}

/// The causal mask over scores `s` (top-left diagonal): keeps row >= column, else -inf. Its
/// -inf scalar is made here, so a graph without the mask has none (a variant pack binds only
/// the graph's own tensors); `negative_inf_uid` receives it.
GraphTensor causal_mask(GraphBuilder& g, const GraphTensor& s, int64_t& negative_inf_uid) {
  GraphTensor negative_inf = g.scalar("-inf");
  negative_inf_uid = negative_inf.uid;
  GraphTensor row = g.temporary("row index", s.dims, data_int32);
  g.pointwise("row index", pw_gen_index, s, nullptr, row, data_float, nullptr, 2);
  GraphTensor column = g.temporary("column index", s.dims, data_int32);
  g.pointwise("column index", pw_gen_index, s, nullptr, column, data_float, nullptr, 3);
  GraphTensor keep = g.temporary("causal keep", s.dims, data_boolean);
  g.pointwise("row >= column", pw_cmp_ge, row, &column, keep, data_boolean);
  GraphTensor masked = g.temporary("masked scores", s.dims);
  g.pointwise("causal select", pw_binary_select, s, &negative_inf, masked, data_float, &keep);
  return masked;
}

GraphIo build_forward(GraphBuilder& g, const CudnnAttentionShape& s) {
  const int dt = operand_type(s.dtype);
  GraphIo io;
  const Dims q_dims{s.b, s.h, s.tq, s.d}, k_dims{s.b, s.h, s.tk, s.d}, v_dims{s.b, s.h, s.tk, s.dv};
  GraphTensor q = g.tensor("q", q_dims, operand_strides(s.q_strides, q_dims), dt, false);
  // k as kᵀ: [b, h, d, tk] over k's row-major rows.
  GraphTensor kt = g.tensor("k", {s.b, s.h, s.d, s.tk},
                            transposed(operand_strides(s.k_strides, k_dims)), dt, false);
  GraphTensor v = g.tensor("v", v_dims, operand_strides(s.v_strides, v_dims), dt, false);
  const Dims o_dims{s.b, s.h, s.tq, s.dv};
  GraphTensor o = g.tensor("o", o_dims, operand_strides(s.o_strides, o_dims), dt, false);
  const Dims row_dims{s.b, s.h, s.tq, 1};
  GraphTensor stats = g.tensor("lse", row_dims, packed_strides(row_dims), data_float, !s.saves_lse);
  GraphTensor scale = g.scalar("scale");
  io = {q.uid, kt.uid, v.uid, o.uid, s.saves_lse ? stats.uid : 0};
  io.scale = scale.uid;

  const Dims score_dims{s.b, s.h, s.tq, s.tk};
  GraphTensor scores = g.temporary("scores", score_dims);
  g.matmul("q·kᵀ", q, kt, scores);
  GraphTensor scaled = g.temporary("scaled scores", score_dims);
  g.pointwise("scale", pw_mul, scores, &scale, scaled);
  if (s.causal) scaled = causal_mask(g, scaled, io.negative_infinity);
  GraphTensor row_max = g.temporary("row max", row_dims);
  g.reduction("row max", reduce_max, scaled, row_max);
  GraphTensor shifted = g.temporary("shifted", score_dims);
  g.pointwise("minus max", pw_sub, scaled, &row_max, shifted);
  GraphTensor exponent = g.temporary("exp", score_dims);
  g.pointwise("exp", pw_exp, shifted, nullptr, exponent);
  GraphTensor row_sum = g.temporary("row sum", row_dims);
  g.reduction("row sum", reduce_add, exponent, row_sum);
  GraphTensor log_sum = g.temporary("log sum", row_dims);
  g.pointwise("log", pw_log, row_sum, nullptr, log_sum);
  g.pointwise("lse", pw_add, row_max, &log_sum, stats);
  GraphTensor probabilities = g.temporary("probabilities", score_dims, dt);
  g.pointwise("normalise", pw_div, exponent, &row_sum, probabilities);
  g.matmul("p·v", probabilities, v, o);
  return io;
}

GraphIo build_backward(GraphBuilder& g, const CudnnAttentionShape& s) {
  const int dt = operand_type(s.dtype);
  const Dims q_dims{s.b, s.h, s.tq, s.d}, o_dims{s.b, s.h, s.tq, s.dv};
  const Dims k_dims{s.b, s.h, s.tk, s.d}, v_dims{s.b, s.h, s.tk, s.dv};
  const Dims row_dims{s.b, s.h, s.tq, 1}, score_dims{s.b, s.h, s.tq, s.tk};
  const Dims k_strides = operand_strides(s.k_strides, k_dims);
  GraphTensor q = g.tensor("q", q_dims, operand_strides(s.q_strides, q_dims), dt, false);
  GraphTensor kt = g.tensor("k", {s.b, s.h, s.d, s.tk}, transposed(k_strides), dt, false);
  GraphTensor vt = g.tensor("v", {s.b, s.h, s.dv, s.tk},
                            transposed(operand_strides(s.v_strides, v_dims)), dt, false);
  GraphTensor o = g.tensor("o", o_dims, operand_strides(s.o_strides, o_dims), dt, false);
  GraphTensor d_o = g.tensor("do", o_dims, operand_strides(s.do_strides, o_dims), dt, false);
  GraphTensor stats = g.tensor("lse", row_dims, packed_strides(row_dims), data_float, false);
  GraphTensor dq = g.tensor("dq", q_dims, operand_strides(s.dq_strides, q_dims), dt, false);
  GraphTensor dk = g.tensor("dk", k_dims, operand_strides(s.dk_strides, k_dims), dt, false);
  GraphTensor dv = g.tensor("dv", v_dims, operand_strides(s.dv_strides, v_dims), dt, false);
  GraphTensor scale = g.scalar("scale");
  GraphTensor one = g.scalar("one");
  GraphTensor softmax_sum = g.tensor("do·o", row_dims, packed_strides(row_dims), data_float, false);
  GraphTensor dq_accumulator =
      g.tensor("dq accumulator", q_dims, packed_strides(q_dims), data_float, false);
  GraphIo io{q.uid, kt.uid, vt.uid, o.uid, stats.uid, d_o.uid, dq.uid, dk.uid, dv.uid};
  io.scale = scale.uid;
  io.one = one.uid;
  io.softmax_sum = softmax_sum.uid;
  io.dq_accumulator = dq_accumulator.uid;

  // Each row's do·o, once (FlashAttention-2's D).
  GraphTensor do_o = g.temporary("do∘o", o_dims);
  g.pointwise("do∘o", pw_mul, d_o, &o, do_o);
  GraphTensor do_o_sum = g.temporary("do·o", row_dims);
  g.reduction("do·o", reduce_add, do_o, do_o_sum);
  g.pointwise("do·o out", pw_mul, do_o_sum, &one, softmax_sum);

  // The probabilities again, from the saved log-sum-exp.
  GraphTensor scores = g.temporary("scores", score_dims);
  g.matmul("q·kᵀ", q, kt, scores);
  GraphTensor scaled = g.temporary("scaled scores", score_dims);
  g.pointwise("scale", pw_mul, scores, &scale, scaled);
  if (s.causal) scaled = causal_mask(g, scaled, io.negative_infinity);
  GraphTensor shifted = g.temporary("minus lse", score_dims);
  g.pointwise("minus lse", pw_sub, scaled, &stats, shifted);
  GraphTensor probabilities = g.temporary("probabilities", score_dims);
  g.pointwise("exp", pw_exp, shifted, nullptr, probabilities);
  const Dims transposed_dims{s.b, s.h, s.tk, s.tq};
  const Dims transposed_strides{s.h * s.tq * s.tk, s.tq * s.tk, 1, s.tk};
  GraphTensor pt = g.tensor("pᵀ", transposed_dims, transposed_strides, dt, true);
  g.reshape("pᵀ", probabilities, pt);
  g.matmul("pᵀ·do", pt, d_o, dv);

  GraphTensor dp = g.temporary("dp", score_dims);
  g.matmul("do·vᵀ", d_o, vt, dp);
  GraphTensor dp_centred = g.temporary("dp - do·o", score_dims);
  g.pointwise("dp - do·o", pw_sub, dp, &softmax_sum, dp_centred);
  GraphTensor ds_unscaled = g.temporary("p∘(dp - do·o)", score_dims);
  g.pointwise("p∘(dp - do·o)", pw_mul, dp_centred, &probabilities, ds_unscaled);
  GraphTensor ds = g.temporary("ds", score_dims);
  g.pointwise("ds scale", pw_mul, ds_unscaled, &scale, ds);
  GraphTensor dst = g.tensor("dsᵀ", transposed_dims, transposed_strides, dt, true);
  g.reshape("dsᵀ", ds, dst);
  g.matmul("dsᵀ·q", dst, q, dk);

  GraphTensor k = g.tensor("k rows", k_dims, k_strides, dt, true);
  g.reshape("k rows", kt, k);
  g.matmul("ds·k", ds, k, dq_accumulator);
  g.pointwise("dq out", pw_identity, dq_accumulator, nullptr, dq);
  return io;
}

std::size_t round_to(std::size_t n, std::size_t m) { return (n + m - 1) / m * m; }

constexpr std::size_t granule = 256; ///< each buffer of the workspace starts on one

std::size_t dq_accumulator_bytes(const CudnnAttentionShape& s) {
  return s.backward
             ? round_to(static_cast<std::size_t>(s.b * s.h * s.tq * s.d) * sizeof(float), granule)
             : 0;
}

} // namespace

std::string CudnnAttentionShape::describe() const {
  return std::to_string(b) + "×" + std::to_string(h) + "×" + std::to_string(tq) + "×" +
         std::to_string(tk) + "×" + std::to_string(d) + (dv != d ? "/" + std::to_string(dv) : "") +
         " " + std::string(dtype_name(dtype)) + (causal ? " causal" : "") +
         (backward ? " backward" : "");
}

std::string cudnn_attention_unsupported(const CudnnAttentionShape& s, int capability) {
  if (s.dtype != DType::bf16 && s.dtype != DType::f16)
    return std::string("cuDNN's fused attention takes bf16 or f16, and these operands are ") +
           std::string(dtype_name(s.dtype));
  if (capability < 80)
    return "cuDNN's fused attention needs sm_80 or newer, and this GPU is sm_" +
           std::to_string(capability);
  for (int64_t dim : {s.d, s.dv})
    if (dim % 8 != 0 || dim > 128)
      return "cuDNN's fused attention takes feature dims that are multiples of 8 up to 128, and "
             "this one is " +
             std::to_string(dim);
  return {};
}

/// A shape's graph, the plan cuDNN chose for it, and the scalars its calls pass by value.
struct CudnnAttention::Plan {
  const Api* api = nullptr;
  std::deque<Descriptor> descriptors;
  std::unique_ptr<Descriptor> graph, plan;
  GraphIo io;
  std::size_t plan_workspace = 0, dq_accumulator_offset = 0, softmax_sum_offset = 0, workspace = 0;
  float scale = 1.0f, negative_infinity = -std::numeric_limits<float>::infinity(), one = 1.0f;
};

std::size_t cudnn_attention_buffer_bytes(const CudnnAttentionShape& shape) {
  if (!shape.backward) return 0;
  return dq_accumulator_bytes(shape) +
         round_to(static_cast<std::size_t>(shape.b * shape.h * shape.tq) * sizeof(float), granule);
}

int build_cudnn_attention_operations(const CudnnAttentionShape& shape) {
  CudnnAttention* library = CudnnAttention::get();
  if (!library) throw std::runtime_error("sinter: " + CudnnAttention::unavailable_reason());
  GraphBuilder g(library->api());
  check_bindings(shape.backward ? build_backward(g, shape) : build_forward(g, shape), g);
  return static_cast<int>(g.operations().size());
}

CudnnAttention* CudnnAttention::get() { return loaded().first; }

const std::string& CudnnAttention::unavailable_reason() { return loaded().second; }

std::pair<CudnnAttention*, std::string>& CudnnAttention::loaded() {
  static std::pair<CudnnAttention*, std::string> state =
      []() -> std::pair<CudnnAttention*, std::string> {
    if (cuda::null_gpu_library())
      return {nullptr, "the null CUDA driver (SINTER_NULL_GPU=1) has no cuDNN"};
    void* lib = cuda::open_cuda_library({"libcudnn.so.9", "libcudnn.so"});
    if (!lib)
      return {nullptr, "cannot load libcudnn.so.9: install cuDNN 9 (or PyTorch, which carries it) "
                       "or add its folder to LD_LIBRARY_PATH"};
    auto api = std::make_unique<Api>();
    EntryPoints entry(lib);
    entry.need(api->get_version, "cudnnGetVersion");
    entry.need(api->error_string, "cudnnGetErrorString");
    entry.need(api->create, "cudnnCreate");
    entry.need(api->destroy, "cudnnDestroy");
    entry.need(api->set_stream, "cudnnSetStream");
    entry.need(api->descriptor_create, "cudnnBackendCreateDescriptor");
    entry.need(api->descriptor_destroy, "cudnnBackendDestroyDescriptor");
    entry.need(api->set_attribute, "cudnnBackendSetAttribute");
    entry.need(api->get_attribute, "cudnnBackendGetAttribute");
    entry.need(api->finalize, "cudnnBackendFinalize");
    entry.need(api->execute, "cudnnBackendExecute");
    if (!entry.missing().empty())
      return {nullptr, "libcudnn lacks " + entry.missing() + " (sinter needs cuDNN 9)"};
    EntryPoints optional(lib);
    optional.need(api->last_error, "cudnnGetLastErrorString");
    if (api->get_version() < 90000)
      return {nullptr, "libcudnn is version " + std::to_string(api->get_version()) +
                           " and sinter needs cuDNN 9"};
    auto* library = new CudnnAttention(); // lives as long as the process: plans outlive steps
    library->api_ = std::move(api);
    return {library, ""};
  }();
  return state;
}

CudnnAttention::~CudnnAttention() {
  plans_.clear();
  if (handle_) api_->destroy(handle_);
}

std::size_t CudnnAttention::version() const { return api_->get_version(); }

CudnnAttention::Plan& CudnnAttention::plan(const CudnnAttentionShape& shape) {
  std::lock_guard lock(mutex_);
  auto found = plans_.find(shape.key());
  if (found != plans_.end()) return *found->second;
  const Api& api = *api_;
  if (!handle_) api.check(api.create(&handle_), "cudnnCreate");

  auto plan = std::make_unique<Plan>();
  plan->api = &api;
  plan->scale = shape.scale;
  GraphBuilder g(api);
  plan->io = shape.backward ? build_backward(g, shape) : build_forward(g, shape);
  check_bindings(plan->io, g);
  plan->graph = std::make_unique<Descriptor>(api, operation_graph_descriptor, "operation graph");
  plan->graph->set(graph_handle, type_handle, 1, &handle_)
      .set(graph_operations, type_descriptor, static_cast<int64_t>(g.operations().size()),
           g.operations().data())
      .finalize();
  plan->descriptors = g.take_descriptors();

  Descriptor heuristics(api, engine_heuristics_descriptor, "engine heuristics");
  void* graph_raw = plan->graph->raw();
  heuristics.set_descriptor(heuristics_graph, graph_raw)
      .set_enum(heuristics_mode, type_heuristics_mode, heuristics_mode_a)
      .finalize();
  int64_t count = 0;
  api.check(
      api.get_attribute(heuristics.raw(), heuristics_results, type_descriptor, 0, &count, nullptr),
      "engine heuristics count");
  if (count == 0)
    throw std::runtime_error("sinter: cuDNN has no engine for the fused attention graph of " +
                             shape.describe());
  std::vector<Descriptor> configs;
  std::vector<void*> config_raw;
  for (int64_t i = 0; i < count; ++i) {
    configs.emplace_back(api, engine_config_descriptor, "engine config");
    config_raw.push_back(configs.back().raw());
  }
  api.check(api.get_attribute(heuristics.raw(), heuristics_results, type_descriptor, count, &count,
                              config_raw.data()),
            "engine heuristics results");
  std::string refusals;
  for (int64_t i = 0; i < count && !plan->plan; ++i) {
    auto candidate = std::make_unique<Descriptor>(api, execution_plan_descriptor, "execution plan");
    try {
      candidate->set(plan_handle, type_handle, 1, &handle_)
          .set_descriptor(plan_engine_config, config_raw[static_cast<std::size_t>(i)])
          .finalize();
      plan->plan = std::move(candidate);
    } catch (const std::runtime_error& e) {
      if (refusals.empty()) refusals = e.what();
    }
  }
  if (!plan->plan)
    throw std::runtime_error("sinter: cuDNN finalized no execution plan for the fused attention "
                             "of " +
                             shape.describe() + " (" + std::to_string(count) +
                             " engines tried; first refusal: " + refusals + ")");
  int64_t workspace = 0, returned = 0;
  api.check(api.get_attribute(plan->plan->raw(), plan_workspace_size, type_int64, 1, &returned,
                              &workspace),
            "execution plan workspace size");
  plan->plan_workspace = round_to(static_cast<std::size_t>(workspace), granule);
  plan->dq_accumulator_offset = plan->plan_workspace;
  plan->softmax_sum_offset = plan->dq_accumulator_offset + dq_accumulator_bytes(shape);
  plan->workspace = plan->plan_workspace + cudnn_attention_buffer_bytes(shape);
  return *plans_.emplace(shape.key(), std::move(plan)).first->second;
}

void CudnnAttention::prepare(const CudnnAttentionShape& shape) { plan(shape); }

std::size_t CudnnAttention::workspace_bytes(const CudnnAttentionShape& shape) {
  return plan(shape).workspace;
}

void CudnnAttention::run(const CudnnAttentionShape& shape, const CudnnAttentionBuffers& buffers,
                         cuda::StreamHandle stream) {
  Plan& p = plan(shape);
  const Api& api = *api_;
  std::vector<int64_t> uids;
  std::vector<void*> pointers;
  auto bind = [&](int64_t uid, void* pointer) {
    if (!uid) return;
    uids.push_back(uid);
    pointers.push_back(pointer);
  };
  auto device = [](cuda::DevicePtr ptr) {
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(ptr));
  };
  bind(p.io.q, device(buffers.q));
  bind(p.io.k, device(buffers.k));
  bind(p.io.v, device(buffers.v));
  bind(p.io.o, device(buffers.o));
  bind(p.io.lse, device(buffers.lse));
  bind(p.io.scale, &p.scale);
  bind(p.io.negative_infinity, &p.negative_infinity);
  if (shape.backward) {
    bind(p.io.d_o, device(buffers.d_o));
    bind(p.io.dq, device(buffers.dq));
    bind(p.io.dk, device(buffers.dk));
    bind(p.io.dv, device(buffers.dv));
    bind(p.io.one, &p.one);
    bind(p.io.dq_accumulator, device(buffers.workspace + p.dq_accumulator_offset));
    bind(p.io.softmax_sum, device(buffers.workspace + p.softmax_sum_offset));
  }
  // Before cuDNN 9.6 the dq accumulator is the caller's to clear.
  if (shape.backward && api.get_version() < 90600) {
    const cuda::Driver& driver = cuda::require_driver();
    driver.check(driver.cuMemsetD8Async(buffers.workspace + p.dq_accumulator_offset, 0,
                                        p.softmax_sum_offset - p.dq_accumulator_offset, stream),
                 "cuMemsetD8Async");
  }
  Descriptor pack(api, variant_pack_descriptor, "variant pack");
  void* workspace = device(buffers.workspace);
  pack.set(variant_pack_unique_ids, type_int64, static_cast<int64_t>(uids.size()), uids.data())
      .set(variant_pack_data_pointers, type_void_pointer, static_cast<int64_t>(pointers.size()),
           pointers.data())
      .set(variant_pack_workspace, type_void_pointer, 1, &workspace)
      .finalize();
  api.check(api.set_stream(handle_, stream), "cudnnSetStream");
  api.check(api.execute(handle_, p.plan->raw(), pack.raw()), "execute attention");
}

} // namespace sinter::kernels
