// precision_lab: the same CNN (examples/cnn_train.h) on the same data, from the same initial
// weights and batch order, under ten precision configurations, and one table of what each did:
//
//   config            policy      loss scale   update rounding
//   fp32              fp32        none         -
//   fp16-noscale      fp16        none         -
//   fp16-static       fp16        static:S     -
//   fp16-backoff      fp16        backoff      -
//   fp16-logmax       fp16        logmax       -
//   fp16-gradient     fp16        gradient     -       (Zhao et al.'s per-operator scaling)
//   bf16              bf16        none         -
//   bf16-pure-nearest bf16-pure   none         nearest
//   bf16-pure-sr      bf16-pure   none         stochastic
//   bf16-pure-kahan   bf16-pure   none         kahan
//
// Columns: final test accuracy and train loss, skipped steps, final loss scale, the backward
// pass's measured underflow (RoundingCensus, tensor/core/rounding_census.h: the fraction of
// nonzero fp32 results that rounded to zero when stored in 16 bits, over the telemetry-sampled
// steps; "-" where nothing is stored in 16 bits), and wall time. Each configuration writes its own metrics file
// (<out-dir>/<config>.jsonl, with telemetry) for scripts/plot_metrics.py, and the table goes to
// <out-dir>/lab.md and lab.json as well.
//
//   ./precision_lab --out-dir lab                 # the table in docs/mixed-precision.md
//   ./precision_lab --lr 2e-4 --out-dir lab-small  # updates below bf16 resolution
//   ./precision_lab --only fp32,bf16-pure-nearest,bf16-pure-sr --epochs 1
//   ./precision_lab --suite stress --out-dir lab-stress     # Note [Stress regimes]
//   ./precision_lab --suite fp8 --out-dir lab-fp8           # Note [Fp8 regimes]: the 8-bit recipes
//
// --suite fp8 runs the fp8-* configurations (8-bit GEMM operands on the bf16 policy; autograd/fp8.h)
// on the cnn and on a small char_lstm (Note [The char_lstm of the lab]); its tables add, per
// role, the shares of operand elements that saturated and that flushed to zero.
//
// --device (default auto: cuda:0 when a GPU is visible) runs every configuration there. The
// backward-underflow column comes from the rounding census, which counts the roundings of the CPU
// kernels; CUDA kernels round on the device without counting, so on a GPU that column reads "-"
// (per-gradient underflow is still measured by the telemetry's grad_telemetry, in the metrics).
#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <fstream>
#include <sstream>

#include "char_lstm_model.h"
#include "cnn_train.h"
#include "common.h"
#include "mixtape.h"

using namespace mixtape;

namespace {

struct LabConfig {
  std::string name;
  std::string precision;
  std::string loss_scale;
  std::string rounding;  // pure policies only
  // --precision fp8 only: the flags of examples/common.h's PrecisionFlags (empty, 0: their default)
  std::string fp8_recipe, fp8_format, mx_element, mx_scale, amax_algo;
  int64_t amax_history = 0;
};

// The first kDefaultConfigs of lab_configs are the default suite's; the fp8 configurations after
// them run in --suite fp8 (Note [Fp8 regimes]) or when --only names them.
constexpr size_t kDefaultConfigs = 10;

std::vector<LabConfig> lab_configs(const std::string& static_scale) {
  return {
      {"fp32", "fp32", "none", ""},
      {"fp16-noscale", "fp16", "none", ""},
      {"fp16-static", "fp16", "static:" + static_scale, ""},
      {"fp16-backoff", "fp16", "backoff", ""},
      {"fp16-logmax", "fp16", "logmax", ""},
      {"fp16-gradient", "fp16", "gradient", ""},
      {"bf16", "bf16", "none", ""},
      {"bf16-pure-nearest", "bf16-pure", "none", "nearest"},
      {"bf16-pure-sr", "bf16-pure", "none", "stochastic"},
      {"bf16-pure-kahan", "bf16-pure", "none", "kahan"},
      // 8 bits: E4M3 inputs and weights, E5M2 gradients (HYBRID) unless the name says e4m3
      {"fp8-current", "fp8", "none", "", "current"},
      {"fp8-current-e4m3", "fp8", "none", "", "current", "e4m3"},
      {"fp8-delayed", "fp8", "none", "", "delayed"},  // Transformer Engine's defaults: 1024 steps, max
      {"fp8-delayed-h16", "fp8", "none", "", "delayed", "", "", "", "", 16},
      {"fp8-delayed-recent", "fp8", "none", "", "delayed", "", "", "", "most_recent"},
      {"fp8-rowwise", "fp8", "none", "", "rowwise"},
      {"fp8-block", "fp8", "none", "", "block"},
      {"fp8-mxfp8", "fp8", "none", "", "mx", "", "e4m3"},
      {"fp8-mxfp8-up", "fp8", "none", "", "mx", "", "e4m3", "up"},
      {"fp8-mxfp6", "fp8", "none", "", "mx", "", "e2m3"},
      {"fp8-mxfp4", "fp8", "none", "", "mx", "", "e2m1"},
      {"fp8-mxfp4-up", "fp8", "none", "", "mx", "", "e2m1", "up"},
      {"fp8-nvfp4", "fp8", "none", "", "nvfp4"},
      {"fp8-gradient", "fp8", "gradient", "", "current"},
      {"fp8-gradient-e4m3", "fp8", "gradient", "", "current", "e4m3"},
  };
}

// What the input operands of one 8-bit GEMM site met over a run (each step's Fp8Context::records).
struct SiteInputs {
  OpId op = OpId::linear;
  int64_t count = 0, flushed = 0, saturated = 0;
  void add(OpId o, int64_t n, int64_t flush, int64_t sat) { op = o, count += n, flushed += flush, saturated += sat; }
};

struct LabRow {
  LabConfig config;
  std::string regime;         // stress and fp8 suites only
  std::string model = "cnn";  // or "char_lstm" (fp8 suite)
  uint64_t seed = 0;
  double accuracy = 0, test_loss = 0, train_loss = 0, wall = 0;
  double aux_mse = std::nan("");  // the decoder head's test MSE (nonuniform regime)
  double val_bpc = std::nan("");  // char_lstm: validation bits per character
  int64_t steps = 0, skipped = 0, nonfinite = 0;
  float final_scale = 1;
  RoundingCounts rounding;
  std::optional<std::array<QuantStats, 3>> fp8;  // fp8 policy: what each role's operands met (Fp8Context::totals)
  std::map<int64_t, SiteInputs> fp8_inputs;      // fp8 policy: each site's input operands
};

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string scale_str(float s) {
  int e = 0;
  std::frexp(s, &e);
  return "2^" + std::to_string(e - 1);
}

// The table as Markdown (also what is printed).
std::string table(const std::vector<LabRow>& rows) {
  std::ostringstream os;
  os << "| config | test accuracy | train loss | skipped steps | final scale | backward underflow | wall s |\n"
     << "|---|---:|---:|---:|---:|---:|---:|\n";
  for (const LabRow& r : rows) {
    os << "| " << r.config.name << " | " << fmt("%.2f%%", 100.0 * r.accuracy) << " | "
       << (std::isfinite(r.train_loss) ? fmt("%.4f", r.train_loss) : std::string("nan")) << " | " << r.skipped << " | "
       << scale_str(r.final_scale) << " | "
       << (r.rounding.nonzero > 0 ? fmt("%.3f%%", 100.0 * r.rounding.underflow_rate()) : std::string("-")) << " | "
       << fmt("%.0f", r.wall) << " |\n";
  }
  return os.str();
}

nlohmann::json row_json(const LabRow& r, const Device& device) {
  auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  nlohmann::json j = {
      {"config", r.config.name},
      {"precision", r.config.precision},
      {"loss_scale", r.config.loss_scale},
      {"update_rounding", r.config.rounding},
      {"device", device.str()},
      {"seed", r.seed},
      {"test_accuracy", r.accuracy},
      {"test_loss", num(r.test_loss)},
      {"train_loss", num(r.train_loss)},
      {"steps", r.steps},
      {"skipped", r.skipped},
      {"nonfinite_losses", r.nonfinite},
      {"final_scale", r.final_scale},
      {"rounded_16bit", r.rounding.rounded},
      {"underflow_rate", r.rounding.nonzero ? nlohmann::json(r.rounding.underflow_rate()) : nlohmann::json(nullptr)},
      {"wall_s", r.wall}};
  if (!r.regime.empty()) j["regime"] = r.regime;
  j["model"] = r.model;
  if (std::isfinite(r.val_bpc)) j["val_bpc"] = r.val_bpc;
  if (r.fp8) {
    for (const Fp8Role role : {Fp8Role::input, Fp8Role::weight, Fp8Role::grad}) {
      const QuantStats& q = (*r.fp8)[size_t(role)];
      j[std::string("fp8_") + fp8_role_name(role)] = {{"count", q.count},         {"saturated", q.saturated},
                                                      {"flushed", q.flushed},     {"subnormal", q.subnormal},
                                                      {"nonfinite", q.nonfinite}, {"amax", q.amax}};
    }
    nlohmann::json sites = nlohmann::json::array();
    for (const auto& [site, in] : r.fp8_inputs)
      sites.push_back({{"site", site},
                       {"op", op_name(in.op)},
                       {"count", in.count},
                       {"flushed", in.flushed},
                       {"saturated", in.saturated}});
    j["fp8_input_sites"] = sites;
  }
  if (std::isfinite(r.aux_mse)) j["test_aux_mse"] = r.aux_mse;
  return j;
}

// Draws the figures of the runs in `dir` into dir/plots with scripts/plot_metrics.py (needs
// python3 with matplotlib; scripts/install_deps.sh installs both). A failure is reported, not
// fatal: the tables are already written.
void draw_figures(const std::filesystem::path& dir) {
#ifdef MIXTAPE_PLOT_SCRIPT
  auto quote = [](const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  };
  const std::string cmd = "python3 " + quote(MIXTAPE_PLOT_SCRIPT) + " " + quote(dir.string()) + "/*.jsonl --out " +
                          quote((dir / "plots").string()) + " > " + quote((dir / "plots.log").string()) + " 2>&1";
  const int status = std::system(cmd.c_str());
  if (status == 0) std::printf("figures in %s/plots/\n", dir.string().c_str());
  else std::printf("figures not drawn (%s failed; see %s/plots.log)\n", MIXTAPE_PLOT_SCRIPT, dir.string().c_str());
#else
  std::printf("figures not drawn: run scripts/plot_metrics.py %s/*.jsonl\n", dir.string().c_str());
#endif
}

// Writes a whole file or throws naming it (a lab that could not save its table must not exit 0).
void write_file(const std::filesystem::path& path, const std::string& text) {
  errno = 0;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  MT_CHECK(f.good(), "could not write ", path.string(), errno != 0 ? detail::cat(": ", std::strerror(errno)) : "");
}

// Fails now, naming the path, when `path` could not be written at the end: a folder in its way, or
// a file that cannot be opened for writing. Leaves an existing file as it was.
void check_writable(const std::filesystem::path& path) {
  std::error_code ec;
  MT_CHECK(!std::filesystem::is_directory(path, ec), "could not write ", path.string(), ": it is a folder");
  const bool existed = std::filesystem::exists(path, ec);
  errno = 0;
  std::ofstream f(path, std::ios::binary | std::ios::app);
  const bool ok = f.is_open();
  f.close();
  MT_CHECK(ok, "could not write ", path.string(), errno != 0 ? detail::cat(": ", std::strerror(errno)) : "");
  if (!existed) std::filesystem::remove(path, ec);
}

// ---- the stress suite (--suite stress) ---------------------------------------------------------
//
// Note [Stress regimes]
// On the default configuration every technique ends within noise of fp32: the cnn's gradients
// fit fp16 under any loss scale, and its updates are large enough for bf16. Each regime below
// changes one thing so that one paper's effect decides the result, and runs over several seeds
// (mean +- standard deviation) so that a difference can be told from noise:
//   underflow    the cross entropy is weighted 2^-14 (AdamW's eps too, so fp32 trains exactly
//                as unweighted): most gradients fall below fp16's 2^-24 without a loss scale
//                (Micikevicius et al., section 3.2). Every scaler should recover.
//   nonuniform   a decoder head reconstructs the image from the encoder's features, its per-pixel
//                MSE weighted 2^-32, beside the classifier (AdamW eps 1e-20, so fp32's Adam trains
//                both heads at full speed). The classifier's largest gradients cap any single
//                loss scale near 2^15; the decoder's gradients need a scale near 2^31 to stay
//                above fp16's 2^-24: one scale cannot hold both (Zhao et al., section 1). Per-
//                node scales give the decoder's own cast and GEMMs their own betas.
//   stall        lr 2e-4: most AdamW updates are below half a bf16 ulp of their weight, so
//                nearest rounding drops them (Zamirai et al., Theorem 1); stochastic rounding
//                and Kahan summation keep them.
struct Regime {
  std::string name, what;
  std::vector<std::string> configs;
  double loss_weight = 1.0, aux_weight = 0.0, adam_eps = 1e-8, lr = 2e-3;
  int epochs = 1;
};

std::vector<Regime> stress_regimes() {
  const std::vector<std::string> fp16 = {"fp32",         "fp16-noscale", "fp16-static",
                                         "fp16-backoff", "fp16-logmax",  "fp16-gradient"};
  return {
      {.name = "underflow",
       .what = "cross entropy weighted 2^-14",
       .configs = fp16,
       .loss_weight = std::ldexp(1.0, -14),
       .adam_eps = 1e-8 * std::ldexp(1.0, -14),
       .epochs = 1},
      {.name = "nonuniform",
       .what = "classifier + decoder head whose per-pixel MSE is weighted 2^-32",
       .configs = fp16,
       .aux_weight = std::ldexp(1.0, -32),
       .adam_eps = 1e-20,
       .epochs = 1},
      {.name = "stall",
       .what = "lr 2e-4: updates below half a bf16 ulp",
       .configs = {"fp32", "bf16", "bf16-pure-nearest", "bf16-pure-sr", "bf16-pure-kahan"},
       .lr = 2e-4,
       .epochs = 3},
  };
}

struct Stat {
  double mean = 0, sd = 0;
};
Stat stat(const std::vector<double>& v) {
  Stat s;
  if (v.empty()) return s;
  for (double x : v) s.mean += x;
  s.mean /= double(v.size());
  if (v.size() > 1) {
    for (double x : v) s.sd += (x - s.mean) * (x - s.mean);
    s.sd = std::sqrt(s.sd / double(v.size() - 1));  // sample standard deviation
  }
  return s;
}

// The rows of each configuration (its seeds), configurations in the order first seen.
std::vector<std::vector<const LabRow*>> by_config(const std::vector<LabRow>& rows) {
  std::vector<std::vector<const LabRow*>> groups;
  for (const LabRow& r : rows) {
    auto g = std::find_if(groups.begin(), groups.end(),
                          [&](const auto& group) { return group[0]->config.name == r.config.name; });
    if (g == groups.end()) groups.push_back({&r});
    else g->push_back(&r);
  }
  return groups;
}

// One row per configuration over its seeds, in the order first seen: mean +- sd.
std::string stress_table(const std::vector<LabRow>& rows, bool with_aux) {
  std::ostringstream os;
  os << "| config | seeds | test accuracy | " << (with_aux ? "decoder test MSE | " : "")
     << "skipped steps | backward underflow | wall s |\n|---|---:|---:|" << (with_aux ? "---:|" : "")
     << "---:|---:|---:|\n";
  for (const std::vector<const LabRow*>& group : by_config(rows)) {
    const std::string& name = group[0]->config.name;
    std::vector<double> acc, mse, skipped, under;
    double wall = 0;
    for (const LabRow* r : group) {
      acc.push_back(100.0 * r->accuracy);
      mse.push_back(r->aux_mse);
      skipped.push_back(double(r->skipped));
      if (r->rounding.nonzero > 0) under.push_back(100.0 * r->rounding.underflow_rate());
      wall += r->wall;
    }
    const Stat a = stat(acc), m = stat(mse), sk = stat(skipped), u = stat(under);
    os << "| " << name << " | " << acc.size() << " | " << fmt("%.2f", a.mean) << fmt(" ± %.2f%%", a.sd) << " | ";
    if (with_aux) os << fmt("%.4f", m.mean) << fmt(" ± %.4f", m.sd) << " | ";
    os << fmt("%.1f", sk.mean) << " | " << (under.empty() ? std::string("-") : fmt("%.3f%%", u.mean)) << " | "
       << fmt("%.0f", wall) << " |\n";
  }
  return os.str();
}

// ---- the program's steps ------------------------------------------------------------------------

// precision_lab's own flags; the shared ones (--epochs, --lr, --seed, --device, ...) are in common.h.
struct LabFlags {
  std::string data_dir = data::kFashionMnistDir, text = data::kFortunesDir, out_dir = "precision_lab", only,
              static_scale = "1024";
  std::string suite = "default", regimes;
  int64_t width = 16, limit = 12000, test_limit = 5000, telemetry_every = 25, log_every = 10, lstm_steps = 300;
  double weight_decay = 1e-4, dropout = 0.3;
  int seeds = 0;  // 0: the suite's default
  bool smoke = false, plots = true;
  int64_t checkpoint_every = 0;
  bool resume = false;

  void add_to(CLI::App& app) {
    app.add_option("--suite", suite,
                   "default: the ten 16-bit configurations on the cnn; stress: three regimes built so that each "
                   "technique changes the result (underflow, nonuniform, stall; Note [Stress regimes]); fp8: the "
                   "8-bit recipes on the cnn and the char_lstm in six regimes (formats, outlier10, outlier16, spike, "
                   "mx, gradscale; Note [Fp8 regimes]); stress and fp8 over --seeds seeds")
        ->check(CLI::IsMember({"default", "stress", "fp8"}))
        ->capture_default_str();
    app.add_option("--regimes", regimes, "stress and fp8 suites: comma-separated regimes to run (default: all)");
    app.add_option("--text", text, "fp8 suite: the char_lstm's corpus, a text file or folder")->capture_default_str();
    app.add_option("--lstm-steps", lstm_steps, "fp8 suite: training steps of each char_lstm run")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 40))
        ->capture_default_str();
    app.add_flag("--plots,!--no-plots", plots,
                 "draw each suite's figures into <out-dir>[/<regime>]/plots (python3 + matplotlib)")
        ->capture_default_str();
    app.add_option("--checkpoint-every", checkpoint_every,
                   "save each run's whole state to <out-dir>/<run>.safetensors every N steps and at its end")
        ->check(CLI::Range(int64_t(0), int64_t(1) << 40))
        ->capture_default_str();
    app.add_flag("--resume", resume,
                 "continue each run from <out-dir>/<run>.safetensors where it exists (a finished run is evaluated "
                 "again, not retrained); runs save their state at the end");
    app.add_option("--seeds", seeds, "seeds per configuration (default: 1; stress, fp8: 3); reported as mean +- sd")
        ->check(CLI::Range(1, 100));
    app.add_option("--data", data_dir, "directory with the (Fashion-)MNIST IDX files")->capture_default_str();
    app.add_option("--out-dir", out_dir, "metrics per configuration, lab.md and lab.json go here")
        ->capture_default_str();
    app.add_option("--only", only,
                   "comma-separated configurations to run (default: the suite's own); any of the lab's, the fp8 "
                   "ones (fp8-current, fp8-mxfp4, ...) included: an unknown name lists them all");
    app.add_option("--static-scale", static_scale, "S of the fp16-static configuration (a power of two)")
        ->capture_default_str();
    app.add_option("--width", width, "channels of the first conv")->check(CLI::Range(1, 1024))->capture_default_str();
    app.add_option("--dropout", dropout, "dropout before the last layer")
        ->check(examples::finite)
        ->check(CLI::Range(0.0, 0.95))
        ->capture_default_str();
    app.add_option("--weight-decay", weight_decay, "AdamW weight decay")
        ->check(examples::finite)
        ->check(examples::non_negative)
        ->capture_default_str();
    app.add_option("--limit", limit, "training images (0: all 60000)")
        ->check(examples::non_negative)
        ->capture_default_str();
    app.add_option("--test-limit", test_limit, "test images (0: all 10000)")
        ->check(examples::non_negative)
        ->capture_default_str();
    app.add_option("--telemetry-every", telemetry_every, "telemetry and rounding census every N steps")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 40))
        ->capture_default_str();
    app.add_option("--log-every", log_every, "steps between step events")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 40))
        ->capture_default_str();
    app.add_flag("--smoke", smoke, "every configuration for a few steps on a subset (CI smoke run)");
  }

  // After parsing: --smoke's configuration for the flags not given explicitly.
  void finish(const CLI::App& app, examples::CommonFlags& flags) {
    if (!smoke) return;
    using examples::smoke_default;
    smoke_default(app, "--epochs", flags.epochs, 1);
    smoke_default(app, "--limit", limit, 1024);
    smoke_default(app, "--test-limit", test_limit, 500);
    smoke_default(app, "--width", width, 4);
    smoke_default(app, "--telemetry-every", telemetry_every, 4);
    smoke_default(app, "--log-every", log_every, 2);
    smoke_default(app, "--lstm-steps", lstm_steps, 6);
  }
};

// Whether --regimes (all when not given) names a regime.
bool selected(const LabFlags& o, const std::string& regime) {
  return o.regimes.empty() || ("," + o.regimes + ",").find("," + regime + ",") != std::string::npos;
}

// Every name --regimes gives must be one of the suite's regimes, checked before the first run starts.
void check_regimes(const LabFlags& o, const std::vector<std::string>& names) {
  if (o.regimes.empty()) return;
  MT_CHECK(o.suite != "default", "--regimes applies to --suite stress and --suite fp8");
  std::stringstream ss(o.regimes);
  for (std::string name; std::getline(ss, name, ',');) {
    if (std::find(names.begin(), names.end(), name) != names.end()) continue;
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    throw Error(detail::cat("--regimes: unknown ", o.suite, " regime '", name, "' (choose from ", list, ")"));
  }
}

// The configurations --only names (without it, the default suite's ten, or every one for the
// suites that pick their own), checked before the first run starts.
std::vector<LabConfig> select_configs(const LabFlags& o) {
  std::vector<LabConfig> configs = lab_configs(o.static_scale);
  if (o.only.empty() && o.suite == "default") configs.resize(kDefaultConfigs);
  if (!o.only.empty()) {
    std::vector<LabConfig> picked;
    std::stringstream ss(o.only);
    for (std::string name; std::getline(ss, name, ',');) {
      auto it = std::find_if(configs.begin(), configs.end(), [&](const LabConfig& c) { return c.name == name; });
      if (it == configs.end()) {
        std::string names;
        for (const LabConfig& c : configs) names += (names.empty() ? "" : ", ") + c.name;
        throw Error(detail::cat("--only: unknown configuration '", name, "' (choose from ", names, ")"));
      }
      picked.push_back(*it);
    }
    configs = picked;
  }
  for (const LabConfig& c : configs) parse_loss_scale(c.loss_scale);
  return configs;
}

// What every run of a suite shares: the data, the device, the base configuration of the cnn.
struct Lab {
  const LabFlags& o;
  Device device;
  data::LabeledImages train, test;
  examples::CnnConfig base;
  std::vector<LabConfig> configs;
  // --suite fp8: the char_lstm's corpus and validation streams (Note [The char_lstm of the lab])
  std::optional<data::TextCorpus> corpus;
  std::vector<data::TextBatch> val_batches;
};

// A configuration's options, as its flags would give them (examples/common.h's PrecisionFlags).
PrecisionOptions precision_options(const Lab& lab, const LabConfig& lc, uint64_t seed, double clip = 0.0) {
  examples::PrecisionFlags pf;
  pf.precision = lc.precision;
  pf.loss_scale = lc.loss_scale;
  if (!lc.rounding.empty()) pf.rounding = lc.rounding;
  pf.fp8_recipe = lc.fp8_recipe;
  pf.fp8_format = lc.fp8_format;
  pf.mx_element = lc.mx_element;
  pf.mx_scale = lc.mx_scale;
  pf.amax_algo = lc.amax_algo;
  pf.amax_history = lc.amax_history;
  pf.telemetry_every = lab.o.telemetry_every;
  return pf.options(seed, clip);
}

// What each role's operands met over the run, under the fp8 policy.
std::optional<std::array<QuantStats, 3>> fp8_totals(const PrecisionTrainer& trainer) {
  const Fp8Context* f = trainer.fp8();
  if (!f) return std::nullopt;
  return std::array<QuantStats, 3>{f->totals(Fp8Role::input), f->totals(Fp8Role::weight), f->totals(Fp8Role::grad)};
}

// Adds this step's input operands, per site, to `sites` (fprop only: wgrad reads the same input),
// and writes them to `metrics` as one "fp8_inputs" event: {"step":..,"sites":[{"site","op","count",
// "saturated","flushed","amax","scale_inv"}, ...]} (scripts/plot_metrics.py draws fp8_inputs.png).
void record_inputs(const PrecisionTrainer& trainer, int64_t step, std::map<int64_t, SiteInputs>& sites,
                   train::Metrics& metrics) {
  const Fp8Context* f = trainer.fp8();
  if (!f) return;
  nlohmann::json event = {{"event", "fp8_inputs"}, {"step", step}, {"sites", nlohmann::json::array()}};
  for (const Fp8Record& r : f->records()) {
    if (r.role != Fp8Role::input || std::string_view(r.gemm) != "fprop") continue;
    sites[r.site].add(r.op, r.stats.count, r.stats.flushed, r.stats.saturated);
    event["sites"].push_back({{"site", r.site},
                              {"op", op_name(r.op)},
                              {"count", r.stats.count},
                              {"saturated", r.stats.saturated},
                              {"flushed", r.stats.flushed},
                              {"amax", r.stats.amax},
                              {"scale_inv", r.stats.scale_inv_max}});
  }
  metrics.write(event);
}

// One training run of one configuration; its metrics (steps, telemetry, summary) go to `metrics_path`.
// With --checkpoint-every or --resume, the run saves its whole state next to its metrics
// (<run>.safetensors; train/checkpoint.h) and --resume continues it from there: a run that had
// finished is evaluated again, not retrained, so an interrupted suite redoes only what it lost.
LabRow run_config(const Lab& lab, const LabConfig& lc, examples::CnnConfig cc, const std::string& metrics_path) {
  const PrecisionOptions options = precision_options(lab, lc, cc.seed);
  const train::Checkpointer checkpoint(std::filesystem::path(metrics_path).replace_extension(".safetensors").string(),
                                       lab.o.checkpoint_every, lab.o.resume);
  if (lab.o.resume || lab.o.checkpoint_every > 0) cc.checkpoint = &checkpoint;
  train::Metrics metrics(metrics_path, checkpoint.resuming());
  std::printf("== %s: --precision %s --loss-scale %s%s --seed %llu%s\n", lc.name.c_str(), lc.precision.c_str(),
              lc.loss_scale.c_str(), lc.rounding.empty() ? "" : (" --update-rounding " + lc.rounding).c_str(),
              (unsigned long long)cc.seed,
              checkpoint.resuming() ? (" (resumed from " + checkpoint.path() + ")").c_str() : "");
  const auto t0 = std::chrono::steady_clock::now();
  LabRow row{.config = lc};
  cc.after_step = [&row, &metrics](const PrecisionTrainer& t, int64_t step) {
    record_inputs(t, step, row.fp8_inputs, metrics);
  };
  examples::CnnRun run = examples::train_cnn(cc, options, lab.train, lab.test, metrics);
  row.wall = train::seconds_since(t0);
  row.accuracy = run.last.accuracy;
  row.aux_mse = run.last.aux_mse;
  row.test_loss = run.last.loss;
  row.train_loss = run.final_train_loss;
  row.steps = run.steps;
  row.skipped = run.trainer->skipped();
  row.nonfinite = run.nonfinite_losses;
  row.final_scale = run.trainer->scale();
  row.rounding = run.trainer->total_rounding();
  row.fp8 = fp8_totals(*run.trainer);
  row.seed = cc.seed;
  std::printf("   test accuracy %.2f%%%s, %s, %.0f s\n", 100.0 * row.accuracy,
              std::isfinite(row.aux_mse) ? fmt(", decoder test MSE %.5f", row.aux_mse).c_str() : "",
              train::precision_summary(*run.trainer).c_str(), row.wall);
  nlohmann::json summary = {
      {"event", "summary"},
      {"config", lc.name},
      {"device", lab.device.str()},
      {"final_test_accuracy", row.accuracy},
      {"final_test_loss", row.test_loss},
      {"final_train_loss", std::isfinite(row.train_loss) ? nlohmann::json(row.train_loss) : nlohmann::json(nullptr)},
      {"steps", row.steps},
      {"nonfinite_losses", row.nonfinite},
      {"wall_s", row.wall},
      {"steps_per_s", double(row.steps) / run.train_secs}};
  if (std::isfinite(row.aux_mse)) summary["final_test_aux_mse"] = row.aux_mse;
  train::add_precision_summary(summary, *run.trainer);
  metrics.write(summary);
  return row;
}

// A suite's table (markdown) and its rows (lab.json).
struct SuiteResult {
  std::string md;
  nlohmann::json rows = nlohmann::json::array();
};

// --suite default: every selected configuration, each over --seeds seeds (default 1).
SuiteResult run_default_suite(const Lab& lab, const std::filesystem::path& out) {
  const int n_seeds = lab.o.seeds > 0 ? lab.o.seeds : 1;
  std::vector<LabRow> rows;
  for (const LabConfig& lc : lab.configs) {
    for (int k = 0; k < n_seeds; ++k) {
      examples::CnnConfig cc = lab.base;
      cc.seed = lab.base.seed + uint64_t(k);
      const std::string stem = n_seeds > 1 ? lc.name + "-seed" + std::to_string(cc.seed) : lc.name;
      rows.push_back(run_config(lab, lc, cc, (out / (stem + ".jsonl")).string()));
    }
  }
  SuiteResult r;
  r.md = n_seeds > 1 ? stress_table(rows, false) : table(rows);
  for (const LabRow& row : rows) r.rows.push_back(row_json(row, lab.device));
  return r;
}

// --suite stress: each regime of Note [Stress regimes] (or those --regimes names) over its
// configurations, each over --seeds seeds (default 3); metrics under <out-dir>/<regime>/.
SuiteResult run_stress_suite(const Lab& lab, const std::filesystem::path& out) {
  const int n_seeds = lab.o.seeds > 0 ? lab.o.seeds : 3;
  SuiteResult r;
  for (const Regime& rg : stress_regimes()) {
    if (!selected(lab.o, rg.name)) continue;
    std::vector<LabRow> rows;
    std::filesystem::create_directories(out / rg.name);
    for (const std::string& name : rg.configs) {
      auto it =
          std::find_if(lab.configs.begin(), lab.configs.end(), [&](const LabConfig& c) { return c.name == name; });
      if (it == lab.configs.end()) continue;  // left out by --only
      for (int k = 0; k < n_seeds; ++k) {
        examples::CnnConfig cc = lab.base;
        cc.seed = lab.base.seed + uint64_t(k);
        cc.loss_weight = rg.loss_weight;
        cc.aux_weight = rg.aux_weight;
        cc.adam_eps = rg.adam_eps;
        cc.lr = rg.lr;
        if (!lab.o.smoke) cc.epochs = rg.epochs;
        std::printf("[%s] ", rg.name.c_str());
        LabRow row =
            run_config(lab, *it, cc, (out / rg.name / (name + "-seed" + std::to_string(cc.seed) + ".jsonl")).string());
        row.regime = rg.name;
        rows.push_back(row);
      }
    }
    r.md += "### " + rg.name + ": " + rg.what + "\n\n" + stress_table(rows, rg.aux_weight > 0.0) + "\n";
    for (const LabRow& row : rows) r.rows.push_back(row_json(row, lab.device));
  }
  return r;
}

// ---- the fp8 suite (--suite fp8) ---------------------------------------------------------------
//
// Note [Fp8 regimes]
// Each regime asks one question of the 8-bit recipes (autograd/fp8.h), on the cnn and/or the
// char_lstm, over --seeds seeds (default 3), next to bf16 (the policy fp8 runs on underneath):
//   formats    why HYBRID: gradients in E4M3 (fp8-current-e4m3) against E5M2 (fp8-current), both
//              scaled per tensor from their own amax.
//   outlier10, outlier16
//              the cnn's first linear layer reads an input with one channel 2^10 (2^16) larger
//              than the rest and a weight with the matching columns as much smaller: the same
//              model, bit for bit in bf16 (Note [Operands rescaled exactly] in
//              examples/cnn_train.h), as the outlier features of large language models sit in a
//              few channels. A per-tensor scale is set by the outlier; rowwise scales (one per
//              sample) still see it in every row; MX and DeepSeek blocks confine it to the
//              blocks that hold it.
//   spike      the same layer's whole input 2^8 larger (its weight 2^8 smaller) on every 40th
//              step, again the same model: current scaling is blind to it (the codes of a step
//              are those without the spike); delayed scaling quantizes the spike with the scale
//              of the steps before it (saturating it), then keeps the spike's amax in its
//              history for amax_history_len steps (Transformer Engine's default 1024, the whole
//              run here; 16; or most_recent, one step).
//   mx         MXFP8, MXFP6, MXFP4 (E4M3, E2M3, E2M1 elements; one E8M0 scale per 32), with the
//              OCP floor rule and, for MXFP8 and MXFP4, the round-up rule; and NVFP4 (E2M1 with
//              an E4M3 scale per 16 under an fp32 tensor scale: Note [Two-level scales] in
//              tensor/core/scale_formulas.h), the other answer to MXFP4's coarse scales.
//   gradscale  per-operator gradient scaling (--loss-scale gradient: each node's power-of-two
//              beta from the 8-bit format's range, Note [Gradient scaling in 8 bits]) against
//              per-tensor current and delayed scaling of the gradients, in E5M2 and in E4M3.
struct Fp8Regime {
  std::string name, what;
  std::vector<std::string> models;  // "cnn", "char_lstm"
  std::vector<std::string> configs;
  int outlier_log2 = 0;
  int64_t spike_every = 0;
  int spike_log2 = 0;
  int epochs = 1;  // the cnn's (the char_lstm trains --lstm-steps steps)
};

std::vector<Fp8Regime> fp8_regimes() {
  return {
      {.name = "formats",
       .what = "gradients in E5M2 (HYBRID) or E4M3, per-tensor current scaling",
       .models = {"cnn", "char_lstm"},
       .configs = {"bf16", "fp8-current", "fp8-current-e4m3"}},
      {.name = "outlier10",
       .what = "the first linear layer's input has one channel 2^10 larger, its weight the matching columns 2^10 "
               "smaller (Note [Operands rescaled exactly])",
       .models = {"cnn"},
       .configs = {"bf16", "fp8-current", "fp8-rowwise", "fp8-mxfp8", "fp8-block"},
       .outlier_log2 = 10},
      {.name = "outlier16",
       .what = "the same with 2^16",
       .models = {"cnn"},
       .configs = {"bf16", "fp8-current", "fp8-rowwise", "fp8-mxfp8", "fp8-block"},
       .outlier_log2 = 16},
      {.name = "spike",
       .what = "the first linear layer's input 2^8 larger, its weight 2^8 smaller, on every 40th step (Note "
               "[Operands rescaled exactly])",
       .models = {"cnn"},
       .configs = {"bf16", "fp8-current", "fp8-delayed", "fp8-delayed-h16", "fp8-delayed-recent"},
       .spike_every = 40,
       .spike_log2 = 8},
      {.name = "mx",
       .what = "MX block scaling with 8-, 6- and 4-bit elements, and NVFP4",
       .models = {"cnn", "char_lstm"},
       .configs = {"bf16", "fp8-mxfp8", "fp8-mxfp8-up", "fp8-mxfp6", "fp8-mxfp4", "fp8-mxfp4-up", "fp8-nvfp4"}},
      {.name = "gradscale",
       .what = "per-operator against per-tensor scaling of the gradients",
       .models = {"cnn", "char_lstm"},
       .configs = {"fp8-current", "fp8-delayed", "fp8-gradient", "fp8-current-e4m3", "fp8-gradient-e4m3"}},
  };
}

// Note [The char_lstm of the lab]
// The fp8 suite's language model: examples/char_lstm_model.h's CharLSTM (embedding 32, one LSTM
// layer of 128, on the fortunes corpus), Adam lr 1e-2 with 30 steps of warm-up and cosine decay
// to lr/10, gradients clipped to norm 1, --lstm-steps steps (300) of 32 random windows of 64 characters;
// scored by the validation bits per character over the whole held-out 5% of the corpus. Small
// enough that a seed takes seconds; the numbers are this model's, not char_lstm's defaults'.
struct CharLabSize {
  int64_t embed = 32, hidden = 128, layers = 1, seq_len = 64, batch = 32, warmup = 30;
  double lr = 1e-2, clip = 1.0;
};
constexpr double kLn2 = 0.69314718055994530942;

LabRow run_char_lstm(const Lab& lab, const LabConfig& lc, uint64_t seed, const std::string& metrics_path) {
  const CharLabSize z;
  const int64_t steps = lab.o.lstm_steps;
  Generator gen(seed);
  examples::CharLSTM model(lab.corpus->vocab_size(), {.embed = z.embed, .hidden = z.hidden, .layers = z.layers}, gen);
  model.to(lab.device);
  PrecisionTrainer trainer(model, OptimizerSpec{.kind = OptimizerKind::adam, .lr = z.lr},
                           precision_options(lab, lc, seed, z.clip));
  LRScheduler sched(
      trainer.optimizer(),
      LinearWarmup(std::min(z.warmup, steps), CosineAnnealingLR(std::max<int64_t>(steps - z.warmup, 1), z.lr / 10)));
  train::Metrics metrics(metrics_path, false);
  std::printf("== %s (char_lstm): --precision %s --loss-scale %s --seed %llu\n", lc.name.c_str(), lc.precision.c_str(),
              lc.loss_scale.c_str(), (unsigned long long)seed);
  const auto t0 = std::chrono::steady_clock::now();
  Generator draws(seed + 1);
  LabRow row{.config = lc, .model = "char_lstm", .seed = seed};
  // One epoch of `steps` steps (train/loop.h); the training loss reported is the mean of the last
  // log_every steps.
  train::TrainLoop loop({.steps_per_epoch = steps, .log_every = lab.o.log_every, .progress = false},
                        {{.model = &model, .trainer = &trainer, .sched = &sched}});
  loop.add_draws("windows", draws, [&] {
    const data::TextBatch b = lab.corpus->random_batch(data::TextSplit::train, z.batch, z.seq_len, draws);
    return std::vector<Tensor>{b.input, b.target};
  });
  loop.objective = [&](const train::TrainLoop::Batch& b, const train::StepInfo&) -> train::Objective {
    return {examples::sequence_loss(model.forward(b[0], std::nullopt, trainer.compute_dtype()).logits, b[1]), {}};
  };
  double loss_sum = 0.0, last = 0.0;
  int64_t finite = 0;
  loop.tally = [&](const double* l, int64_t step) {
    last = *l;
    if (step <= steps - lab.o.log_every) return;
    if (std::isfinite(last)) loss_sum += last, ++finite;
    else ++row.nonfinite;
  };
  loop.after_step = [&](const train::StepInfo& s) { record_inputs(trainer, s.step, row.fp8_inputs, metrics); };
  loop.step_event = [&](const train::StepInfo& s) -> std::optional<nlohmann::json> {
    return nlohmann::json{{"event", "step"},
                          {"step", s.step},
                          {"loss", std::isfinite(last) ? nlohmann::json(last) : nlohmann::json(nullptr)},
                          {"lr", trainer.optimizer().lr()},
                          {"scale", trainer.last_scale()},
                          {"skipped", !trainer.last_applied()}};
  };
  loop.resume(nullptr, {});
  loop.run(metrics);
  row.steps = steps;
  row.train_loss = finite > 0 ? loss_sum / double(finite) / kLn2 : std::nan("");
  row.val_bpc = examples::evaluate_nats(model, lab.val_batches, 0, trainer.compute_dtype()) / kLn2;
  row.wall = train::seconds_since(t0);
  row.skipped = trainer.skipped();
  row.final_scale = trainer.scale();
  row.rounding = trainer.total_rounding();
  row.fp8 = fp8_totals(trainer);
  std::printf("   validation %.3f bpc, %s, %.0f s\n", row.val_bpc, train::precision_summary(trainer).c_str(), row.wall);
  nlohmann::json summary = {
      {"event", "summary"},
      {"config", lc.name},
      {"model", "char_lstm"},
      {"device", lab.device.str()},
      {"final_val_bpc", row.val_bpc},
      {"final_train_bpc", std::isfinite(row.train_loss) ? nlohmann::json(row.train_loss) : nlohmann::json(nullptr)},
      {"steps", steps},
      {"wall_s", row.wall}};
  train::add_precision_summary(summary, trainer);
  metrics.write(summary);
  return row;
}

// "0.012% / 3.4%": the saturated and flushed shares of a role's elements, or "-" without fp8.
std::string sat_flush(const std::vector<const LabRow*>& rows, Fp8Role role) {
  double count = 0, sat = 0, flush = 0;
  for (const LabRow* r : rows) {
    if (!r->fp8) return "-";
    const QuantStats& q = (*r->fp8)[size_t(role)];
    count += double(q.count), sat += double(q.saturated), flush += double(q.flushed);
  }
  if (count == 0) return "-";
  return fmt("%.3f%%", 100.0 * sat / count) + " / " + fmt("%.2f%%", 100.0 * flush / count);
}

// "linear #2: 38.1%": the site whose inputs flushed most (summed over `rows`), or "-" without fp8.
std::string worst_input_site(const std::vector<const LabRow*>& rows) {
  std::map<int64_t, SiteInputs> sum;
  for (const LabRow* r : rows)
    for (const auto& [site, in] : r->fp8_inputs) sum[site].add(in.op, in.count, in.flushed, in.saturated);
  std::string out = "-";
  double worst = -1;
  for (const auto& [site, in] : sum) {
    const double share = in.count > 0 ? double(in.flushed) / double(in.count) : 0.0;
    if (share <= worst) continue;
    worst = share;
    out = detail::cat(op_name(in.op), " #", site, ": ", fmt("%.2f%%", 100.0 * share));
  }
  return out;
}

// One row per configuration over its seeds: the score (mean +- sd), what each role's operands
// met, and the site whose inputs flushed most, summed over the seeds.
std::string fp8_table(const std::vector<LabRow>& rows, bool lstm) {
  std::ostringstream os;
  os << "| config | seeds | " << (lstm ? "validation bpc" : "test accuracy")
     << " | inputs saturated / flushed | weights saturated / flushed | grads saturated / flushed | inputs flushed "
        "most at | wall s |\n"
     << "|---|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const std::vector<const LabRow*>& mine : by_config(rows)) {
    const std::string& name = mine[0]->config.name;
    std::vector<double> score;
    double wall = 0;
    for (const LabRow* r : mine) {
      score.push_back(lstm ? r->val_bpc : 100.0 * r->accuracy);
      wall += r->wall;
    }
    const Stat a = stat(score);
    os << "| " << name << " | " << score.size() << " | "
       << (lstm ? fmt("%.3f", a.mean) + fmt(" ± %.3f", a.sd) : fmt("%.2f", a.mean) + fmt(" ± %.2f%%", a.sd)) << " | "
       << sat_flush(mine, Fp8Role::input) << " | " << sat_flush(mine, Fp8Role::weight) << " | "
       << sat_flush(mine, Fp8Role::grad) << " | " << worst_input_site(mine) << " | " << fmt("%.0f", wall) << " |\n";
  }
  return os.str();
}

// --suite fp8: each regime of Note [Fp8 regimes] (or those --regimes names) on its models, each
// configuration over --seeds seeds (default 3); metrics under <out-dir>/<regime>-<model>/.
SuiteResult run_fp8_suite(const Lab& lab, const std::filesystem::path& out) {
  const int n_seeds = lab.o.seeds > 0 ? lab.o.seeds : 3;
  SuiteResult r;
  for (const Fp8Regime& rg : fp8_regimes()) {
    if (!selected(lab.o, rg.name)) continue;
    for (const std::string& model : rg.models) {
      const std::filesystem::path dir = out / (rg.name + "-" + model);
      std::filesystem::create_directories(dir);
      std::vector<LabRow> rows;
      for (const std::string& name : rg.configs) {
        auto it =
            std::find_if(lab.configs.begin(), lab.configs.end(), [&](const LabConfig& c) { return c.name == name; });
        if (it == lab.configs.end()) continue;  // left out by --only
        for (int k = 0; k < n_seeds; ++k) {
          const uint64_t seed = lab.base.seed + uint64_t(k);
          const std::string metrics = (dir / (name + "-seed" + std::to_string(seed) + ".jsonl")).string();
          std::printf("[%s] ", rg.name.c_str());
          LabRow row;
          if (model == "char_lstm") {
            row = run_char_lstm(lab, *it, seed, metrics);
          } else {
            examples::CnnConfig cc = lab.base;
            cc.seed = seed;
            cc.outlier_log2 = rg.outlier_log2;
            cc.spike_every = lab.o.smoke ? std::min<int64_t>(rg.spike_every, 3) : rg.spike_every;
            cc.spike_log2 = rg.spike_log2;
            if (!lab.o.smoke) cc.epochs = rg.epochs;
            row = run_config(lab, *it, cc, metrics);
          }
          row.regime = rg.name;
          rows.push_back(row);
        }
      }
      r.md += "### " + rg.name + " (" + model + "): " + rg.what + "\n\n" + fp8_table(rows, model == "char_lstm") + "\n";
      for (const LabRow& row : rows) r.rows.push_back(row_json(row, lab.device));
    }
  }
  return r;
}

// The char_lstm's corpus and validation streams, when a selected fp8 regime runs it.
void load_text(Lab& lab) {
  bool wanted = false;
  for (const Fp8Regime& rg : fp8_regimes())
    if (selected(lab.o, rg.name))
      wanted = wanted || std::find(rg.models.begin(), rg.models.end(), "char_lstm") != rg.models.end();
  if (!wanted) return;
  const CharLabSize z;
  lab.corpus = data::TextCorpus::from_path(lab.o.text, 0.05);
  const int64_t n_valid = int64_t(lab.corpus->ids(data::TextSplit::validation).size());
  MT_CHECK(int64_t(lab.corpus->ids(data::TextSplit::train).size()) > z.seq_len && n_valid >= 2, "--text '", lab.o.text,
           "' is too short for the char_lstm's windows of ", z.seq_len, " characters");
  lab.val_batches =
      lab.corpus->eval_batches(data::TextSplit::validation, std::min<int64_t>(64, n_valid - 1), z.seq_len);
  if (lab.o.smoke) lab.val_batches.resize(std::min<size_t>(lab.val_batches.size(), 4));
}

// Prints the table, writes lab.md and lab.json, and draws the figures (--plots).
void write_results(const Lab& lab, const std::filesystem::path& out, const SuiteResult& result) {
  std::printf("\n%s", result.md.c_str());
  write_file(out / "lab.md", result.md);
  write_file(out / "lab.json", result.rows.dump(2) + "\n");
  std::printf("metrics per run, lab.md and lab.json in %s/\n", out.string().c_str());
  if (!lab.o.plots || lab.o.smoke) return;
  if (lab.o.suite == "default") {
    draw_figures(out);
    return;
  }
  if (lab.o.suite == "fp8") {
    for (const Fp8Regime& rg : fp8_regimes())
      for (const std::string& model : rg.models)
        if (std::filesystem::exists(out / (rg.name + "-" + model))) draw_figures(out / (rg.name + "-" + model));
    return;
  }
  for (const Regime& rg : stress_regimes())
    if (std::filesystem::exists(out / rg.name)) draw_figures(out / rg.name);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Train the Fashion-MNIST CNN under ten precision configurations (fp32; fp16 without scaling, static,\n"
      "backoff, logmax and gradient scaling; bf16 mixed; bf16-pure with nearest, stochastic and Kahan\n"
      "updates) from the same initial weights and batch order, and print one table; or the stress regimes,\n"
      "or the 8-bit recipes (--suite fp8) on the CNN and a character-level LSTM."};
  examples::CommonFlags flags;
  flags.epochs = 3;
  flags.lr = 2e-3;
  flags.add_to(app);
  app.get_option("--metrics")->description("not used: each run writes <out-dir>/<config>.jsonl (refused if given)");
  examples::DeviceFlag device_flag;
  device_flag.add_to(app);
  LabFlags o;
  o.add_to(app);
  CLI11_PARSE(app, argc, argv);

  try {
    o.finish(app, flags);
    // The shared --metrics names one file; the lab writes one per run (<out-dir>/<config>.jsonl).
    MT_CHECK(app.count("--metrics") == 0,
             "--metrics: precision_lab writes the metrics of each run to its own file, "
             "<out-dir>/<config>.jsonl (<out-dir>/<regime>/<config>-seed<N>.jsonl with --suite stress); "
             "choose the folder with --out-dir");
    Lab lab{.o = o, .device = device_flag.resolve()};
    examples::check_output_dir(o.out_dir);
    set_num_threads(flags.threads);
    lab.configs = select_configs(o);
    std::vector<std::string> regime_names;
    if (o.suite == "stress")
      for (const Regime& rg : stress_regimes()) regime_names.push_back(rg.name);
    if (o.suite == "fp8")
      for (const Fp8Regime& rg : fp8_regimes()) regime_names.push_back(rg.name);
    check_regimes(o, regime_names);
    MT_CHECK(o.suite != "fp8" || (!o.resume && o.checkpoint_every == 0),
             "--resume and --checkpoint-every apply to the default and stress suites; the fp8 suite's runs are "
             "minutes long and start afresh (--regimes and --only rerun a part)");
    lab.train = data::load_fashion_mnist(o.data_dir, data::MnistSplit::train,
                                         {.limit = o.limit > 0 ? o.limit : -1, .num_classes = examples::kCnnClasses});
    lab.test =
        data::load_fashion_mnist(o.data_dir, data::MnistSplit::test,
                                 {.limit = o.test_limit > 0 ? o.test_limit : -1, .num_classes = examples::kCnnClasses});
    const std::filesystem::path out(o.out_dir);
    std::filesystem::create_directories(out);
    for (const char* table : {"lab.md", "lab.json"}) check_writable(out / table);  // before hours of training
    std::printf(
        "precision lab: CNN width %lld, %lld training / %lld test images, %d epochs, batch %d, AdamW lr %g "
        "(cosine), weight decay %g, seed %llu, %d threads\n",
        (long long)o.width, (long long)lab.train.images.size(0), (long long)lab.test.images.size(0), flags.epochs,
        flags.batch_size, flags.lr, o.weight_decay, (unsigned long long)flags.seed, flags.threads);
    if (o.suite != "default" && !o.smoke)  // the regimes set their own length
      std::printf("(%s suite: each regime sets the cnn's epochs%s)\n", o.suite.c_str(),
                  o.suite == "fp8" ? "; the char_lstm trains --lstm-steps steps" : "");
    std::printf("device: %s\n", examples::device_description(lab.device, flags.threads).c_str());
    if (lab.device.is_cuda())
      std::printf("(the backward-underflow column counts CPU roundings only: '-' on %s)\n", lab.device.str().c_str());

    lab.base = {.width = o.width,
                .dropout = o.dropout,
                .lr = flags.lr,
                .weight_decay = o.weight_decay,
                .epochs = flags.epochs,
                .batch_size = flags.batch_size,
                .seed = flags.seed,
                .log_every = o.log_every,
                .max_steps = flags.max_steps,
                .progress = true,
                .verbose = false,
                .device = lab.device};
    if (o.suite == "fp8") load_text(lab);
    const SuiteResult result = o.suite == "default"  ? run_default_suite(lab, out)
                               : o.suite == "stress" ? run_stress_suite(lab, out)
                                                     : run_fp8_suite(lab, out);
    write_results(lab, out, result);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "precision_lab: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
