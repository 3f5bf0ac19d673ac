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

// torch.optim.Adam / AdamW: the new parameter; m and v (the stored moments on entry) become the
// new moments.
template <class D, class C>
MT_HOST_DEVICE inline C adam(C p, C g, C& m, C& v, const AdamConsts<C>& k) {
  C d = g;
  if (k.l2) d = d + k.wd * p;
  if (k.shrink_w) p = p * k.shrink;
  m = lerp(m, d, k.w1);
  v = k.b2 * v + k.w2 * (d * d);
  const C denom = D::sqrt(v) / k.bias2_sqrt + k.eps;
  return p + k.neg_step_size * (m / denom);
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

// Writes the new weight w + u (w: the stored weight in fp32, u: the fp32 update) into *p under
// the rule. c: the element's Kahan compensation (read and written for kahan only); the random
// word of stochastic rounding is philox_words(seed, counter)[0], as every random draw.
template <class D, class P>
MT_HOST_DEVICE inline void write_weight(P* p, float w, float u, WeightRule rule, P* c, uint64_t seed,
                                        uint64_t counter) {
  switch (rule) {
    case WeightRule::nearest: *p = D::nearest(w + u); return;
    case WeightRule::stochastic: *p = D::stochastic(w + u, philox_words(seed, counter)[0]); return;
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
  uint64_t seed, offset;  // element i draws counter offset + i
};

inline Sgd16Consts sgd16_consts(double lr, double momentum, double weight_decay, WeightRule rule, uint64_t seed,
                                uint64_t offset) {
  return {float(-lr), float(weight_decay), float(momentum), momentum != 0.0, rule, seed, offset};
}

// Algorithm 2 (SGD with momentum, 16-bit state) and its Kahan variant, Algorithm 3, for the
// element of row-major index i: p the weight, g its fp32 gradient, m the momentum (unused without
// momentum), c the Kahan compensation (unused unless the rule is kahan).
template <class D, class P>
MT_HOST_DEVICE inline void sgd16(P* p, float g, P* m, P* c, uint64_t i, const Sgd16Consts& k) {
  const float w = D::load(*p);
  float d = g + k.wd * w;  // Algorithm 2 line 3
  if (k.use_mom) {         // line 4, m read back as stored
    const P mv = D::nearest(k.mom * D::load(*m) + d);
    *m = mv;
    d = D::load(mv);
  }
  write_weight<D>(p, w, k.neg_lr * d, k.rule, c, k.seed, k.offset + i);
}

struct AdamW16Consts {
  float bias1, bias2, b1, w1, b2, w2, lr, eps, lr_wd;
  WeightRule rule;
  uint64_t seed, offset;
};

// c_{1,t} = beta1^t and c_{2,t} = beta2^t (Algorithm 4 lines 7-8) in double.
inline AdamW16Consts adamw16_consts(double lr, double beta1, double beta2, double eps, double weight_decay,
                                    int64_t step, WeightRule rule, uint64_t seed, uint64_t offset) {
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
          offset};
}

// Algorithm 4 (AdamW, 16-bit state) and its Kahan variant, Algorithm 5, for the element of
// row-major index i; m, v the moments, c as in sgd16.
template <class D, class P>
MT_HOST_DEVICE inline void adamw16(P* p, float g, P* m, P* v, P* c, uint64_t i, const AdamW16Consts& k) {
  const float w = D::load(*p);
  const P mv = D::nearest(k.b1 * D::load(*m) + k.w1 * g);        // line 5
  const P vv = D::nearest(k.b2 * D::load(*v) + k.w2 * (g * g));  // line 6
  *m = mv;
  *v = vv;
  const float m_hat = D::load(mv) / k.bias1;                        // line 9
  const float v_hat = D::sqrt(D::load(vv) / k.bias2);               // line 10
  const float u = -(k.lr * m_hat / (v_hat + k.eps) + k.lr_wd * w);  // line 11
  write_weight<D>(p, w, u, k.rule, c, k.seed, k.offset + i);
}

}  // namespace mixtape::formulas
