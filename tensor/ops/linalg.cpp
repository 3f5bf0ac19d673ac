#include "tensor/ops/linalg.h"

#include "cuda/backend.h"
#include "tensor/cpu/linalg.h"
#include "tensor/ops/common.h"
#include "tensor/ops/reduce.h"

namespace mixtape {

namespace {

// Product of the dims before the last `keep` dims.
int64_t leading_numel(const Shape& s, size_t keep) {
  int64_t n = 1;
  for (size_t i = 0; i + keep < s.size(); ++i) n *= s[i];
  return n;
}

// The GEMM launchers take matrices that are row-major or column-major in their last two dims
// (a leading dimension and a transpose flag); anything else is copied.
Tensor gemm_ready(const Tensor& t) {
  const size_t n = size_t(t.dim());
  return cpu::blas_layout_ok(t.shape()[n - 2], t.shape()[n - 1], t.strides()[n - 2], t.strides()[n - 1])
             ? t
             : t.contiguous();
}

// out [batch..., M, N] = a [..., M, K] b [..., K, N] (+ bias [N]); batch dims broadcast.
// Arguments are validated by the callers.
Tensor gemm(const char* op, const Tensor& a_in, const Tensor& b_in, const Tensor& bias) {
  Tensor a = gemm_ready(a_in), b = gemm_ready(b_in);
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  const Shape ab(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch;
  try {
    batch = broadcast_shapes(ab, bb, op);
  } catch (const Error&) {
    throw Error(detail::cat(op, ": batch dims of ", a_in.meta(), " and ", b_in.meta(), " cannot be broadcast (",
                            shape_str(ab), " vs ", shape_str(bb), ")"));
  }
  Shape as = batch, bs = batch, os = batch;
  as.insert(as.end(), {M, K});
  bs.insert(bs.end(), {K, N});
  os.insert(os.end(), {M, N});
  a = a.expand(as);
  b = b.expand(bs);
  Tensor out = empty(os, a.dtype(), a.device());
  on_device(
      out.device(), [&] { cpu::matmul(a, b, bias, out); }, [&] { cuda::matmul(a, b, bias, out); });
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  ops::check_same("matmul", {&a, &b});
  ops::check_floating("matmul", a);
  MT_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: expected operands with at least 1 dim, got ", a.meta(), " x ",
           b.meta());
  const Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  const Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  const int64_t K = a2.size(-1);
  MT_CHECK(K == b2.size(-2), "matmul: inner dimensions differ: ", a.meta(), " x ", b.meta(), " (", K, " vs ",
           b2.size(-2), ")");
  Tensor out;
  if (b2.dim() == 2 && a2.dim() > 2) {
    // [..., M, K] x [K, N]: one GEMM over all rows, (rows, N) = (rows, K) (K, N).
    Shape os(a2.shape().begin(), a2.shape().end() - 1);
    os.push_back(b2.size(1));
    out = gemm("matmul", a2.reshape({leading_numel(a2.shape(), 1), K}), b2, Tensor()).view(os);
  } else {
    out = gemm("matmul", a2, b2, Tensor());
  }
  if (a.dim() == 1) out = out.squeeze(-2);
  if (b.dim() == 1) out = out.squeeze(-1);
  return out;
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  ops::check_same("bmm", {&a, &b});
  ops::check_floating("bmm", a);
  ops::check_dim("bmm", a, 3, "a batch of matrices [B, M, K]");
  ops::check_dim("bmm", b, 3, "a batch of matrices [B, K, N]");
  MT_CHECK(a.size(0) == b.size(0), "bmm: batch sizes differ: ", a.meta(), " x ", b.meta());
  MT_CHECK(a.size(2) == b.size(1), "bmm: inner dimensions differ: ", a.meta(), " x ", b.meta(), " (", a.size(2), " vs ",
           b.size(1), ")");
  return gemm("bmm", a, b, Tensor());
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  if (b.defined()) ops::check_same("linear", {&x, &w, &b});
  else ops::check_same("linear", {&x, &w});
  ops::check_floating("linear", x);
  MT_CHECK(x.dim() >= 1, "linear: expected an input [..., in_features], got ", x.meta());
  ops::check_dim("linear", w, 2, "a weight [out_features, in_features]");
  MT_CHECK(x.size(-1) == w.size(1), "linear: input ", x.meta(), " has ", x.size(-1), " features but weight ", w.meta(),
           " expects ", w.size(1));
  MT_CHECK(!b.defined() || (b.dim() == 1 && b.size(0) == w.size(0)), "linear: bias ", b.defined() ? b.meta() : "",
           " does not match weight ", w.meta(), " (expected [", w.size(0), "])");
  // (rows, out) = (rows, in) (out, in)^T; w.t() reaches BLAS as CblasTrans.
  const int64_t rows = leading_numel(x.shape(), 1);
  Shape os = x.shape();
  os.back() = w.size(0);
  return gemm("linear", x.reshape({rows, x.size(-1)}), w.t(), b).view(os);
}

Tensor matmul_backward_a(const Tensor& dy, const Tensor& b, const Shape& a_shape) {
  MT_CHECK(a_shape.size() >= 2 && b.dim() >= 2 && dy.dim() >= 2,
           "matmul backward: expected operands with at least "
           "2 dims, got a ",
           shape_str(a_shape), ", b ", b.meta(), ", dy ", dy.meta());
  if (a_shape.size() == 2 && dy.dim() > 2) {
    // a was shared by every batch entry: da = sum_i dy_i b_i^T as one GEMM,
    // (M, K) = (M, B*N) (K, B*N)^T with the batch moved next to N.
    const int64_t nd = dy.dim(), M = dy.size(-2), N = dy.size(-1), K = b.size(-2);
    std::vector<int64_t> perm{nd - 2};
    for (int64_t d = 0; d < nd - 2; ++d) perm.push_back(d);
    perm.push_back(nd - 1);
    Shape bs(dy.shape().begin(), dy.shape().end() - 2);
    bs.insert(bs.end(), {K, N});
    const int64_t cols = leading_numel(dy.shape(), 2) * N;
    const Tensor dyf = dy.permute(perm).reshape({M, cols});
    const Tensor bf = b.expand(bs).permute(perm).reshape({K, cols});
    return matmul(dyf, bf.t());
  }
  return sum_to(matmul(dy, b.transpose(-1, -2)), a_shape);
}

Tensor matmul_backward_b(const Tensor& dy, const Tensor& a, const Shape& b_shape) {
  MT_CHECK(b_shape.size() >= 2 && a.dim() >= 2 && dy.dim() >= 2,
           "matmul backward: expected operands with at least "
           "2 dims, got a ",
           a.meta(), ", b ", shape_str(b_shape), ", dy ", dy.meta());
  if (b_shape.size() == 2 && dy.dim() > 2) {
    // b was shared by every batch entry: db = sum_i a_i^T dy_i as one GEMM over all rows,
    // (K, N) = (rows, K)^T (rows, N).
    const int64_t M = dy.size(-2), N = dy.size(-1), K = a.size(-1);
    Shape as(dy.shape().begin(), dy.shape().end() - 2);
    as.insert(as.end(), {M, K});
    const int64_t rows = leading_numel(dy.shape(), 1);
    return matmul(a.expand(as).reshape({rows, K}).t(), dy.reshape({rows, N}));
  }
  return sum_to(matmul(a.transpose(-1, -2), dy), b_shape);
}

Tensor linear_backward_input(const Tensor& dy, const Tensor& w) { return matmul(dy, w); }

Tensor linear_backward_weight(const Tensor& dy, const Tensor& x) {
  MT_CHECK(dy.dim() >= 1 && x.dim() >= 1 && leading_numel(dy.shape(), 1) == leading_numel(x.shape(), 1),
           "linear backward: gradient ", dy.meta(), " does not match input ", x.meta());
  const int64_t rows = leading_numel(x.shape(), 1);
  return matmul(dy.reshape({rows, dy.size(-1)}).t(), x.reshape({rows, x.size(-1)}));
}

Tensor linear_backward_bias(const Tensor& dy) {
  MT_CHECK(dy.dim() >= 1, "linear backward: expected a gradient [..., out_features], got ", dy.meta());
  return sum(dy.reshape({leading_numel(dy.shape(), 1), dy.size(-1)}), {0});
}

}  // namespace mixtape
