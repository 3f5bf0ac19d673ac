#include "train/metrics.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <unistd.h>

namespace mixtape::train {

namespace {
// ": No space left on device" after a failed stream operation, when the C library said why.
std::string reason() { return errno != 0 ? std::string(": ") + std::strerror(errno) : std::string(); }
}  // namespace

Metrics::Metrics(const std::string& path, bool append) : path_(path) {
  if (path.empty()) return;
  errno = 0;
  out_.open(path, std::ios::out | (append ? std::ios::app : std::ios::trunc));
  MT_CHECK(out_.good(), "cannot open metrics file '", path, "' for writing", reason());
}

void Metrics::write(const nlohmann::json& event) {
  if (!out_.is_open()) return;
  errno = 0;
  out_ << event.dump() << '\n';
  out_.flush();
  MT_CHECK(out_.good(), "writing the metrics file '", path_, "' failed", reason());
}

void Metrics::write_telemetry(const PrecisionTrainer& t, const std::string& prefix) {
  if (!out_.is_open()) return;
  errno = 0;
  t.write_telemetry([this](std::string_view line) { out_ << line << '\n'; }, prefix);
  out_.flush();
  MT_CHECK(out_.good(), "writing the metrics file '", path_, "' failed", reason());
}

void add_precision_summary(nlohmann::json& j, const PrecisionTrainer& t, const std::string& prefix) {
  j[prefix + "precision"] = nn::precision_name(t.precision());
  j[prefix + "scaling"] = t.options().loss_scale.str();
  if (nn::is_pure(t.precision())) j[prefix + "update_rounding"] = update_rounding_name(t.options().rounding);
  j[prefix + "skipped_steps"] = t.skipped();
  j[prefix + "final_scale"] = t.scale();
  if (const Fp8Context* f = t.fp8()) {
    j[prefix + "fp8_recipe"] = fp8_recipe_name(f->options().recipe);
    for (Fp8Role r : {Fp8Role::input, Fp8Role::weight, Fp8Role::grad}) {
      const QuantStats& q = f->totals(r);
      const std::string k = prefix + "fp8_" + fp8_role_name(r) + "_";
      j[k + "format"] = dtype_name(f->format(r));
      j[k + "saturated_rate"] = q.count ? double(q.saturated) / double(q.count) : 0.0;
      j[k + "flushed_rate"] = q.count ? double(q.flushed) / double(q.count) : 0.0;
      j[k + "subnormal_rate"] = q.count ? double(q.subnormal) / double(q.count) : 0.0;
    }
  }
  const RoundingCounts& r = t.total_rounding();
  if (t.telemetry()) {
    j[prefix + "rounded_16bit"] = r.rounded;
    j[prefix + "underflow_rate"] = r.underflow_rate();
    j[prefix + "subnormal_rate"] = r.subnormal_rate();
  }
}

std::string precision_summary(const PrecisionTrainer& t) {
  std::string s = detail::cat(nn::precision_name(t.precision()), ", loss scale ", t.options().loss_scale.str(), ": ",
                              t.skipped(), " of ", t.steps(), " steps skipped, final scale ", t.scale());
  if (t.telemetry() && t.total_rounding().rounded > 0)
    s += detail::cat(", backward underflow ", 100.0 * t.total_rounding().underflow_rate(),
                     "% of nonzero values rounded to 16 bits (sampled steps)");
  if (const Fp8Context* f = t.fp8()) {
    s += detail::cat("; fp8 ", fp8_recipe_name(f->options().recipe), " scaling:");
    for (Fp8Role r : {Fp8Role::input, Fp8Role::weight, Fp8Role::grad}) {
      const QuantStats& q = f->totals(r);
      const double n = q.count ? double(q.count) : 1.0;
      s += detail::cat(" ", fp8_role_name(r), "s (", dtype_name(f->format(r)), ") ", 100.0 * double(q.saturated) / n,
                       "% saturated, ", 100.0 * double(q.flushed) / n, "% flushed to zero",
                       r == Fp8Role::grad ? "" : ";");
    }
  }
  return s;
}

const char* diverged_hint(const PrecisionTrainer& t) {
  return nn::is_16bit(t.precision()) && t.options().loss_scale.kind == LossScaleSpec::Kind::none
             ? ", or a dynamic --loss-scale such as backoff)"
             : ")";
}

void StepCounters::end_step(bool logged) {
  const cuda::RuntimeCounters now = cuda::runtime_counters();
  if (steps_++ == 0) return;
  launches_ += now.launches - at_.launches;
  allocs_ += now.device_allocs - at_.device_allocs;
  (logged ? logging_syncs_ : syncs_) += now.host_syncs - at_.host_syncs;
  ++(logged ? logging_steps_ : quiet_steps_);
}

void StepCounters::add_to(nlohmann::json& summary) const {
  const auto per = [](uint64_t n, uint64_t steps) { return steps ? double(n) / double(steps) : 0.0; };
  summary["launches_per_step"] = per(launches_, logging_steps_ + quiet_steps_);
  summary["host_syncs_per_step"] = per(syncs_, quiet_steps_);
  summary["host_syncs_per_logging_step"] = per(logging_syncs_, logging_steps_);
  summary["device_allocs_after_warmup"] = allocs_;
}

void Progress::update(int epoch, int64_t step, int64_t steps, double loss, bool force) {
  if (quiet) return;
  const auto now = std::chrono::steady_clock::now();
  if (!force && now - last_ < (tty_ ? std::chrono::milliseconds(500) : std::chrono::milliseconds(15000))) return;
  last_ = now;
  const double secs = std::chrono::duration<double>(now - t0_).count();
  const double rate = secs > 0 ? double(step - first_) / secs : 0.0;
  const double eta = rate > 0 ? double(steps - step) / rate : 0.0;
  std::fprintf(stderr, "%sepoch %d/%d [%5lld/%5lld] loss %.4f  %6.1f steps/s  ETA %4.0fs ", tty_ ? "\r" : "", epoch,
               epochs_, (long long)step, (long long)steps, loss, rate, eta);
  if (force || !tty_) std::fputc('\n', stderr);
}

}  // namespace mixtape::train
