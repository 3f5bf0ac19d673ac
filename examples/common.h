// Shared pieces of the example programs: the flags every program has, a JSON Lines metrics
// file (docs/design.md section 6), and a progress line with rate and ETA.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unistd.h>
#include <vector>

#include "cuda/runtime.h"
#include "mixtape.h"

namespace examples {

// ---- flag checks --------------------------------------------------------------------------------

// Every floating-point flag checks this before its range: ->check(examples::finite)->check(CLI::Range(...)).
// CLI11's range checks compare with < and >, which are false for NaN, so NaN passes CLI::Range,
// PositiveNumber and NonNegativeNumber, and inf passes the one-sided ones; no flag of these
// programs means anything at NaN or inf.
inline const CLI::Validator finite(
    [](std::string& s) -> std::string {
      double v = 0.0;
      if (!CLI::detail::lexical_cast(s, v)) return "'" + s + "' is not a number";
      return std::isfinite(v) ? std::string() : "must be a finite number, got '" + s + "'";
    },
    "", "FINITE");

// Sign checks that say what they want. CLI11's NonNegativeNumber and PositiveNumber name their
// range as "0.000000 to 1797693134862315708...": the largest double in 309 digits.
inline CLI::Validator sign_check(bool strict) {
  return CLI::Validator(
      [strict](std::string& s) -> std::string {
        double v = 0.0;
        if (!CLI::detail::lexical_cast(s, v)) return "'" + s + "' is not a number";
        if (strict ? v > 0 : v >= 0) return std::string();
        return std::string(strict ? "must be more than 0" : "must be 0 or more") + ", got '" + s + "'";
      },
      strict ? "> 0" : ">= 0", strict ? "POSITIVE" : "NONNEGATIVE");
}
inline const CLI::Validator non_negative = sign_check(false);
inline const CLI::Validator positive = sign_check(true);

// A seed is a decimal integer in 0 .. 2^64-1. CLI11 reads an unsigned flag with strtoull, which
// takes "-1" as 2^64-1 and a number past 2^64-1 as 2^64-1: both would run with a seed nobody gave.
inline const CLI::Validator seed_range(
    [](std::string& s) -> std::string {
      static const std::string max = "18446744073709551615";  // 2^64-1
      const bool digits = !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
      const std::string n = digits ? s.substr(std::min(s.find_first_not_of('0'), s.size() - 1)) : s;
      if (!digits || n.size() > max.size() || (n.size() == max.size() && n > max))
        return "must be an integer from 0 to 18446744073709551615 (2^64-1), got '" + s + "'";
      return std::string();
    },
    "0..2^64-1", "SEED");

// --smoke's value for a flag the user did not give: an explicit flag wins over --smoke.
template <class T, class V>
void smoke_default(const CLI::App& app, const std::string& flag, T& value, const V& smoke_value) {
  if (app.count(flag) == 0) value = T(smoke_value);
}

// Checks, before any data is read or any step is trained, that `dir` (the value of `flag`) can
// hold the program's outputs: creates it, then writes and removes a probe file. Throws naming the
// flag and the folder, so that an unusable --out-dir costs a second, not a training run.
inline void check_output_dir(const std::string& dir, const char* flag = "--out-dir") {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  MT_CHECK(!ec, flag, " '", dir, "': cannot create the folder: ", ec.message());
  MT_CHECK(fs::is_directory(dir, ec), flag, " '", dir, "' is not a folder");
  const fs::path probe = fs::path(dir) / (".write-probe." + std::to_string(::getpid()));
  errno = 0;
  std::ofstream f(probe, std::ios::binary | std::ios::trunc);
  f << "probe\n";
  f.close();
  const bool written = f.good();
  const int err = errno;
  fs::remove(probe, ec);
  MT_CHECK(written, flag, " '", dir, "': cannot write a file in the folder",
           err != 0 ? mixtape::detail::cat(" (", std::strerror(err), ")") : std::string());
}

// --device: where the model, its optimizer state and every batch live (data loading stays on the
// host; batches are copied over one at a time). "auto" is cuda:0 when mixtape was built with CUDA
// and a GPU is visible, the CPU otherwise; "cuda" is cuda:0.
struct DeviceFlag {
  std::string name = "auto";

  void add_to(CLI::App& app) {
    app.add_option("--device", name, "auto (cuda:0 when a GPU is visible, else cpu), cpu, cuda or cuda:N")
        ->check([](const std::string& s) -> std::string {
          if (s == "auto") return {};
          try {
            mixtape::Device::parse(s);
            return {};
          } catch (const std::exception& e) { return e.what(); }
        })
        ->capture_default_str();
  }

  // The device asked for; throws a mixtape::Error that says why when it cannot be used (the
  // programs print it and exit with status 1).
  mixtape::Device resolve() const {
    using mixtape::Device;
    namespace cuda = mixtape::cuda;
    if (name == "auto") return cuda::is_available() ? Device::cuda(0) : Device::cpu();
    const Device d = Device::parse(name);
    if (d.is_cpu()) return d;
    MT_CHECK(cuda::built_with_cuda(), "--device ", name,
             ": this mixtape was built without CUDA (nvcc was not found "
             "at configure time; reconfigure with -DMIXTAPE_CUDA=ON on a machine with the CUDA toolkit), so only "
             "--device cpu works");
    const int n = cuda::device_count();
    MT_CHECK(n > 0, "--device ", name,
             ": no CUDA device is visible (no GPU, no driver, or CUDA_VISIBLE_DEVICES "
             "hides them; nvidia-smi lists what the driver sees); use --device cpu");
    MT_CHECK(d.index < n, "--device ", name, ": cuda:", d.index, " does not exist (", n, " CUDA device",
             n == 1 ? " is" : "s are", " visible: cuda:0", n > 1 ? mixtape::detail::cat("..cuda:", n - 1) : "", ")");
    return d;
  }
};

// "cpu (2 threads)" or "cuda:0 (NVIDIA H100 80GB HBM3, compute capability 9.0, 132 SMs, 79.1 GiB)".
inline std::string device_description(mixtape::Device d, int threads) {
  if (d.is_cpu()) return mixtape::detail::cat("cpu (", threads, " threads)");
  const mixtape::cuda::DeviceInfo info = mixtape::cuda::device_info(d.index);
  char mem[32];
  std::snprintf(mem, sizeof mem, "%.1f GiB", double(info.global_memory) / double(1ull << 30));
  return mixtape::detail::cat(d.str(), " (", info.name, ", compute capability ", info.major, ".", info.minor, ", ",
                              info.multiprocessors, " SMs, ", mem, ")");
}

// Waits for the work queued on `d` (a no-op on the CPU). Kernels run asynchronously, so a host
// clock read after a phase measures that phase only after this.
inline void synchronize(mixtape::Device d) {
  if (d.is_cuda()) mixtape::cuda::synchronize(d.index);
}

struct CommonFlags {
  int epochs = 1;
  int batch_size = 64;
  double lr = 1e-3;
  uint64_t seed = 0;
  int threads = 2;
  std::string metrics;  // JSON Lines file; empty = none
  int max_steps = 0;    // stop after this many training steps (0 = no limit), for smoke runs

  void add_to(CLI::App& app) {
    // Every program calls this first: make stdout line-buffered so results reach log files as
    // they happen, not when the program ends.
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    // A flag given twice takes its last value, so wrapper scripts can set defaults that the
    // user's own arguments override (scripts/run_main.sh).
    app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    app.add_option("--epochs", epochs, "training epochs")->check(CLI::Range(1, 100000))->capture_default_str();
    app.add_option("--batch-size", batch_size, "batch size")->check(CLI::Range(1, 1 << 20))->capture_default_str();
    app.add_option("--lr", lr, "learning rate")->check(finite)->check(positive)->capture_default_str();
    app.add_option("--seed", seed, "random seed")->check(seed_range)->capture_default_str();
    app.add_option("--threads", threads, "CPU threads for the GEMMs")
        ->check(CLI::Range(1, 1024))
        ->capture_default_str();
    app.add_option("--metrics", metrics, "write JSON Lines metrics to this file");
    app.add_option("--max-steps", max_steps, "stop after this many steps (0: run every epoch)")
        ->check(non_negative)
        ->capture_default_str();
  }
};

// --optimizer and --amsgrad: the rule that trains (optim/trainer.h). Without --optimizer a
// program keeps its own (cnn AdamW, char_lstm Adam or AdamW, mlp_demo SGD, dcgan Adam) with its
// own settings; another rule takes the program's lr, weight decay and momentum, and its own eps.
struct OptimizerFlags {
  std::string optimizer;  // empty: the program's own
  bool amsgrad = false;

  void add_to(CLI::App& app) {
    app.add_option("--optimizer", optimizer, "sgd, adam, adamw, rmsprop or adagrad (default: the program's own)")
        ->check(CLI::IsMember({"sgd", "adam", "adamw", "rmsprop", "adagrad"}));
    app.add_flag("--amsgrad", amsgrad, "Adam / AdamW: divide by the running maximum of the second moment");
  }

  // The program's spec `own` with the flags applied; throws for --amsgrad with a rule without it.
  mixtape::OptimizerSpec spec(mixtape::OptimizerSpec own) const {
    if (!optimizer.empty()) {
      const mixtape::OptimizerKind kind = mixtape::optimizer_kind_from_name(optimizer);
      if (kind != own.kind) own.eps.reset();  // the rule's own eps, not the program's
      own.kind = kind;
    }
    const bool adam = own.kind == mixtape::OptimizerKind::adam || own.kind == mixtape::OptimizerKind::adamw;
    MT_CHECK(!amsgrad || adam, "--amsgrad is an option of adam and adamw, not of --optimizer ", optimizer);
    own.amsgrad = own.amsgrad || amsgrad;
    return own;
  }
};

// The precision flags every program has (docs/design.md section 5; optim/trainer.h).
struct PrecisionFlags {
  std::string precision = "fp32";
  std::string loss_scale;  // empty: the policy's default (backoff for fp16 and fp16-pure, else none)
  std::string rounding = "stochastic";
  double grad_scale_gamma = 1e-3;
  int64_t grad_scale_period = 1;
  int64_t telemetry_every = 0;
  std::string telemetry_format;  // empty: the compute dtype (f16 for fp32 runs)
  // --precision fp8 (autograd/fp8.h); empty strings: not given (the defaults below).
  std::string fp8_recipe, fp8_format, mx_element, mx_scale, amax_algo;
  int fp8_margin = -1;
  int64_t amax_history = 0;

  void add_to(CLI::App& app) {
    app.add_option("--precision", precision,
                   "fp32, fp16 or bf16 (mixed: f32 masters), fp16-pure or bf16-pure, or fp8 (bf16 with 8-bit GEMM "
                   "operands)")
        ->check(CLI::IsMember({"fp32", "fp16", "bf16", "fp16-pure", "bf16-pure", "fp8"}))
        ->capture_default_str();
    app.add_option("--fp8-recipe", fp8_recipe,
                   "fp8: how operands are scaled: current (per tensor, own amax), delayed (per tensor, amax history), "
                   "rowwise (per row), mx (32-element blocks, E8M0 scales), block (1x128 / 128x128 tiles); default "
                   "current")
        ->check(CLI::IsMember({"current", "delayed", "rowwise", "mx", "block"}));
    app.add_option("--fp8-format", fp8_format,
                   "fp8: hybrid (E4M3 inputs and weights, E5M2 gradients) or e4m3 (E4M3 everywhere); default hybrid")
        ->check(CLI::IsMember({"hybrid", "e4m3"}));
    app.add_option("--mx-element", mx_element,
                   "fp8 --fp8-recipe mx: the inputs' and weights' element format: e4m3, e5m2 (MXFP8), e3m2, e2m3 "
                   "(MXFP6), e2m1 (MXFP4); default e4m3")
        ->check(CLI::IsMember({"e4m3", "e5m2", "e3m2", "e2m3", "e2m1"}));
    app.add_option("--mx-scale", mx_scale,
                   "fp8 --fp8-recipe mx: floor (the OCP spec's rule: the top element may saturate) or up (round the "
                   "scale up: nothing saturates); default floor")
        ->check(CLI::IsMember({"floor", "up"}));
    app.add_option("--fp8-margin", fp8_margin, "fp8 current/delayed/rowwise: scale to max / amax / 2^margin; default 0")
        ->check(CLI::Range(0, 64));
    app.add_option("--amax-history", amax_history, "fp8 --fp8-recipe delayed: steps of amax history; default 1024")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
    app.add_option("--amax-algo", amax_algo,
                   "fp8 --fp8-recipe delayed: max (of the history) or most_recent; default max")
        ->check(CLI::IsMember({"max", "most_recent"}));
    app.add_option("--loss-scale", loss_scale,
                   "none, static:S (S a power of two), backoff, logmax, or gradient (Zhao et al.); "
                   "default backoff for fp16 and fp16-pure, none otherwise");
    app.add_option("--update-rounding", rounding, "pure policies: nearest, stochastic or kahan")
        ->check(CLI::IsMember({"nearest", "stochastic", "kahan"}))
        ->capture_default_str();
    app.add_option("--grad-scale-gamma,--zhao-gamma", grad_scale_gamma, "gradient scaling: underflow threshold gamma'")
        ->check(finite)
        ->check(CLI::Range(1e-12, 0.5))
        ->capture_default_str();
    app.add_option("--grad-scale-period,--zhao-period", grad_scale_period,
                   "gradient scaling: recompute each node's scale every K steps")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 40))
        ->capture_default_str();
    app.add_option("--telemetry-every", telemetry_every,
                   "write per-layer gradient telemetry to the metrics every N steps (0: off)")
        ->check(non_negative)
        ->capture_default_str();
    app.add_option("--telemetry-format", telemetry_format, "format telemetry measures against: f16 or bf16")
        ->check(CLI::IsMember({"f16", "bf16"}));
  }

  mixtape::PrecisionOptions options(uint64_t seed, double max_grad_norm = 0.0) const {
    using namespace mixtape;
    PrecisionOptions o;
    o.precision = nn::precision_from_name(precision);
    const bool fp16 = o.precision == nn::Precision::fp16 || o.precision == nn::Precision::fp16_pure;
    o.loss_scale = parse_loss_scale(loss_scale.empty() ? (fp16 ? "backoff" : "none") : loss_scale);
    o.rounding = update_rounding_from_name(rounding);
    o.gradient_scaling = {.underflow_threshold = grad_scale_gamma, .update_period = grad_scale_period};
    o.seed = seed;
    o.max_grad_norm = max_grad_norm;
    o.telemetry_every = telemetry_every;
    if (!telemetry_format.empty()) o.telemetry_format = telemetry_format == "bf16" ? DType::bf16 : DType::f16;
    o.fp8 = fp8_options(o.precision == nn::Precision::fp8);
    return o;
  }

  // The fp8 flags as Fp8Options; throws naming the flag when one is given that does not apply.
  mixtape::Fp8Options fp8_options(bool fp8) const {
    using namespace mixtape;
    const bool any = !fp8_recipe.empty() || !fp8_format.empty() || !mx_element.empty() || !mx_scale.empty() ||
                     !amax_algo.empty() || fp8_margin >= 0 || amax_history > 0;
    MT_CHECK(fp8 || !any,
             "--fp8-recipe, --fp8-format, --mx-element, --mx-scale, --fp8-margin, --amax-history and "
             "--amax-algo apply to --precision fp8, not ",
             precision);
    Fp8Options f;
    if (!fp8_recipe.empty()) f.recipe = fp8_recipe_from_name(fp8_recipe);
    MT_CHECK((mx_element.empty() && mx_scale.empty()) || f.recipe == Fp8Recipe::mx,
             "--mx-element and --mx-scale apply to --fp8-recipe mx, not ", fp8_recipe_name(f.recipe));
    MT_CHECK((amax_history == 0 && amax_algo.empty()) || f.recipe == Fp8Recipe::delayed,
             "--amax-history and --amax-algo apply to --fp8-recipe delayed, not ", fp8_recipe_name(f.recipe));
    MT_CHECK(fp8_margin < 0 || f.recipe == Fp8Recipe::current || f.recipe == Fp8Recipe::delayed ||
                 f.recipe == Fp8Recipe::rowwise,
             "--fp8-margin applies to the amax recipes (current, delayed, rowwise), not ", fp8_recipe_name(f.recipe));
    if (fp8_format == "e4m3") f.grad_format = DType::e4m3;
    if (!mx_element.empty()) f.mx_element = dtype_from_name(mx_element);
    if (mx_scale == "up") f.mx_rule = ScaleRule::pow2_up;
    if (fp8_margin >= 0) f.margin = fp8_margin;
    if (amax_history > 0) f.amax_history_len = amax_history;
    f.amax_most_recent = amax_algo == "most_recent";
    return f;
  }
};

// The precision part of a "summary" event and of the closing line: skipped steps, the final loss
// scale, and the underflow the rounding census measured (sampled steps only).
inline void add_precision_summary(nlohmann::json& j, const mixtape::PrecisionTrainer& t,
                                  const std::string& prefix = {}) {
  j[prefix + "precision"] = mixtape::nn::precision_name(t.precision());
  j[prefix + "scaling"] = t.options().loss_scale.str();
  if (mixtape::nn::is_pure(t.precision()))
    j[prefix + "update_rounding"] = mixtape::update_rounding_name(t.options().rounding);
  j[prefix + "skipped_steps"] = t.skipped();
  j[prefix + "final_scale"] = t.scale();
  if (const mixtape::Fp8Context* f = t.fp8()) {
    j[prefix + "fp8_recipe"] = mixtape::fp8_recipe_name(f->options().recipe);
    for (mixtape::Fp8Role r : {mixtape::Fp8Role::input, mixtape::Fp8Role::weight, mixtape::Fp8Role::grad}) {
      const mixtape::QuantStats& q = f->totals(r);
      const std::string k = prefix + "fp8_" + mixtape::fp8_role_name(r) + "_";
      j[k + "format"] = mixtape::dtype_name(f->format(r));
      j[k + "saturated_rate"] = q.count ? double(q.saturated) / double(q.count) : 0.0;
      j[k + "flushed_rate"] = q.count ? double(q.flushed) / double(q.count) : 0.0;
      j[k + "subnormal_rate"] = q.count ? double(q.subnormal) / double(q.count) : 0.0;
    }
  }
  const mixtape::RoundingCounts& r = t.total_rounding();
  if (t.telemetry()) {
    j[prefix + "rounded_16bit"] = r.rounded;
    j[prefix + "underflow_rate"] = r.underflow_rate();
    j[prefix + "subnormal_rate"] = r.subnormal_rate();
  }
}

inline std::string precision_summary(const mixtape::PrecisionTrainer& t) {
  std::string s =
      mixtape::detail::cat(mixtape::nn::precision_name(t.precision()), ", loss scale ", t.options().loss_scale.str(),
                           ": ", t.skipped(), " of ", t.steps(), " steps skipped, final scale ", t.scale());
  if (t.telemetry() && t.total_rounding().rounded > 0)
    s += mixtape::detail::cat(", backward underflow ", 100.0 * t.total_rounding().underflow_rate(),
                              "% of nonzero values rounded to 16 bits (sampled steps)");
  if (const mixtape::Fp8Context* f = t.fp8()) {
    s += mixtape::detail::cat("; fp8 ", mixtape::fp8_recipe_name(f->options().recipe), " scaling:");
    for (mixtape::Fp8Role r : {mixtape::Fp8Role::input, mixtape::Fp8Role::weight, mixtape::Fp8Role::grad}) {
      const mixtape::QuantStats& q = f->totals(r);
      const double n = q.count ? double(q.count) : 1.0;
      s += mixtape::detail::cat(" ", mixtape::fp8_role_name(r), "s (", mixtape::dtype_name(f->format(r)), ") ",
                                100.0 * double(q.saturated) / n, "% saturated, ", 100.0 * double(q.flushed) / n,
                                "% flushed to zero", r == mixtape::Fp8Role::grad ? "" : ";");
    }
  }
  return s;
}

// The end of a "training diverged" message (after "(try a smaller --lr"): a 16-bit run without a
// loss scale is pointed to a dynamic one.
inline const char* diverged_hint(const mixtape::PrecisionTrainer& t) {
  return mixtape::nn::is_16bit(t.precision()) && t.options().loss_scale.kind == mixtape::LossScaleSpec::Kind::none
             ? ", or a dynamic --loss-scale such as backoff)"
             : ")";
}

// What the training steps cost the host on the device (Note [Runtime counters] in
// cuda/runtime.h), for the summary event: kernel launches per step, host synchronizations per
// step that does not log and per step that does (a step event or telemetry reads numbers back),
// and device allocations; each over the steps after the first (the first allocates what the later
// ones reuse). On the CPU every count is 0.
class StepCounters {
 public:
  void begin_step() { at_ = mixtape::cuda::runtime_counters(); }
  void end_step(bool logged) {
    const mixtape::cuda::RuntimeCounters now = mixtape::cuda::runtime_counters();
    if (steps_++ == 0) return;
    launches_ += now.launches - at_.launches;
    allocs_ += now.device_allocs - at_.device_allocs;
    (logged ? logging_syncs_ : syncs_) += now.host_syncs - at_.host_syncs;
    ++(logged ? logging_steps_ : quiet_steps_);
  }
  void add_to(nlohmann::json& summary) const {
    const auto per = [](uint64_t n, uint64_t steps) { return steps ? double(n) / double(steps) : 0.0; };
    summary["launches_per_step"] = per(launches_, logging_steps_ + quiet_steps_);
    summary["host_syncs_per_step"] = per(syncs_, quiet_steps_);
    summary["host_syncs_per_logging_step"] = per(logging_syncs_, logging_steps_);
    summary["device_allocs_after_warmup"] = allocs_;
  }

 private:
  mixtape::cuda::RuntimeCounters at_;
  uint64_t steps_ = 0, quiet_steps_ = 0, logging_steps_ = 0;
  uint64_t launches_ = 0, syncs_ = 0, logging_syncs_ = 0, allocs_ = 0;
};

// Note [Batches staged on the device]
// A host-to-device copy from pageable memory synchronizes the stream (Note [Runtime counters] in
// cuda/runtime.h), so copying each batch as its step begins would cost every step two
// synchronizations. On a GPU an epoch's batches are therefore gathered on the host as the loader
// makes them (from the epoch's first batch to run) and copied over in one transfer per field
// before its first step; each step's batch is a view of those, already on the device, so
// PrecisionTrainer::input only casts it there. On the CPU each batch is taken from the loader
// when its step comes, as before.
// Replaces the host tensors of a run of steps (steps[i][f]: field f of step i, the same fields
// in every step) by views of one device tensor per field: one copy per field.
inline void stage_on_device(std::vector<std::vector<mixtape::Tensor>*>& steps, mixtape::Device device) {
  if (steps.empty()) return;
  for (size_t f = 0; f < steps[0]->size(); ++f) {
    std::vector<mixtape::Tensor> field;
    for (const std::vector<mixtape::Tensor>* step : steps) field.push_back((*step)[f]);
    const mixtape::Tensor all = mixtape::concat(field, 0).to(device);
    int64_t row = 0;
    for (std::vector<mixtape::Tensor>* step : steps) {
      const int64_t n = (*step)[f].size(0);
      (*step)[f] = all.narrow(0, row, n);
      row += n;
    }
  }
}

class EpochBatches {
 public:
  EpochBatches(mixtape::data::DataLoader& loader, int64_t epoch, int64_t first_batch, mixtape::Device device)
      : loader_(loader), staged_on_(device) {
    loader_.start_epoch(epoch, first_batch);
    if (!device.is_cuda()) return;
    while (std::optional<mixtape::data::Batch> b = loader_.next()) batches_.push_back(std::move(*b));
    std::vector<std::vector<mixtape::Tensor>*> steps;
    for (mixtape::data::Batch& b : batches_) steps.push_back(&b.tensors);
    stage_on_device(steps, device);
  }
  // The next batch (on the device when staged there), or nullopt when the epoch is over.
  std::optional<mixtape::data::Batch> next() {
    if (!staged_on_.is_cuda()) return loader_.next();
    if (next_ == batches_.size()) return std::nullopt;
    return std::move(batches_[next_++]);
  }

 private:
  mixtape::data::DataLoader& loader_;
  mixtape::Device staged_on_;
  std::vector<mixtape::data::Batch> batches_;
  size_t next_ = 0;
};

// Note [Draws staged on the device]
// Some of a step's inputs are drawn on the host from a generator the checkpoint records
// (char_lstm's windows, dcgan's noise). On a GPU, copying them as the step begins would
// synchronize (pageable memory), so the draws of a run of steps are made together, in step
// order, and copied in one transfer per field before the first of them (as EpochBatches stages
// an epoch). The caller ends a run where a checkpoint may be saved (steps_until_checkpoint), so
// the generator a checkpoint records has drawn exactly the steps before it; a run is at most
// kMaxStaged steps, to bound the memory. On the CPU each step draws when it comes. Either way a
// step gets the same values.
class StagedDraws {
 public:
  static constexpr int64_t kMaxStaged = 256;
  using Draw = std::function<std::vector<mixtape::Tensor>()>;  // one step's fields, on the host
  StagedDraws(mixtape::Device device, Draw draw) : device_(device), draw_(std::move(draw)) {}
  // The next step's fields; on a GPU, when none are staged, those of the next `steps` steps (at
  // least this one) are drawn and copied first.
  std::vector<mixtape::Tensor> next(int64_t steps) {
    if (!device_.is_cuda()) return draw_();
    if (next_ == staged_.size()) stage(std::clamp<int64_t>(steps, 1, kMaxStaged));
    return std::move(staged_[next_++]);
  }

 private:
  void stage(int64_t n) {
    staged_.clear();
    next_ = 0;
    std::vector<std::vector<mixtape::Tensor>*> steps;
    for (int64_t i = 0; i < n; ++i) staged_.push_back(draw_());  // in step order
    for (std::vector<mixtape::Tensor>& step : staged_) steps.push_back(&step);
    stage_on_device(steps, device_);
  }

  mixtape::Device device_;
  Draw draw_;
  std::vector<std::vector<mixtape::Tensor>> staged_;
  size_t next_ = 0;
};

// The training losses of the steps since the last read, kept on the device that computed them:
// each step copies its loss (or, with width w, its w one-element values) into a readout tensor
// (no synchronization, Note [Readout block] in cuda/runtime.h), and take() reads them all in the
// one synchronization of a logging step, which also brings the trainer's step report. On the CPU
// the same bookkeeping reads plain memory, so a run sums exactly the values it summed when it
// read each loss at once.
class LossLog {
 public:
  LossLog(int64_t capacity, mixtape::Device device, int64_t width = 1)
      : width_(width),
        buf_(mixtape::readout_zeros({std::max<int64_t>(capacity, 1) * width}, mixtape::DType::f32, device)) {}
  // Records a step's one-element values (width of them); returns whether the log is full (take()
  // before the next add()).
  bool add(const mixtape::Tensor& loss) { return add(std::vector<mixtape::Tensor>{loss}); }
  bool add(const std::vector<mixtape::Tensor>& values) {
    MT_CHECK(int64_t(values.size()) == width_, "LossLog: ", values.size(), " values for a log of width ", width_);
    MT_CHECK(n_ < capacity(), "LossLog: full; take() the losses first");
    for (int64_t j = 0; j < width_; ++j) buf_.narrow(0, n_ * width_ + j, 1).copy_(values[size_t(j)].reshape({1}));
    return ++n_ == capacity();
  }
  // The values recorded since the last take(), step by step (width per step), in order: one read
  // of the device, or none.
  std::vector<double> take() {
    if (n_ == 0) return {};
    const std::vector<double> v = buf_.narrow(0, 0, n_ * width_).to_vector();
    n_ = 0;
    return v;
  }
  int64_t pending() const { return n_; }
  int64_t capacity() const { return buf_.numel() / width_; }

 private:
  int64_t width_;
  mixtape::Tensor buf_;
  int64_t n_ = 0;
};

// ---- output files (checkpoints: checkpoint.h) --------------------------------------------

// dir/name as a string (--out-dir and a file name).
inline std::string output_path(const std::string& dir, const std::string& name) {
  return (std::filesystem::path(dir) / name).string();
}

// One JSON object per line, flushed per event so a crash loses nothing already written.
class Metrics {
 public:
  // `append`: a resumed run adds its events after those of the run it continues.
  explicit Metrics(const std::string& path, bool append = false) : path_(path) {
    if (path.empty()) return;
    errno = 0;
    out_.open(path, std::ios::out | (append ? std::ios::app : std::ios::trunc));
    MT_CHECK(out_.good(), "cannot open metrics file '", path, "' for writing", reason());
  }
  void write(const nlohmann::json& event) {
    if (!out_.is_open()) return;
    errno = 0;
    out_ << event.dump() << '\n';
    out_.flush();
    MT_CHECK(out_.good(), "writing the metrics file '", path_, "' failed", reason());
  }
  // The step's telemetry lines (PrecisionTrainer::write_telemetry), flushed together.
  void write_telemetry(const mixtape::PrecisionTrainer& t, const std::string& prefix = {}) {
    if (!out_.is_open()) return;
    errno = 0;
    t.write_telemetry([this](std::string_view line) { out_ << line << '\n'; }, prefix);
    out_.flush();
    MT_CHECK(out_.good(), "writing the metrics file '", path_, "' failed", reason());
  }

 private:
  // ": No space left on device" after a failed stream operation, when the C library said why.
  static std::string reason() { return errno != 0 ? std::string(": ") + std::strerror(errno) : std::string(); }

  std::string path_;
  std::ofstream out_;
};

// "epoch 2/10 [ 312/ 938] loss 0.4123  41.2 steps/s  ETA 15s": redrawn in place twice a second
// on a terminal, one line every 15 s when stderr is a file or a pipe.
class Progress {
 public:
  Progress(int epochs, int64_t steps_per_epoch)
      : epochs_(epochs), steps_(steps_per_epoch), tty_(isatty(fileno(stderr)) != 0) {}
  void start_epoch() { t0_ = std::chrono::steady_clock::now(); }
  void update(int epoch, int64_t step, double loss, bool force = false) {
    if (quiet) return;
    const auto now = std::chrono::steady_clock::now();
    if (!force && now - last_ < (tty_ ? std::chrono::milliseconds(500) : std::chrono::milliseconds(15000))) return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - t0_).count();
    const double rate = secs > 0 ? double(step) / secs : 0.0;
    const double eta = rate > 0 ? double(steps_ - step) / rate : 0.0;
    std::fprintf(stderr, "%sepoch %d/%d [%5lld/%5lld] loss %.4f  %6.1f steps/s  ETA %4.0fs ", tty_ ? "\r" : "", epoch,
                 epochs_, (long long)step, (long long)steps_, loss, rate, eta);
    if (force || !tty_) std::fputc('\n', stderr);
  }

 private:
  int epochs_;
  int64_t steps_;
  bool tty_;
  std::chrono::steady_clock::time_point t0_{}, last_{};

 public:
  bool quiet = false;  // a data-parallel rank other than 0 (Note [Data-parallel examples])
};

// Note [Data-parallel examples]
// `mpirun -np N ./cnn ...` (likewise char_lstm, dcgan) trains one model on N ranks: each builds
// the same model, takes rank 0's parameters (DataParallel::broadcast), trains on rows
// [rank B/N, (rank + 1) B/N) of every global batch of --batch-size B, and the trainer averages
// the gradients (docs/data-parallel.md). The losses reported are the means over the ranks. Only
// rank 0 prints, writes --metrics and saves checkpoints; every rank reads the checkpoint it
// resumes from. Without mpirun the program is the single-process one, unchanged.
// --dist-timeout: how long a collective waits for the other ranks (Note [Collectives that cannot
// hang] in dist/communicator.h).
struct DataParallelFlags {
  double timeout = mixtape::dist::Communicator::kDefaultTimeout;

  void add_to(CLI::App& app) {
    app.add_option("--dist-timeout", timeout,
                   "under mpirun: seconds a collective waits for the other ranks; then every rank still running "
                   "stops with an error naming the collective, the step and the ranks that did not arrive")
        ->check(CLI::Range(1e-3, 1e7))
        ->capture_default_str();
  }
};

inline std::shared_ptr<mixtape::dist::DataParallel> data_parallel(int64_t batch_size, const DataParallelFlags& flags,
                                                                  const char* program) {
  auto dp = std::make_shared<mixtape::dist::DataParallel>(mixtape::dist::world());
  dp->comm().set_timeout(flags.timeout);
  if (!dp->distributed()) return dp;
  MT_CHECK(batch_size % dp->size() == 0, program, ": --batch-size ", batch_size, " does not split into ", dp->size(),
           " equal shards (one per rank); choose a multiple of ", dp->size());
  if (!dp->is_root())
    MT_CHECK(std::freopen("/dev/null", "w", stdout) != nullptr, program, ": cannot silence rank ", dp->rank(),
             "'s output");
  std::printf("%s: data parallel, %s, %lld rows per rank of each batch of %lld\n", program, dp->describe().c_str(),
              (long long)(batch_size / dp->size()), (long long)batch_size);
  return dp;
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace examples
