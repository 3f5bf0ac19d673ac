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
//
// --device (default auto: cuda:0 when a GPU is visible) runs every configuration there. The
// backward-underflow column comes from the rounding census, which counts the roundings of the CPU
// kernels; CUDA kernels round on the device without counting, so on a GPU that column reads "-"
// (per-gradient underflow is still measured by the telemetry's grad_telemetry, in the metrics).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

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
};

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
  };
}

struct LabRow {
  LabConfig config;
  std::string regime;  // stress suite only
  uint64_t seed = 0;
  double accuracy = 0, test_loss = 0, train_loss = 0, wall = 0;
  double aux_mse = std::nan("");  // the decoder head's test MSE (nonuniform regime)
  int64_t steps = 0, skipped = 0, nonfinite = 0;
  float final_scale = 1;
  RoundingCounts rounding;
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

// One row per configuration over its seeds, in the order first seen: mean +- sd.
std::string stress_table(const std::vector<LabRow>& rows, bool with_aux) {
  std::vector<std::string> order;
  for (const LabRow& r : rows)
    if (std::find(order.begin(), order.end(), r.config.name) == order.end()) order.push_back(r.config.name);
  std::ostringstream os;
  os << "| config | seeds | test accuracy | " << (with_aux ? "decoder test MSE | " : "")
     << "skipped steps | backward underflow | wall s |\n|---|---:|---:|" << (with_aux ? "---:|" : "")
     << "---:|---:|---:|\n";
  for (const std::string& name : order) {
    std::vector<double> acc, mse, skipped, under;
    double wall = 0;
    for (const LabRow& r : rows) {
      if (r.config.name != name) continue;
      acc.push_back(100.0 * r.accuracy);
      mse.push_back(r.aux_mse);
      skipped.push_back(double(r.skipped));
      if (r.rounding.nonzero > 0) under.push_back(100.0 * r.rounding.underflow_rate());
      wall += r.wall;
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
  std::string data_dir = data::kFashionMnistDir, out_dir = "precision_lab", only, static_scale = "1024";
  std::string suite = "default", regimes;
  int64_t width = 16, limit = 12000, test_limit = 5000, telemetry_every = 25, log_every = 10;
  double weight_decay = 1e-4, dropout = 0.3;
  int seeds = 0;  // 0: the suite's default
  bool smoke = false, plots = true;
  int64_t checkpoint_every = 0;
  bool resume = false;

  void add_to(CLI::App& app) {
    app.add_option("--suite", suite,
                   "default: the ten configurations on the cnn; stress: three regimes built so that each technique "
                   "changes the result (underflow, nonuniform, stall; Note [Stress regimes]), each over --seeds seeds")
        ->check(CLI::IsMember({"default", "stress"}))
        ->capture_default_str();
    app.add_option("--regimes", regimes, "stress suite: comma-separated regimes to run (default: all)");
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
    app.add_option("--seeds", seeds, "seeds per configuration (default: 1; stress: 3); reported as mean +- sd")
        ->check(CLI::Range(1, 100));
    app.add_option("--data", data_dir, "directory with the (Fashion-)MNIST IDX files")->capture_default_str();
    app.add_option("--out-dir", out_dir, "metrics per configuration, lab.md and lab.json go here")
        ->capture_default_str();
    app.add_option("--only", only, "comma-separated configurations to run (default: all ten)");
    app.add_option("--static-scale", static_scale, "S of the fp16-static configuration (a power of two)")
        ->capture_default_str();
    app.add_option("--width", width, "channels of the first conv")->check(CLI::Range(1, 1024))->capture_default_str();
    app.add_option("--dropout", dropout, "dropout before the last layer")
        ->check(examples::finite)
        ->check(CLI::Range(0.0, 0.95))
        ->capture_default_str();
    app.add_option("--weight-decay", weight_decay, "AdamW weight decay")
        ->check(examples::finite)
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    app.add_option("--limit", limit, "training images (0: all 60000)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    app.add_option("--test-limit", test_limit, "test images (0: all 10000)")
        ->check(CLI::NonNegativeNumber)
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
  }
};

// The configurations --only names (all ten without it), checked before the first run starts.
std::vector<LabConfig> select_configs(const LabFlags& o) {
  std::vector<LabConfig> configs = lab_configs(o.static_scale);
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
};

// One training run of one configuration; its metrics (steps, telemetry, summary) go to `metrics_path`.
// With --checkpoint-every or --resume, the run saves its whole state next to its metrics
// (<run>.safetensors; examples/checkpoint.h) and --resume continues it from there: a run that had
// finished is evaluated again, not retrained, so an interrupted suite redoes only what it lost.
LabRow run_config(const Lab& lab, const LabConfig& lc, examples::CnnConfig cc, const std::string& metrics_path) {
  examples::PrecisionFlags pf;
  pf.precision = lc.precision;
  pf.loss_scale = lc.loss_scale;
  if (!lc.rounding.empty()) pf.rounding = lc.rounding;
  pf.telemetry_every = lab.o.telemetry_every;
  const PrecisionOptions options = pf.options(cc.seed);
  const examples::Checkpointer checkpoint =
      examples::Checkpointer::at(std::filesystem::path(metrics_path).replace_extension(".safetensors").string(),
                                 lab.o.checkpoint_every, lab.o.resume);
  if (lab.o.resume || lab.o.checkpoint_every > 0) cc.checkpoint = &checkpoint;
  examples::Metrics metrics(metrics_path, checkpoint.resuming());
  std::printf("== %s: --precision %s --loss-scale %s%s --seed %llu%s\n", lc.name.c_str(), lc.precision.c_str(),
              lc.loss_scale.c_str(), lc.rounding.empty() ? "" : (" --update-rounding " + lc.rounding).c_str(),
              (unsigned long long)cc.seed,
              checkpoint.resuming() ? (" (resumed from " + checkpoint.path() + ")").c_str() : "");
  const auto t0 = std::chrono::steady_clock::now();
  examples::CnnRun run = examples::train_cnn(cc, options, lab.train, lab.test, metrics);
  LabRow row{.config = lc};
  row.wall = examples::seconds_since(t0);
  row.accuracy = run.last.accuracy;
  row.aux_mse = run.last.aux_mse;
  row.test_loss = run.last.loss;
  row.train_loss = run.final_train_loss;
  row.steps = run.steps;
  row.skipped = run.trainer->skipped();
  row.nonfinite = run.nonfinite_losses;
  row.final_scale = run.trainer->scale();
  row.rounding = run.trainer->total_rounding();
  row.seed = cc.seed;
  std::printf("   test accuracy %.2f%%%s, %s, %.0f s\n", 100.0 * row.accuracy,
              std::isfinite(row.aux_mse) ? fmt(", decoder test MSE %.5f", row.aux_mse).c_str() : "",
              examples::precision_summary(*run.trainer).c_str(), row.wall);
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
  examples::add_precision_summary(summary, *run.trainer);
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
    if (!lab.o.regimes.empty() && ("," + lab.o.regimes + ",").find("," + rg.name + ",") == std::string::npos) continue;
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
  for (const Regime& rg : stress_regimes())
    if (std::filesystem::exists(out / rg.name)) draw_figures(out / rg.name);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Train the Fashion-MNIST CNN under ten precision configurations (fp32; fp16 without scaling, static,\n"
      "backoff, logmax and gradient scaling; bf16 mixed; bf16-pure with nearest, stochastic and Kahan\n"
      "updates) from the same initial weights and batch order, and print one table."};
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
    lab.train = data::load_fashion_mnist(o.data_dir, data::MnistSplit::train,
                                         {.limit = o.limit > 0 ? o.limit : -1, .num_classes = examples::kCnnClasses});
    lab.test =
        data::load_fashion_mnist(o.data_dir, data::MnistSplit::test,
                                 {.limit = o.test_limit > 0 ? o.test_limit : -1, .num_classes = examples::kCnnClasses});
    const std::filesystem::path out(o.out_dir);
    std::filesystem::create_directories(out);
    std::printf(
        "precision lab: CNN width %lld, %lld training / %lld test images, %d epochs, batch %d, AdamW lr %g "
        "(cosine), weight decay %g, seed %llu, %d threads\n",
        (long long)o.width, (long long)lab.train.images.size(0), (long long)lab.test.images.size(0), flags.epochs,
        flags.batch_size, flags.lr, o.weight_decay, (unsigned long long)flags.seed, flags.threads);
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
    const SuiteResult result = o.suite == "default" ? run_default_suite(lab, out) : run_stress_suite(lab, out);
    write_results(lab, out, result);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "precision_lab: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
