#include "nn/precision.h"

#include "autograd/functions/loss.h"
#include "autograd/functions/shape.h"

namespace mixtape::nn {

namespace {
struct PolicyRow {
  Precision p;
  const char* name;
  DType compute, params;
};
constexpr PolicyRow kPolicies[] = {
    {Precision::fp32, "fp32", DType::f32, DType::f32},
    {Precision::fp16, "fp16", DType::f16, DType::f32},
    {Precision::bf16, "bf16", DType::bf16, DType::f32},
    {Precision::fp16_pure, "fp16-pure", DType::f16, DType::f16},
    {Precision::bf16_pure, "bf16-pure", DType::bf16, DType::bf16},
    {Precision::fp8, "fp8", DType::bf16, DType::f32},
};
const PolicyRow& row(Precision p) { return kPolicies[size_t(p)]; }
}  // namespace

const char* precision_name(Precision p) { return row(p).name; }

Precision precision_from_name(const std::string& name) {
  std::string choices;
  for (const PolicyRow& r : kPolicies) {
    if (name == r.name) return r.p;
    choices += choices.empty() ? r.name : std::string(", ") + r.name;
  }
  throw Error(detail::cat("unknown precision policy '", name, "' (choose one of ", choices, ")"));
}

DType compute_dtype(Precision p) { return row(p).compute; }
DType param_dtype(Precision p) { return row(p).params; }
bool is_pure(Precision p) { return p == Precision::fp16_pure || p == Precision::bf16_pure; }
bool is_16bit(Precision p) { return p != Precision::fp32; }

bool on_fp32_allow_list(OpId op) {
  for (const Fp32ListEntry& e : kFp32AllowList)
    if (e.op == op) return true;
  return false;
}

Variable fp32_input(OpId op, const Variable& x) {
  bool cast_entry = false;
  for (const Fp32ListEntry& e : kFp32AllowList) cast_entry |= e.op == op && e.rule == Fp32Rule::cast_input;
  MT_CHECK(cast_entry, "fp32_input: '", op_name(op), "' is not an op whose input the fp32 allow-list casts");
  MT_CHECK(x.defined(), "fp32_input(", op_name(op), "): the input is an undefined Variable");
  return mixtape::is_16bit(x.dtype()) ? cast(x, DType::f32) : x;
}

void apply_precision(Module& model, Precision p) {
  if (is_pure(p)) model.to(param_dtype(p));
}

Softmax::Softmax(int64_t dim) : UnaryModule("Softmax"), dim_(dim) {}
Variable Softmax::forward(const Variable& x) { return softmax(fp32_input(OpId::softmax, x), dim_); }
std::string Softmax::extra_repr() const { return "dim=" + std::to_string(dim_); }

LogSoftmax::LogSoftmax(int64_t dim) : UnaryModule("LogSoftmax"), dim_(dim) {}
Variable LogSoftmax::forward(const Variable& x) { return log_softmax(fp32_input(OpId::log_softmax, x), dim_); }
std::string LogSoftmax::extra_repr() const { return "dim=" + std::to_string(dim_); }

}  // namespace mixtape::nn
