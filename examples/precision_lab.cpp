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
// pass's measured underflow (RoundingCensus, tensor/dtype.h: the fraction of nonzero fp32 results
// that rounded to zero when stored in 16 bits, over the telemetry-sampled steps; "-" where
// nothing is stored in 16 bits), and wall time. Each configuration writes its own metrics file
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
#include <cstdio>
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
  double accuracy = 0, test_loss = 0, train_loss = 0, wall = 0;
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
  examples::DeviceFlag device_flag;
  device_flag.add_to(app);
  std::string data_dir = data::kFashionMnistDir, out_dir = "precision_lab", only, static_scale = "1024";
  int64_t width = 16, limit = 12000, test_limit = 5000, telemetry_every = 25, log_every = 10;
  double weight_decay = 1e-4, dropout = 0.3;
  bool smoke = false;
  app.add_option("--data", data_dir, "directory with the (Fashion-)MNIST IDX files")->capture_default_str();
  app.add_option("--out-dir", out_dir, "metrics per configuration, lab.md and lab.json go here")->capture_default_str();
  app.add_option("--only", only, "comma-separated configurations to run (default: all ten)");
  app.add_option("--static-scale", static_scale, "S of the fp16-static configuration (a power of two)")
      ->capture_default_str();
  app.add_option("--width", width, "channels of the first conv")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--dropout", dropout, "dropout before the last layer")->check(CLI::Range(0.0, 0.95))->capture_default_str();
  app.add_option("--weight-decay", weight_decay, "AdamW weight decay")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--limit", limit, "training images (0: all 60000)")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--test-limit", test_limit, "test images (0: all 10000)")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--telemetry-every", telemetry_every, "telemetry and rounding census every N steps")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40))->capture_default_str();
  app.add_option("--log-every", log_every, "steps between step events")->check(CLI::Range(int64_t(1), int64_t(1) << 40))
      ->capture_default_str();
  app.add_flag("--smoke", smoke, "every configuration for a few steps on a subset (CI smoke run)");
  CLI11_PARSE(app, argc, argv);

  try {
    if (smoke) {
      flags.epochs = 1;
      limit = 1024;
      test_limit = 500;
      width = 4;
      telemetry_every = 4;
      log_every = 2;
    }
    const Device device = device_flag.resolve();
    set_num_threads(flags.threads);
    std::vector<LabConfig> configs = lab_configs(static_scale);
    if (!only.empty()) {
      std::vector<LabConfig> picked;
      std::stringstream ss(only);
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
    // Validate every configuration's flags before the first run starts.
    for (const LabConfig& c : configs) parse_loss_scale(c.loss_scale);

    const data::LabeledImages train =
        data::load_fashion_mnist(data_dir, data::MnistSplit::train, {.limit = limit > 0 ? limit : -1});
    const data::LabeledImages test =
        data::load_fashion_mnist(data_dir, data::MnistSplit::test, {.limit = test_limit > 0 ? test_limit : -1});
    std::filesystem::create_directories(out_dir);
    std::printf("precision lab: CNN width %lld, %lld training / %lld test images, %d epochs, batch %d, AdamW lr %g "
                "(cosine), weight decay %g, seed %llu, %d threads\n",
                (long long)width, (long long)train.images.size(0), (long long)test.images.size(0), flags.epochs,
                flags.batch_size, flags.lr, weight_decay, (unsigned long long)flags.seed, flags.threads);
    std::printf("device: %s\n", examples::device_description(device, flags.threads).c_str());
    if (device.is_cuda())
      std::printf("(the backward-underflow column counts CPU roundings only: '-' on %s)\n", device.str().c_str());

    std::vector<LabRow> rows;
    for (const LabConfig& lc : configs) {
      examples::PrecisionFlags pf;
      pf.precision = lc.precision;
      pf.loss_scale = lc.loss_scale;
      if (!lc.rounding.empty()) pf.rounding = lc.rounding;
      pf.telemetry_every = telemetry_every;
      const PrecisionOptions options = pf.options(flags.seed);
      examples::CnnConfig cc{.width = width, .dropout = dropout, .lr = flags.lr, .weight_decay = weight_decay,
                             .epochs = flags.epochs, .batch_size = flags.batch_size, .seed = flags.seed,
                             .log_every = log_every, .max_steps = flags.max_steps, .progress = true, .verbose = false,
                             .device = device};
      const std::string metrics_path = (std::filesystem::path(out_dir) / (lc.name + ".jsonl")).string();
      examples::Metrics metrics(metrics_path);
      std::printf("== %s: --precision %s --loss-scale %s%s\n", lc.name.c_str(), lc.precision.c_str(),
                  lc.loss_scale.c_str(), lc.rounding.empty() ? "" : (" --update-rounding " + lc.rounding).c_str());
      const auto t0 = std::chrono::steady_clock::now();
      examples::CnnRun run = examples::train_cnn(cc, options, train, test, metrics);
      LabRow row{.config = lc};
      row.wall = examples::seconds_since(t0);
      row.accuracy = run.last.accuracy;
      row.test_loss = run.last.loss;
      row.train_loss = run.final_train_loss;
      row.steps = run.steps;
      row.skipped = run.trainer->skipped();
      row.nonfinite = run.nonfinite_losses;
      row.final_scale = run.trainer->scale();
      row.rounding = run.trainer->total_rounding();
      std::printf("   test accuracy %.2f%%, %s, %.0f s\n", 100.0 * row.accuracy,
                  examples::precision_summary(*run.trainer).c_str(), row.wall);
      nlohmann::json summary = {{"event", "summary"},        {"config", lc.name}, {"device", device.str()},
                                {"final_test_accuracy", row.accuracy}, {"final_test_loss", row.test_loss},
                                {"final_train_loss", std::isfinite(row.train_loss) ? nlohmann::json(row.train_loss) : nlohmann::json(nullptr)},
                                {"steps", row.steps},           {"nonfinite_losses", row.nonfinite},
                                {"wall_s", row.wall},           {"steps_per_s", double(row.steps) / run.train_secs}};
      examples::add_precision_summary(summary, *run.trainer);
      metrics.write(summary);
      rows.push_back(row);
    }

    const std::string md = table(rows);
    std::printf("\n%s", md.c_str());
    std::ofstream(std::filesystem::path(out_dir) / "lab.md") << md;
    nlohmann::json j = nlohmann::json::array();
    for (const LabRow& r : rows)
      j.push_back({{"config", r.config.name}, {"precision", r.config.precision}, {"loss_scale", r.config.loss_scale},
                   {"update_rounding", r.config.rounding}, {"device", device.str()}, {"test_accuracy", r.accuracy}, {"test_loss", r.test_loss},
                   {"train_loss", std::isfinite(r.train_loss) ? nlohmann::json(r.train_loss) : nlohmann::json(nullptr)},
                   {"steps", r.steps}, {"skipped", r.skipped}, {"nonfinite_losses", r.nonfinite},
                   {"final_scale", r.final_scale}, {"rounded_16bit", r.rounding.rounded},
                   {"underflow_rate", r.rounding.nonzero ? nlohmann::json(r.rounding.underflow_rate()) : nlohmann::json(nullptr)},
                   {"wall_s", r.wall}});
    std::ofstream(std::filesystem::path(out_dir) / "lab.json") << j.dump(2) << '\n';
    std::printf("metrics per configuration, lab.md and lab.json in %s/\n", out_dir.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "precision_lab: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
