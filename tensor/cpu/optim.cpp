// Fused optimizer updates: one strided pass per parameter, formulas in tensor/ops/optim.h.
//
// Note [Update kernel dtypes]
// Each kernel is a template over the parameter's storage type P and the state's storage type
// S, and computes in C = compute_t<P> (float for f32 and 16-bit storage, double for f64). The
// gradient arrives unscaled in C. Values are loaded with load<>, updated in C, and written once
// with store<> (dtype.h, the single rounding point). dispatch_update lists the (P, S) pairs a
// kernel accepts: today (f32, f32), the fp32 parameters and fp32 master weights of mixed
// precision, and (f64, f64) for the reference tests. Pure 16-bit training (bf16 or f16 params
// and state) rounds the update differently (stochastically, or with a Kahan compensation
// buffer), so those rules are separate kernels next to these, sharing this dispatch.
#include "tensor/cpu/optim.h"

#include <cmath>

#include "tensor/cpu/loops.h"

namespace mixtape::cpu {

namespace {

template <class F>
void dispatch_update(const char* op, DType param, DType state, F&& f) {
  if (param == DType::f32 && state == DType::f32) return f.template operator()<float, float>();
  if (param == DType::f64 && state == DType::f64) return f.template operator()<double, double>();
  throw Error(detail::cat(op, ": no kernel for ", dtype_name(param), " parameters with ", dtype_name(state),
                          " state"));
}

// torch.lerp's CPU formula: a + w (b - a), written from the nearer end for w >= 0.5.
template <class C>
inline C lerp(C a, C b, C w) {
  return w < C(0.5) ? a + w * (b - a) : b - (b - a) * (C(1) - w);
}

}  // namespace

void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buf, double lr, double momentum,
                double dampening, double weight_decay, bool nesterov, int64_t step) {
  const DType state_dtype = momentum != 0.0 ? momentum_buf.dtype() : param.dtype();
  dispatch_update("sgd_update", param.dtype(), state_dtype, [&]<class P, class S>() {
    using C = compute_t<P>;
    const C neg_lr = C(-lr), wd = C(weight_decay), mom = C(momentum), keep = C(1.0 - dampening);
    const bool decay = weight_decay != 0.0;
    P* p = param.data<P>();
    const C* g = grad.data<C>();
    if (momentum == 0.0) {
      for_each_offset<2>(param.shape(), {param.strides(), grad.strides()}, [&](const std::array<int64_t, 2>& o) {
        const C pv = load(p[o[0]]);
        C d = g[o[1]];
        if (decay) d += wd * pv;
        p[o[0]] = store<P>(pv + neg_lr * d);
      });
      return;
    }
    S* b = momentum_buf.data<S>();
    const bool first = step == 1;
    for_each_offset<3>(param.shape(), {param.strides(), grad.strides(), momentum_buf.strides()},
                       [&](const std::array<int64_t, 3>& o) {
                         const C pv = load(p[o[0]]);
                         C d = g[o[1]];
                         if (decay) d += wd * pv;
                         const C buf = first ? d : mom * load(b[o[2]]) + keep * d;
                         b[o[2]] = store<S>(buf);
                         d = nesterov ? d + mom * buf : buf;
                         p[o[0]] = store<P>(pv + neg_lr * d);
                       });
  });
}

void adam_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, double lr, double beta1,
                 double beta2, double eps, double weight_decay, bool decoupled, int64_t step) {
  dispatch_update(decoupled ? "adamw_update" : "adam_update", param.dtype(), exp_avg.dtype(), [&]<class P, class S>() {
    using C = compute_t<P>;
    // Host scalars in double, as torch.optim computes them in Python floats.
    const double bias1 = 1.0 - std::pow(beta1, double(step));
    const double bias2 = 1.0 - std::pow(beta2, double(step));
    const C neg_step_size = C(-lr / bias1), bias2_sqrt = C(std::sqrt(bias2));
    const C w1 = C(1.0 - beta1), b2 = C(beta2), w2 = C(1.0 - beta2), eps_c = C(eps);
    const C wd = C(weight_decay), shrink = C(1.0 - lr * weight_decay);
    const bool l2 = !decoupled && weight_decay != 0.0, shrink_w = decoupled && weight_decay != 0.0;
    P* p = param.data<P>();
    const C* g = grad.data<C>();
    S* m = exp_avg.data<S>();
    S* v = exp_avg_sq.data<S>();
    for_each_offset<4>(param.shape(), {param.strides(), grad.strides(), exp_avg.strides(), exp_avg_sq.strides()},
                       [&](const std::array<int64_t, 4>& o) {
                         C pv = load(p[o[0]]);
                         C d = g[o[1]];
                         if (l2) d += wd * pv;
                         if (shrink_w) pv *= shrink;
                         const C mv = lerp(C(load(m[o[2]])), d, w1);
                         const C vv = b2 * load(v[o[3]]) + w2 * (d * d);
                         m[o[2]] = store<S>(mv);
                         v[o[3]] = store<S>(vv);
                         const C denom = std::sqrt(vv) / bias2_sqrt + eps_c;
                         p[o[0]] = store<P>(pv + neg_step_size * (mv / denom));
                       });
  });
}

}  // namespace mixtape::cpu
