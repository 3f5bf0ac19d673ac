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
#include <filesystem>

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

// One step on a batch of real images ([B, nc, S, S], on the host or staged on the device) and the
// global batch's noise: examples::gan_step (D's update, then G's, each through its own trainer)
// with each phase timed when the step is; telemetry of sampled steps goes to `metrics`.
examples::GanStepResult train_step(Gan& gan, const Tensor& real_images, const Tensor& noise, PhaseTimes& times,
                                   examples::Metrics& metrics) {
  const Tensor z = gan.g_trainer->input(gan.dp->shard_rows(noise));  // this rank's rows of the noise
  const examples::GanNets nets{*gan.G,          *gan.D,          *gan.g_trainer, *gan.d_trainer,
                               gan.real_labels, gan.fake_labels, gan.d_params};
  return examples::gan_step(nets, real_images, z, [&](examples::GanPhase phase) {
    times.lap(times.slot(phase));
    if (phase == examples::GanPhase::d_opt) metrics.write_telemetry(*gan.d_trainer, "D.");
    if (phase == examples::GanPhase::g_opt) metrics.write_telemetry(*gan.g_trainer, "G.");
  });
}

// ---- the training loop -----------------------------------------------------------------------

// A step's values as read back: its losses and D's mean probabilities on real and fake images.
struct GanValues {
  double loss_d = 0, loss_g = 0, d_real = 0, d_fake = 0;
  bool finite() const { return std::isfinite(loss_d) && std::isfinite(loss_g); }
};

// What the whole run has done so far.
struct RunState {
  int64_t step = 0;
  double train_secs = 0.0;          // training steps only, without sample grids and checkpoints
  GanValues last;                   // the last step whose losses were finite
  PhaseTimes times;                 // summed over the epochs
  examples::StepCounters counters;  // launches, host synchronizations and allocations per step
  bool stop = false;                // --max-steps reached
};

// One epoch's sums over its steps whose losses were finite.
struct EpochStats {
  double sum_d = 0, sum_g = 0, sum_real = 0, sum_fake = 0;
  int64_t steps = 0, scored = 0;  // steps, and those with finite losses (the averages')
  PhaseTimes times;

  double n() const { return double(std::max<int64_t>(scored, 1)); }
};

// Where a run stands: the next batch, and the sums of the epoch in progress.
struct Position {
  int64_t epoch = 1, batch = 0;  // the next step trains batch `batch` of epoch `epoch`
  EpochStats stats;              // of epoch `epoch` so far (times are not saved)
};

// Both networks with what trains them ("generator." and "discriminator.": model, generators,
// trainer), the noise generator and the position under "progress." (Note [Resumable runs]).
TensorDict dcgan_checkpoint(const Gan& gan, int64_t step, Position p, int64_t batches_per_epoch) {
  if (p.batch == batches_per_epoch) p = {.epoch = p.epoch + 1};  // the epoch is complete: the next one
  TensorDict ckpt;
  examples::add_training_state(ckpt, "generator.", *gan.G, *gan.g_trainer, nullptr);
  examples::add_training_state(ckpt, "discriminator.", *gan.D, *gan.d_trainer, nullptr);
  examples::add_generator(ckpt, "progress.noise", gan.noise_gen);
  ckpt.set_meta("progress.step", std::to_string(step));
  ckpt.set_meta("progress.epoch", std::to_string(p.epoch));
  ckpt.set_meta("progress.batch", std::to_string(p.batch));
  const EpochStats& e = p.stats;
  for (const auto& [key, v] :
       {std::pair{"sum_d", e.sum_d}, {"sum_g", e.sum_g}, {"sum_real", e.sum_real}, {"sum_fake", e.sum_fake}})
    ckpt.set_meta(std::string("progress.") + key, state_io::format(v));
  ckpt.set_meta("progress.steps", std::to_string(e.steps));
  ckpt.set_meta("progress.scored", std::to_string(e.scored));
  return ckpt;
}

// Continues from a checkpoint of dcgan_checkpoint; returns the step it was saved at.
int64_t resume_dcgan(const TensorDict& ckpt, Gan& gan, Position& p, int64_t batches_per_epoch) {
  using examples::progress_double, examples::progress_int;
  examples::load_training_state(ckpt, "generator.", *gan.G, *gan.g_trainer, nullptr);
  examples::load_training_state(ckpt, "discriminator.", *gan.D, *gan.d_trainer, nullptr);
  examples::load_generator(ckpt, "progress.noise", gan.noise_gen);
  const int64_t step = progress_int(ckpt, "step");
  p.epoch = progress_int(ckpt, "epoch");
  p.batch = progress_int(ckpt, "batch");
  EpochStats& e = p.stats;
  e.sum_d = progress_double(ckpt, "sum_d");
  e.sum_g = progress_double(ckpt, "sum_g");
  e.sum_real = progress_double(ckpt, "sum_real");
  e.sum_fake = progress_double(ckpt, "sum_fake");
  e.steps = progress_int(ckpt, "steps");
  e.scored = progress_int(ckpt, "scored");
  MT_CHECK(step >= 0 && p.epoch >= 1 && p.batch >= 0 && p.batch < batches_per_epoch && e.steps >= 0 && e.scored >= 0,
           "--resume: the checkpoint's position (step ", step, ", epoch ", p.epoch, ", batch ", p.batch,
           ") does not fit this run's ", batches_per_epoch, " batches per epoch");
  return step;
}

// What a checkpoint must match to be resumed by this run.
examples::RunIdentity run_identity(const Gan& gan, const examples::CommonFlags& flags, int64_t images) {
  examples::RunIdentity id = {{"program", "dcgan"},
                              {"generator", gan.G->str()},
                              {"discriminator", gan.D->str()},
                              {"batch_size", std::to_string(flags.batch_size)},
                              {"seed", std::to_string(flags.seed)},
                              {"training_images", std::to_string(images)}};
  examples::add_precision_identity(id, *gan.g_trainer, "G.");
  examples::add_precision_identity(id, *gan.d_trainer, "D.");
  return id;
}

std::string step_png(const std::string& dir, int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "dcgan_step_%06lld.png", (long long)step);
  return examples::output_path(dir, name);
}

// One pass over the data from p.batch (or up to --max-steps): each step, its checks, its step
// event, --sample-every grid and --checkpoint-every save.
void train_epoch(Gan& gan, data::DataLoader& loader, Position& p, const DcganFlags& o, int64_t max_steps,
                 const examples::Checkpointer& checkpoint, const examples::RunIdentity& id,
                 examples::Progress& progress, examples::Metrics& metrics, RunState& run) {
  progress.start_epoch();
  const auto t_epoch = Clock::now();
  const int epoch = int(p.epoch);
  EpochStats& e = p.stats;
  e.times = PhaseTimes{};
  e.times.device = gan.device;
  const bool on_gpu = gan.device.is_cuda();
  const int64_t batches = loader.batches_per_epoch();
  const int64_t epoch_end = run.step + (batches - p.batch);  // this epoch's last step, or --max-steps
  const int64_t last_step = max_steps > 0 ? std::min(epoch_end, max_steps) : epoch_end;
  examples::EpochBatches images(loader, epoch, p.batch, gan.device);  // Note [Batches staged on the device]
  examples::StagedDraws noise(gan.device, [&] {                       // Note [Draws staged on the device]
    return std::vector<Tensor>{normal({gan.global_batch, gan.nz, 1, 1}, 0.0, 1.0, gan.noise_gen)};
  });
  // The step values wait on the device until a step logs (Note [Readout block]); then they are
  // counted, in order, into the epoch's sums, with the steps each scaler skipped meanwhile.
  examples::LossLog log(o.log_every, gan.device, 4);
  int64_t counted_up_to = run.step;  // the last step whose values are counted
  int64_t skipped_d = gan.d_trainer->skipped(), skipped_g = gan.g_trainer->skipped();
  GanValues last;  // the last step counted
  const auto count = [&] {
    std::vector<double> v = log.take();
    if (gan.dp->distributed()) gan.dp->mean_over_ranks(v);  // the global batch's values, the same on every rank
    const int64_t new_skipped_d = gan.d_trainer->skipped() - skipped_d;
    const int64_t new_skipped_g = gan.g_trainer->skipped() - skipped_g;
    skipped_d += new_skipped_d, skipped_g += new_skipped_g;
    int64_t nonfinite_d = 0, nonfinite_g = 0;
    for (size_t i = 0; i + 3 < v.size(); i += 4) {
      last = {.loss_d = v[i], .loss_g = v[i + 1], .d_real = v[i + 2], .d_fake = v[i + 3]};
      // A step a scaler skipped changed nothing; more non-finite losses than skipped steps mean
      // a step with a non-finite loss was applied: training diverged. (A non-finite loss has
      // non-finite gradients, which every skipping scaler skips.)
      nonfinite_d += !std::isfinite(last.loss_d);
      nonfinite_g += !std::isfinite(last.loss_g);
      MT_CHECK(nonfinite_d <= new_skipped_d && nonfinite_g <= new_skipped_g, "the losses became loss_d ", last.loss_d,
               ", loss_g ", last.loss_g, " at step ", counted_up_to + int64_t(i / 4) + 1, " under ",
               gan.g_trainer->describe(), " (try a smaller --lr", examples::diverged_hint(*gan.g_trainer));
      if (last.finite()) {
        e.sum_d += last.loss_d;
        e.sum_g += last.loss_g;
        e.sum_real += last.d_real;
        e.sum_fake += last.d_fake;
        ++e.scored;
        run.last = last;
      }
    }
    counted_up_to += int64_t(v.size() / 4);
  };
  e.times.start();
  while (std::optional<data::Batch> next = images.next()) {
    data::Batch& b = *next;
    const bool logs = (run.step + 1) % o.log_every == 0;
    const bool reads = logs || run.step + 1 >= last_step;
    e.times.timing = reads || !on_gpu;
    e.times.lap(e.times.data);
    const Tensor z = noise.next(checkpoint.steps_until_due(run.step + 1, last_step))[0];
    run.counters.begin_step();
    const examples::GanStepResult r = train_step(gan, gan.dp->shard_rows(b[0]), z, e.times, metrics);
    e.times.steps += e.times.timing;
    ++run.step;
    ++e.steps;
    if (log.add(r.values()) || reads) count();  // the one read of a step that logs
    if (reads) progress.update(epoch, e.steps, e.sum_d / e.n());
    if (logs && last.finite())
      metrics.write({{"event", "step"},
                     {"step", run.step},
                     {"epoch", epoch},
                     {"loss", last.loss_d},
                     {"loss_d", last.loss_d},
                     {"loss_g", last.loss_g},
                     {"d_real", last.d_real},
                     {"d_fake", last.d_fake},
                     {"lr", gan.d_trainer->optimizer().lr()},
                     {"d_scale", gan.d_trainer->last_scale()},  // the scales this step's gradients carried
                     {"d_skipped", !gan.d_trainer->last_applied()},
                     {"g_scale", gan.g_trainer->last_scale()},
                     {"g_skipped", !gan.g_trainer->last_applied()}});
    run.counters.end_step(reads || gan.g_trainer->sampled() || gan.d_trainer->sampled());
    if (o.sample_every > 0 && run.step % o.sample_every == 0) gan.write_samples(step_png(o.out_dir, run.step));
    p.batch = b.index + 1;
    if (max_steps > 0 && run.step >= max_steps) {
      run.stop = true;
      break;
    }
    if (checkpoint.due(run.step)) {
      count();
      checkpoint.save(dcgan_checkpoint(gan, run.step, p, batches), id);
    }
    e.times.start();
  }
  count();
  progress.update(epoch, e.steps, e.sum_d / e.n(), true);
  run.train_secs += examples::seconds_since(t_epoch);
  run.times += e.times;
}

// ---- checkpoint, sample grids and reports ----------------------------------------------------

std::string epoch_png(const std::string& dir, int epoch) {
  char name[64];
  std::snprintf(name, sizeof name, "dcgan_epoch_%03d.png", epoch);
  return examples::output_path(dir, name);
}

// The epoch's averages and phase times, on stdout and as an "eval" event.
void report_epoch(int epoch, const EpochStats& e, const std::string& png, examples::Metrics& metrics) {
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
void report_run(const Gan& gan, const RunState& run, Device device, double wall, const std::string& ckpt_path,
                examples::Metrics& metrics) {
  std::printf("%lld steps; wall %.1f s (training %.1f s, %.2f steps/s); checkpoint %s\n", (long long)run.step, wall,
              run.train_secs, double(run.step) / run.train_secs, ckpt_path.c_str());
  std::printf("generator: %s\ndiscriminator: %s\n", examples::precision_summary(*gan.g_trainer).c_str(),
              examples::precision_summary(*gan.d_trainer).c_str());
  nlohmann::json summary = {{"event", "summary"},
                            {"device", device.str()},
                            {"precision", nn::precision_name(gan.g_trainer->precision())},
                            {"steps", run.step},
                            {"final_loss_d", run.last.loss_d},
                            {"final_loss_g", run.last.loss_g},
                            {"final_d_real", run.last.d_real},
                            {"final_d_fake", run.last.d_fake},
                            {"ms_per_step", run.times.per_step()},
                            {"wall_s", wall},
                            {"steps_per_s", double(run.step) / run.train_secs}};
  examples::add_precision_summary(summary, *gan.g_trainer, "g_");
  examples::add_precision_summary(summary, *gan.d_trainer, "d_");
  run.counters.add_to(summary);
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
  examples::Checkpointer checkpoint("dcgan.safetensors");
  checkpoint.add_to(app);
  CLI11_PARSE(app, argc, argv);

  std::shared_ptr<dist::DataParallel> dp;
  try {
    o.finish(app, flags);
    dp = examples::data_parallel(flags.batch_size, o.dist, "dcgan");
    checkpoint.set_ranks(dp->rank(), dp->size());
    const Device device = device_flag.resolve();
    examples::check_output_dir(o.out_dir);
    checkpoint.finish(o.out_dir);
    set_num_threads(flags.threads);
    const auto t_start = Clock::now();

    const Tensor images = load_images(o, flags.batch_size);
    Gan gan(o, images.size(1), flags, precision, device, dp);
    data::DataLoader loader(data::TensorDataset({images}),
                            {.batch_size = flags.batch_size, .shuffle = true, .drop_last = true, .seed = flags.seed});
    const int64_t batches = loader.batches_per_epoch();
    const examples::RunIdentity id = run_identity(gan, flags, images.size(0));
    RunState run;
    Position p;
    if (const std::optional<TensorDict> saved = checkpoint.resume_state(id)) {
      run.step = resume_dcgan(*saved, gan, p, batches);
      std::printf("resumed from %s at step %lld (epoch %lld, batch %lld)\n", checkpoint.path().c_str(),
                  (long long)run.step, (long long)p.epoch, (long long)p.batch);
    }
    checkpoint.check_room(dcgan_checkpoint(gan, run.step, p, batches));
    run.stop = flags.max_steps > 0 && run.step >= flags.max_steps;
    examples::Metrics metrics(dp->is_root() ? flags.metrics : std::string(), checkpoint.resuming());
    examples::Progress progress(flags.epochs, batches);
    progress.quiet = !dp->is_root();

    for (; p.epoch <= flags.epochs && !run.stop; ++p.epoch, p.batch = 0, p.stats = {}) {
      train_epoch(gan, loader, p, o, flags.max_steps, checkpoint, id, progress, metrics, run);
      const std::string png = epoch_png(o.out_dir, int(p.epoch));
      gan.write_samples(png);
      checkpoint.save(dcgan_checkpoint(gan, run.step, p, batches), id);
      report_epoch(int(p.epoch), p.stats, png, metrics);
      if (run.stop && p.batch < batches) break;  // stopped inside the epoch: resume there
    }
    report_run(gan, run, device, examples::seconds_since(t_start), checkpoint.path(), metrics);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dcgan: error: %s\n", e.what());
    if (dp && dp->distributed()) dist::abort_all(1);  // the other ranks may wait in a collective
    return 1;
  }
  return 0;
}
