// Shared pieces of the example programs: the flags every program has, and what they check
// (the training loop, its metrics file, progress line and checkpoints are the library's: train/).
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

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
                   "rowwise (per row), mx (32-element blocks, E8M0 scales), block (1x128 / 128x128 tiles), nvfp4 "
                   "(E2M1 inputs and weights, an E4M3 scale per 16 under an fp32 tensor scale); default current")
        ->check(CLI::IsMember({"current", "delayed", "rowwise", "mx", "block", "nvfp4"}));
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

// ---- output files (checkpoints: checkpoint.h) --------------------------------------------

// dir/name as a string (--out-dir and a file name).
inline std::string output_path(const std::string& dir, const std::string& name) {
  return (std::filesystem::path(dir) / name).string();
}

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

}  // namespace examples
