// Gradient scaling: Zhao, Vogel, Ahmed, Luk, "Reducing Underflow in Mixed Precision Training by
// Gradient Scaling" (IJCAI 2020), as a ScalingRule for the tape (autograd/scaling.h).
//
//   GradientScalingRule rule;              // gamma' = 1e-3, recompute every backward
//   Tape tape;
//   tape.set_scaling_rule(&rule);
//   tape.backward(loss);               // each GEMM-like node and 16-bit cast picks its own beta
//   rule.next_step();                  // only matters with update_period > 1
//
// Each GEMM-like node computes dX = f_G(beta dY, W) and each 16-bit -> wide cast passes on
// beta dY; beta is the smallest power of two whose predicted underflow rate is <= gamma',
// lowered to the largest power of two that cannot overflow when that is smaller. The weight and
// bias gradients of GEMM-like nodes get a beta of their own from their exact fp32 values
// (Note [Parameter gradient scale]), so a weight gradient can be scaled down without touching
// the activation gradient.
// Note [Gradient scaling as implemented] in gradient_scaling.cpp lists every reading of the paper made here.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "autograd/scaling.h"
#include "tensor/tensor_dict.h"

namespace mixtape {

// ---- the statistical model as free functions ----------------------------------------------

// The range of a 16-bit gradient format: lambda_min = smallest subnormal, lambda_max = largest
// finite. f16: [2^-24, 65504]; bf16: [2^-133, (2 - 2^-7) 2^127]. nullopt for f32 / f64, whose
// gradients need no scaling (the rule answers beta = 1 for them).
struct FormatRange {
  double lambda_min = 0.0;
  double lambda_max = 0.0;
};
std::optional<FormatRange> format_range(DType t);

// The inverse error function on (-1, 1), to double precision (+-inf at +-1, NaN outside).
double erfinv(double y);

// Lemma 1, Eq. 2: the standard deviation of dX = f_G(dY, W) when each element of dX sums n
// products: sqrt(n) sigma_dy sigma_w.
double gemm_sigma(int64_t n, double sigma_dy, double sigma_w);
// Theorem 1, Eq. 3: predicted underflow rate of beta * dX with dX ~ N(0, sigma^2):
// erf(lambda_min / (beta sqrt(2) sigma)). 1 when sigma = 0 (everything is zero).
double gemm_underflow_rate(double beta, double sigma, double lambda_min);
// Theorem 2, Eq. 4: predicted underflow rate of beta * dY with ln|dY| ~ N(mu, sigma^2):
// 1/2 + 1/2 erf((ln lambda_min - mu - ln beta) / (sqrt(2) sigma)).
double cast_underflow_rate(double beta, double mu, double sigma, double lambda_min);

struct BetaChoice {
  float beta = 1.0f;           // the chosen power of two
  double underflow_bound = 0;  // smallest real beta with predicted rate <= gamma' (0: no estimate)
  double cap = std::numeric_limits<double>::infinity();  // largest real beta that cannot overflow
  bool capped = false;                                   // the cap, not the underflow bound, decided beta
};

// Algorithm 1, line 7, for dX = f_G(beta dY, W) with sigma = gemm_sigma(n, sigma_dy, sigma_w):
//   bound = lambda_min / (sqrt(2) sigma erfinv(gamma')), rounded up to a power of two, at least 1;
//   cap   = lambda_max / (n max|dY| max|W|), and lambda_max / max|dY| (beta dY is itself stored
//           in the 16-bit dtype), rounded down to a power of two;
//   beta  = min(bound, cap): below 1 only when the cap demands it.
// Statistics describe the tensors actually multiplied (dY already carries its scale alpha).
BetaChoice choose_gemm_beta(double sigma, int64_t n, double max_dy, double max_w, double gamma, const FormatRange& f);
// Algorithm 1, line 14, for the cast: the smallest power of two with cast_underflow_rate <=
// gamma' (ln beta >= ln lambda_min - mu - sqrt(2) sigma erfinv(2 gamma' - 1)), at least 1, capped
// by lambda_max / max|dY| rounded down to a power of two.
BetaChoice choose_cast_beta(double mu, double sigma, double max_dy, double gamma, const FormatRange& f);

// Note [Parameter gradient scale], for the weight or bias gradient g of a GEMM-like node, known
// exactly (accumulated in fp32, not yet rounded): the smallest power of two whose predicted
// underflow rate (Theorem 1 with sigma measured on g itself) is <= gamma', at least 1, capped
// by lambda_max / max|g| rounded down to a power of two, which is exact: beta g cannot overflow.
BetaChoice choose_param_beta(double sigma, double max_g, double gamma, const FormatRange& f);

// ---- the rule -----------------------------------------------------------------------------

// How the processes of a data-parallel run agree on each beta (Note [Scales agreed across
// processes] in gradient_scaling.cpp); implemented by dist/data_parallel.h.
class ScaleAgreement {
 public:
  virtual ~ScaleAgreement() = default;
  // In place: the element-wise maximum of `votes` over every process of the group (the same
  // length on every process, asked in the same order).
  virtual void max_over_processes(std::span<double> votes) = 0;
};

struct GradientScalingOptions {
  double underflow_threshold = 1e-3;  // gamma', in (0, 1)
  int64_t update_period = 1;          // K: recompute each node's beta every K steps (paper: 100)
};

// What the rule decided for one query of the last backward pass, for telemetry and plots.
struct ScaleRecord {
  enum class Kind : uint8_t { gemm, cast, param };
  Kind kind = Kind::gemm;
  OpId op = OpId::linear;
  int64_t node = -1;             // GradSite::node: position on the tape (-1: asked outside backward)
  int32_t query = 0;             // GradSite::query
  int32_t input = 0;             // param: the node input (1: weight, 2: bias); gemm, cast: 0
  DType format = DType::f32;     // the 16-bit format the result is stored in
  float alpha = 1.0f;            // the incoming scale
  float beta = 1.0f;             // the local factor; the result carries alpha * beta
  double sigma = 0.0;            // gemm: sigma of dX at beta = 1 (Eq. 2); cast: sigma of ln|dY|;
                                 // param: the RMS of the fp32 gradient
  double mu = 0.0;               // cast: mean of ln|dY|; gemm: 0
  double underflow_bound = 0.0;  // BetaChoice::underflow_bound
  double cap = std::numeric_limits<double>::infinity();  // BetaChoice::cap
  double underflow_rate = 0.0;                           // predicted rate at the chosen beta
  bool capped = false;                                   // the overflow cap decided beta
  bool reused = false;  // taken from the cache (update_period > 1); statistics are from then
};

class GradientScalingRule : public ScalingRule {
 public:
  explicit GradientScalingRule(GradientScalingOptions options = {});

  float gemm_beta(const GemmGradQuery& q) override;
  float cast_beta(const CastGradQuery& q) override;
  float param_beta(const ParamGradQuery& q) override;
  void on_overflow(const OverflowEvent& e) override { step_overflows_.push_back(e); }
  bool any_process(bool local) override;

  // Data-parallel training: every beta is agreed with the other processes before it is used
  // (Note [Scales agreed across processes]). Null (the default): this process decides alone.
  void set_agreement(ScaleAgreement* agreement) { agreement_ = agreement; }
  ScaleAgreement* agreement() const { return agreement_; }

  // Advances the step counter: a node's beta is recomputed once update_period steps have passed
  // since it was computed. Call once per training step (after backward); it also starts the
  // next step's step_records() and step_overflows().
  void next_step() {
    ++step_;
    step_records_.clear();
    step_overflows_.clear();
  }
  int64_t step() const { return step_; }
  // Forgets every cached beta (the next query of each node recomputes).
  void reset_cache() { cache_.clear(); }

  // The step counter and the cached betas with the step each was computed at (only
  // update_period > 1 caches), so a resumed run reuses and recomputes exactly where the
  // uninterrupted one would. Metadata "step", "underflow_threshold", "update_period"; tensors
  // "cache.ints" i64 [n, 8] (node, query, kind, op, input, format, capped, computed at step) and
  // "cache.reals" f64 [n, 7] (alpha, beta, sigma, mu, underflow_bound, cap, underflow_rate).
  // load_state_dict requires the same options and validates every entry before it changes
  // anything.
  TensorDict state_dict() const;
  void load_state_dict(const TensorDict& dict);

  const GradientScalingOptions& options() const { return options_; }
  // One record per query of the most recent backward pass, in the order they were asked
  // (queries asked outside a backward pass, GradSite::pass == 0, share one list).
  const std::vector<ScaleRecord>& records() const { return records_; }
  // Every record and every overflow the tape's guard reported (Note [Overflow guard] in
  // autograd/tape.cpp) since the last next_step(), over all backward passes of the step.
  const std::vector<ScaleRecord>& step_records() const { return step_records_; }
  const std::vector<OverflowEvent>& step_overflows() const { return step_overflows_; }

 private:
  struct Cached {
    ScaleRecord record;
    int64_t step = 0;
  };
  // Looks up (node, query); a hit must be young enough and of the same kind and op.
  const ScaleRecord* cached(const GradSite& site, ScaleRecord::Kind kind, OpId op) const;
  float finish(const GradSite& site, ScaleRecord r, bool cacheable);
  // Note [Scales agreed across processes]: with an agreement, c becomes the choice every process
  // takes; returns false (beta 1, nothing cached) when this or another process saw an inf/NaN.
  bool agree(BetaChoice& c, bool finite, bool& cacheable);
  void begin_query(const GradSite& site);
  // begin_query, then a record of the query's site, kind, op, format and incoming scale.
  ScaleRecord begin_record(const GradSite& site, ScaleRecord::Kind kind, OpId op, DType format, float alpha);

  GradientScalingOptions options_;
  ScaleAgreement* agreement_ = nullptr;
  int64_t step_ = 0;
  uint64_t pass_ = 0;  // GradSite::pass of the records held
  std::map<std::pair<int64_t, int32_t>, Cached> cache_;
  std::vector<ScaleRecord> records_;
  std::vector<ScaleRecord> step_records_;
  std::vector<OverflowEvent> step_overflows_;
};

}  // namespace mixtape
