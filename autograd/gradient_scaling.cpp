#include "autograd/gradient_scaling.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "tensor/core/half.h"
#include "tensor/ops/stats.h"
#include "tensor/state_io.h"

namespace mixtape {

// Note [Gradient scaling as implemented]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The paper's Algorithm 1 and section 4, with these readings:
//
// 1. sigma is measured as the root mean square of the actual tensors, zeros included. The paper
//    ignores the mean terms (its footnote 2): with zero-mean products p = dy w the variance of a
//    sum of N products is N E[dy^2] E[w^2], and E[x^2] is the squared RMS. The RMS equals the
//    standard deviation for zero-mean data, stays right for weights with an offset (constant
//    weights have std 0 but give nonzero dX), and reproduces footnote 3 by itself: a dY that a
//    ReLU zeroed half of has half the mean square, hence sigma = sqrt(N/2) sigma_dy sigma_w.
// 2. Scales are powers of two (section 4.2). The underflow bound is rounded up (the smallest
//    power of two whose predicted rate is <= gamma'), the overflow cap down. Algorithm 1 line 14
//    writes e^floor(...) for the cast; that is neither a power of two nor within gamma', so the
//    cast bound is rounded like the GEMM one.
// 3. beta >= 1 unless the cap is below 1. Section 4.2: a scale above what gamma' needs only
//    enlarges the gradient's variance, and "alpha can be smaller than 1 if the type cast will
//    cause overflow for any alpha >= 1". So a gradient whose predicted rate is already <= gamma'
//    at beta = 1 passes through unchanged (it is not scaled down towards the bound), and beta
//    drops below 1 only when no beta >= 1 is overflow-free.
// 4. The GEMM cap also includes lambda_max / max|dY|: the node stores beta dY in dY's 16-bit
//    dtype before the GEMM (linalg.cpp activation_grad), and that must not overflow either. It
//    binds only when N max|W| < 1.
// 5. The format: a GEMM's dX has dY's dtype; a cast's result has the query's `to` dtype (its dY
//    is the wide gradient). f32 / f64 results need no scaling: beta = 1.
// 6. Theorem 2 models a positive softmax gradient; the rule fits mu and sigma to ln|dY| over the
//    finite nonzero entries (a cross-entropy gradient has one negative entry per row; exact
//    zeros cannot underflow).
// 7. An inf or NaN in dY (an overflow upstream) gives beta = 1 and is not cached: the optimizer
//    layer sees the non-finite weight gradients and skips the step.
// 8. alpha * beta stays within float's normal powers of two, [2^-126, 2^127].
// 9. update_period K > 1 caches each node's beta by (tape position, query index), checked
//    against the op; this assumes each step records the same graph, as a training loop does.
//    Queries asked outside a backward pass have no tape position and are never cached.
//    Reused betas are not re-checked against overflow (that needs the very max|dY| pass the
//    cache saves); as in the paper, an overflow shows up as inf/NaN and the step is skipped.
// 10. The underflow event is P(beta |dx| <= lambda_min) as in Eqs. 1, 3 and 4, although
//    round-to-nearest flushes only |x| <= lambda_min / 2 to zero: the prediction is cautious.
// 11. Algorithm 1 line 8 applies the weight gradient f_G(X, dZ) / alpha at once and gives it no
//    overflow bound; here every output of a node is a tuple of its own, and the weight and bias
//    gradients get their own beta (Note [Parameter gradient scale] below), so a weight gradient
//    can be scaled down without touching the activation gradient, or up when it would underflow.
// 12. Branch sums are taken in fp32 and their common scale is chosen from the exact sum (Note
//    [Overflow-free branch sum] in scaling.cpp): M gradients that each fit can overflow together.
// 13. Ops that pass the scale through are guarded by the tape (Note [Overflow guard] in
//    tape.cpp), which also reports where any remaining overflow started.

namespace {

constexpr int kMinExp = -126;  // alpha * beta stays a normal float power of two
constexpr int kMaxExp = 127;
constexpr double kInf = std::numeric_limits<double>::infinity();

// ceil(log2 x) and floor(log2 x) for finite x > 0, exact at powers of two.
int ceil_log2(double x) {
  int e = 0;
  const double m = std::frexp(x, &e);  // x = m 2^e, m in [0.5, 1)
  return m == 0.5 ? e - 1 : e;
}
int floor_log2(double x) {
  int e = 0;
  std::frexp(x, &e);
  return e - 1;
}

// The exponents of Note [Gradient scaling as implemented] points 2 and 3: the bound rounded up
// and at least 1 (2^0), the cap rounded down (kNoCap when there is none).
constexpr int kNoCap = 1 << 20;
int bound_exponent(double bound) {
  if (bound > 1.0) return std::isfinite(bound) ? ceil_log2(bound) : kMaxExp;
  return 0;
}
int cap_exponent(double cap) {
  if (cap < kInf) return cap > 0.0 ? floor_log2(cap) : kMinExp;
  return kNoCap;
}
// min(2^k_bound, 2^k_cap), within float's normal powers of two.
void choose_between(BetaChoice& c, int k_bound, int k_cap) {
  int k = k_bound;
  c.capped = false;
  if (k_cap < k) {
    k = k_cap;
    c.capped = true;
  }
  c.beta = std::ldexp(1.0f, std::clamp(k, kMinExp, kMaxExp));
}

// Note [Gradient scaling as implemented] points 2 and 3: min(bound rounded up and at least 1, cap
// rounded down).
BetaChoice power_of_two_between(double bound, double cap) {
  BetaChoice c;
  c.underflow_bound = bound;
  c.cap = cap;
  choose_between(c, bound_exponent(bound), cap_exponent(cap));
  return c;
}

void check_gamma(double gamma, const char* where) {
  MT_CHECK(gamma > 0.0 && gamma < 1.0, where, ": the underflow threshold gamma' must lie in (0, 1), got ", gamma);
}

void check_statistic(double v, const char* what, const char* where) {
  MT_CHECK(std::isfinite(v) && v >= 0.0, where, ": ", what, " must be finite and >= 0, got ", v);
}

void check_range(const FormatRange& f, const char* where) {
  MT_CHECK(f.lambda_min > 0.0 && f.lambda_max > f.lambda_min && std::isfinite(f.lambda_max), where,
           ": bad format range [", f.lambda_min, ", ", f.lambda_max, "]");
}

// Records a choice in r.
void take(ScaleRecord& r, const BetaChoice& c) {
  r.beta = c.beta;
  r.underflow_bound = c.underflow_bound;
  r.cap = c.cap;
  r.capped = c.capped;
}

// Keeps alpha * beta a normal float power of two (Note point 8).
float clamp_total(float beta, float alpha) {
  int ea = 0, eb = 0;
  std::frexp(alpha, &ea);
  std::frexp(beta, &eb);
  const int a = ea - 1, b = eb - 1;  // alpha = 2^a, beta = 2^b
  const int lo = std::max(kMinExp, kMinExp - a), hi = std::min(kMaxExp, kMaxExp - a);
  return lo <= hi ? std::ldexp(1.0f, std::clamp(b, lo, hi)) : 1.0f;
}

}  // namespace

std::optional<FormatRange> format_range(DType t) {
  switch (t) {
    case DType::f16: return FormatRange{kHalfLimits.min_subnormal, kHalfLimits.max_finite};
    case DType::bf16: return FormatRange{kBf16Limits.min_subnormal, kBf16Limits.max_finite};
    default: break;
  }
  // The 8-bit formats of GEMM operands (Note [Gradient scaling in 8 bits] in autograd/fp8.cpp).
  if (is_8bit(t)) return FormatRange{bits8::min_subnormal(format_of(t)), bits8::max_finite(format_of(t))};
  return std::nullopt;
}

double erfinv(double y) {
  if (std::isnan(y) || y < -1.0 || y > 1.0) return std::numeric_limits<double>::quiet_NaN();
  if (y == 0.0) return 0.0;
  if (y == 1.0 || y == -1.0) return y * kInf;
  const double a = std::abs(y);
  // Starting point: Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011),
  // single-precision branch, ~1e-7 relative.
  double w = -std::log((1.0 - a) * (1.0 + a));
  double p;
  if (w < 5.0) {
    w -= 2.5;
    p = 2.81022636e-08;
    p = 3.43273939e-07 + p * w;
    p = -3.5233877e-06 + p * w;
    p = -4.39150654e-06 + p * w;
    p = 0.00021858087 + p * w;
    p = -0.00125372503 + p * w;
    p = -0.00417768164 + p * w;
    p = 0.246640727 + p * w;
    p = 1.50140941 + p * w;
  } else {
    w = std::sqrt(w) - 3.0;
    p = -0.000200214257;
    p = 0.000100950558 + p * w;
    p = 0.00134934322 + p * w;
    p = -0.00367342844 + p * w;
    p = 0.00573950773 + p * w;
    p = -0.0076224613 + p * w;
    p = 0.00943887047 + p * w;
    p = 1.00167406 + p * w;
    p = 2.83297682 + p * w;
  }
  double x = p * a;
  // Newton steps to double precision; near 1 on erfc(x) = 1 - a, which is exact there.
  const double slope = 2.0 * std::numbers::inv_sqrtpi;
  for (int i = 0; i < 3; ++i) {
    const double d = slope * std::exp(-x * x);
    if (!(d > 0.0)) break;
    x += a > 0.5 ? (std::erfc(x) - (1.0 - a)) / d : (a - std::erf(x)) / d;
  }
  return y < 0.0 ? -x : x;
}

double gemm_sigma(int64_t n, double sigma_dy, double sigma_w) {
  return std::sqrt(double(std::max<int64_t>(n, 0))) * sigma_dy * sigma_w;
}

double gemm_underflow_rate(double beta, double sigma, double lambda_min) {
  if (!(sigma > 0.0)) return 1.0;
  return std::erf(lambda_min / (beta * std::numbers::sqrt2 * sigma));
}

double cast_underflow_rate(double beta, double mu, double sigma, double lambda_min) {
  const double z = std::log(lambda_min) - mu - std::log(beta);
  if (!(sigma > 0.0)) return z >= 0.0 ? 1.0 : 0.0;
  return 0.5 + 0.5 * std::erf(z / (std::numbers::sqrt2 * sigma));
}

BetaChoice choose_gemm_beta(double sigma, int64_t n, double max_dy, double max_w, double gamma, const FormatRange& f) {
  const char* where = "choose_gemm_beta";
  check_gamma(gamma, where);
  check_range(f, where);
  check_statistic(sigma, "sigma", where);
  check_statistic(max_dy, "max|dY|", where);
  check_statistic(max_w, "max|W|", where);
  MT_CHECK(n >= 0, where, ": the reduction length must be >= 0, got ", n);
  // Eq. 3 solved for beta: erf(lambda_min / (beta sqrt(2) sigma)) <= gamma'.
  const double bound = sigma > 0.0 ? f.lambda_min / (std::numbers::sqrt2 * sigma * erfinv(gamma)) : 0.0;
  // |dX| <= N max|dY| max|W|; and beta dY itself is stored in the 16-bit dtype (Note point 4).
  double cap = kInf;
  const double worst = double(n) * max_dy * max_w;
  if (worst > 0.0) cap = f.lambda_max / worst;
  if (max_dy > 0.0) cap = std::min(cap, f.lambda_max / max_dy);
  return power_of_two_between(bound, cap);
}

// Note [Parameter gradient scale]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A GEMM-like node's weight gradient dW = X^T dY (and its bias gradient, a sum of dY) inherits
// dY's scale alpha, which the nodes above chose for the activation gradients. Its own size is
// another matter: each element sums N = batch x positions products, and a-priori
//   |dW_ij| <= N max|X| max|dY|,
// the bound Algorithm 1 line 7 uses for dX. For the cnn's first conv N = 64 x 28 x 28 = 50176,
// about 2^15.6, so that bound would scale the gradient down by ~2^16 more than its largest
// element needs, pushing small elements into underflow. The products of the node are summed in
// fp32 anyway, so the exact alternative costs one pass over a weight-sized tensor: accumulate
// dW in fp32 (from operands widened to fp32: 16-bit products are exact in fp32, so these are the
// fp32 sums a 16-bit GEMM forms before it rounds), then choose
//   beta = min(2^ceil(log2(lambda_min / (sqrt(2) sigma erfinv(gamma'))))  and at least 1,
//              2^floor(log2(lambda_max / max|dW|))),
// sigma the RMS of the fp32 dW (Theorem 1 with sigma measured, not predicted), and round beta dW
// to 16 bits once. beta max|dW| <= lambda_max, so the stored gradient cannot overflow; the result
// carries alpha beta and the optimizer unscales it like any other. Without a rule nothing of this
// runs: the gradient keeps alpha, computed in 16 bits as before.
BetaChoice choose_param_beta(double sigma, double max_g, double gamma, const FormatRange& f) {
  const char* where = "choose_param_beta";
  check_gamma(gamma, where);
  check_range(f, where);
  check_statistic(sigma, "sigma", where);
  check_statistic(max_g, "max|g|", where);
  const double bound = sigma > 0.0 ? f.lambda_min / (std::numbers::sqrt2 * sigma * erfinv(gamma)) : 0.0;
  const double cap = max_g > 0.0 ? f.lambda_max / max_g : kInf;
  return power_of_two_between(bound, cap);
}

BetaChoice choose_cast_beta(double mu, double sigma, double max_dy, double gamma, const FormatRange& f) {
  const char* where = "choose_cast_beta";
  check_gamma(gamma, where);
  check_range(f, where);
  MT_CHECK(std::isfinite(mu), where, ": mu must be finite, got ", mu);
  check_statistic(sigma, "sigma", where);
  check_statistic(max_dy, "max|dY|", where);
  // Eq. 4 solved for beta: ln beta >= ln lambda_min - mu - sqrt(2) sigma erfinv(2 gamma' - 1).
  const double ln_bound = std::log(f.lambda_min) - mu - std::numbers::sqrt2 * sigma * erfinv(2.0 * gamma - 1.0);
  const double cap = max_dy > 0.0 ? f.lambda_max / max_dy : kInf;
  return power_of_two_between(std::exp(ln_bound), cap);
}

// ---- GradientScalingRule ----------------------------------------------------------------------

GradientScalingRule::GradientScalingRule(GradientScalingOptions options) : options_(options) {
  check_gamma(options_.underflow_threshold, "GradientScalingRule");
  MT_CHECK(options_.update_period >= 1, "GradientScalingRule: update_period must be >= 1, got ",
           options_.update_period);
}

void GradientScalingRule::begin_query(const GradSite& site) {
  if (site.pass != pass_) {  // a new backward pass: the records describe the last one only
    records_.clear();
    pass_ = site.pass;
  }
}

const ScaleRecord* GradientScalingRule::cached(const GradSite& site, ScaleRecord::Kind kind, OpId op) const {
  if (options_.update_period <= 1 || site.node < 0) return nullptr;
  const auto it = cache_.find({site.node, site.query});
  if (it == cache_.end()) return nullptr;
  const Cached& c = it->second;
  if (c.record.kind != kind || c.record.op != op || step_ - c.step >= options_.update_period) return nullptr;
  return &c.record;
}

float GradientScalingRule::finish(const GradSite& site, ScaleRecord r, bool cacheable) {
  if (cacheable && options_.update_period > 1 && site.node >= 0) cache_[{site.node, site.query}] = Cached{r, step_};
  r.beta = clamp_total(r.beta, r.alpha);
  if (const std::optional<FormatRange> f = format_range(r.format)) {
    r.underflow_rate = r.kind == ScaleRecord::Kind::gemm ? gemm_underflow_rate(r.beta, r.sigma, f->lambda_min)
                                                         : cast_underflow_rate(r.beta, r.mu, r.sigma, f->lambda_min);
  }
  records_.push_back(r);
  step_records_.push_back(r);
  return r.beta;
}

ScaleRecord GradientScalingRule::begin_record(const GradSite& site, ScaleRecord::Kind kind, OpId op, DType format,
                                              float alpha) {
  begin_query(site);
  ScaleRecord r;
  r.kind = kind;
  r.op = op;
  r.node = site.node;
  r.query = site.query;
  r.format = format;
  r.alpha = alpha;
  return r;
}

// Note [Scales agreed across processes]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// In data-parallel training (docs/data-parallel.md) every process runs the same graph on its own
// shard of the batch, so each query of a backward pass is asked on every process, in the same
// order, with different statistics. The processes must take the same beta: their parameter
// gradients are summed in 16 bits at a common scale, and a cached beta (update_period > 1) must be
// cached everywhere or nowhere. What to agree on follows from the two halves of the choice:
//   underflow  beta >= bound_r keeps process r's predicted underflow rate <= gamma'; all of them
//              hold for beta >= max_r bound_r: the largest of the bounds' exponents;
//   overflow   beta <= cap_r keeps process r's gradient finite; all of them hold for
//              beta <= min_r cap_r: the smallest of the caps' exponents;
// and beta = min(2^max k_bound, 2^min k_cap), as for one process. Agreeing on the exponents, not
// on pooled statistics, keeps the overflow guarantee exact on every process (a pooled max|dY|
// would be the same number; a pooled sigma would predict the underflow of the global batch, not
// of each process's own gradient). Both extremes travel in one element-wise maximum over the
// processes (the cap exponent negated), with two flags: some process saw an inf or NaN (then
// every process takes beta = 1 and caches nothing, as one process does: the step is skipped
// anyway), and some process cannot cache. The tape's overflow guard asks any_process() before it
// recomputes a node (Note [Overflow guard] in tape.cpp), so every process recomputes the same
// nodes with the same shift. Without an agreement nothing of this runs.
bool GradientScalingRule::agree(BetaChoice& c, bool finite, bool& cacheable) {
  if (!agreement_) return finite;
  constexpr double kNone = -double(kNoCap);
  double votes[4] = {finite ? double(bound_exponent(c.underflow_bound)) : kNone,
                     finite ? -double(cap_exponent(c.cap)) : kNone, finite ? 0.0 : 1.0, cacheable ? 0.0 : 1.0};
  agreement_->max_over_processes(votes);
  if (votes[2] > 0.0) {
    cacheable = false;
    return false;
  }
  choose_between(c, int(votes[0]), int(-votes[1]));
  cacheable = votes[3] == 0.0;
  return true;
}

bool GradientScalingRule::any_process(bool local) {
  if (!agreement_) return local;
  double vote[1] = {local ? 1.0 : 0.0};
  agreement_->max_over_processes(vote);
  return vote[0] > 0.0;
}

float GradientScalingRule::gemm_beta(const GemmGradQuery& q) {
  MT_ASSERT(q.dy && q.dy->defined());
  ScaleRecord r = begin_record(q.site, ScaleRecord::Kind::gemm, q.op, q.dy->g.dtype(), q.dy->scale);
  const std::optional<FormatRange> f = format_range(r.format);
  if (!f || !q.w || !q.w->defined()) return finish(q.site, r, false);
  if (const ScaleRecord* hit = cached(q.site, r.kind, r.op)) {
    ScaleRecord again = *hit;
    again.alpha = r.alpha;
    again.reused = true;
    return finish(q.site, again, false);
  }
  const TensorMoments dy = tensor_moments(q.dy->g);
  const TensorMoments w = tensor_moments(*q.w);
  const bool finite = dy.nonfinite == 0 && w.nonfinite == 0;
  BetaChoice c;
  if (finite) {
    r.sigma = gemm_sigma(q.reduction, dy.rms, w.rms);
    c = choose_gemm_beta(r.sigma, q.reduction, dy.max_abs, w.max_abs, options_.underflow_threshold, *f);
  }
  bool cacheable = finite && r.sigma > 0.0;  // an all-zero dY says nothing about later steps
  if (!agree(c, finite, cacheable)) return finish(q.site, r, false);
  take(r, c);
  return finish(q.site, r, cacheable);
}

float GradientScalingRule::param_beta(const ParamGradQuery& q) {
  MT_ASSERT(q.g && q.g->defined());
  ScaleRecord r = begin_record(q.site, ScaleRecord::Kind::param, q.op, q.to, q.alpha);
  r.input = q.input;
  const std::optional<FormatRange> f = format_range(r.format);
  if (!f) return finish(q.site, r, false);
  // Never cached: the exact maximum is at hand every step, and only it makes the cap exact.
  const TensorMoments m = tensor_moments(*q.g);
  const bool finite = m.nonfinite == 0;
  BetaChoice c;
  if (finite) {
    r.sigma = m.rms;
    c = choose_param_beta(m.rms, m.max_abs, options_.underflow_threshold, *f);
  }
  bool cacheable = false;
  if (!agree(c, finite, cacheable)) return finish(q.site, r, false);
  take(r, c);
  return finish(q.site, r, false);
}

float GradientScalingRule::cast_beta(const CastGradQuery& q) {
  MT_ASSERT(q.dy && q.dy->defined());
  ScaleRecord r = begin_record(q.site, ScaleRecord::Kind::cast, OpId::cast, q.to, q.dy->scale);
  const std::optional<FormatRange> f = format_range(r.format);
  if (!f) return finish(q.site, r, false);
  if (const ScaleRecord* hit = cached(q.site, r.kind, r.op)) {
    ScaleRecord again = *hit;
    again.alpha = r.alpha;
    again.reused = true;
    return finish(q.site, again, false);
  }
  const LogAbsMoments m = log_abs_moments(q.dy->g);
  const bool finite = m.nonfinite == 0;
  BetaChoice c;  // all zeros (count 0): beta 1, not cached
  if (finite && m.count > 0) {
    r.mu = m.mu;
    r.sigma = m.sigma;
    c = choose_cast_beta(m.mu, m.sigma, m.max_abs, options_.underflow_threshold, *f);
  }
  bool cacheable = finite && m.count > 0;
  if (!agree(c, finite, cacheable)) return finish(q.site, r, false);
  if (m.count == 0 && !agreement_) return finish(q.site, r, false);
  take(r, c);
  return finish(q.site, r, cacheable);
}

}  // namespace mixtape

// ---- state ---------------------------------------------------------------------------------

namespace mixtape {

namespace {
constexpr int64_t kIntColumns = 8, kRealColumns = 7;
constexpr const char* kOwner = "GradientScalingRule";
}  // namespace

TensorDict GradientScalingRule::state_dict() const {
  TensorDict d;
  d.set_meta("step", state_io::format(step_));
  d.set_meta("underflow_threshold", state_io::format(options_.underflow_threshold));
  d.set_meta("update_period", state_io::format(options_.update_period));
  std::vector<int64_t> ints;
  std::vector<double> reals;
  for (const auto& [key, c] : cache_) {
    const ScaleRecord& r = c.record;
    ints.insert(ints.end(), {r.node, r.query, int64_t(r.kind), int64_t(r.op), r.input, int64_t(r.format),
                             int64_t(r.capped), c.step});
    reals.insert(reals.end(), {r.alpha, r.beta, r.sigma, r.mu, r.underflow_bound, r.cap, r.underflow_rate});
  }
  const auto n = int64_t(cache_.size());
  d.add("cache.ints", from_vector(ints, {n, kIntColumns}));
  d.add("cache.reals", from_vector(reals, {n, kRealColumns}, DType::f64));
  return d;
}

void GradientScalingRule::load_state_dict(const TensorDict& dict) {
  const int64_t step = state_io::get_int(dict, "step", kOwner);
  const double gamma = state_io::get_double(dict, "underflow_threshold", kOwner);
  const int64_t period = state_io::get_int(dict, "update_period", kOwner);
  MT_CHECK(step >= 0, kOwner, " state dict: 'step' must be >= 0, got ", step);
  MT_CHECK(gamma == options_.underflow_threshold && period == options_.update_period, kOwner,
           " state dict: saved with underflow threshold ", gamma, " and update period ", period, "; this rule has ",
           options_.underflow_threshold, " and ", options_.update_period);
  const Tensor& ints_t = dict.at("cache.ints");
  const Tensor& reals_t = dict.at("cache.reals");
  MT_CHECK(ints_t.dtype() == DType::i64 && ints_t.dim() == 2 && ints_t.size(1) == kIntColumns, kOwner,
           " state dict: 'cache.ints' must be i64 [n, ", kIntColumns, "], got ", dtype_name(ints_t.dtype()), " ",
           shape_str(ints_t.shape()));
  MT_CHECK(reals_t.dtype() == DType::f64 && reals_t.dim() == 2 && reals_t.size(1) == kRealColumns &&
               reals_t.size(0) == ints_t.size(0),
           kOwner, " state dict: 'cache.reals' must be f64 [", ints_t.size(0), ", ", kRealColumns, "], got ",
           dtype_name(reals_t.dtype()), " ", shape_str(reals_t.shape()));
  const std::vector<int64_t> ints = ints_t.values<int64_t>();
  const std::vector<double> reals = reals_t.values<double>();
  std::map<std::pair<int64_t, int32_t>, Cached> cache;
  for (int64_t i = 0; i < ints_t.size(0); ++i) {
    const int64_t* a = &ints[size_t(i * kIntColumns)];
    const double* b = &reals[size_t(i * kRealColumns)];
    MT_CHECK(a[0] >= 0 && a[1] >= 0 && a[1] <= INT32_MAX && a[2] >= 0 && a[2] <= int64_t(ScaleRecord::Kind::param) &&
                 a[3] >= 0 && a[3] < int64_t(kNumOps) && a[4] >= 0 && a[4] <= 2 && a[5] >= 0 &&
                 a[5] <= int64_t(DType::bf16) && (a[6] == 0 || a[6] == 1) && a[7] >= 0 && a[7] <= step,
             kOwner, " state dict: cache entry ", i, " is out of range");
    ScaleRecord r;
    r.node = a[0];
    r.query = int32_t(a[1]);
    r.kind = ScaleRecord::Kind(a[2]);
    r.op = OpId(a[3]);
    r.input = int32_t(a[4]);
    r.format = DType(a[5]);
    r.capped = a[6] != 0;
    r.alpha = float(b[0]);
    r.beta = float(b[1]);
    r.sigma = b[2];
    r.mu = b[3];
    r.underflow_bound = b[4];
    r.cap = b[5];
    r.underflow_rate = b[6];
    MT_CHECK(r.alpha == b[0] && r.beta == b[1] && r.beta > 0.0f && std::isfinite(r.beta), kOwner,
             " state dict: cache entry ", i, " has a scale that is not a finite positive float");
    MT_CHECK(cache.emplace(std::make_pair(r.node, r.query), Cached{r, a[7]}).second, kOwner,
             " state dict: cache entry ", i, " repeats node ", r.node, " query ", r.query);
  }
  cache_ = std::move(cache);
  step_ = step;
  records_.clear();
  step_records_.clear();
  step_overflows_.clear();
}

}  // namespace mixtape
