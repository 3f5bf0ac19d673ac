#include "optim/trainer.h"

#include <cmath>
#include <sstream>
#include <utility>
#include <nlohmann/json.hpp>

#include "autograd/tape.h"
#include "tensor/state_io.h"

namespace mixtape {

// ---- loss-scale specs --------------------------------------------------------------------------

const char* optimizer_kind_name(OptimizerKind k) {
  switch (k) {
#define MIXTAPE_NAME(kind, Class) \
  case OptimizerKind::kind: return #Class;
    MIXTAPE_OPTIMIZERS(MIXTAPE_NAME)
#undef MIXTAPE_NAME
  }
  return "?";
}

std::string optimizer_kind_choices() {
  std::vector<std::string> names;
#define MIXTAPE_FLAG(kind, Class) names.push_back(#kind);
  MIXTAPE_OPTIMIZERS(MIXTAPE_FLAG)
#undef MIXTAPE_FLAG
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return s;
}

OptimizerKind optimizer_kind_from_name(const std::string& name) {
#define MIXTAPE_FROM_NAME(kind, Class) \
  if (name == #kind) return OptimizerKind::kind;
  MIXTAPE_OPTIMIZERS(MIXTAPE_FROM_NAME)
#undef MIXTAPE_FROM_NAME
  throw Error(detail::cat("unknown optimizer '", name, "' (expected ", optimizer_kind_choices(), ")"));
}

std::unique_ptr<Optimizer> make_optimizer(std::vector<Variable> params, const OptimizerSpec& o, UpdateRounding rounding,
                                          uint64_t seed) {
  const bool adam = o.kind == OptimizerKind::adam || o.kind == OptimizerKind::adamw;
  MT_CHECK(!o.amsgrad || adam, "PrecisionTrainer: amsgrad is an option of Adam and AdamW, not of ",
           optimizer_kind_name(o.kind));
  MT_CHECK(!o.nesterov || o.kind == OptimizerKind::sgd,
           "PrecisionTrainer: Nesterov momentum is an option of SGD, not of ", optimizer_kind_name(o.kind));
  switch (o.kind) {
#define MIXTAPE_FACTORY(kind, Class) \
  case OptimizerKind::kind: return make_##kind(std::move(params), o, rounding, seed);
    MIXTAPE_OPTIMIZERS(MIXTAPE_FACTORY)
#undef MIXTAPE_FACTORY
  }
  MT_ASSERT(false, "unknown optimizer kind");
}

// ---- the trainer -------------------------------------------------------------------------------

PrecisionTrainer::PrecisionTrainer(nn::Module& model, const OptimizerSpec& optimizer, PrecisionOptions options)
    : options_(std::move(options)), model_(&model) {
  const char* who = "PrecisionTrainer";
  MT_CHECK(options_.telemetry_every >= 0, who, ": telemetry_every must be >= 0, got ", options_.telemetry_every);
  MT_CHECK(std::isfinite(options_.max_grad_norm) && options_.max_grad_norm >= 0.0, who,
           ": max_grad_norm must be finite and >= 0, got ", options_.max_grad_norm);
  MT_CHECK(std::isfinite(options_.max_grad_value) && options_.max_grad_value >= 0.0, who,
           ": max_grad_value must be finite and >= 0, got ", options_.max_grad_value);
  scaler_ = make_loss_scaler(options_.loss_scale, options_.backoff, options_.logmax);
  if (options_.loss_scale.kind == LossScaleSpec::Kind::gradient)
    grad_scaling_ = std::make_unique<GradientScalingRule>(options_.gradient_scaling);
  if (options_.precision == nn::Precision::fp8) fp8_ = std::make_unique<Fp8Context>(options_.fp8);
  if (options_.telemetry_every > 0) {
    DType format = options_.telemetry_format.value_or(is_16bit(compute_dtype()) ? compute_dtype() : DType::f16);
    telemetry_ =
        std::make_unique<Telemetry>(TelemetryOptions{.every_n_steps = options_.telemetry_every, .format = format});
  }
  // A pure policy converts the model before its optimizer is built over the 16-bit parameters;
  // if the optimizer refuses (Nesterov, Adam with L2 decay, a bad hyper-parameter), the model
  // gets its parameters back as they were.
  std::vector<std::pair<Tensor, std::optional<ScaledGrad>>> before;
  for (const Variable& p : model.parameters()) before.emplace_back(p.data(), p.grad());
  // One device for everything (checked before the policy changes the model).
  MT_CHECK(!before.empty(), who, ": the model has no parameters");
  device_ = before.front().first.device();
  for (const auto& [name, p] : model.named_parameters())
    MT_CHECK(p.device() == device_, who, ": parameter '", name, "' is on ", p.device(), ", the first parameter on ",
             device_, "; move the whole model with Module::to(device) first");
  nn::apply_precision(model, options_.precision);
  params_ = model.parameters();
  MT_CHECK(!params_.empty(), who, ": the model has no parameters");
  if (nn::is_pure(options_.precision)) {
    try {
      pure_ = make_optimizer(params_, optimizer, options_.rounding, options_.seed);
    } catch (...) {
      for (size_t i = 0; i < params_.size(); ++i) {
        params_[i].impl().data = before[i].first;
        params_[i].set_grad(before[i].second);
      }
      try {
        throw;
      } catch (const Error& e) {  // which policy refused it
        throw Error(detail::cat(who, ": ", nn::precision_name(options_.precision), ": ", e.what()));
      }
    }
  } else {
    const OptimizerSpec spec = optimizer;
    masters_ = std::make_unique<MasterWeights>(
        params_, [spec](std::vector<Variable> m) { return make_optimizer(std::move(m), spec); },
        MasterWeightsOptions{.max_grad_norm = options_.max_grad_norm, .max_grad_value = options_.max_grad_value});
    // The decision lives on the device when the rule, the clipping and the update can run there.
    if (device_.is_cuda() && scaler_->device_rule() && options_.max_grad_value == 0.0 &&
        masters_->optimizer().device_step_ready()) {
      scaler_->keep_on(device_);
      masters_->optimizer().allocate_state();  // before the first step's temporaries
    }
  }
}

Tensor PrecisionTrainer::input(const Tensor& x) const {
  MT_CHECK(x.defined(), "PrecisionTrainer::input: got an undefined tensor");
  const Tensor here = x.to(device_);  // no copy when x is already there
  return is_floating(here.dtype()) && here.dtype() != compute_dtype() ? here.to(compute_dtype()) : here;
}

void PrecisionTrainer::begin_step(Tape& tape) {
  sampled_ = telemetry_ && telemetry_->begin_step(step_, tape);
  tape.set_scaling_rule(grad_scaling_.get());
  if (fp8_) {
    fp8_->begin_step();
    tape.set_fp8(fp8_.get());
  }
  last_rounding_ = {};
  ++step_;
  if (dp_) dp_->comm().set_step(step_);  // the step a collective's timeout names
}

void PrecisionTrainer::attach(Tape& tape) {
  MT_CHECK(step_ > 0, "PrecisionTrainer::attach: call begin_step first");
  tape.set_scaling_rule(grad_scaling_.get());
  tape.set_fp8(fp8_.get());
  tape.set_observer(sampled_ ? telemetry_.get() : nullptr);
}

void PrecisionTrainer::backward(Tape& tape, const Variable& loss) {
  MT_CHECK(loss.defined() && loss.numel() == 1, "PrecisionTrainer::backward: the loss must be a defined scalar");
  census_backward([&] { tape.backward(loss, scaler_->seed(loss)); });
}

void PrecisionTrainer::backward(Tape& tape, const Variable& root, const ScaledGrad& seed) {
  census_backward([&] { tape.backward(root, seed); });
}

void PrecisionTrainer::census_backward(const std::function<void()>& run_backward) {
  if (!sampled_) return run_backward();
  RoundingCensus census;
  run_backward();
  const RoundingCounts c = census.counts();
  last_rounding_ += c;
  total_rounding_ += c;
}

void PrecisionTrainer::set_data_parallel(std::shared_ptr<dist::DataParallel> dp) {
  MT_CHECK(dp != nullptr, "PrecisionTrainer::set_data_parallel: no DataParallel");
  MT_CHECK(!dp->distributed() || device_.is_cpu(), "PrecisionTrainer::set_data_parallel: the model is on ", device_,
           "; data parallelism over MPI trains on the CPU (docs/data-parallel.md: GPUs need a NCCL communicator)");
  dp_ = dp->distributed() ? std::move(dp) : nullptr;  // one process: the single-process path, unchanged
  if (grad_scaling_) grad_scaling_->set_agreement(dp_.get());
}

StepReport PrecisionTrainer::step() {
  // Note [Gradient all-reduce] in dist/data_parallel.cpp: the mean over the ranks, and whether any
  // rank's gradients overflowed, which the step then sees on every rank.
  const bool overflow_elsewhere = dp_ && dp_->all_reduce_gradients(params_).any_overflow;
  const GradClip clip{.max_norm = options_.max_grad_norm, .max_value = options_.max_grad_value};
  last_ =
      masters_ ? masters_->step(*scaler_, overflow_elsewhere) : scaled_step(*pure_, *scaler_, clip, overflow_elsewhere);
  if (grad_scaling_) {
    last_scales_ = grad_scaling_->step_records();
    last_overflows_ = grad_scaling_->step_overflows();
    grad_scaling_->next_step();
  }
  if (dp_) dp_->sync_buffers(*model_);
  return last_;
}

void PrecisionTrainer::zero_grad() {
  if (masters_) masters_->zero_grad();
  else pure_->zero_grad();
}

Optimizer& PrecisionTrainer::optimizer() { return masters_ ? masters_->optimizer() : *pure_; }
const Optimizer& PrecisionTrainer::optimizer() const { return masters_ ? masters_->optimizer() : *pure_; }

std::vector<std::string> PrecisionTrainer::warnings() const {
  return pure_ ? pure_->warnings() : std::vector<std::string>{};
}

namespace {

// "12 linear dW": the node's tape position, its op, and which gradient it emitted.
std::string scale_label(const ScaleRecord& r) {
  const char* what = "dX";
  if (r.kind == ScaleRecord::Kind::cast) what = "cast";
  else if (r.kind == ScaleRecord::Kind::param) what = r.input == 2 ? "db" : "dW";
  else if (r.op == OpId::matmul || r.op == OpId::bmm) what = r.query == 0 ? "dA" : "dB";
  char buf[96];
  std::snprintf(buf, sizeof buf, "%03lld %s %s", (long long)r.node, op_name(r.op), what);
  return buf;
}

}  // namespace

void PrecisionTrainer::write_telemetry(const std::function<void(std::string_view)>& sink,
                                       const std::string& prefix) const {
  const int64_t step = step_ - 1;
  if (grad_scaling_) {
    nlohmann::json scales = nlohmann::json::object();
    for (const ScaleRecord& r : last_scales_)
      if (!r.reused && r.node >= 0) scales[scale_label(r)] = std::log2(double(r.alpha) * double(r.beta));
    if (!scales.empty()) {
      nlohmann::json j = {{"event", "scales"}, {"step", step}, {"log2_scale", scales}};
      if (!prefix.empty()) j["network"] = prefix;
      sink(j.dump());
    }
    for (const OverflowEvent& e : last_overflows_) {
      nlohmann::json j = {{"event", "overflow"},      {"step", step},     {"node", e.node},
                          {"op", op_name(e.op)},      {"input", e.input}, {"log2_scale", std::log2(double(e.alpha))},
                          {"recovered", e.recovered}, {"shift", e.shift}, {"skipped", !last_.applied()}};
      if (!prefix.empty()) j["network"] = prefix;
      sink(j.dump());
    }
  }
  if (!sampled_) return;
  for (const std::string& line : telemetry_->json_lines(step, prefix)) sink(line);
  if (fp8_)
    for (const std::string& line : fp8_->json_lines(step, prefix)) sink(line);
  const RoundingCounts& c = last_rounding_;
  nlohmann::json r = {{"event", "rounding"},
                      {"step", step},
                      {"rounded", c.rounded},
                      {"nonzero", c.nonzero},
                      {"underflow", c.underflow},
                      {"subnormal", c.subnormal},
                      {"overflow", c.overflow},
                      {"underflow_rate", c.underflow_rate()},
                      {"subnormal_rate", c.subnormal_rate()}};
  if (!prefix.empty()) r["network"] = prefix;
  sink(r.dump());
}

std::string PrecisionTrainer::describe() const {
  const nn::Precision p = options_.precision;
  std::string s = nn::precision_name(p);
  if (p == nn::Precision::fp32) s += " (f32 compute and parameters)";
  else if (nn::is_pure(p))
    s += detail::cat(" (", dtype_name(compute_dtype()), " compute, parameters and optimizer state; ",
                     update_rounding_name(options_.rounding), " update rounding)");
  else if (fp8_) {
    const Fp8Options& o = options_.fp8;
    s += detail::cat(" (", fp8_recipe_name(o.recipe), " scaling; inputs and weights ",
                     dtype_name(fp8_->format(Fp8Role::input)), ", gradients ", dtype_name(o.grad_format),
                     " as GEMM operands; bf16 compute, f32 parameters as masters)");
  } else s += detail::cat(" (", dtype_name(compute_dtype()), " compute, f32 parameters as masters)");
  s += ", loss scale " + options_.loss_scale.str();
  if (grad_scaling_)
    s += detail::cat(" (Zhao et al., gamma' ", options_.gradient_scaling.underflow_threshold, ", K ",
                     options_.gradient_scaling.update_period, ")");
  s += detail::cat(", ", optimizer().name());
  return s;
}

TensorDict PrecisionTrainer::state_dict() const {
  TensorDict d;
  d.merge("optimizer.", masters_ ? masters_->state_dict() : pure_->state_dict());
  d.merge("scaler.", scaler_->state_dict());
  if (grad_scaling_) d.merge("gradient_scaling.", grad_scaling_->state_dict());
  if (fp8_) d.merge("fp8.", fp8_->state_dict());
  d.set_meta("precision", nn::precision_name(options_.precision));
  d.set_meta("trainer.step", std::to_string(step_));  // the telemetry schedule resumes from here
  const RoundingCounts& r = total_rounding_;          // the census totals the summaries report
  for (const auto& [key, v] : {std::pair{"rounded", r.rounded},
                               {"nonzero", r.nonzero},
                               {"underflow", r.underflow},
                               {"subnormal", r.subnormal},
                               {"overflow", r.overflow}})
    d.set_meta(std::string("trainer.rounding.") + key, std::to_string(v));
  return d;
}

void PrecisionTrainer::load_state_dict(const TensorDict& dict) {
  const std::string p = dict.has_meta("precision") ? dict.meta("precision") : std::string("(none)");
  MT_CHECK(p == nn::precision_name(options_.precision),
           "PrecisionTrainer::load_state_dict: the state is for precision '", p, "', this trainer runs '",
           nn::precision_name(options_.precision), "'");
  int64_t step = 0;
  if (dict.has_meta("trainer.step")) {
    const std::string& v = dict.meta("trainer.step");
    size_t used = 0;
    try {
      step = std::stoll(v, &used);
    } catch (const std::exception&) { used = 0; }
    MT_CHECK(used == v.size() && !v.empty() && step >= 0,
             "PrecisionTrainer::load_state_dict: 'trainer.step' must be a non-negative integer, got '", v, "'");
  }
  RoundingCounts rounding;
  if (dict.has_meta("trainer.rounding.rounded")) {
    const char* owner = "PrecisionTrainer";
    rounding = {.rounded = state_io::get_uint(dict, "trainer.rounding.rounded", owner),
                .nonzero = state_io::get_uint(dict, "trainer.rounding.nonzero", owner),
                .underflow = state_io::get_uint(dict, "trainer.rounding.underflow", owner),
                .subnormal = state_io::get_uint(dict, "trainer.rounding.subnormal", owner),
                .overflow = state_io::get_uint(dict, "trainer.rounding.overflow", owner)};
  }
  // Every tensor belongs to a part of this trainer: an entry no part reads would be dropped unseen.
  for (const auto& [name, t] : dict) {
    const auto under = [&n = name](const char* prefix) { return n.rfind(prefix, 0) == 0; };
    MT_CHECK(under("optimizer.") || under("scaler.") || (grad_scaling_ && under("gradient_scaling.")) ||
                 (fp8_ && under("fp8.")),
             "PrecisionTrainer::load_state_dict: unexpected entry '", name, "' (this trainer keeps 'optimizer.', ",
             "'scaler.'", grad_scaling_ ? ", 'gradient_scaling.'" : "", fp8_ ? ", 'fp8.'" : "", " entries)");
  }
  const TensorDict opt = dict.sub("optimizer."), sc = dict.sub("scaler."), gs = dict.sub("gradient_scaling.");
  MT_CHECK(!grad_scaling_ || !gs.metadata.empty(),
           "PrecisionTrainer::load_state_dict: this trainer scales gradients per operator (loss scale gradient), "
           "the state holds no 'gradient_scaling.' entries");
  // Each part validates everything before it changes anything; if a later part is rejected after
  // an earlier one was taken, the earlier ones go back to where they were.
  const TensorDict old_scaler = scaler_->state_dict();
  const TensorDict old_rule = grad_scaling_ ? grad_scaling_->state_dict() : TensorDict{};
  const TensorDict old_fp8 = fp8_ ? fp8_->state_dict() : TensorDict{};
  try {
    scaler_->load_state_dict(sc);
    if (grad_scaling_) grad_scaling_->load_state_dict(gs);
    if (fp8_) fp8_->load_state_dict(dict.sub("fp8."));
    if (masters_) masters_->load_state_dict(opt);
    else pure_->load_state_dict(opt);
  } catch (...) {
    scaler_->load_state_dict(old_scaler);
    if (grad_scaling_) grad_scaling_->load_state_dict(old_rule);
    if (fp8_) fp8_->load_state_dict(old_fp8);
    throw;
  }
  step_ = step;
  total_rounding_ = rounding;
}

}  // namespace mixtape
