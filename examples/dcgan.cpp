// dcgan: a deep convolutional GAN (Radford, Metz & Chintala 2016) on Fashion-MNIST or any folder
// of images.
//
//   generator G (32x32, ngf = F):                  discriminator D (32x32, ndf = F):
//   z [B, nz, 1, 1]                                x [B, nc, 32, 32]
//   convT 4x4 s1 -> [B, 4F, 4, 4]   BN ReLU        conv 4x4 s2 -> [B, F, 16, 16]   LeakyReLU(0.2)
//   convT 4x4 s2 -> [B, 2F, 8, 8]   BN ReLU        conv 4x4 s2 -> [B, 2F, 8, 8]    BN LeakyReLU(0.2)
//   convT 4x4 s2 -> [B, F, 16, 16]  BN ReLU        conv 4x4 s2 -> [B, 4F, 4, 4]    BN LeakyReLU(0.2)
//   convT 4x4 s2 -> [B, nc, 32, 32] tanh           conv 4x4 s1 -> [B, 1, 1, 1]     one logit
//
// Every further doubling of --image-size adds one stage on each side (64x64: 8F at 4x4). Convs
// have no bias (batch norm follows, or the output is the image / the logit), weights start from
// N(0, 0.02) (nn::init::dcgan_init), and each network has its own Adam (lr 2e-4, beta1 0.5).
//
// Each network trains through its own PrecisionTrainer, both built from the same precision flags
// (--precision, --loss-scale, --update-rounding: optim/trainer.h). Each has its own loss
// scaler: D's loss and G's loss have gradients of different sizes, and a step one network's
// scaler skips says nothing about the other's.
//
// Width: --ngf/--ndf default to 32, not the paper's 64 or more. At 32x32 a training step (three D
// passes, one G pass, their backward passes) costs about 6 GFLOP at width 32 against 24 at width
// 64; on 2 shared CPU cores that is ~0.3 s against ~1 s per batch of 64, i.e. an epoch of
// Fashion-MNIST in ~5 minutes instead of ~15, and width 32 already draws recognizable clothing
// after 2 epochs (docs/images/dcgan_fashion_mnist.png: 5 epochs).
//
// Fashion-MNIST's 28x28 images are padded by 2 pixels of background on each side to 32x32 (no
// resampling) and scaled to [-1, 1]; --images DIR trains on RGB images resized and centre-cropped
// to --image-size (default 64) instead.
//
//   ./dcgan --epochs 5 --metrics dcgan.jsonl --out-dir runs/dcgan      # Fashion-MNIST, 32x32
//   ./dcgan --images ~/faces --epochs 20 --out-dir runs/faces          # any image folder, 64x64
//   ./dcgan --precision fp16 --loss-scale backoff --epochs 2           # mixed precision
//   ./dcgan --smoke --metrics m.jsonl --out-dir /tmp                    # CI: a few dozen steps
//   ./dcgan --device cpu                    # default --device auto: cuda:0 when a GPU is visible
//   mpirun -np 2 ./dcgan --device cpu --threads 1 --precision fp16 --loss-scale backoff   # data parallel
//
// Both networks, their trainers and the labels live on --device; images are loaded and batched on
// the host and copied over per batch, noise is drawn on the host (the same numbers on every
// device), and the sample grids are copied back for the PNG writer.
//
// Each epoch writes dcgan_epoch_NNN.png, an 8x8 grid of G's images for one fixed batch of 64
// noise vectors, and the checkpoint dcgan.safetensors (tensors "generator.*", "discriminator.*",
// and the trainers' optimizer and scaler state "trainer_g.*", "trainer_d.*").
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "checkpoint.h"
#include "common.h"
#include "dcgan_model.h"
#include "mixtape.h"

using namespace mixtape;

namespace {

using Clock = std::chrono::steady_clock;

// ---- flags -----------------------------------------------------------------------------------

// dcgan's own flags; the shared ones (--epochs, --lr, --precision, --device, ...) are in common.h.
struct DcganFlags {
  std::string data_dir = data::kFashionMnistDir, images_dir, out_dir = ".", sample_mode = "eval";
  int64_t image_size = 0, nz = 100, ngf = 32, ndf = 32, limit = 0, log_every = 50, sample_every = 0;
  double beta1 = 0.5;
  bool smoke = false;
  examples::OptimizerFlags optimizer;  // --optimizer / --amsgrad for both networks; default Adam
  examples::DataParallelFlags dist;    // --dist-timeout

  bool folder() const { return !images_dir.empty(); }

  void add_to(CLI::App& app) {
    optimizer.add_to(app);
    dist.add_to(app);
    app.add_option("--data", data_dir, "directory with the (Fashion-)MNIST IDX files")->capture_default_str();
    app.add_option("--images", images_dir, "train on the PNG/JPEG images of this folder (RGB) instead");
    app.add_option("--image-size", image_size,
                   "image side, a power of two >= 8 (default: 32 for Fashion-MNIST, "
                   "64 for --images; Fashion-MNIST takes 32 only)");
    app.add_option("--nz", nz, "length of the noise vector z")->check(CLI::Range(1, 4096))->capture_default_str();
    app.add_option("--ngf", ngf, "generator width (channels of its last hidden layer)")
        ->check(CLI::Range(1, 1024))
        ->capture_default_str();
    app.add_option("--ndf", ndf, "discriminator width (channels of its first layer)")
        ->check(CLI::Range(1, 1024))
        ->capture_default_str();
    app.add_option("--beta1", beta1, "Adam beta1 of both optimizers")
        ->check(examples::finite)
        ->check(CLI::Range(0.0, 0.999999))
        ->capture_default_str();
    app.add_option("--limit", limit, "use only the first N training images (0: all)")->check(examples::non_negative);
    app.add_option("--log-every", log_every, "steps between step events in the metrics")
        ->check(CLI::Range(int64_t(1), int64_t(1000000)))
        ->capture_default_str();
    app.add_option("--sample-every", sample_every, "also write a sample grid every N steps (0: only per epoch)")
        ->check(examples::non_negative)
        ->capture_default_str();
    app.add_option("--sample-mode", sample_mode, "batch norm statistics for the sample grids")
        ->check(CLI::IsMember({"eval", "train"}))
        ->capture_default_str();
    app.add_option("--out-dir", out_dir, "where the PNG grids and dcgan.safetensors (see --checkpoint) go")
        ->capture_default_str();
    app.add_flag("--smoke", smoke, "tiny networks, a few dozen steps on a subset (CI smoke run)");
  }

  // After parsing: --smoke's configuration, the default image size, and the checks that involve
  // several flags.
  void finish(const CLI::App& app, examples::CommonFlags& flags) {
    if (smoke) {  // for the flags not given explicitly
      using examples::smoke_default;
      smoke_default(app, "--epochs", flags.epochs, 1);
      smoke_default(app, "--batch-size", flags.batch_size, 32);
      smoke_default(app, "--limit", limit, 1536);  // 48 steps
      smoke_default(app, "--ngf", ngf, 8);
      smoke_default(app, "--ndf", ndf, 8);
      smoke_default(app, "--nz", nz, 32);
      smoke_default(app, "--log-every", log_every, 2);
    }
    if (image_size == 0) image_size = folder() ? 64 : 32;
    MT_CHECK(image_size >= 8 && (image_size & (image_size - 1)) == 0, "--image-size must be a power of two >= 8, got ",
             image_size);
    MT_CHECK(folder() || image_size == 32, "Fashion-MNIST trains at --image-size 32 (28x28 padded), got ", image_size,
             "; use --images DIR for other sizes");
    MT_CHECK((ngf << (num_stages() - 1)) <= 8192 && (ndf << (num_stages() - 1)) <= 8192,
             "--ngf/--ndf too large for --image-size ", image_size);
  }

  // Upsampling (downsampling) stages between 4x4 and the image: 3 for 32x32, 4 for 64x64.
  int64_t num_stages() const {
    int64_t k = 0;
    for (int64_t s = image_size; s > 4; s /= 2) ++k;
    return k;
  }
};

// ---- data ------------------------------------------------------------------------------------

// Fashion-MNIST [N, 1, 28, 28] -> [N, 1, 32, 32] in [-1, 1]: 2 pixels of background (-1) around
// each image, so the 4 -> 8 -> 16 -> 32 architecture applies without resampling.
Tensor load_fashion_mnist_32(const std::string& dir, int64_t limit) {
  // The GAN uses no labels, so they are not checked against a number of classes.
  const data::LabeledImages raw = data::load_fashion_mnist(
      dir, data::MnistSplit::train, {.normalize = false, .limit = limit > 0 ? limit : -1, .num_classes = 0});
  const Tensor& x = raw.images;  // [N, 1, 28, 28] in [0, 1]
  const int64_t N = x.size(0), H = x.size(2), W = x.size(3);
  MT_CHECK(H <= 32 && W <= 32, "images in ", dir, " are ", H, "x", W, "; at most 32x32 can be padded to 32x32");
  Tensor out = full({N, 1, 32, 32}, -1.0);
  out.narrow(2, (32 - H) / 2, H).narrow(3, (32 - W) / 2, W).copy_(x * 2.0 - 1.0);
  return out;
}

// The training images [N, nc, S, S] in [-1, 1], on the host: Fashion-MNIST padded to 32x32, or
// the --images folder at --image-size.
Tensor load_images(const DcganFlags& o, int64_t batch_size) {
  Tensor images;
  if (o.folder()) {
    images = data::load_image_folder(o.images_dir, {.size = o.image_size, .limit = o.limit > 0 ? o.limit : -1}).images;
    std::printf("dcgan: %lld images from %s at %lldx%lld\n", (long long)images.size(0), o.images_dir.c_str(),
                (long long)o.image_size, (long long)o.image_size);
  } else {
    images = load_fashion_mnist_32(o.data_dir, o.limit);
    std::printf("dcgan: %lld Fashion-MNIST training images from %s, padded to 32x32\n", (long long)images.size(0),
                o.data_dir.c_str());
  }
  MT_CHECK(images.size(0) >= batch_size, "the ", images.size(0), " training images are fewer than one batch of ",
           batch_size);
  return images;
}

// G's images for the fixed noise batch, as an 8x8 PNG grid; `fixed_z` is in G's compute dtype
// and the images are converted to f32 for the PNG. In eval mode batch norm uses the running
// statistics (the default; see Note [Sampling mode]); in train mode it uses the fixed batch's own
// statistics, and the running statistics are restored afterwards so sampling never changes
// training.
void write_sample_grid(nn::Sequential& G, const Tensor& fixed_z, bool train_mode, const std::string& path) {
  NoGrad no_grad;
  std::vector<Tensor> saved;
  if (train_mode) {
    for (const auto& [name, t] : G.named_buffers()) saved.push_back(t.clone());
  } else {
    G.eval();
  }
  const Tensor images = G(Variable(fixed_z)).data().to(DType::f32).to(Device::cpu());
  if (train_mode) {
    size_t i = 0;
    for (auto& [name, t] : G.named_buffers()) t.copy_(saved[i++]);
  }
  G.train();
  data::write_png_grid(path, images, 8, 8);
}

// Note [Sampling mode]
// The grids are drawn with G in eval mode, batch norm normalizing with its running statistics,
// as a trained generator is used. PyTorch's DCGAN example samples in train mode instead (the
// fixed batch's own statistics). The running statistics start at mean 0, variance 1, far above
// the variance of a fresh N(0, 0.02) generator's activations, so early eval-mode grids are washed
// out (near-flat gray at step 10, faint at step 30: momentum 0.1 leaves 0.9^k of the initial
// statistics after k steps); from about step 50 on both modes draw the same pictures (compared at
// steps 50 to 200 on Fashion-MNIST), and every epoch's grid is far past that point. --sample-mode train draws with batch statistics (and
// leaves the running ones as they were), for --sample-every grids in the first steps.

// The two networks and their trainers, with what every step and every sample grid reuses.
struct Gan {
  Gan(const DcganFlags& o, int64_t channels, const examples::CommonFlags& flags,
      const examples::PrecisionFlags& precision, Device device, std::shared_ptr<dist::DataParallel> dp);

  // Rank 0 draws the grids (Note [Data-parallel examples] in common.h).
  void write_samples(const std::string& path) {
    if (dp->is_root()) write_sample_grid(*G, fixed_z, sample_train, path);
  }

  int64_t nz, nc, batch;  // batch: this rank's rows of each global batch (all of them on one process)
  int64_t global_batch;
  std::shared_ptr<dist::DataParallel> dp;
  Device device;
  std::shared_ptr<nn::Sequential> G, D;
  std::unique_ptr<PrecisionTrainer> g_trainer, d_trainer;
  std::vector<Variable> d_params;
  Generator noise_gen;              // z for each step, drawn on the host (the same on every device)
  Tensor fixed_z;                   // [64, nz, 1, 1] in G's compute dtype: the z of every sample grid
  bool sample_train;                // --sample-mode train
  Tensor real_labels, fake_labels;  // [B, 1] ones and zeros on the device
};

// Both networks start from N(0, 0.02) weights drawn from --seed (G's first) and move to the
// device before their trainers are built: masters and optimizer state follow the parameters.
Gan::Gan(const DcganFlags& o, int64_t channels, const examples::CommonFlags& flags,
         const examples::PrecisionFlags& precision, Device device, std::shared_ptr<dist::DataParallel> dp_)
    : nz(o.nz),
      nc(channels),
      batch(dp_->shard_size(flags.batch_size)),
      global_batch(flags.batch_size),
      dp(std::move(dp_)),
      device(device),
      noise_gen(flags.seed + 1) {
  Generator init_gen(flags.seed);
  G = examples::make_generator(nz, o.ngf, nc, o.num_stages());
  D = examples::make_discriminator(o.ndf, nc, o.num_stages());
  nn::init::dcgan_init(*G, init_gen);
  nn::init::dcgan_init(*D, init_gen);
  dp->broadcast(*G);  // rank 0's initial state on every rank (nothing with one process)
  dp->broadcast(*D);
  G->to(device);
  D->to(device);
  std::printf("generator %s\n%lld parameters\ndiscriminator %s\n%lld parameters\n", G->str().c_str(),
              (long long)G->num_parameters(), D->str().c_str(), (long long)D->num_parameters());
  const OptimizerSpec adam = o.optimizer.spec({.kind = OptimizerKind::adam, .lr = flags.lr, .beta1 = o.beta1});
  g_trainer = std::make_unique<PrecisionTrainer>(*G, adam, precision.options(flags.seed));
  d_trainer = std::make_unique<PrecisionTrainer>(*D, adam, precision.options(flags.seed + 1));
  if (dp->distributed()) {
    g_trainer->set_data_parallel(dp);
    d_trainer->set_data_parallel(dp);
  }
  std::printf("device: %s\nprecision: G %s\n           D %s\n",
              examples::device_description(device, flags.threads).c_str(), g_trainer->describe().c_str(),
              d_trainer->describe().c_str());
  d_params = D->parameters();
  // 64 noise vectors from a constant seed: the same z for every grid of a run, and across runs.
  Generator sample_gen(20160107);
  fixed_z = g_trainer->input(normal({64, nz, 1, 1}, 0.0, 1.0, sample_gen));
  sample_train = o.sample_mode == "train";
  real_labels = ones({batch, 1}, DType::f32, device);
  fake_labels = zeros({batch, 1}, DType::f32, device);
}

// ---- one training step -----------------------------------------------------------------------

// Milliseconds spent in each phase, summed over an epoch's timed steps. On a GPU each phase of a
// timed step ends with a synchronize, so the time is that of its kernels, not of queueing them;
// there only the steps that log are timed (they synchronize anyway), on the CPU every step.
struct PhaseTimes {
  double g_fwd = 0, d_fwd = 0, d_bwd = 0, d_opt = 0, dg_fwd = 0, dg_bwd = 0, g_bwd = 0, g_opt = 0, data = 0;
  int64_t steps = 0;  // the steps timed
  Device device = Device::cpu();
  bool timing = true;     // whether the step in progress is timed
  Clock::time_point t{};  // the end of the last phase

  void start() { t = Clock::now(); }
  // The time since the last phase ended goes to `slot` (a timed step).
  void lap(double& slot) {
    if (!timing) return;
    examples::synchronize(device);
    const auto now = Clock::now();
    slot += std::chrono::duration<double, std::milli>(now - t).count();
    t = now;
  }
  double& slot(examples::GanPhase p) {
    using P = examples::GanPhase;
    switch (p) {
      case P::g_fwd: return g_fwd;
      case P::d_fwd: return d_fwd;
      case P::d_bwd: return d_bwd;
      case P::d_opt: return d_opt;
      case P::dg_fwd: return dg_fwd;
      case P::dg_bwd: return dg_bwd;
      case P::g_bwd: return g_bwd;
      case P::g_opt: return g_opt;
    }
    return data;
  }
  PhaseTimes& operator+=(const PhaseTimes& o) {
    g_fwd += o.g_fwd, d_fwd += o.d_fwd, d_bwd += o.d_bwd, d_opt += o.d_opt, dg_fwd += o.dg_fwd;
    dg_bwd += o.dg_bwd, g_bwd += o.g_bwd, g_opt += o.g_opt, data += o.data, steps += o.steps;
    return *this;
  }
  nlohmann::json per_step() const {
    const double n = double(std::max<int64_t>(steps, 1));
    return {{"g_forward", g_fwd / n},   {"d_forward", d_fwd / n},          {"d_backward", d_bwd / n},
            {"d_optimizer", d_opt / n}, {"d_on_fake_forward", dg_fwd / n}, {"d_on_fake_backward", dg_bwd / n},
            {"g_backward", g_bwd / n},  {"g_optimizer", g_opt / n},        {"data", data / n}};
  }
};

// One step on this rank's rows of a batch of real images ([B, nc, S, S], on the device) and of
// the noise: examples::gan_step (D's update, then G's, each through its own trainer), with each
// phase timed when the step is.
examples::GanStepResult train_step(Gan& gan, const Tensor& real_images, const Tensor& noise, PhaseTimes& times) {
  const examples::GanNets nets{*gan.G,          *gan.D,          *gan.g_trainer, *gan.d_trainer,
                               gan.real_labels, gan.fake_labels, gan.d_params};
  return examples::gan_step(nets, real_images, gan.g_trainer->input(noise),
                            [&](examples::GanPhase phase) { times.lap(times.slot(phase)); });
}

// ---- the training loop -----------------------------------------------------------------------

// A step's values as read back: its losses and D's mean probabilities on real and fake images.
struct GanValues {
  double loss_d = 0, loss_g = 0, d_real = 0, d_fake = 0;
  bool finite() const { return std::isfinite(loss_d) && std::isfinite(loss_g); }
};

// One epoch's sums over its steps whose losses were finite, saved with the checkpoint.
struct EpochStats {
  double sum_d = 0, sum_g = 0, sum_real = 0, sum_fake = 0;
  int64_t steps = 0, scored = 0;  // steps, and those with finite losses (the averages')
  PhaseTimes times;               // (not saved)

  double n() const { return double(std::max<int64_t>(scored, 1)); }
};

// The sums under "progress." (none when `epoch_done`: the next run starts the next epoch).
void save_stats(TensorDict& ckpt, const EpochStats& stats, bool epoch_done) {
  const EpochStats e = epoch_done ? EpochStats{} : stats;
  for (const auto& [key, v] :
       {std::pair{"sum_d", e.sum_d}, {"sum_g", e.sum_g}, {"sum_real", e.sum_real}, {"sum_fake", e.sum_fake}})
    ckpt.set_meta(std::string("progress.") + key, state_io::format(v));
  ckpt.set_meta("progress.steps", std::to_string(e.steps));
  ckpt.set_meta("progress.scored", std::to_string(e.scored));
}

void load_stats(const TensorDict& ckpt, EpochStats& e) {
  using train::progress_double, train::progress_int;
  e.sum_d = progress_double(ckpt, "sum_d");
  e.sum_g = progress_double(ckpt, "sum_g");
  e.sum_real = progress_double(ckpt, "sum_real");
  e.sum_fake = progress_double(ckpt, "sum_fake");
  e.steps = progress_int(ckpt, "steps");
  e.scored = progress_int(ckpt, "scored");
  MT_CHECK(e.steps >= 0 && e.scored >= 0, "--resume: the checkpoint's step counts are negative");
}

// What a checkpoint must match to be resumed by this run.
train::RunIdentity run_identity(const Gan& gan, const examples::CommonFlags& flags, int64_t images) {
  train::RunIdentity id = {{"program", "dcgan"},
                           {"generator", gan.G->str()},
                           {"discriminator", gan.D->str()},
                           {"batch_size", std::to_string(flags.batch_size)},
                           {"seed", std::to_string(flags.seed)},
                           {"training_images", std::to_string(images)}};
  train::add_precision_identity(id, *gan.g_trainer, "G.");
  train::add_precision_identity(id, *gan.d_trainer, "D.");
  return id;
}

std::string step_png(const std::string& dir, int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "dcgan_step_%06lld.png", (long long)step);
  return examples::output_path(dir, name);
}

// The step event of a logging step, when its losses were finite.
std::optional<nlohmann::json> step_event(const Gan& gan, const train::StepInfo& s, const GanValues& v) {
  if (!v.finite()) return std::nullopt;
  return nlohmann::json{{"event", "step"},
                        {"step", s.step},
                        {"epoch", s.epoch},
                        {"loss", v.loss_d},
                        {"loss_d", v.loss_d},
                        {"loss_g", v.loss_g},
                        {"d_real", v.d_real},
                        {"d_fake", v.d_fake},
                        {"lr", gan.d_trainer->optimizer().lr()},
                        {"d_scale", gan.d_trainer->last_scale()},  // the scales this step's gradients carried
                        {"d_skipped", !gan.d_trainer->last_applied()},
                        {"g_scale", gan.g_trainer->last_scale()},
                        {"g_skipped", !gan.g_trainer->last_applied()}};
}

// ---- checkpoint, sample grids and reports ----------------------------------------------------

std::string epoch_png(const std::string& dir, int epoch) {
  char name[64];
  std::snprintf(name, sizeof name, "dcgan_epoch_%03d.png", epoch);
  return examples::output_path(dir, name);
}

// The epoch's averages and phase times, on stdout and as an "eval" event.
void report_epoch(int epoch, const EpochStats& e, const std::string& png, train::Metrics& metrics) {
  const double n = e.n();
  const nlohmann::json ms = e.times.per_step();
  std::printf("epoch %d: loss_d %.4f  loss_g %.4f  D(x) %.3f  D(G(z)) %.3f  -> %s\n", epoch, e.sum_d / n, e.sum_g / n,
              e.sum_real / n, e.sum_fake / n, png.c_str());
  std::printf(
      "  ms/step: G fwd %.1f | D fwd %.1f bwd %.1f adam %.1f | D(G(z)) fwd %.1f bwd %.1f | "
      "G bwd %.1f adam %.1f | data %.1f\n",
      ms["g_forward"].get<double>(), ms["d_forward"].get<double>(), ms["d_backward"].get<double>(),
      ms["d_optimizer"].get<double>(), ms["d_on_fake_forward"].get<double>(), ms["d_on_fake_backward"].get<double>(),
      ms["g_backward"].get<double>(), ms["g_optimizer"].get<double>(), ms["data"].get<double>());
  metrics.write({{"event", "eval"},
                 {"epoch", epoch},
                 {"loss_d", e.sum_d / n},
                 {"loss_g", e.sum_g / n},
                 {"d_real", e.sum_real / n},
                 {"d_fake", e.sum_fake / n},
                 {"samples", png},
                 {"ms_per_step", ms}});
}

// The closing lines and the "summary" event.
void report_run(const Gan& gan, const train::TrainLoop& loop, const GanValues& last, const PhaseTimes& times,
                Device device, double wall, const std::string& ckpt_path, train::Metrics& metrics) {
  const double steps = double(loop.steps()), train_secs = loop.train_seconds();
  std::printf("%lld steps; wall %.1f s (training %.1f s, %.2f steps/s); checkpoint %s\n", (long long)loop.steps(), wall,
              train_secs, steps / train_secs, ckpt_path.c_str());
  std::printf("generator: %s\ndiscriminator: %s\n", train::precision_summary(*gan.g_trainer).c_str(),
              train::precision_summary(*gan.d_trainer).c_str());
  nlohmann::json summary = {{"event", "summary"},
                            {"device", device.str()},
                            {"precision", nn::precision_name(gan.g_trainer->precision())},
                            {"steps", loop.steps()},
                            {"final_loss_d", last.loss_d},
                            {"final_loss_g", last.loss_g},
                            {"final_d_real", last.d_real},
                            {"final_d_fake", last.d_fake},
                            {"ms_per_step", times.per_step()},
                            {"wall_s", wall},
                            {"steps_per_s", steps / train_secs}};
  train::add_precision_summary(summary, *gan.g_trainer, "g_");
  train::add_precision_summary(summary, *gan.d_trainer, "d_");
  loop.counters().add_to(summary);
  metrics.write(summary);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Train a DCGAN on Fashion-MNIST at 32x32, or on a folder of images, under any precision "
      "policy."};
  examples::CommonFlags flags;
  flags.epochs = 5;
  flags.lr = 2e-4;
  flags.add_to(app);
  examples::PrecisionFlags precision;
  precision.add_to(app);
  examples::DeviceFlag device_flag;
  device_flag.add_to(app);
  DcganFlags o;
  o.add_to(app);
  examples::CheckpointFlags checkpoint_flags("dcgan.safetensors");
  checkpoint_flags.add_to(app);
  CLI11_PARSE(app, argc, argv);

  std::shared_ptr<dist::DataParallel> dp;
  try {
    o.finish(app, flags);
    dp = examples::data_parallel(flags.batch_size, o.dist, "dcgan");
    const Device device = device_flag.resolve();
    examples::check_output_dir(o.out_dir);
    const train::Checkpointer checkpoint = checkpoint_flags.finish(o.out_dir, dp->rank(), dp->size());
    set_num_threads(flags.threads);
    const auto t_start = Clock::now();

    const Tensor images = load_images(o, flags.batch_size);
    Gan gan(o, images.size(1), flags, precision, device, dp);
    data::DataLoader loader(data::TensorDataset({images}),
                            {.batch_size = flags.batch_size, .shuffle = true, .drop_last = true, .seed = flags.seed});
    const train::RunIdentity id = run_identity(gan, flags, images.size(0));
    train::Metrics metrics(dp->is_root() ? flags.metrics : std::string(), checkpoint.resuming());

    // The loop (train/loop.h): batches of images and noise drawn per step, D's update then G's
    // (each through its own trainer), the sums the events report, a sample grid after each epoch.
    train::TrainLoop loop({.epochs = flags.epochs,
                           .steps_per_epoch = loader.batches_per_epoch(),
                           .max_steps = flags.max_steps,
                           .log_every = o.log_every,
                           .values = 4,  // GanStepResult::values: loss_d, loss_g, D(x), D(G(z))
                           .save_every_epoch = true,
                           .dp = dp->distributed() ? dp : nullptr},
                          {{.model = gan.D.get(),
                            .trainer = gan.d_trainer.get(),
                            .checkpoint_prefix = "discriminator.",
                            .telemetry_prefix = "D.",
                            .loss_column = 0},
                           {.model = gan.G.get(),
                            .trainer = gan.g_trainer.get(),
                            .checkpoint_prefix = "generator.",
                            .telemetry_prefix = "G.",
                            .loss_column = 1}});
    loop.add_loader(loader);
    loop.add_draws("noise", gan.noise_gen, [&] {
      return std::vector<Tensor>{normal({gan.global_batch, gan.nz, 1, 1}, 0.0, 1.0, gan.noise_gen)};
    });
    EpochStats e;      // of the epoch in progress
    GanValues last;    // the last step read back
    GanValues final;   // the last one whose losses were finite
    PhaseTimes times;  // summed over the epochs
    loop.epoch_start = [&](int) {
      e.times = PhaseTimes{.device = device};
      e.times.start();
    };
    loop.step = [&](const train::TrainLoop::Batch& b, const train::StepInfo& s) {
      e.times.timing = s.reads || !device.is_cuda();
      e.times.lap(e.times.data);
      const examples::GanStepResult r = train_step(gan, b[0], b[1], e.times);
      e.times.steps += e.times.timing;
      ++e.steps;
      return r.values();
    };
    loop.tally = [&](const double* v, int64_t) {
      last = {.loss_d = v[0], .loss_g = v[1], .d_real = v[2], .d_fake = v[3]};
      if (!last.finite()) return;  // a step a scaler skipped (the loop checked that it was)
      e.sum_d += last.loss_d, e.sum_g += last.loss_g, e.sum_real += last.d_real, e.sum_fake += last.d_fake;
      ++e.scored;
      final = last;
    };
    loop.step_event = [&](const train::StepInfo& s) { return step_event(gan, s, last); };
    loop.after_step = [&](const train::StepInfo& s) {
      if (o.sample_every > 0 && s.step % o.sample_every == 0) gan.write_samples(step_png(o.out_dir, s.step));
    };
    loop.progress_loss = [&] { return e.sum_d / e.n(); };
    loop.epoch_end = [&](int epoch, bool complete) {
      const std::string png = epoch_png(o.out_dir, epoch);
      gan.write_samples(png);
      report_epoch(epoch, e, png, metrics);
      times += e.times;
      if (complete) e = EpochStats{};
    };
    loop.save_state = [&](TensorDict& ckpt, bool epoch_done) { save_stats(ckpt, e, epoch_done); };
    loop.load_state = [&](const TensorDict& ckpt) { load_stats(ckpt, e); };
    if (loop.resume(&checkpoint, id))
      std::printf("resumed from %s at %s\n", checkpoint.path().c_str(), loop.position().c_str());
    loop.run(metrics);
    report_run(gan, loop, final, times, device, train::seconds_since(t_start), checkpoint.path(), metrics);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dcgan: error: %s\n", e.what());
    if (dp && dp->distributed()) dist::abort_all(1);  // the other ranks may wait in a collective
    return 1;
  }
  return 0;
}
