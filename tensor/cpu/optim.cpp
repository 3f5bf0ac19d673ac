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
// buffer), so those rules are separate kernels below (Note [16-bit update rules]). The fp32
// kernels take a third type, Q, for the optional 16-bit copy of a master weight that the same
// pass writes (half, bfloat16, or NoCopy; Note [Fused master copy] in tensor/ops/optim.h).
//
// Note [16-bit update rules]
// sgd16_update and adamw16_update implement Zamirai et al.'s Algorithms 2-5 for weights and
// state stored in bf16 (or f16). The paper rounds every operator output to bf16 (a simulated
// 16-bit unit); these kernels are fused: each element is loaded, computed in fp32, and the
// values that the algorithm keeps in memory are rounded once when stored. Those stores are the
// only rounding points, each spelled round_to_*:
//   state (m, v)           round_to_bf16 / round_to_half (nearest), and the update then reads
//                          the state back as stored, as the algorithm's next line would
//   the weight w + u       nearest, or round_to_*_stochastic with the element's Philox word
//   Kahan's s and c        nearest: y = u - c and (s - w) - y are fp32 values, s and c are stored
// Consequences of fusing: intermediates (g + d w, the Adam ratio, y) carry fp32 precision where
// the paper's simulator rounded them to bf16, so our "nearest" baseline is, if anything, kinder
// than the paper's standard algorithm; an update below 2^-24 |w| already vanishes in the fp32
// sum w + u before stochastic rounding sees it (stochastic rounding would move such a weight
// with probability < 2^-16); and s - w is exact (Sterbenz), so Kahan's c holds the rounding
// error of s up to the one rounding of c itself. That rounding is Kahan's limit in 16 bits: c
// keeps 8 significant bits in bf16 (11 in f16) and |c| reaches ulp(w)/2, so an update smaller
// than ulp(c)/2, about ulp(w) * 2^-9 in bf16, stalls in c as it stalls in w under nearest
// rounding, and each rounding of c costs up to ulp(c)/2 of the running sum (test_pure16.cpp
// prints both regimes).
#include "tensor/cpu/optim.h"

#include <cmath>
#include <type_traits>

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

// The rounded 16-bit copy of an f32 master (Note [Fused master copy] in tensor/ops/optim.h):
// f.template operator()<Q>() with Q = half or bfloat16, or NoCopy when there is none.
struct NoCopy {};

template <class F>
void dispatch_copy(const Tensor* copy, F&& f) {
  if (!copy) return f.template operator()<NoCopy>();
  if (copy->dtype() == DType::f16) return f.template operator()<half>();
  if (copy->dtype() == DType::bf16) return f.template operator()<bfloat16>();
  throw Error(detail::cat("rounded copy: ", copy->meta(), " is not bf16 or f16"));
}

// The copy's element pointer and strides; without a copy, the param's strides (never written).
template <class Q>
Q* copy_data(const Tensor* copy) {
  if constexpr (std::is_same_v<Q, NoCopy>) return nullptr;
  else return static_cast<Q*>(copy->raw_data());
}

inline const Shape& copy_strides(const Tensor* copy, const Tensor& param) {
  return copy ? copy->strides() : param.strides();
}

// Stores the new master value v into the copy, rounded to nearest even.
template <class Q, class C>
inline void write_copy(Q* q, int64_t offset, C v) {
  if constexpr (!std::is_same_v<Q, NoCopy>) q[offset] = store<Q>(v);
}

// torch.lerp's CPU formula: a + w (b - a), written from the nearer end for w >= 0.5.
template <class C>
inline C lerp(C a, C b, C w) {
  return w < C(0.5) ? a + w * (b - a) : b - (b - a) * (C(1) - w);
}

}  // namespace

void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buf, double lr, double momentum,
                double dampening, double weight_decay, bool nesterov, int64_t step, Tensor* rounded_copy) {
  const DType state_dtype = momentum != 0.0 ? momentum_buf.dtype() : param.dtype();
  dispatch_update("sgd_update", param.dtype(), state_dtype, [&]<class P, class S>() {
    dispatch_copy(rounded_copy, [&]<class Q>() {
      using C = compute_t<P>;
      const C neg_lr = C(-lr), wd = C(weight_decay), mom = C(momentum), keep = C(1.0 - dampening);
      const bool decay = weight_decay != 0.0;
      P* p = param.data<P>();
      const C* g = grad.data<C>();
      Q* q = copy_data<Q>(rounded_copy);
      const Shape& q_strides = copy_strides(rounded_copy, param);
      if (momentum == 0.0) {
        for_each_offset<3>(param.shape(), {param.strides(), grad.strides(), q_strides},
                           [&](const std::array<int64_t, 3>& o) {
                             const C pv = load(p[o[0]]);
                             C d = g[o[1]];
                             if (decay) d += wd * pv;
                             const C next = pv + neg_lr * d;
                             p[o[0]] = store<P>(next);
                             write_copy(q, o[2], next);
                           });
        return;
      }
      S* b = momentum_buf.data<S>();
      const bool first = step == 1;
      for_each_offset<4>(param.shape(), {param.strides(), grad.strides(), momentum_buf.strides(), q_strides},
                         [&](const std::array<int64_t, 4>& o) {
                           const C pv = load(p[o[0]]);
                           C d = g[o[1]];
                           if (decay) d += wd * pv;
                           const C buf = first ? d : mom * load(b[o[2]]) + keep * d;
                           b[o[2]] = store<S>(buf);
                           d = nesterov ? d + mom * buf : buf;
                           const C next = pv + neg_lr * d;
                           p[o[0]] = store<P>(next);
                           write_copy(q, o[3], next);
                         });
    });
  });
}

void adam_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, double lr, double beta1,
                 double beta2, double eps, double weight_decay, bool decoupled, int64_t step, Tensor* rounded_copy) {
  const char* op = decoupled ? "adamw_update" : "adam_update";
  dispatch_update(op, param.dtype(), exp_avg.dtype(), [&]<class P, class S>() {
    dispatch_copy(rounded_copy, [&]<class Q>() {
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
      Q* q = copy_data<Q>(rounded_copy);
      for_each_offset<5>(param.shape(),
                         {param.strides(), grad.strides(), exp_avg.strides(), exp_avg_sq.strides(),
                          copy_strides(rounded_copy, param)},
                         [&](const std::array<int64_t, 5>& o) {
                           C pv = load(p[o[0]]);
                           C d = g[o[1]];
                           if (l2) d += wd * pv;
                           if (shrink_w) pv *= shrink;
                           const C mv = lerp(C(load(m[o[2]])), d, w1);
                           const C vv = b2 * load(v[o[3]]) + w2 * (d * d);
                           m[o[2]] = store<S>(mv);
                           v[o[3]] = store<S>(vv);
                           const C denom = std::sqrt(vv) / bias2_sqrt + eps_c;
                           const C next = pv + neg_step_size * (mv / denom);
                           p[o[0]] = store<P>(next);
                           write_copy(q, o[4], next);
                         });
    });
  });
}

// ---- gradient statistics -------------------------------------------------------------------

void grad_stats(const Tensor& g, Tensor& out) {
  dispatch_float(g.dtype(), "grad_stats", [&]<class T>() {
    using C = compute_t<T>;
    const T* pg = static_cast<const T*>(g.raw_data());
    bool bad = false;
    C m = C(0);
    for_each_offset<1>(g.shape(), {g.strides()}, [&](const std::array<int64_t, 1>& o) {
      const C v = std::abs(C(load(pg[o[0]])));
      if (!std::isfinite(v)) bad = true;
      else if (v > m) m = v;
    });
    C* po = out.data<C>();
    po[0] = bad ? C(1) : C(0);
    po[1] = m;
  });
}

// ---- 16-bit update rules (Note [16-bit update rules]) ---------------------------------------

namespace {

template <class F>
void dispatch_16bit(const char* op, DType t, F&& f) {
  if (t == DType::bf16) return f.template operator()<bfloat16>();
  if (t == DType::f16) return f.template operator()<half>();
  throw Error(detail::cat(op, ": no kernel for ", dtype_name(t), " parameters (need bf16 or f16)"));
}

template <class P>
P round_nearest16(float v) {
  if constexpr (std::is_same_v<P, half>) return round_to_half(v);
  else return round_to_bf16(v);
}

template <class P>
P round_stochastic16(float v, uint32_t r) {
  if constexpr (std::is_same_v<P, half>) return round_to_half_stochastic(v, r);
  else return round_to_bf16_stochastic(v, r);
}

enum class WeightRule { nearest, stochastic, kahan };

WeightRule weight_rule(Rounding rounding, const Tensor& kahan_comp) {
  if (kahan_comp.defined()) return WeightRule::kahan;
  return rounding == Rounding::stochastic ? WeightRule::stochastic : WeightRule::nearest;
}

// Writes the new weight w + u (w: the stored weight in fp32, u: the fp32 update) into *p under
// the rule. c: the element's Kahan compensation (read and written for kahan only); counter: the
// element's Philox counter (stochastic only).
template <class P>
inline void write_weight(P* p, float w, float u, WeightRule rule, P* c, uint64_t seed, uint64_t counter) {
  switch (rule) {
    case WeightRule::nearest:
      *p = round_nearest16<P>(w + u);
      return;
    case WeightRule::stochastic:
      *p = round_stochastic16<P>(w + u, philox_words(seed, counter)[0]);
      return;
    case WeightRule::kahan: {
      // Algorithm 3 lines 7-10 (Algorithm 5 lines 13-16).
      const float y = u - load(*c);
      const P s = round_nearest16<P>(w + y);
      *c = round_nearest16<P>((load(s) - w) - y);
      *p = s;
      return;
    }
  }
}

}  // namespace

void sgd16_update(Tensor& param, const Tensor& grad, Tensor& momentum_buf, Tensor& kahan_comp, double lr,
                  double momentum, double weight_decay, Rounding rounding, uint64_t seed, uint64_t offset) {
  dispatch_16bit("sgd16_update", param.dtype(), [&]<class P>() {
    const WeightRule rule = weight_rule(rounding, kahan_comp);
    const bool use_mom = momentum != 0.0;
    const float neg_lr = float(-lr), wd = float(weight_decay), mom = float(momentum);
    P* p = param.data<P>();
    const float* g = grad.data<float>();
    // Absent buffers alias the parameter's layout and are never dereferenced.
    const Tensor& mt = use_mom ? momentum_buf : param;
    const Tensor& ct = rule == WeightRule::kahan ? kahan_comp : param;
    P* m = mt.data<P>();
    P* c = ct.data<P>();
    uint64_t i = 0;
    for_each_offset<4>(param.shape(), {param.strides(), grad.strides(), mt.strides(), ct.strides()},
                       [&](const std::array<int64_t, 4>& o) {
                         const float w = load(p[o[0]]);
                         float d = g[o[1]] + wd * w;  // Algorithm 2 line 3
                         if (use_mom) {               // line 4, m read back as stored
                           m[o[2]] = round_nearest16<P>(mom * load(m[o[2]]) + d);
                           d = load(m[o[2]]);
                         }
                         write_weight<P>(p + o[0], w, neg_lr * d, rule, c + o[3], seed, offset + i++);
                       });
  });
}

void adamw16_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, Tensor& kahan_comp,
                    double lr, double beta1, double beta2, double eps, double weight_decay, int64_t step,
                    Rounding rounding, uint64_t seed, uint64_t offset) {
  dispatch_16bit("adamw16_update", param.dtype(), [&]<class P>() {
    const WeightRule rule = weight_rule(rounding, kahan_comp);
    // Host scalars: c_{1,t} = beta1^t and c_{2,t} = beta2^t (Algorithm 4 lines 7-8) in double.
    const float bias1 = float(1.0 - std::pow(beta1, double(step)));
    const float bias2 = float(1.0 - std::pow(beta2, double(step)));
    const float b1 = float(beta1), w1 = float(1.0 - beta1), b2 = float(beta2), w2 = float(1.0 - beta2);
    const float lr_f = float(lr), eps_f = float(eps), lr_wd = float(lr * weight_decay);
    P* p = param.data<P>();
    const float* g = grad.data<float>();
    P* m = exp_avg.data<P>();
    P* v = exp_avg_sq.data<P>();
    const Tensor& ct = rule == WeightRule::kahan ? kahan_comp : param;
    P* c = ct.data<P>();
    uint64_t i = 0;
    for_each_offset<5>(
        param.shape(), {param.strides(), grad.strides(), exp_avg.strides(), exp_avg_sq.strides(), ct.strides()},
        [&](const std::array<int64_t, 5>& o) {
          const float w = load(p[o[0]]);
          const float gv = g[o[1]];
          m[o[2]] = round_nearest16<P>(b1 * load(m[o[2]]) + w1 * gv);         // line 5
          v[o[3]] = round_nearest16<P>(b2 * load(v[o[3]]) + w2 * (gv * gv));  // line 6
          const float m_hat = load(m[o[2]]) / bias1;                           // line 9
          const float v_hat = std::sqrt(load(v[o[3]]) / bias2);                // line 10
          const float u = -(lr_f * m_hat / (v_hat + eps_f) + lr_wd * w);       // line 11
          write_weight<P>(p + o[0], w, u, rule, c + o[4], seed, offset + i++);
        });
  });
}

}  // namespace mixtape::cpu
