// cnn: a convolutional classifier on Fashion-MNIST (the models: examples/cnn_train.h).
//
// AdamW with a cosine learning-rate schedule over the whole run, under any precision policy
// (--precision, --loss-scale, --update-rounding: optim/trainer.h). Reads the IDX files of the
// Debian package dataset-fashion-mnist by default; --data points at any MNIST-format directory.
//
//   ./cnn --epochs 12 --metrics cnn.jsonl                      # the README's accuracy run
//   ./cnn --precision fp16 --loss-scale backoff --epochs 2     # the main job: mixed precision
//   ./cnn --model resnet --width 64 --hflip                    # a small residual network (93%)
//   ./cnn --smoke --metrics m.jsonl --out-dir /tmp              # a few steps, for CI
//   ./cnn --device cpu                                          # default --device auto: cuda:0 if any
//   mpirun -np 2 ./cnn --device cpu --threads 1 --precision fp16 --loss-scale backoff
//                                                               # data parallel (docs/data-parallel.md)
#include <algorithm>
#include <cctype>
#include <cstdio>

#include "checkpoint.h"
#include "cnn_train.h"
#include "common.h"
#include "mixtape.h"

using namespace mixtape;

namespace {

// cnn's own flags; the shared ones (--epochs, --lr, --precision, --device, ...) are in common.h.
struct CnnFlags {
  std::string data_dir = data::kFashionMnistDir, out_dir = ".";
  std::string model = "cnn", norm = "batch";  // --model, --norm (examples::CnnModel, CnnNorm)
  int64_t width = 32, limit = 0, log_every = 50, crop_padding = 0;
  double dropout = 0.3, weight_decay = 1e-4;
  bool hflip = false, smoke = false;

  void add_to(CLI::App& app) {
    app.add_option("--data", data_dir, "directory with the (Fashion-)MNIST IDX files")->capture_default_str();
    app.add_option("--out-dir", out_dir, "where the checkpoint cnn.safetensors goes (see --checkpoint)")
        ->capture_default_str();
    app.add_option("--model", model,
                   "cnn: two conv blocks (examples/cnn_train.h); resnet: a stem and two residual blocks")
        ->check(CLI::IsMember({"cnn", "resnet"}, CLI::ignore_case))
        ->capture_default_str();
    app.add_option("--norm", norm,
                   "the resnet's normalization: batch (BatchNorm2d) or group (GroupNorm, 8 channels a group)")
        ->check(CLI::IsMember({"batch", "group"}, CLI::ignore_case))
        ->capture_default_str();
    app.add_option("--width", width,
                   "channels of the first conv (cnn) or of the stem and first block (resnet); the second "
                   "block has twice as many")
        ->check(CLI::Range(1, 1024))
        ->capture_default_str();
    app.add_option("--dropout", dropout, "cnn: dropout before the last layer")
        ->check(examples::finite)
        ->check(CLI::Range(0.0, 0.95))
        ->capture_default_str();
    app.add_option("--weight-decay", weight_decay, "AdamW weight decay")
        ->check(examples::finite)
        ->check(examples::non_negative)
        ->capture_default_str();
    app.add_flag("--hflip", hflip,
                 "mirror each training image left-right with probability 1/2 (chosen per image and epoch)");
    app.add_option("--crop-padding", crop_padding,
                   "shift each training image by up to N pixels each way, blank pixels filling in (chosen per "
                   "image and epoch; PyTorch's RandomCrop(28, padding=N))")
        ->check(CLI::Range(0, 13))
        ->capture_default_str();
    app.add_option("--limit", limit, "use only the first N training images (0: all)")->check(examples::non_negative);
    app.add_option("--log-every", log_every, "steps between step events in the metrics")->check(CLI::Range(1, 1000000));
    app.add_flag("--smoke", smoke, "a few steps on a subset (CI smoke run)");
  }

  // After parsing: --smoke's configuration for the flags not given explicitly.
  void finish(const CLI::App& app, examples::CommonFlags& flags) {
    for (std::string* name : {&model, &norm})  // the checks above ignore case
      std::transform(name->begin(), name->end(), name->begin(), [](unsigned char c) { return char(std::tolower(c)); });
    if (norm != "batch" && model != "resnet")
      throw std::invalid_argument("--norm applies to --model resnet (the cnn model uses batch norm)");
    if (!smoke) return;
    examples::smoke_default(app, "--epochs", flags.epochs, 1);
    examples::smoke_default(app, "--limit", limit, 2048);
    examples::smoke_default(app, "--width", width, 8);
    examples::smoke_default(app, "--log-every", log_every, 4);
  }
};

// The closing lines and the "summary" event.
void report_run(const examples::CnnRun& run, Device device, double wall, const std::string& ckpt_path,
                const dist::DataParallel& dp, train::Metrics& metrics) {
  const PrecisionTrainer& trainer = *run.trainer;
  const int64_t step = run.steps;
  const examples::CnnEval& last = run.last;
  const double train_secs = run.train_secs;
  std::printf("%s\n", train::precision_summary(trainer).c_str());
  std::printf(
      "final test accuracy %.2f%% after %lld steps on %s; wall %.1f s (training %.1f s, %.1f steps/s); "
      "checkpoint %s\n",
      100.0 * last.accuracy, (long long)step, device.str().c_str(), wall, train_secs, double(step) / train_secs,
      ckpt_path.c_str());
  if (run.nonfinite_losses > 0)
    std::printf("%lld training steps had an inf or NaN loss\n", (long long)run.nonfinite_losses);
  if (dp.distributed())  // rank 0's own time in the gradient all-reduce (DataParallel::all_reduce_gradients)
    std::printf("%d ranks: the gradient all-reduce took %.2f s of %.1f s training (%.1f%%)\n", dp.size(),
                dp.total_sync_seconds(), train_secs, 100.0 * dp.total_sync_seconds() / train_secs);
  nlohmann::json summary = {{"event", "summary"},
                            {"device", device.str()},
                            {"final_test_accuracy", last.accuracy},
                            {"final_test_loss", last.loss},
                            {"steps", step},
                            {"wall_s", wall},
                            {"steps_per_s", double(step) / train_secs},
                            {"nonfinite_losses", run.nonfinite_losses}};
  train::add_precision_summary(summary, trainer);
  if (dp.distributed()) {
    summary["ranks"] = dp.size();
    summary["all_reduce_s"] = dp.total_sync_seconds();
  }
  run.counters.add_to(summary);
  metrics.write(summary);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a two-block CNN on Fashion-MNIST under any precision policy."};
  examples::CommonFlags flags;
  flags.epochs = 12;
  flags.lr = 2e-3;
  flags.add_to(app);
  examples::PrecisionFlags precision;
  precision.add_to(app);
  examples::DeviceFlag device_flag;
  device_flag.add_to(app);
  examples::OptimizerFlags optimizer;
  optimizer.add_to(app);
  examples::DataParallelFlags dist_flags;
  dist_flags.add_to(app);
  CnnFlags o;
  o.add_to(app);
  examples::CheckpointFlags checkpoint_flags("cnn.safetensors");
  checkpoint_flags.add_to(app);
  CLI11_PARSE(app, argc, argv);

  std::shared_ptr<dist::DataParallel> dp;
  try {
    o.finish(app, flags);
    dp = examples::data_parallel(flags.batch_size, dist_flags, "cnn");
    const Device device = device_flag.resolve();
    examples::check_output_dir(o.out_dir);
    const train::Checkpointer checkpoint = checkpoint_flags.finish(o.out_dir, dp->rank(), dp->size());
    set_num_threads(flags.threads);
    std::printf("cnn: device %s\n", examples::device_description(device, flags.threads).c_str());
    const auto t_start = std::chrono::steady_clock::now();
    data::LabeledImages train =
        data::load_fashion_mnist(o.data_dir, data::MnistSplit::train,
                                 {.limit = o.limit > 0 ? o.limit : -1, .num_classes = examples::kCnnClasses});
    data::LabeledImages test = data::load_fashion_mnist(
        o.data_dir, data::MnistSplit::test, {.limit = o.smoke ? 1000 : -1, .num_classes = examples::kCnnClasses});
    std::printf("cnn: %lld training and %lld test images from %s\n", (long long)train.images.size(0),
                (long long)test.images.size(0), o.data_dir.c_str());

    // The model, its training (train/loop.h) and its evaluation: examples/cnn_train.h.
    const examples::CnnConfig config{
        .model = o.model == "resnet" ? examples::CnnModel::resnet : examples::CnnModel::cnn,
        .norm = o.norm == "group" ? examples::CnnNorm::group : examples::CnnNorm::batch,
        .width = o.width,
        .dropout = o.dropout,
        .lr = flags.lr,
        .weight_decay = o.weight_decay,
        .epochs = flags.epochs,
        .batch_size = flags.batch_size,
        .seed = flags.seed,
        .hflip = o.hflip,
        .crop_padding = o.crop_padding,
        .log_every = o.log_every,
        .max_steps = flags.max_steps,
        .progress = dp->is_root(),
        .device = device,
        .optimizer = optimizer,
        .checkpoint = &checkpoint,
        .dp = dp->distributed() ? dp : nullptr};
    const PrecisionOptions options = precision.options(flags.seed);
    train::Metrics metrics(dp->is_root() ? flags.metrics : std::string(), checkpoint.resuming());
    const examples::CnnRun run = examples::train_cnn(config, options, train, test, metrics);

    report_run(run, device, train::seconds_since(t_start), checkpoint.path(), *dp, metrics);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cnn: error: %s\n", e.what());
    if (dp && dp->distributed()) dist::abort_all(1);  // the other ranks may wait in a collective
    return 1;
  }
  return 0;
}
