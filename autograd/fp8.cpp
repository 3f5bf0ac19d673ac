#include "autograd/fp8.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "autograd/scaling.h"
#include "autograd/tape.h"
#include "tensor/core/scale_formulas.h"
#include "tensor/state_io.h"

namespace mixtape {

// Note [Gradient scaling in 8 bits]
// Zhao et al. choose each node's power-of-two beta so that the gradient it emits survives the
// format it is stored in: beta above the underflow bound (at most gamma' of the values below
// lambda_min) and below the overflow cap (lambda_max over the largest magnitude). lambda_min and
// lambda_max come from the format, so the rule carries over; what changes is where the narrow
// format is. Under the fp8 policy the gradients passed between ops are bf16 (whose range is
// fp32's: nothing to protect), and the narrowing happens when a GEMM-like op casts its incoming dY
// to the 8-bit grad format as an operand of its dgrad and wgrad GEMMs. That cast is the cast of
// Theorem 2 (the rule's cast_beta): with ln|dY| modelled as normal with mean mu and deviation
// sigma, the predicted underflow rate of beta dY is Phi((ln lambda_min - ln beta - mu) / sigma),
// and beta <= lambda_max / max|dY|. The node's outputs carry beta alpha, as every output of a
// GEMM-like node does, and dY is quantized with s = 1: the beta is its scale. A beta exists that
// meets both bounds when the format's range covers the gradient's spread from max|dY| down to
// its gamma' quantile, exp(mu + Phi^-1(gamma') sigma); the formats' ranges log2(lambda_max /
// lambda_min), in binades:
//   bf16 261    fp16 40.0    E5M2 31.8 (2^-16 .. 57344)    E4M3 17.8 (2^-9 .. 448)
//   E3M2 8.8    E2M3 5.9     E2M1 3.6
// With gamma' = 10^-3 (|Phi^-1| = 3.09) a log-normal gradient of sigma = 1.5 (2.2 binades) spans
// 3.09 x 2.2 = 6.7 binades below its median plus its top tail above it: E5M2 holds it with room to
// spare, E4M3 barely, and the fp6 / fp4 formats cannot; there the cap wins (nothing overflows) and
// the scale record reports the underflow rate that remains. The weight operand is not scaled by
// the rule: it keeps its recipe's own scale, as the activations do.

namespace {

constexpr Fp8Recipe kRecipes[] = {Fp8Recipe::current, Fp8Recipe::delayed, Fp8Recipe::rowwise,
                                  Fp8Recipe::mx,      Fp8Recipe::block,   Fp8Recipe::nvfp4};

// DeepSeek-V3's tiles: 1 x 128 for activations and gradients, 128 x 128 for weights.
constexpr int64_t kTile = 128;
// The MX block: 32 elements along K share one E8M0 scale.
constexpr int64_t kMxBlock = 32;
// NVFP4's block: 16 elements along K share one E4M3 scale (16 x 16 for weights, as NVIDIA's recipe
// quantizes them, so that W and W^T share their blocks).
constexpr int64_t kNvfp4Block = 16;

}  // namespace

const char* fp8_recipe_name(Fp8Recipe r) {
  switch (r) {
    case Fp8Recipe::current: return "current";
    case Fp8Recipe::delayed: return "delayed";
    case Fp8Recipe::rowwise: return "rowwise";
    case Fp8Recipe::mx: return "mx";
    case Fp8Recipe::block: return "block";
    case Fp8Recipe::nvfp4: return "nvfp4";
  }
  return "?";
}

Fp8Recipe fp8_recipe_from_name(const std::string& name) {
  std::string choices;
  for (Fp8Recipe r : kRecipes) {
    if (name == fp8_recipe_name(r)) return r;
    choices += choices.empty() ? fp8_recipe_name(r) : std::string(", ") + fp8_recipe_name(r);
  }
  throw Error(detail::cat("unknown fp8 recipe '", name, "' (choose one of ", choices, ")"));
}

const char* fp8_role_name(Fp8Role r) {
  switch (r) {
    case Fp8Role::input: return "input";
    case Fp8Role::weight: return "weight";
    case Fp8Role::grad: return "grad";
  }
  return "?";
}

void check_fp8_options(const Fp8Options& o) {
  MT_CHECK(o.forward_format == DType::e4m3 || o.forward_format == DType::e5m2,
           "fp8: forward_format must be e4m3 or e5m2, got ", dtype_name(o.forward_format));
  MT_CHECK(o.grad_format == DType::e4m3 || o.grad_format == DType::e5m2, "fp8: grad_format must be e4m3 or e5m2, got ",
           dtype_name(o.grad_format));
  MT_CHECK(is_8bit(o.mx_element), "fp8: mx_element must be e4m3, e5m2, e3m2, e2m3 or e2m1, got ",
           dtype_name(o.mx_element));
  MT_CHECK(o.mx_rule != ScaleRule::amax, "fp8: mx_rule must be pow2-floor or pow2-up (MX scales are E8M0)");
  MT_CHECK(o.margin >= 0 && o.margin <= 64, "fp8: margin must be in [0, 64], got ", o.margin);
  MT_CHECK(o.amax_history_len >= 1 && o.amax_history_len <= (int64_t(1) << 20),
           "fp8: amax_history_len must be in [1, 2^20], got ", o.amax_history_len);
}

Fp8Context* active_fp8() {
  const Tape* tape = Tape::current();
  return tape ? tape->fp8() : nullptr;
}

Fp8Grad fp8_grad(const Fp8Context& fp8, const ScaledGrad& dy) {
  if (!scaling_rule_active()) return {dy, false};
  const float beta = cast_beta(CastGradQuery{&dy, fp8.format(Fp8Role::grad)});
  return {{rescale(dy.g, beta), beta * dy.scale}, true};
}

Fp8Context::Fp8Context(Fp8Options options) : options_(options) { check_fp8_options(options_); }

DType Fp8Context::format(Fp8Role role) const {
  if (role == Fp8Role::grad) return options_.grad_format;
  if (options_.recipe == Fp8Recipe::nvfp4) return DType::e2m1;
  return options_.recipe == Fp8Recipe::mx ? options_.mx_element : options_.forward_format;
}

bool Fp8Context::per_tensor(Fp8Role role) const {
  const QuantSpec s = spec(role, false);
  return s.layout.block_rows == 0 && s.layout.block_cols == 0;
}

QuantSpec Fp8Context::spec(Fp8Role role, bool per_operator_scaled) const {
  QuantSpec s{.format = format(role), .margin = options_.margin};
  if (per_operator_scaled) {
    s.given_scale = 1.0f;  // the gradient already carries its node's beta
    return s;
  }
  switch (options_.recipe) {
    case Fp8Recipe::current:
    case Fp8Recipe::delayed: break;  // per tensor, amax rule (delayed: given_scale from the history)
    case Fp8Recipe::rowwise: s.layout = {1, 0}; break;
    case Fp8Recipe::mx:
      s.layout = {1, kMxBlock};
      s.rule = options_.mx_rule;
      break;
    case Fp8Recipe::block:
      s.layout = role == Fp8Role::weight ? ScaleLayout{kTile, kTile} : ScaleLayout{1, kTile};
      s.rule = ScaleRule::pow2_up;
      break;
    case Fp8Recipe::nvfp4:
      s.layout = role == Fp8Role::weight ? ScaleLayout{kNvfp4Block, kNvfp4Block} : ScaleLayout{1, kNvfp4Block};
      s.rule = ScaleRule::nvfp4;
      break;
  }
  return s;
}

Fp8Context::History& Fp8Context::history(int64_t site, OpId op, Fp8Role role) {
  History& h = histories_[{site, int(role)}];
  if (h.amax.empty() || h.op != op) h = History{op, std::vector<float>(size_t(options_.amax_history_len), 0.0f)};
  return h;
}

void Fp8Context::begin_step() {
  next_site_ = 0;
  records_.clear();
  cache_.clear();
  for (auto& [key, h] : histories_) {
    const float fmax = bits8::max_finite(format_of(format(Fp8Role(key.second))));
    h.amax[size_t(h.next)] = h.pending;
    const float recent = h.pending;
    h.next = (h.next + 1) % int64_t(h.amax.size());
    h.pending = 0.0f;
    const float amax = options_.amax_most_recent ? recent : *std::max_element(h.amax.begin(), h.amax.end());
    h.scale = scales::amax_scale(amax, fmax, options_.margin, h.scale);  // 0 or inf / NaN: keep the last scale
  }
}

int64_t Fp8Context::next_site() { return next_site_++; }

std::optional<Quantized> Fp8Context::cached(const Tensor& x, const QuantSpec& s) const {
  const bool per_tensor = s.layout.block_rows == 0 && s.layout.block_cols == 0;
  const Shape ts{x.size(1), x.size(0)}, tst{x.strides()[1], x.strides()[0]};
  for (const CachedOperand& c : cache_) {
    if (c.storage.lock() != x.storage() || c.offset != x.offset() || c.dtype != x.dtype() || !(c.spec == s)) continue;
    if (c.shape == x.shape() && c.strides == x.strides()) return c.q;
    if (per_tensor && c.shape == ts && c.strides == tst) return c.q.t();
  }
  return std::nullopt;
}

Quantized Fp8Context::quantize(int64_t site, OpId op, Fp8Role role, const char* gemm, const Tensor& x,
                               bool per_operator_scaled) {
  QuantSpec s = spec(role, per_operator_scaled);
  History* h = nullptr;
  if (options_.recipe == Fp8Recipe::delayed && !per_operator_scaled) {
    h = &history(site, op, role);
    s.given_scale = h->scale;
  }
  if (std::optional<Quantized> hit = cached(x, s)) return *hit;  // recorded when first quantized
  // The codes do not depend on the operand's memory order: a transposed view (an operand of a
  // wgrad GEMM) is quantized from contiguous rows, the per-tensor codes in x^T's order and handed
  // back transposed (x^T's layout is x's), any other layout's from a contiguous copy.
  const bool per_tensor = s.layout.block_rows == 0 && s.layout.block_cols == 0;
  const bool transposed_view = x.dim() == 2 && !x.is_contiguous() && x.t().is_contiguous();
  Quantized q = !transposed_view ? mixtape::quantize(x, s)
                : per_tensor     ? mixtape::quantize(x.t(), s).t()
                                 : mixtape::quantize(x.contiguous(), s);
  cache_.push_back({x.storage(), x.offset(), x.shape(), x.strides(), x.dtype(), s, q});
  if (h) h->pending = std::max(h->pending, q.stats.amax);
  record(site, op, role, gemm, s.format, q.stats);
  return q;
}

void Fp8Context::record(int64_t site, OpId op, Fp8Role role, const char* gemm, DType format, const QuantStats& stats) {
  QuantStats& t = totals_[size_t(role)];
  t.count += stats.count;
  t.saturated += stats.saturated;
  t.flushed += stats.flushed;
  t.subnormal += stats.subnormal;
  t.nonfinite += stats.nonfinite;
  t.amax = std::max(t.amax, stats.amax);
  records_.push_back(Fp8Record{site, op, role, gemm, format, stats});
}

std::vector<std::string> Fp8Context::json_lines(int64_t step, const std::string& network) const {
  std::vector<std::string> out;
  for (const Fp8Record& r : records_) {
    const QuantStats& q = r.stats;
    nlohmann::ordered_json j = {{"event", "fp8"},
                                {"step", step},
                                {"site", r.site},
                                {"op", op_name(r.op)},
                                {"role", fp8_role_name(r.role)},
                                {"gemm", r.gemm},
                                {"format", dtype_name(r.format)},
                                {"count", q.count},
                                {"saturated", q.saturated},
                                {"flushed", q.flushed},
                                {"subnormal", q.subnormal},
                                {"nonfinite", q.nonfinite},
                                {"amax", q.amax},
                                {"scale_inv_min", q.scale_inv_min},
                                {"scale_inv_max", q.scale_inv_max}};
    if (!network.empty()) j["network"] = network;
    out.push_back(j.dump());
  }
  return out;
}

namespace {

// The options a state belongs to, as text: a history means nothing under another recipe.
std::string options_text(const Fp8Options& o) {
  return detail::cat(fp8_recipe_name(o.recipe), " ", dtype_name(o.forward_format), "/", dtype_name(o.grad_format),
                     " mx ", dtype_name(o.mx_element), " ", scale_rule_name(o.mx_rule), " margin ", o.margin,
                     " history ", o.amax_history_len, o.amax_most_recent ? " most_recent" : " max");
}

}  // namespace

TensorDict Fp8Context::state_dict() const {
  TensorDict d;
  d.set_meta("options", options_text(options_));
  for (Fp8Role r : {Fp8Role::input, Fp8Role::weight, Fp8Role::grad}) {
    const QuantStats& t = totals_[size_t(r)];
    d.set_meta(detail::cat("totals.", fp8_role_name(r)),
               detail::cat(t.count, " ", t.saturated, " ", t.flushed, " ", t.subnormal, " ", t.nonfinite, " ",
                           state_io::format(double(t.amax))));
  }
  for (const auto& [key, h] : histories_) {
    const std::string name = detail::cat("site", key.first, ".", fp8_role_name(Fp8Role(key.second)));
    std::vector<float> v = h.amax;
    v.insert(v.end(), {float(h.next), h.pending, h.scale, float(int(h.op))});
    d.add(name, from_vector(v, {int64_t(v.size())}));
  }
  return d;
}

void Fp8Context::load_state_dict(const TensorDict& dict) {
  MT_CHECK(!dict.has_meta("options") || dict.meta("options") == options_text(options_),
           "Fp8Context: the state was saved under fp8 options '", dict.has_meta("options") ? dict.meta("options") : "",
           "', this run uses '", options_text(options_), "'");
  QuantStats totals[3];
  for (Fp8Role r : {Fp8Role::input, Fp8Role::weight, Fp8Role::grad}) {
    const std::string key = detail::cat("totals.", fp8_role_name(r));
    if (!dict.has_meta(key)) continue;
    QuantStats& t = totals[size_t(r)];
    double amax = 0.0;
    std::istringstream is(dict.meta(key));
    MT_CHECK(is >> t.count >> t.saturated >> t.flushed >> t.subnormal >> t.nonfinite >> amax, "Fp8Context: metadata '",
             key, "' must hold six numbers, got '", dict.meta(key), "'");
    t.amax = float(amax);
  }
  std::map<std::pair<int64_t, int>, History> histories;
  const int64_t L = options_.amax_history_len;
  for (const auto& [name, t] : dict) {
    int64_t site = -1;
    char role[16] = {};
    MT_CHECK(std::sscanf(name.c_str(), "site%ld.%15s", &site, role) == 2 && site >= 0, "Fp8Context: unexpected entry '",
             name, "' in the state dict");
    int r = -1;
    for (Fp8Role x : {Fp8Role::input, Fp8Role::weight, Fp8Role::grad})
      if (std::string(role) == fp8_role_name(x)) r = int(x);
    MT_CHECK(r >= 0, "Fp8Context: unknown role in '", name, "'");
    MT_CHECK(t.dtype() == DType::f32 && t.dim() == 1 && t.size(0) == L + 4, "Fp8Context: '", name,
             "' must be f32 [amax_history_len + 4] = [", L + 4, "], got ", t.meta(),
             " (was it saved with another amax_history_len?)");
    const std::vector<double> v = t.to_vector();
    // amaxes are finite and >= 0, the scale finite and > 0; position and op whole numbers in range
    // (so that the state saves back to the same bytes, and no value from the file reaches a cast
    // or a quantization it cannot stand).
    const auto amax_ok = [](double a) { return std::isfinite(a) && a >= 0.0; };
    const auto index_ok = [](double x, int64_t end) { return x >= 0.0 && x < double(end) && x == std::floor(x); };
    History h;
    for (int64_t i = 0; i < L; ++i) {
      MT_CHECK(amax_ok(v[size_t(i)]), "Fp8Context: '", name, "' holds amax ", v[size_t(i)], " at history position ", i,
               " (amaxes are finite and >= 0)");
      h.amax.push_back(float(v[size_t(i)]));
    }
    MT_CHECK(index_ok(v[size_t(L)], L) && index_ok(v[size_t(L + 3)], int64_t(kNumOps)), "Fp8Context: '", name,
             "' has a history position (", v[size_t(L)], ") or op (", v[size_t(L + 3)],
             ") that is not a whole number in range");
    MT_CHECK(amax_ok(v[size_t(L + 1)]) && std::isfinite(v[size_t(L + 2)]) && v[size_t(L + 2)] > 0.0, "Fp8Context: '",
             name, "' has a pending amax (", v[size_t(L + 1)], ") or scale (", v[size_t(L + 2)],
             ") out of range (an amax is finite and >= 0, a scale finite and > 0)");
    h.next = int64_t(v[size_t(L)]);
    h.pending = float(v[size_t(L + 1)]);
    h.scale = float(v[size_t(L + 2)]);
    h.op = OpId(int(v[size_t(L + 3)]));
    histories[{site, r}] = std::move(h);
  }
  histories_ = std::move(histories);  // nothing changes unless every entry was valid
  for (size_t i = 0; i < 3; ++i) totals_[i] = totals[i];
}

}  // namespace mixtape
