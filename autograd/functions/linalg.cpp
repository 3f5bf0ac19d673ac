#include "autograd/functions/linalg.h"

#include "autograd/fp8.h"
#include "autograd/functions/view.h"
#include "autograd/tape.h"
#include "tensor/ops/linalg.h"
#include "tensor/ops/quantize.h"

namespace mixtape {

namespace {

// Zhao et al., Algorithm 1 for an activation gradient of a GEMM-like node: choose beta for
// dX = f(beta * dY, other), where each element of dX is a dot product of length `reduction`,
// and attach the scale beta * alpha.
template <class F>
ScaledGrad activation_grad(OpId op, const ScaledGrad& dy, const Tensor& other, int64_t reduction, F&& f) {
  const float beta = gemm_beta(GemmGradQuery{op, &dy, &other, reduction});
  return {f(rescale(dy.g, beta)), beta * dy.scale};
}

// Length of the dot products behind each element of an operand's gradient: the contracted dim
// of dy (k) times the batch entries summed into it, i.e. dy.numel() * k / operand.numel().
int64_t reduction_length(const Tensor& dy, int64_t k, const Shape& operand) {
  const int64_t n = numel_of(operand);
  return n > 0 ? dy.numel() * k / n : 0;
}

// linear with 8-bit operands (Note [8-bit training] in autograd/fp8.h): the three GEMMs each
// quantize their two operands, with blocks along their own K, from the tensors saved here.
Variable linear_fp8(Fp8Context& fp8, const Variable& x, const Variable& w, const Variable& b) {
  const int64_t in = w.size(1), out = w.size(0), rows = in > 0 ? x.numel() / in : 0;
  const Tensor x2 = x.data().reshape({rows, in});
  const int64_t site = fp8.next_site();
  const Quantized xq = fp8.quantize(site, OpId::linear, Fp8Role::input, "fprop", x2);
  const Quantized wq = fp8.quantize(site, OpId::linear, Fp8Role::weight, "fprop", w.data());
  Shape ys = x.shape();
  ys.back() = out;
  Tensor y = scaled_matmul_nt(xq, wq, b.defined() ? b.data() : Tensor(), x.dtype()).view(ys);
  const Tensor sx = w.requires_grad() ? x2 : Tensor();
  const Tensor sw = x.requires_grad() ? w.data() : Tensor();
  Fp8Context* ctx = &fp8;
  const Shape xs = x.shape();
  return record_scaled(
      OpId::linear, {x, w, b}, y,
      [ctx, site, sx, sw, xs, rows, out](const std::vector<ScaledGrad>& dys, const std::vector<bool>& needs) {
    const Fp8Grad fg = fp8_grad(*ctx, dys[0]);
    const ScaledGrad& dy = fg.dy;
    const bool per_op = fg.per_operator;
    const Tensor d2 = dy.g.reshape({rows, out});
    std::vector<ScaledGrad> g(3);
    if (needs[0]) {  // dgrad: dx = dy w: (rows, in) = (rows, out) (in, out)^T
      const Quantized dq = ctx->quantize(site, OpId::linear, Fp8Role::grad, "dgrad", d2, per_op);
      const Quantized wt = ctx->quantize(site, OpId::linear, Fp8Role::weight, "dgrad", sw.transpose(0, 1));
      g[0] = {scaled_matmul_nt(dq, wt, Tensor(), dy.g.dtype()).view(xs), dy.scale};
    }
    if (needs[1])  // wgrad: dw = dy^T x: (out, in) = (out, rows) (in, rows)^T
      g[1] = param_grad(OpId::linear, 1, dy, [&](DType t) {
        const Quantized dq = ctx->quantize(site, OpId::linear, Fp8Role::grad, "wgrad", d2.transpose(0, 1), per_op);
        const Quantized xt = ctx->quantize(site, OpId::linear, Fp8Role::input, "wgrad", sx.transpose(0, 1));
        return scaled_matmul_nt(dq, xt, Tensor(), t);
      });
    if (needs[2]) g[2] = param_grad(OpId::linear, 2, dy, [&](DType t) { return linear_backward_bias(dy.g.to(t)); });
    return g;
      });
}

}  // namespace

Variable matmul(const Variable& a, const Variable& b) {
  MT_CHECK(a.defined() && b.defined(), "matmul: got an undefined Variable");
  if (a.dim() == 1 || b.dim() == 1) {
    // Vectors become [1, K] / [K, 1] through reshape nodes, so the node below sees matrices.
    const int64_t kb = b.dim() == 1 ? b.size(0) : (b.dim() >= 2 ? b.size(-2) : 0);
    MT_CHECK(a.dim() >= 1 && b.dim() >= 1 && a.size(-1) == kb, "matmul: inner dimensions differ: ", a.data().meta(),
             " x ", b.data().meta());
    const Variable a2 = a.dim() == 1 ? reshape(a, {1, a.size(0)}) : a;
    const Variable b2 = b.dim() == 1 ? reshape(b, {b.size(0), 1}) : b;
    const Variable y = matmul(a2, b2);
    Shape ys = y.shape();
    if (b.dim() == 1) ys.pop_back();
    if (a.dim() == 1) ys.erase(ys.end() - 1 - (b.dim() == 1 ? 0 : 1));
    return reshape(y, ys);
  }
  Tensor y = mixtape::matmul(a.data(), b.data());
  // da reads b and db reads a: save each only when the other side needs its gradient.
  const Tensor sa = b.requires_grad() ? a.data() : Tensor();
  const Tensor sb = a.requires_grad() ? b.data() : Tensor();
  const Shape as = a.shape(), bs = b.shape();
  return record_scaled(OpId::matmul, {a, b}, y,
                       [sa, sb, as, bs](const std::vector<ScaledGrad>& dys, const std::vector<bool>& needs) {
    const ScaledGrad& dy = dys[0];
    std::vector<ScaledGrad> g(2);
    if (needs[0])  // da = dy b^T: dots over N (and over the batch entries a was broadcast along)
      g[0] = activation_grad(OpId::matmul, dy, sb, reduction_length(dy.g, as.back(), as),
                             [&](const Tensor& d) { return matmul_backward_a(d, sb, as); });
    if (needs[1])  // db = a^T dy: dots over M (and the batch entries b was broadcast along)
      g[1] = activation_grad(OpId::matmul, dy, sa, reduction_length(dy.g, bs[bs.size() - 2], bs),
                             [&](const Tensor& d) { return matmul_backward_b(d, sa, bs); });
    return g;
  });
}

Variable bmm(const Variable& a, const Variable& b) {
  MT_CHECK(a.defined() && b.defined(), "bmm: got an undefined Variable");
  Tensor y = mixtape::bmm(a.data(), b.data());
  const Tensor sa = b.requires_grad() ? a.data() : Tensor();
  const Tensor sb = a.requires_grad() ? b.data() : Tensor();
  return record_scaled(OpId::bmm, {a, b}, y,
                       [sa, sb](const std::vector<ScaledGrad>& dys, const std::vector<bool>& needs) {
    const ScaledGrad& dy = dys[0];
    std::vector<ScaledGrad> g(2);
    if (needs[0])  // da = dy b^T: (B, M, K) = (B, M, N) (B, K, N)^T
      g[0] = activation_grad(OpId::bmm, dy, sb, dy.g.size(2),
                             [&](const Tensor& d) { return mixtape::bmm(d, sb.transpose(1, 2)); });
    if (needs[1])  // db = a^T dy: (B, K, N) = (B, M, K)^T (B, M, N)
      g[1] = activation_grad(OpId::bmm, dy, sa, dy.g.size(1),
                             [&](const Tensor& d) { return mixtape::bmm(sa.transpose(1, 2), d); });
    return g;
  });
}

Variable linear(const Variable& x, const Variable& w, const Variable& b) {
  MT_CHECK(x.defined() && w.defined(), "linear: got an undefined Variable");
  if (Fp8Context* fp8 = active_fp8(); fp8 && is_16bit(x.dtype())) {
    MT_CHECK(w.dim() == 2 && x.dim() >= 1 && x.size(-1) == w.size(1), "linear: expected x [..., ", w.size(-1),
             "] and w [out, in], got ", x.data().meta(), " and ", w.data().meta());
    return linear_fp8(*fp8, x, w, b);
  }
  Tensor y = mixtape::linear(x.data(), w.data(), b.defined() ? b.data() : Tensor());
  const Tensor sx = w.requires_grad() ? x.data() : Tensor();
  const Tensor sw = x.requires_grad() ? w.data() : Tensor();
  const int64_t out_features = w.size(0);
  return record_scaled(OpId::linear, {x, w, b}, y,
                       [sx, sw, out_features](const std::vector<ScaledGrad>& dys, const std::vector<bool>& needs) {
    const ScaledGrad& dy = dys[0];
    std::vector<ScaledGrad> g(3);
    if (needs[0])  // dx = dy w: (..., in) = (..., out) (out, in)
      g[0] = activation_grad(OpId::linear, dy, sw, out_features,
                             [&](const Tensor& d) { return linear_backward_input(d, sw); });
    // Parameter gradients get their own scale (Note [Parameter gradient scale]); the optimizer
    // unscales each parameter by its own.
    if (needs[1])  // dw = dy^T x: (out, in)
      g[1] = param_grad(OpId::linear, 1, dy, [&](DType t) { return linear_backward_weight(dy.g.to(t), sx.to(t)); });
    if (needs[2])  // db = sum of dy rows: (out)
      g[2] = param_grad(OpId::linear, 2, dy, [&](DType t) { return linear_backward_bias(dy.g.to(t)); });
    return g;
  });
}

}  // namespace mixtape
