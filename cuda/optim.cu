// Fused optimizer updates on the GPU: one pass per parameter reads param, grad and state through
// their strides (OffsetCalculator) and writes param and state in place. Each launcher mirrors the
// CPU kernel of the same name in tensor/cpu/optim.cpp (Note [Update kernel dtypes], Note [16-bit
// update rules]); formulas in tensor/ops/optim.h.
//
// Note [Bit-identical updates]
// The updates use only + - * / sqrt, so the GPU reproduces the CPU bit for bit when it evaluates
// the same expression tree in the same type with each operation rounded on its own: the kernels
// spell every operation with the *_rn intrinsics (nvcc would otherwise contract a*b + c into an
// FMA, which the CPU build does not), host scalars (bias corrections, 1 - beta, -lr) are computed
// on the host exactly as the CPU kernels compute them, and 16-bit stores round with the device
// twins of the CPU's round_to_* (store_value, store_stochastic; Note [Rounding on the device]).
// Stochastic rounding draws philox_words(seed, offset + i)[0] for the element of row-major
// index i, as the CPU loop does, so a fixed (seed, offset) gives the CPU's bits too.
//
// Master weights: the fp32 kernels take the optional 16-bit copy of the master (Note [Fused
// master copy] in tensor/ops/optim.h) as one more operand, Q* q, written with store_value<Q> of
// the new fp32 value in the same pass; without a copy Q is float, q aliases the parameter's
// layout and has_copy is false, so it is never written.
#include <cmath>

#include "cuda/backend.h"
#include "cuda/common.cuh"

namespace mixtape::cuda {

namespace {


// philox_words(seed, index)[0] (tensor/core/rng.h). philox_words itself is a host-only inline
// function; the constexpr block function it wraps compiles for the device.
__device__ __forceinline__ uint32_t philox_word0(uint64_t seed, uint64_t index) {
  return philox4x32_10({uint32_t(index), uint32_t(index >> 32), 0u, 0u}, {uint32_t(seed), uint32_t(seed >> 32)})[0];
}

// N operands of one shape, each through its own strides (no broadcasting of shape: the
// front-ends check equal shapes; a zero stride in a read-only operand is honoured).
template <int N>
OffsetCalculator<N> same_shape_offsets(const Shape& shape, const std::array<const Tensor*, N>& ts) {
  std::array<Shape, N> st;
  for (int k = 0; k < N; ++k) st[size_t(k)] = ts[size_t(k)]->strides();
  return make_offset_calculator<N>(shape, st);
}

#define MT_GRID_STRIDE(i, n) \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

// ---- fp32 / f64 updates -------------------------------------------------------------------------

// Writes the new master value v into the rounded copy (Note [Fused master copy]).
template <class Q>
__device__ __forceinline__ void write_copy(Q* q, bool has_copy, float v) {
  if (has_copy) *q = store_value<Q>(v);
}

// torch.optim.SGD without momentum: p += -lr * (g + wd * p). Operands: param, grad, copy.
template <class P, class Q>
__global__ void sgd_plain_kernel(P* p, const P* g, Q* q, bool has_copy, OffsetCalculator<3> oc, int64_t n,
                                 P neg_lr, P wd, bool decay) {
  MT_GRID_STRIDE(i, n) {
    int64_t o[3];
    oc.offsets(i, o);
    const P pv = p[o[0]];
    P d = g[o[1]];
    if (decay) d = add_rn(d, mul_rn(wd, pv));
    const P next = add_rn(pv, mul_rn(neg_lr, d));
    p[o[0]] = next;
    write_copy(q + o[2], has_copy, next);
  }
}

// torch.optim.SGD with momentum. Operands: param, grad, momentum buffer, copy.
template <class P, class Q>
__global__ void sgd_momentum_kernel(P* p, const P* g, P* b, Q* q, bool has_copy, OffsetCalculator<4> oc, int64_t n,
                                    P neg_lr, P wd, P mom, P keep, bool decay, bool first, bool nesterov) {
  MT_GRID_STRIDE(i, n) {
    int64_t o[4];
    oc.offsets(i, o);
    const P pv = p[o[0]];
    P d = g[o[1]];
    if (decay) d = add_rn(d, mul_rn(wd, pv));
    const P buf = first ? d : add_rn(mul_rn(mom, b[o[2]]), mul_rn(keep, d));
    b[o[2]] = buf;
    d = nesterov ? add_rn(d, mul_rn(mom, buf)) : buf;
    const P next = add_rn(pv, mul_rn(neg_lr, d));
    p[o[0]] = next;
    write_copy(q + o[3], has_copy, next);
  }
}

// torch.lerp's CPU formula: a + w (b - a), from the nearer end for w >= 0.5.
template <class C>
__device__ __forceinline__ C lerp(C a, C b, C w) {
  return w < C(0.5) ? add_rn(a, mul_rn(w, sub_rn(b, a))) : sub_rn(b, mul_rn(sub_rn(b, a), sub_rn(C(1), w)));
}

// Adam / AdamW. Operands: param, grad, exp_avg, exp_avg_sq, copy.
template <class P, class Q>
__global__ void adam_kernel(P* p, const P* g, P* m, P* v, Q* q, bool has_copy, OffsetCalculator<5> oc, int64_t n,
                            P neg_step_size, P bias2_sqrt, P w1, P b2, P w2, P eps, P wd, P shrink, bool l2,
                            bool shrink_w) {
  MT_GRID_STRIDE(i, n) {
    int64_t o[5];
    oc.offsets(i, o);
    P pv = p[o[0]];
    P d = g[o[1]];
    if (l2) d = add_rn(d, mul_rn(wd, pv));
    if (shrink_w) pv = mul_rn(pv, shrink);
    const P mv = lerp(m[o[2]], d, w1);
    const P vv = add_rn(mul_rn(b2, v[o[3]]), mul_rn(w2, mul_rn(d, d)));
    m[o[2]] = mv;
    v[o[3]] = vv;
    const P denom = add_rn(div_rn(sqrt_rn(vv), bias2_sqrt), eps);
    const P next = add_rn(pv, mul_rn(neg_step_size, div_rn(mv, denom)));
    p[o[0]] = next;
    write_copy(q + o[4], has_copy, next);
  }
}

// Only (f32, f32) has a kernel: the CPU also has (f64, f64), but f64 stays on the CPU
// (Note [Update kernel dtypes] in tensor/cpu/optim.cpp).
template <class F>
void dispatch_update(const char* op, DType param, DType state, F&& f) {
  if (param == DType::f32 && state == DType::f32) return f(float{});
  throw Error(detail::cat(op, ": no kernel for ", dtype_name(param), " parameters with ", dtype_name(state),
                          " state"));
}

// ---- 16-bit update rules (Note [16-bit update rules] in tensor/cpu/optim.cpp) -------------------

enum class WeightRule : int { nearest, stochastic, kahan };

WeightRule weight_rule(Rounding rounding, const Tensor& kahan_comp) {
  if (kahan_comp.defined()) return WeightRule::kahan;
  return rounding == Rounding::stochastic ? WeightRule::stochastic : WeightRule::nearest;
}

// Writes the new weight w + u into *p under the rule (the CPU's write_weight). c: the element's
// Kahan compensation (kahan only); counter: its Philox counter (stochastic only).
template <class P>
__device__ __forceinline__ void write_weight(P* p, float w, float u, WeightRule rule, P* c, uint64_t seed,
                                             uint64_t counter) {
  switch (rule) {
    case WeightRule::nearest:
      *p = store_value<P>(add_rn(w, u));
      return;
    case WeightRule::stochastic:
      *p = store_stochastic<P>(add_rn(w, u), philox_word0(seed, counter));
      return;
    case WeightRule::kahan: {
      // Algorithm 3 lines 7-10 (Algorithm 5 lines 13-16).
      const float y = sub_rn(u, load_value(*c));
      const P s = store_value<P>(add_rn(w, y));
      *c = store_value<P>(sub_rn(sub_rn(load_value(s), w), y));
      *p = s;
      return;
    }
  }
}

// Algorithm 2 / 3 and the nearest baseline. Operands: param, grad, momentum (param's layout when
// unused, never dereferenced), Kahan buffer (likewise).
template <class P>
__global__ void sgd16_kernel(P* p, const float* g, P* m, P* c, OffsetCalculator<4> oc, int64_t n, float neg_lr,
                             float wd, float mom, bool use_mom, WeightRule rule, uint64_t seed, uint64_t offset) {
  MT_GRID_STRIDE(i, n) {
    int64_t o[4];
    oc.offsets(i, o);
    const float w = load_value(p[o[0]]);
    float d = add_rn(g[o[1]], mul_rn(wd, w));  // Algorithm 2 line 3
    if (use_mom) {                              // line 4, m read back as stored
      const P mv = store_value<P>(add_rn(mul_rn(mom, load_value(m[o[2]])), d));
      m[o[2]] = mv;
      d = load_value(mv);
    }
    write_weight<P>(p + o[0], w, mul_rn(neg_lr, d), rule, c + o[3], seed, offset + uint64_t(i));
  }
}

// Algorithm 4 / 5 and the nearest baseline. Operands: param, grad, exp_avg, exp_avg_sq, Kahan
// buffer (param's layout when unused, never dereferenced).
template <class P>
__global__ void adamw16_kernel(P* p, const float* g, P* m, P* v, P* c, OffsetCalculator<5> oc, int64_t n,
                               float bias1, float bias2, float b1, float w1, float b2, float w2, float lr,
                               float eps, float lr_wd, WeightRule rule, uint64_t seed, uint64_t offset) {
  MT_GRID_STRIDE(i, n) {
    int64_t o[5];
    oc.offsets(i, o);
    const float w = load_value(p[o[0]]);
    const float gv = g[o[1]];
    const P mv = store_value<P>(add_rn(mul_rn(b1, load_value(m[o[2]])), mul_rn(w1, gv)));             // line 5
    const P vv = store_value<P>(add_rn(mul_rn(b2, load_value(v[o[3]])), mul_rn(w2, mul_rn(gv, gv))));  // line 6
    m[o[2]] = mv;
    v[o[3]] = vv;
    const float m_hat = div_rn(load_value(mv), bias1);            // line 9
    const float v_hat = sqrt_rn(div_rn(load_value(vv), bias2));   // line 10
    const float u = -add_rn(div_rn(mul_rn(lr, m_hat), add_rn(v_hat, eps)), mul_rn(lr_wd, w));  // line 11
    write_weight<P>(p + o[0], w, u, rule, c + o[4], seed, offset + uint64_t(i));
  }
}

template <class F>
void dispatch_16bit(const char* op, DType t, F&& f) {
  if (t == DType::bf16) return f(__nv_bfloat16{});
  if (t == DType::f16) return f(__half{});
  throw Error(detail::cat(op, ": no kernel for ", dtype_name(t), " parameters (need bf16 or f16)"));
}

// The rounded copy's element type (Note [Fused master copy]): f(Q{}) with Q = __half or
// __nv_bfloat16, or float (never written) when there is no copy.
template <class F>
void dispatch_copy(const Tensor* copy, F&& f) {
  if (!copy) return f(float{});
  dispatch_16bit("rounded copy", copy->dtype(), f);
}

// The copy operand of the fp32 kernels: its pointer and layout, or the parameter's (never written).
template <class Q>
Q* copy_data(const Tensor* copy, const Tensor& param) {
  return static_cast<Q*>(copy ? copy->raw_data() : param.raw_data());
}

}  // namespace

void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buf, double lr, double momentum,
                double dampening, double weight_decay, bool nesterov, int64_t step, Tensor* rounded_copy) {
  DeviceGuard guard(param.device().index);
  const DType state_dtype = momentum != 0.0 ? momentum_buf.dtype() : param.dtype();
  const int64_t n = param.numel();
  dispatch_update("sgd_update", param.dtype(), state_dtype, [&](auto tag) {
    using P = decltype(tag);  // == compute type and grad type
    if (n == 0) return;
    dispatch_copy(rounded_copy, [&](auto copy_tag) {
      using Q = decltype(copy_tag);
      const P neg_lr = P(-lr), wd = P(weight_decay), mom = P(momentum), keep = P(1.0 - dampening);
      const bool decay = weight_decay != 0.0, has_copy = rounded_copy != nullptr;
      const Tensor& qt = has_copy ? *rounded_copy : param;
      P* p = param.data<P>();
      const P* g = grad.data<P>();
      Q* q = copy_data<Q>(rounded_copy, param);
      const Stream s = stream_of(param);
      if (momentum == 0.0) {
        sgd_plain_kernel<P, Q><<<grid_for(n), kBlock, 0, s>>>(
            p, g, q, has_copy, same_shape_offsets<3>(param.shape(), {&param, &grad, &qt}), n, neg_lr, wd, decay);
        MT_CUDA_CHECK_LAUNCH("sgd_plain_kernel");
        return;
      }
      sgd_momentum_kernel<P, Q><<<grid_for(n), kBlock, 0, s>>>(
          p, g, momentum_buf.data<P>(), q, has_copy,
          same_shape_offsets<4>(param.shape(), {&param, &grad, &momentum_buf, &qt}), n, neg_lr, wd, mom, keep, decay,
          step == 1, nesterov);
      MT_CUDA_CHECK_LAUNCH("sgd_momentum_kernel");
    });
  });
}

void adam_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, double lr, double beta1,
                 double beta2, double eps, double weight_decay, bool decoupled, int64_t step, Tensor* rounded_copy) {
  DeviceGuard guard(param.device().index);
  const int64_t n = param.numel();
  dispatch_update(decoupled ? "adamw_update" : "adam_update", param.dtype(), exp_avg.dtype(), [&](auto tag) {
    using P = decltype(tag);
    if (n == 0) return;
    dispatch_copy(rounded_copy, [&](auto copy_tag) {
      using Q = decltype(copy_tag);
      // Host scalars in double, as the CPU kernel (and torch.optim) computes them.
      const double bias1 = 1.0 - std::pow(beta1, double(step));
      const double bias2 = 1.0 - std::pow(beta2, double(step));
      const P neg_step_size = P(-lr / bias1), bias2_sqrt = P(std::sqrt(bias2));
      const P w1 = P(1.0 - beta1), b2 = P(beta2), w2 = P(1.0 - beta2), eps_c = P(eps);
      const P wd = P(weight_decay), shrink = P(1.0 - lr * weight_decay);
      const bool l2 = !decoupled && weight_decay != 0.0, shrink_w = decoupled && weight_decay != 0.0;
      const bool has_copy = rounded_copy != nullptr;
      const Tensor& qt = has_copy ? *rounded_copy : param;
      adam_kernel<P, Q><<<grid_for(n), kBlock, 0, stream_of(param)>>>(
          param.data<P>(), grad.data<P>(), exp_avg.data<P>(), exp_avg_sq.data<P>(), copy_data<Q>(rounded_copy, param),
          has_copy, same_shape_offsets<5>(param.shape(), {&param, &grad, &exp_avg, &exp_avg_sq, &qt}), n,
          neg_step_size, bias2_sqrt, w1, b2, w2, eps_c, wd, shrink, l2, shrink_w);
      MT_CUDA_CHECK_LAUNCH("adam_kernel");
    });
  });
}

void sgd16_update(Tensor& param, const Tensor& grad, Tensor& momentum_buf, Tensor& kahan_comp, double lr,
                  double momentum, double weight_decay, Rounding rounding, uint64_t seed, uint64_t offset) {
  DeviceGuard guard(param.device().index);
  const int64_t n = param.numel();
  dispatch_16bit("sgd16_update", param.dtype(), [&](auto tag) {
    using P = decltype(tag);
    if (n == 0) return;
    const WeightRule rule = weight_rule(rounding, kahan_comp);
    const bool use_mom = momentum != 0.0;
    const float neg_lr = float(-lr), wd = float(weight_decay), mom = float(momentum);
    // Absent buffers alias the parameter's layout and are never dereferenced.
    const Tensor& mt = use_mom ? momentum_buf : param;
    const Tensor& ct = rule == WeightRule::kahan ? kahan_comp : param;
    MT_CHECK(mt.dtype() == param.dtype() && ct.dtype() == param.dtype(), "sgd16_update: state ", mt.meta(), " / ",
             ct.meta(), " must have the parameter's dtype ", param.meta());
    sgd16_kernel<P><<<grid_for(n), kBlock, 0, stream_of(param)>>>(
        static_cast<P*>(param.raw_data()), grad.data<float>(), static_cast<P*>(mt.raw_data()),
        static_cast<P*>(ct.raw_data()), same_shape_offsets<4>(param.shape(), {&param, &grad, &mt, &ct}), n, neg_lr,
        wd, mom, use_mom, rule, seed, offset);
    MT_CUDA_CHECK_LAUNCH("sgd16_kernel");
  });
}

void adamw16_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, Tensor& kahan_comp,
                    double lr, double beta1, double beta2, double eps, double weight_decay, int64_t step,
                    Rounding rounding, uint64_t seed, uint64_t offset) {
  DeviceGuard guard(param.device().index);
  const int64_t n = param.numel();
  dispatch_16bit("adamw16_update", param.dtype(), [&](auto tag) {
    using P = decltype(tag);
    if (n == 0) return;
    const WeightRule rule = weight_rule(rounding, kahan_comp);
    // Host scalars exactly as the CPU kernel: c_{1,t} = beta1^t, c_{2,t} = beta2^t in double.
    const float bias1 = float(1.0 - std::pow(beta1, double(step)));
    const float bias2 = float(1.0 - std::pow(beta2, double(step)));
    const float b1 = float(beta1), w1 = float(1.0 - beta1), b2 = float(beta2), w2 = float(1.0 - beta2);
    const float lr_f = float(lr), eps_f = float(eps), lr_wd = float(lr * weight_decay);
    const Tensor& ct = rule == WeightRule::kahan ? kahan_comp : param;
    MT_CHECK(exp_avg.dtype() == param.dtype() && exp_avg_sq.dtype() == param.dtype() && ct.dtype() == param.dtype(),
             "adamw16_update: state must have the parameter's dtype ", param.meta());
    adamw16_kernel<P><<<grid_for(n), kBlock, 0, stream_of(param)>>>(
        static_cast<P*>(param.raw_data()), grad.data<float>(), static_cast<P*>(exp_avg.raw_data()),
        static_cast<P*>(exp_avg_sq.raw_data()), static_cast<P*>(ct.raw_data()),
        same_shape_offsets<5>(param.shape(), {&param, &grad, &exp_avg, &exp_avg_sq, &ct}), n, bias1, bias2, b1, w1,
        b2, w2, lr_f, eps_f, lr_wd, rule, seed, offset);
    MT_CUDA_CHECK_LAUNCH("adamw16_kernel");
  });
}

}  // namespace mixtape::cuda
