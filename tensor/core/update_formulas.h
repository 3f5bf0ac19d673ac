// The optimizer updates, written once for both devices as elementwise_formulas.h writes the
// elementwise ops: tensor/cpu/optim.cpp and cuda/optim.cu load each element, call these formulas,
// and store what they return, so the arithmetic is the same code, in the same order of
// operations, on the CPU and the GPU (Note [Bit-identical updates] in cuda/optim.cu; Note [No
// contracted multiply-adds] in CMakeLists.txt keeps it unfused on both).
//
// Each device keeps its own rounding. The fp32 updates (C: float, or double for f64 on the CPU)
// never round in the middle: the caller stores their results. The 16-bit rules (Note [16-bit
// update rules] in tensor/cpu/optim.cpp) round state in the middle of the formula and write the
// weight under a rule, so they take the device's side as `D`, a struct of static functions:
//   D::load(P) -> float           a stored 16-bit value, exactly
//   D::nearest(float) -> P        round to nearest even
//   D::stochastic(float, r) -> P  stochastic rounding with the 32-bit random word r
//   D::sqrt(x)                    correctly rounded square root (also used by Adam's fp32 update)
// The host scalars (bias corrections, 1 - beta, -lr) are computed here too, once, in double and
// then converted, as torch.optim computes them in Python floats.
#pragma once

#include <cmath>
#include <cstdint>

#include "tensor/core/dtype.h"
#include "tensor/core/host_device.h"
#include "tensor/core/rng.h"

namespace mixtape::formulas {

// ---- fp32 (and f64) updates: torch.optim's formulas in the compute type C ---------------------

// torch.lerp's CPU formula: a + w (b - a), written from the nearer end for w >= 0.5.
template <class C>
MT_HOST_DEVICE inline C lerp(C a, C b, C w) {
  return w < C(0.5) ? a + w * (b - a) : b - (b - a) * (C(1) - w);
}

template <class C>
struct SgdConsts {
  C neg_lr, wd, mom, keep;      // -lr, weight decay, momentum, 1 - dampening
  bool decay, first, nesterov;  // weight decay != 0; step == 1
};

template <class C>
MT_HOST_DEVICE inline SgdConsts<C> sgd_consts(double lr, double momentum, double dampening, double weight_decay,
                                              bool nesterov, int64_t step) {
  return {C(-lr), C(weight_decay), C(momentum), C(1.0 - dampening), weight_decay != 0.0, step == 1, nesterov};
}

// torch.optim.SGD without momentum: the new parameter from the parameter p and its gradient g.
template <class C>
MT_HOST_DEVICE inline C sgd(C p, C g, const SgdConsts<C>& k) {
  C d = g;
  if (k.decay) d = d + k.wd * p;
  return p + k.neg_lr * d;
}

// torch.optim.SGD with momentum: the new parameter; buf becomes the new momentum buffer, from the
// stored one `prev` (ignored at step 1, where the caller need not read it).
template <class C>
MT_HOST_DEVICE inline C sgd_momentum(C p, C g, C prev, const SgdConsts<C>& k, C& buf) {
  C d = g;
  if (k.decay) d = d + k.wd * p;
  buf = k.first ? d : k.mom * prev + k.keep * d;
  d = k.nesterov ? d + k.mom * buf : buf;
  return p + k.neg_lr * d;
}

template <class C>
struct AdamConsts {
  C neg_step_size, bias2_sqrt, w1, b2, w2, eps, wd, shrink;
  bool l2, shrink_w;  // Adam's L2 penalty in the gradient, AdamW's decay of the weight
};

// Also computed on the device, per parameter, when the step count lives there (Note [Scaled step]
// in optim/scaled_step.cpp): ::pow and ::sqrt are the C library's on the host (the same functions
// as std::pow and std::sqrt for doubles) and CUDA's double-precision ones on the device.
template <class C>
MT_HOST_DEVICE inline AdamConsts<C> adam_consts(double lr, double beta1, double beta2, double eps, double weight_decay,
                                                bool decoupled, int64_t step) {
  const double bias1 = 1.0 - ::pow(beta1, double(step));
  const double bias2 = 1.0 - ::pow(beta2, double(step));
  return {C(-lr / bias1),
          C(::sqrt(bias2)),
          C(1.0 - beta1),
          C(beta2),
          C(1.0 - beta2),
          C(eps),
          C(weight_decay),
          C(1.0 - lr * weight_decay),
          !decoupled && weight_decay != 0.0,
          decoupled && weight_decay != 0.0};
}

// Adam's first half: the weight decay and the new moments m and v (the stored ones on entry);
// returns the parameter after AdamW's decay.
template <class C>
MT_HOST_DEVICE inline C adam_moments(C p, C g, C& m, C& v, const AdamConsts<C>& k) {
  C d = g;
  if (k.l2) d = d + k.wd * p;
  if (k.shrink_w) p = p * k.shrink;
  m = lerp(m, d, k.w1);
  v = k.b2 * v + k.w2 * (d * d);
  return p;
}

// Adam's second half: the step from the first moment m and the second moment in the denominator
// (v, or AMSGrad's running maximum of v).
template <class D, class C>
MT_HOST_DEVICE inline C adam_move(C p, C m, C v, const AdamConsts<C>& k) {
  const C denom = D::sqrt(v) / k.bias2_sqrt + k.eps;
  return p + k.neg_step_size * (m / denom);
}

// torch.maximum: the larger value, NaN when either is NaN.
template <class C>
MT_HOST_DEVICE inline C maximum(C a, C b) {
  return (a > b || a != a) ? a : b;
}

// torch.optim.Adam / AdamW: the new parameter; m and v (the stored moments on entry) become the
// new moments.
template <class D, class C>
MT_HOST_DEVICE inline C adam(C p, C g, C& m, C& v, const AdamConsts<C>& k) {
  p = adam_moments(p, g, m, v, k);
  return adam_move<D>(p, m, v, k);
}

// The same with amsgrad = True: vmax (the stored maximum on entry) becomes max(vmax, new v), and
// the denominator uses it instead of v.
template <class D, class C>
MT_HOST_DEVICE inline C adam_amsgrad(C p, C g, C& m, C& v, C& vmax, const AdamConsts<C>& k) {
  p = adam_moments(p, g, m, v, k);
  vmax = maximum(vmax, v);
  return adam_move<D>(p, m, vmax, k);
}

template <class C>
struct RmspropConsts {
  C neg_lr, alpha, w, eps, wd, mom;  // w = 1 - alpha
  bool decay, centered, use_mom;
};

template <class C>
MT_HOST_DEVICE inline RmspropConsts<C> rmsprop_consts(double lr, double alpha, double eps, double weight_decay,
                                                      double momentum, bool centered) {
  return {C(-lr),   C(alpha),      C(1.0 - alpha), C(eps), C(weight_decay), C(momentum), weight_decay != 0.0,
          centered, momentum > 0.0};
}

// torch.optim.RMSprop: the new parameter; sq (square_avg), ga (grad_avg, centered only) and buf
// (momentum_buffer, momentum > 0 only), the stored values on entry, become the new ones. The
// buffers a setting does not use are neither read nor written.
template <class D, class C>
MT_HOST_DEVICE inline C rmsprop(C p, C g, C& sq, C& ga, C& buf, const RmspropConsts<C>& k) {
  C d = g;
  if (k.decay) d = d + k.wd * p;
  sq = k.alpha * sq + k.w * (d * d);
  C avg;
  if (k.centered) {
    ga = lerp(ga, d, k.w);
    avg = D::sqrt(sq - ga * ga);
  } else {
    avg = D::sqrt(sq);
  }
  avg = avg + k.eps;
  if (k.use_mom) {
    buf = k.mom * buf + d / avg;
    return p + k.neg_lr * buf;
  }
  return p + k.neg_lr * (d / avg);
}

template <class C>
struct AdagradConsts {
  C neg_clr, wd, eps;  // -lr / (1 + (step - 1) lr_decay)
  bool decay;
};

template <class C>
MT_HOST_DEVICE inline AdagradConsts<C> adagrad_consts(double lr, double lr_decay, double eps, double weight_decay,
                                                      int64_t step) {
  const double clr = lr / (1.0 + double(step - 1) * lr_decay);
  return {C(-clr), C(weight_decay), C(eps), weight_decay != 0.0};
}

// torch.optim.Adagrad: the new parameter; sum (the stored accumulator on entry) becomes the new one.
template <class D, class C>
MT_HOST_DEVICE inline C adagrad(C p, C g, C& sum, const AdagradConsts<C>& k) {
  C d = g;
  if (k.decay) d = d + k.wd * p;
  sum = sum + d * d;
  const C denom = D::sqrt(sum) + k.eps;
  return p + k.neg_clr * (d / denom);
}

// ---- loss scaling and clipping: the decisions of a scaled step ----------------------------------
//
// The loss scaler's rule and the clip factor, written once: optim/loss_scaler.cpp and
// optim/clip.cpp call them on the host, and the device-side step (Note [Scaled step] in
// optim/scaled_step.cpp) calls them in its decision kernel (cuda/optim.cu).

// The rules that run on both devices: none (scale 1, every step applied), fixed (a constant
// scale, skip on inf/NaN), backoff (PyTorch GradScaler's rule with OpenSeq2Seq's clamps; see
// BackoffLossScaler in optim/loss_scaler.h). Scales and factors are powers of two (Note [Loss
// scales are powers of two]); max_scale may be +infinity.
struct LossScaleRule {
  enum class Kind : uint8_t { none, fixed, backoff };
  Kind kind = Kind::none;
  float growth_factor = 2.0f, backoff_factor = 0.5f, min_scale = 1.0f, max_scale = 16777216.0f;
  int64_t growth_interval = 2000;
};

// s clamped to [lo, hi] (std::clamp's comparisons), rounded to float: exact for powers of two.
MT_HOST_DEVICE inline float clamp_scale(double s, float lo, float hi) {
  return float(s < double(lo) ? double(lo) : (double(hi) < s ? double(hi) : s));
}

// One step of the rule: `found_inf` says whether the gradients taken at `scale` hold an inf or
// NaN; scale and tracker (clean steps since the last change) move to their next values. Returns
// whether the step is applied. Growth that would leave the float range is skipped.
MT_HOST_DEVICE inline bool loss_scale_update(const LossScaleRule& r, bool found_inf, float& scale, int64_t& tracker) {
  switch (r.kind) {
    case LossScaleRule::Kind::none: return true;
    case LossScaleRule::Kind::fixed: return !found_inf;
    case LossScaleRule::Kind::backoff: break;
  }
  if (found_inf) {
    scale = clamp_scale(double(scale) * r.backoff_factor, r.min_scale, r.max_scale);
    tracker = 0;
    return false;
  }
  if (++tracker == r.growth_interval) {
    const double grown = double(scale) * r.growth_factor;
    // 2^127: the largest float power of two
    if (grown <= 0x1p127) scale = clamp_scale(grown, r.min_scale, r.max_scale);
    tracker = 0;
  }
  return true;
}

// torch.nn.utils.clip_grad_norm_'s factor for gradients of global L2 norm `norm`: max_norm /
// (norm + 1e-6) when that is below 1, else 1 (no clipping; also for an inf or NaN norm).
MT_HOST_DEVICE inline double clip_coefficient(double norm, double max_norm) {
  if (!(norm - norm == 0.0)) return 1.0;  // inf or NaN: nothing is scaled
  const double coef = max_norm / (norm + 1e-6);
  return coef >= 1.0 ? 1.0 : coef;
}

// The device-side step's state (Note [Scaled step]): the loss scaler's values, in an f32 and an
// i64 readout tensor (Note [Readout block] in cuda/runtime.h), and what the last step decided.
enum StepF : int {
  kScale,      // the scale for the next backward pass
  kScaleUsed,  // the scale the last step's gradients carried
  kApplied,    // 1: the last step was applied, 0: skipped
  kFoundInf,   // 1: its gradients held an inf or NaN
  kMaxAbs,     // max |unscaled gradient| over the finite elements
  kGradNorm,   // global L2 norm of the unscaled gradients before clipping (0 when skipped)
  kClip,       // the clip factor the update multiplies the gradients by (1: none)
  kStepF
};
enum StepI : int {
  kTracker,  // backoff: clean steps since the scale last changed
  kSteps,    // scaler updates so far
  kSkipped,  // of which skipped
  kStepI
};

// ---- 16-bit update rules (Zamirai et al., Algorithms 2-5) ----------------------------------------

enum class WeightRule : uint8_t { nearest, stochastic, kahan };

inline WeightRule weight_rule(Rounding rounding, bool has_kahan_buffer) {
  if (has_kahan_buffer) return WeightRule::kahan;
  return rounding == Rounding::stochastic ? WeightRule::stochastic : WeightRule::nearest;
}

// The random word of stochastic rounding for the element of row-major index i, under the
// constants k of a 16-bit update: rounding_word(seed, offset + i), as every stochastic rounding
// (Note [Rounding words] in rng.h; 0, and never read, under the other rules). The GPU draws it
// element by element; the CPU draws the same words for a block of elements at once
// (rounding_words_n in tensor/cpu/convert.h).
template <class K>
MT_HOST_DEVICE inline uint32_t weight_word(const K& k, uint64_t i) {
  return k.rule == WeightRule::stochastic ? rounding_word(k.seed, k.offset + i) : 0u;
}

// Writes the new weight w + u (w: the stored weight in fp32, u: the fp32 update) into *p under
// the rule. c: the element's Kahan compensation (read and written for kahan only); r: the
// element's random word (weight_word; read for stochastic only).
template <class D, class P>
MT_HOST_DEVICE inline void write_weight(P* p, float w, float u, WeightRule rule, P* c, uint32_t r) {
  switch (rule) {
    case WeightRule::nearest: *p = D::nearest(w + u); return;
    case WeightRule::stochastic: *p = D::stochastic(w + u, r); return;
    case WeightRule::kahan: {
      // Algorithm 3 lines 7-10 (Algorithm 5 lines 13-16).
      const float y = u - D::load(*c);
      const P s = D::nearest(w + y);
      *c = D::nearest((D::load(s) - w) - y);
      *p = s;
      return;
    }
  }
}

struct Sgd16Consts {
  float neg_lr, wd, mom;
  bool use_mom;
  WeightRule rule;
  uint64_t seed, offset;  // element i draws counter offset + i (weight_word)
};

inline Sgd16Consts sgd16_consts(double lr, double momentum, double weight_decay, WeightRule rule, uint64_t seed,
                                uint64_t offset) {
  return {float(-lr), float(weight_decay), float(momentum), momentum != 0.0, rule, seed, offset};
}

// Algorithm 2 (SGD with momentum, 16-bit state) and its Kahan variant, Algorithm 3, for one
// element: p the weight, g its fp32 gradient, m the momentum (unused without momentum), c the
// Kahan compensation (unused unless the rule is kahan), r the element's random word (weight_word).
template <class D, class P>
MT_HOST_DEVICE inline void sgd16(P* p, float g, P* m, P* c, uint32_t r, const Sgd16Consts& k) {
  const float w = D::load(*p);
  float d = g + k.wd * w;  // Algorithm 2 line 3
  if (k.use_mom) {         // line 4, m read back as stored
    const P mv = D::nearest(k.mom * D::load(*m) + d);
    *m = mv;
    d = D::load(mv);
  }
  write_weight<D>(p, w, k.neg_lr * d, k.rule, c, r);
}

struct AdamW16Consts {
  float bias1, bias2, b1, w1, b2, w2, lr, eps, lr_wd;
  WeightRule rule;
  uint64_t seed, offset;
  bool amsgrad;
};

// c_{1,t} = beta1^t and c_{2,t} = beta2^t (Algorithm 4 lines 7-8) in double.
inline AdamW16Consts adamw16_consts(double lr, double beta1, double beta2, double eps, double weight_decay,
                                    int64_t step, WeightRule rule, uint64_t seed, uint64_t offset,
                                    bool amsgrad = false) {
  return {float(1.0 - std::pow(beta1, double(step))),
          float(1.0 - std::pow(beta2, double(step))),
          float(beta1),
          float(1.0 - beta1),
          float(beta2),
          float(1.0 - beta2),
          float(lr),
          float(eps),
          float(lr * weight_decay),
          rule,
          seed,
          offset,
          amsgrad};
}

// Algorithm 4 (AdamW, 16-bit state) and its Kahan variant, Algorithm 5, for one element; m, v
// the moments, c and r as in sgd16. With amsgrad, vmax (unused otherwise) keeps
// the running maximum of the stored v, and line 10 reads it instead of v: the maximum of two
// stored 16-bit values is one of them, so it is stored without a rounding.
template <class D, class P>
MT_HOST_DEVICE inline void adamw16(P* p, float g, P* m, P* v, P* vmax, P* c, uint32_t r, const AdamW16Consts& k) {
  const float w = D::load(*p);
  const P mv = D::nearest(k.b1 * D::load(*m) + k.w1 * g);        // line 5
  const P vv = D::nearest(k.b2 * D::load(*v) + k.w2 * (g * g));  // line 6
  *m = mv;
  *v = vv;
  P vd = vv;  // the second moment of the denominator
  if (k.amsgrad) {
    const P old = *vmax;
    const float a = D::load(old), b = D::load(vv);
    vd = (a > b || a != a) ? old : vv;  // maximum (NaN wins, as torch.maximum)
    *vmax = vd;
  }
  const float m_hat = D::load(mv) / k.bias1;                        // line 9
  const float v_hat = D::sqrt(D::load(vd) / k.bias2);               // line 10
  const float u = -(k.lr * m_hat / (v_hat + k.eps) + k.lr_wd * w);  // line 11
  write_weight<D>(p, w, u, k.rule, c, r);
}

// RMSprop with 16-bit state, in the manner of Algorithms 2-5: torch.optim.RMSprop's formula in
// fp32 between the stored values; square_avg (sq), grad_avg (ga, centered) and the momentum
// buffer (buf, momentum > 0) are rounded to nearest when stored and read back as stored, and the
// weight is written under the rule. Centered: sq - ga^2 is clamped at 0, because the two rounded
// values can cross where the variance is small, which in fp32 they practically never do.
struct Rmsprop16Consts {
  float neg_lr, alpha, w, eps, wd, mom;  // w = 1 - alpha
  bool centered, use_mom;
  WeightRule rule;
  uint64_t seed, offset;
};

inline Rmsprop16Consts rmsprop16_consts(double lr, double alpha, double eps, double weight_decay, double momentum,
                                        bool centered, WeightRule rule, uint64_t seed, uint64_t offset) {
  return {float(-lr),      float(alpha), float(1.0 - alpha), float(eps), float(weight_decay),
          float(momentum), centered,     momentum > 0.0,     rule,       seed,
          offset};
}

template <class D, class P>
MT_HOST_DEVICE inline void rmsprop16(P* p, float g, P* sq, P* ga, P* buf, P* c, uint32_t r, const Rmsprop16Consts& k) {
  const float w = D::load(*p);
  const float d = g + k.wd * w;
  const P sv = D::nearest(k.alpha * D::load(*sq) + k.w * (d * d));
  *sq = sv;
  float avg;
  if (k.centered) {
    const P gv = D::nearest(lerp(D::load(*ga), d, k.w));
    *ga = gv;
    const float gm = D::load(gv);
    const float var = D::load(sv) - gm * gm;
    avg = D::sqrt(var > 0.0f ? var : 0.0f);
  } else {
    avg = D::sqrt(D::load(sv));
  }
  avg = avg + k.eps;
  float step = d / avg;
  if (k.use_mom) {
    const P bv = D::nearest(k.mom * D::load(*buf) + step);
    *buf = bv;
    step = D::load(bv);
  }
  write_weight<D>(p, w, k.neg_lr * step, k.rule, c, r);
}

// Adagrad with a 16-bit accumulator: sum = round(sum + d^2), read back as stored; the weight is
// written under the rule. The accumulator only grows, so once d^2 falls below half an ulp of it
// (2^-9 of sum in bf16) it stops growing, and the step size stops shrinking with it.
struct Adagrad16Consts {
  float neg_clr, wd, eps;
  WeightRule rule;
  uint64_t seed, offset;
};

inline Adagrad16Consts adagrad16_consts(double lr, double lr_decay, double eps, double weight_decay, int64_t step,
                                        WeightRule rule, uint64_t seed, uint64_t offset) {
  const double clr = lr / (1.0 + double(step - 1) * lr_decay);
  return {float(-clr), float(weight_decay), float(eps), rule, seed, offset};
}

template <class D, class P>
MT_HOST_DEVICE inline void adagrad16(P* p, float g, P* sum, P* c, uint32_t r, const Adagrad16Consts& k) {
  const float w = D::load(*p);
  const float d = g + k.wd * w;
  const P sv = D::nearest(D::load(*sum) + d * d);
  *sum = sv;
  const float u = k.neg_clr * (d / (D::sqrt(D::load(sv)) + k.eps));
  write_weight<D>(p, w, u, k.rule, c, r);
}

}  // namespace mixtape::formulas
