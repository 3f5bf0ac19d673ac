// The Fashion-MNIST models and their training loop, shared by cnn (one run) and precision_lab
// (the same run under ten precision configurations). Two models (--model):
//
// cnn (the default, and the precision lab's):
//   conv(1->w, 3x3) - BN - ReLU - maxpool 2      [B, w, 14, 14]
//   conv(w->2w, 3x3) - BN - ReLU - maxpool 2     [B, 2w, 7, 7]
//   flatten - linear(2w*49 -> 128) - ReLU - dropout - linear(128 -> 10)
//
// resnet (He et al.'s basic blocks, one per stage), with batch norm or group norm (--norm)
// after every conv:
//   conv(1->w, 3x3) - norm - ReLU - maxpool 2    [B, w, 14, 14]
//   block(w->w)                                  [B, w, 14, 14]
//   block(w->2w, stride 2)                       [B, 2w, 7, 7]
//   adaptive avg pool 1 - flatten - linear(2w -> 10)
// block(a->b): ReLU(norm(conv3x3(ReLU(norm(conv3x3(x))))) + shortcut(x)), the shortcut the
// identity, or conv1x1(stride) - norm where the shape changes.
//
// AdamW with a cosine learning-rate schedule over the whole run, through a PrecisionTrainer
// (optim/trainer.h), so every policy, loss scale and update rounding runs the same loop.
// The model is built on the CPU (same initial weights on every device), moved to `device`, and
// then the trainer is built there; each batch is copied to the device as it comes.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <tuple>
#include <utility>

#include "common.h"
#include "mixtape.h"

namespace examples {

inline constexpr int64_t kCnnClasses = 10;
inline constexpr size_t kFirstLinear =
    9;  // make_cnn's first linear layer  // the logits of make_cnn; the data's labels are checked against it

enum class CnnModel : uint8_t { cnn, resnet };
enum class CnnNorm : uint8_t { batch, group };  // the resnet's normalization layers

struct CnnConfig {
  CnnModel model = CnnModel::cnn;
  CnnNorm norm = CnnNorm::batch;
  int64_t width = 32;
  double dropout = 0.3;
  double lr = 2e-3;
  double weight_decay = 1e-4;
  int epochs = 12;
  int batch_size = 64;
  uint64_t seed = 0;
  // Augmentation of the training images: mirror left-right (data::RandomHorizontalFlip), shift
  // by up to crop_padding pixels each way (data::RandomCrop; 0: none).
  bool hflip = false;
  int64_t crop_padding = 0;
  int64_t log_every = 50;  // steps between "step" events
  int64_t max_steps = 0;   // 0: every epoch
  bool progress = true;    // the progress line on stderr
  bool verbose = true;     // per-epoch lines on stdout
  mixtape::Device device = mixtape::Device::cpu();
  // The precision lab's stress regimes (examples/precision_lab.cpp); the defaults leave the run as
  // it is. loss_weight multiplies the cross entropy before backward (reported losses are
  // unweighted). aux_weight > 0 adds a decoder head that reconstructs the input image from the
  // encoder's features, trained by aux_weight x the per-pixel MSE. adam_eps is AdamW's eps.
  double loss_weight = 1.0;
  double aux_weight = 0.0;
  double adam_eps = 1e-8;
  // The precision lab's fp8 regimes (Note [Fp8 regimes] in examples/precision_lab.cpp); 0 leaves
  // the run as it is. outlier_log2 = k gives the cnn's first linear layer's GEMM an input channel
  // 2^k larger than the rest; spike_every = n makes its whole input 2^spike_log2 larger on every
  // n-th training step (RescaledLinear: the model computes the same either way).
  int outlier_log2 = 0;
  int64_t spike_every = 0;
  int spike_log2 = 0;
  // Called after each step's update with the step's number, counted from 1 (the precision lab
  // reads the step's 8-bit operands there).
  std::function<void(const mixtape::PrecisionTrainer&, int64_t)> after_step;
  // --optimizer / --amsgrad; the default is AdamW.
  OptimizerFlags optimizer;
  // --checkpoint / --resume (train/checkpoint.h); null: no checkpoints.
  const mixtape::train::Checkpointer* checkpoint = nullptr;
  // Data-parallel training (Note [Data-parallel examples] in common.h); null: one process.
  std::shared_ptr<mixtape::dist::DataParallel> dp;
};

struct CnnEval {
  double loss = 0.0, accuracy = 0.0;
  double aux_mse = std::nan("");  // the decoder head's per-pixel test MSE (aux_weight > 0)
};

// The cnn with a reconstruction head on its encoder (layers 0-7 of make_cnn, [B, 2w, 7, 7]):
//   convT(2w->w, 4, stride 2, pad 1) - ReLU - convT(w->1, 4, stride 2, pad 1)   [B, 1, 28, 28]
struct CnnWithDecoder : mixtape::nn::Module {
  static constexpr size_t kEncoderLayers = 8;
  std::shared_ptr<mixtape::nn::Sequential> net, decoder;
  CnnWithDecoder(std::shared_ptr<mixtape::nn::Sequential> cnn, int64_t width, mixtape::Generator& gen)
      : Module("CnnWithDecoder") {
    using namespace mixtape;
    net = register_module("net", std::move(cnn));
    decoder = register_module(
        "decoder",
        std::make_shared<nn::Sequential>(
            std::make_shared<nn::ConvTranspose2d>(2 * width, width, 4, 2, 1, 0, 1, true, gen),
            std::make_shared<nn::ReLU>(), std::make_shared<nn::ConvTranspose2d>(width, 1, 4, 2, 1, 0, 1, true, gen)));
  }
  // {logits, reconstruction}
  std::pair<mixtape::Variable, mixtape::Variable> forward(const mixtape::Variable& x) {
    mixtape::Variable h = x;
    for (size_t i = 0; i < kEncoderLayers; ++i) h = (*(*net)[i])(h);
    mixtape::Variable logits = h;
    for (size_t i = kEncoderLayers; i < net->size(); ++i) logits = (*(*net)[i])(logits);
    return {logits, (*decoder)(h)};
  }
};

// The decoder head's test MSE per pixel, in fp32.
inline double evaluate_decoder(CnnWithDecoder& m, const mixtape::PrecisionTrainer& trainer,
                               const mixtape::data::LabeledImages& test, int64_t batch_size) {
  using namespace mixtape;
  m.eval();
  NoGrad no_grad;
  data::DataLoader loader(data::TensorDataset({test.images, test.labels}),
                          {.batch_size = batch_size, .shuffle = false});
  double sum = 0.0;
  int64_t n = 0;
  for (data::Batch& b : loader.epoch(0)) {
    const Variable recon = nn::fp32_input(OpId::mse_loss, m.forward(Variable(trainer.input(b[0]))).second);
    sum += mse_loss(recon, b[0].to(trainer.device()).to(DType::f32), Reduction::sum).item();
    n += b[0].numel();
  }
  m.train();
  return sum / double(n);
}

struct CnnRun {
  std::shared_ptr<mixtape::nn::Sequential> model;
  std::shared_ptr<CnnWithDecoder> with_decoder;  // aux_weight > 0: model and the decoder head
  std::unique_ptr<mixtape::PrecisionTrainer> trainer;
  std::unique_ptr<mixtape::LRScheduler> sched;
  mixtape::train::RunIdentity identity;  // what a checkpoint of this run must match to resume it
  CnnEval last;                          // the final evaluation
  int64_t steps = 0;
  double train_secs = 0.0;                // training steps only, without evaluation
  double final_train_loss = 0.0;          // mean over the last epoch
  int64_t nonfinite_losses = 0;           // training steps whose loss was inf or NaN
  mixtape::train::StepCounters counters;  // launches, host synchronizations and allocations per step
};

// Note [Operands rescaled exactly]
// The precision lab's outlier and spike regimes change what the 8-bit GEMM of the cnn's first
// linear layer (input [B, 2w*49], the flattened [2w, 7, 7] features) reads without changing the
// model: with a diagonal s of powers of two it computes
//   y = (x diag(s)) (W diag(s)^-1)^T + b  =  x W^T + b,
// the SmoothQuant identity (Xiao et al., 2023) used the other way round. W is the parameter, so
// the optimizer sees the same model, and a power of two scales exactly in every binary format
// (nothing here comes near bf16's overflow or underflow), so a 16-bit run trains bit for bit as
// without it. Two uses:
//   outlier   s = 2^k on the 49 features of channel 0, on every step: the GEMM's input has one
//             channel 2^k larger than the rest, its weight the matching columns 2^k smaller;
//   spike     s = 2^k on every feature, on the steps the loop asks for (set_spike_log2): the
//             input's amax jumps 2^k for one step and the weight's drops as much.
// A per-tensor scale taken from the operand's own amax (current scaling) is blind to the spike:
// its codes are those of the step without it, and so is the product.
class RescaledLinear : public mixtape::nn::UnaryModule {
 public:
  RescaledLinear(std::shared_ptr<mixtape::nn::Linear> linear, int64_t channel_features, int outlier_log2)
      : UnaryModule("RescaledLinear"), outlier_log2_(outlier_log2), channel_features_(channel_features) {
    linear_ = register_module("linear", std::move(linear));
  }
  // The spike of the next forward passes (0: none).
  void set_spike_log2(int k) { spike_log2_ = k; }

  mixtape::Variable forward(const mixtape::Variable& x) override {
    using namespace mixtape;
    const DType dt = x.dtype();
    const Device dev = x.data().device();
    if (!scale_.defined() || scaled_for_ != std::tuple(spike_log2_, dt, dev)) {  // made once per spike, dtype, device
      std::vector<float> s(size_t(linear_->options().in_features), std::ldexp(1.0f, spike_log2_)), inv(s.size());
      for (size_t i = 0; i < size_t(channel_features_) && outlier_log2_ != 0; ++i)
        s[i] = std::ldexp(s[i], outlier_log2_);
      for (size_t i = 0; i < s.size(); ++i) inv[i] = 1.0f / s[i];  // exact: s is a power of two
      const Shape row = {1, int64_t(s.size())};
      scale_ = from_vector(s, row).to(dev).to(dt);
      inv_scale_ = from_vector(inv, row).to(dev).to(dt);
      scaled_for_ = {spike_log2_, dt, dev};
    }
    const Variable w = cast(linear_->weight, dt) * Variable(inv_scale_);
    return linear(x * Variable(scale_), w, cast(linear_->bias, dt));
  }
  std::string extra_repr() const override {
    return mixtape::detail::cat("outlier: channel 0 x 2^", outlier_log2_, ", spike 2^", spike_log2_);
  }

 private:
  std::shared_ptr<mixtape::nn::Linear> linear_;
  int outlier_log2_, spike_log2_ = 0;
  int64_t channel_features_;
  mixtape::Tensor scale_, inv_scale_;                            // s and 1 / s as [1, in], for scaled_for_
  std::tuple<int, mixtape::DType, mixtape::Device> scaled_for_;  // spike_log2, dtype, device
};

// `rescaled`: the first linear layer is a RescaledLinear (Note [Operands rescaled exactly]) with
// an outlier channel of 2^outlier_log2 (0: none).
inline std::shared_ptr<mixtape::nn::Sequential> make_cnn(int64_t width, double dropout, mixtape::Generator& gen,
                                                         bool rescaled = false, int outlier_log2 = 0) {
  using namespace mixtape;
  const int64_t w1 = width, w2 = 2 * width;
  // (the layers draw their initial weights from gen in the order the compiler evaluates these arguments)
  const auto first_linear = [&](std::shared_ptr<nn::Linear> fc) -> std::shared_ptr<nn::UnaryModule> {
    if (!rescaled) return fc;
    return std::make_shared<RescaledLinear>(std::move(fc), 7 * 7, outlier_log2);
  };
  return std::make_shared<nn::Sequential>(
      std::make_shared<nn::Conv2d>(1, w1, 3, 1, 1, 1, true, gen), std::make_shared<nn::BatchNorm2d>(w1),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Conv2d>(w1, w2, 3, 1, 1, 1, true, gen), std::make_shared<nn::BatchNorm2d>(w2),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
      first_linear(std::make_shared<nn::Linear>(w2 * 7 * 7, 128, true, gen)), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Dropout>(dropout, gen), std::make_shared<nn::Linear>(128, kCnnClasses, true, gen));
}

// BatchNorm2d, or GroupNorm with groups of kGroupNormChannels consecutive channels.
inline constexpr int64_t kGroupNormChannels = 8;
inline std::shared_ptr<mixtape::nn::UnaryModule> make_norm(CnnNorm norm, int64_t channels) {
  using namespace mixtape;
  if (norm == CnnNorm::batch) return std::make_shared<nn::BatchNorm2d>(channels);
  MT_CHECK(channels % kGroupNormChannels == 0, "--norm group needs channel counts divisible by ", kGroupNormChannels,
           "; this model has a layer of ", channels, " (choose --width accordingly)");
  return std::make_shared<nn::GroupNorm>(channels / kGroupNormChannels, channels);
}

// The resnet's basic block (see the top of this file).
class ResidualBlock : public mixtape::nn::UnaryModule {
 public:
  ResidualBlock(int64_t in, int64_t out, int64_t stride, CnnNorm norm, mixtape::Generator& gen)
      : UnaryModule("ResidualBlock") {
    using namespace mixtape;
    conv1_ = register_module("conv1", std::make_shared<nn::Conv2d>(in, out, 3, stride, 1, 1, false, gen));
    norm1_ = register_module("norm1", make_norm(norm, out));
    conv2_ = register_module("conv2", std::make_shared<nn::Conv2d>(out, out, 3, 1, 1, 1, false, gen));
    norm2_ = register_module("norm2", make_norm(norm, out));
    if (stride != 1 || in != out)
      shortcut_ = register_module(
          "shortcut", std::make_shared<nn::Sequential>(
                          std::make_shared<nn::Conv2d>(in, out, 1, stride, 0, 1, false, gen), make_norm(norm, out)));
  }
  mixtape::Variable forward(const mixtape::Variable& x) override {
    using namespace mixtape;
    const Variable h = relu((*norm1_)((*conv1_)(x)));
    const Variable y = (*norm2_)((*conv2_)(h));
    return relu(y + (shortcut_ ? (*shortcut_)(x) : x));
  }

 private:
  std::shared_ptr<mixtape::nn::Conv2d> conv1_, conv2_;
  std::shared_ptr<mixtape::nn::UnaryModule> norm1_, norm2_;
  std::shared_ptr<mixtape::nn::Sequential> shortcut_;  // null: the identity
};

inline std::shared_ptr<mixtape::nn::Sequential> make_resnet(int64_t width, CnnNorm norm, mixtape::Generator& gen) {
  using namespace mixtape;
  const int64_t w = width;
  return std::make_shared<nn::Sequential>(
      std::make_shared<nn::Conv2d>(1, w, 3, 1, 1, 1, false, gen), make_norm(norm, w), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(2), std::make_shared<ResidualBlock>(w, w, 1, norm, gen),
      std::make_shared<ResidualBlock>(w, 2 * w, 2, norm, gen), std::make_shared<nn::AdaptiveAvgPool2d>(1),
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(2 * w, kCnnClasses, true, gen));
}

inline std::shared_ptr<mixtape::nn::Sequential> make_model(const CnnConfig& c, mixtape::Generator& gen) {
  const bool rescaled = c.outlier_log2 != 0 || c.spike_every > 0;
  MT_CHECK(!rescaled || c.model == CnnModel::cnn, "the outlier and spike regimes are built on the cnn model");
  return c.model == CnnModel::resnet ? make_resnet(c.width, c.norm, gen)
                                     : make_cnn(c.width, c.dropout, gen, rescaled, c.outlier_log2);
}

// Test loss and accuracy, in the trainer's compute dtype (the loss in fp32).
inline CnnEval evaluate_cnn(mixtape::nn::Sequential& model, const mixtape::PrecisionTrainer& trainer,
                            const mixtape::data::LabeledImages& test, int64_t batch_size) {
  using namespace mixtape;
  model.eval();
  NoGrad no_grad;
  data::DataLoader loader(data::TensorDataset({test.images, test.labels}),
                          {.batch_size = batch_size, .shuffle = false});
  double loss_sum = 0.0;
  int64_t correct = 0, n = 0;
  for (data::Batch& b : loader.epoch(0)) {
    const Variable logits = nn::fp32_input(OpId::cross_entropy, model(Variable(trainer.input(b[0]))));
    loss_sum += cross_entropy(logits, trainer.input(b[1]), Reduction::sum).item();
    // argmax over classes, compared with the labels (on the host: values() copies back)
    const std::vector<float> l = logits.data().values<float>();
    const std::vector<int64_t> y = b[1].values<int64_t>();
    for (int64_t i = 0; i < b.size(); ++i) {
      int64_t best = 0;
      for (int64_t c = 1; c < kCnnClasses; ++c)
        if (l[size_t(i * kCnnClasses + c)] > l[size_t(i * kCnnClasses + best)]) best = c;
      correct += best == y[size_t(i)];
    }
    n += b.size();
  }
  model.train();
  return {loss_sum / double(n), double(correct) / double(n)};
}

// The test evaluation after an epoch, on stdout (verbose) and as an "eval" event.
inline void evaluate_run(CnnRun& run, const CnnConfig& c, const mixtape::data::LabeledImages& test, int epoch,
                         mixtape::train::Metrics& metrics) {
  run.last = evaluate_cnn(*run.model, *run.trainer, test, 256);
  if (run.with_decoder) run.last.aux_mse = evaluate_decoder(*run.with_decoder, *run.trainer, test, 256);
  if (c.verbose)
    std::printf("epoch %d: train loss %.4f  test loss %.4f  test accuracy %.2f%%\n", epoch, run.final_train_loss,
                run.last.loss, 100.0 * run.last.accuracy);
  nlohmann::json eval = {{"event", "eval"},
                         {"epoch", epoch},
                         {"step", run.steps},
                         {"train_loss", run.final_train_loss},
                         {"test_loss", run.last.loss},
                         {"test_accuracy", run.last.accuracy}};
  if (run.with_decoder) eval["test_aux_mse"] = run.last.aux_mse;
  metrics.write(eval);
}

// The training images' augmentation (none, by default): a shift, then a mirror.
inline mixtape::data::BatchTransform augmentation(const CnnConfig& c) {
  using namespace mixtape::data;
  std::vector<BatchTransform> steps;
  if (c.crop_padding > 0)  // blank pixels: a 0 byte, normalized as load_fashion_mnist does
    steps.push_back(
        RandomCrop{.seed = c.seed, .padding = c.crop_padding, .fill = (0.0f - kFashionMnistMean) / kFashionMnistStd});
  if (c.hflip) steps.push_back(RandomHorizontalFlip{.seed = c.seed});
  return steps.empty() ? BatchTransform() : compose(std::move(steps));
}
// How the run identity names it: "hflip", "crop2", "crop2+hflip".
inline std::string augmentation_name(const CnnConfig& c) {
  std::string s = c.crop_padding > 0 ? "crop" + std::to_string(c.crop_padding) : "";
  if (c.hflip) s += s.empty() ? "hflip" : "+hflip";
  return s;
}

// Builds a fresh model (initialized from c.seed) and its trainer under `precision`; the model is
// built on the CPU (the same initial weights on every device), takes rank 0's state, and moves to
// the device before the trainer is built, so masters and optimizer state follow the parameters.
inline CnnRun make_cnn_run(const CnnConfig& c, const mixtape::PrecisionOptions& precision, int64_t steps_per_epoch) {
  using namespace mixtape;
  CnnRun run;
  Generator gen(c.seed);
  run.model = make_model(c, gen);
  nn::Module* root = run.model.get();
  if (c.aux_weight > 0.0) {
    MT_CHECK(c.model == CnnModel::cnn, "the decoder head (aux_weight > 0) is built on the cnn model's encoder");
    run.with_decoder = std::make_shared<CnnWithDecoder>(run.model, c.width, gen);
    root = run.with_decoder.get();
  }
  if (c.dp) c.dp->broadcast(*root);  // rank 0's initial state on every rank
  root->to(c.device);
  run.trainer = std::make_unique<PrecisionTrainer>(
      *root,
      c.optimizer.spec(
          OptimizerSpec{.kind = OptimizerKind::adamw, .lr = c.lr, .weight_decay = c.weight_decay, .eps = c.adam_eps}),
      precision);
  if (c.dp) run.trainer->set_data_parallel(c.dp);
  // The schedule spans the planned run; --max-steps only stops it (Note [Resumable runs]).
  run.sched = std::make_unique<LRScheduler>(run.trainer->optimizer(), CosineAnnealingLR(steps_per_epoch * c.epochs));
  return run;
}

// Trains a fresh model under `precision`, or continues the one saved at --checkpoint with
// --resume (train/loop.h); writes step, telemetry and eval events to `metrics`. A step whose loss
// is inf or NaN is counted, not fatal: that is what some configurations of the precision lab do,
// and the table says so.
inline CnnRun train_cnn(const CnnConfig& c, const mixtape::PrecisionOptions& precision,
                        const mixtape::data::LabeledImages& train, const mixtape::data::LabeledImages& test,
                        mixtape::train::Metrics& metrics) {
  using namespace mixtape;
  data::DataLoader loader(
      data::TensorDataset({train.images, train.labels}),
      {.batch_size = c.batch_size, .shuffle = true, .drop_last = true, .seed = c.seed, .transform = augmentation(c)});
  const int64_t steps_per_epoch = train.images.size(0) / c.batch_size;
  MT_CHECK(steps_per_epoch > 0, train.images.size(0), " training images make no batch of ", c.batch_size);
  CnnRun run = make_cnn_run(c, precision, steps_per_epoch);
  nn::Sequential& model = *run.model;
  PrecisionTrainer& trainer = *run.trainer;
  nn::Module& root = run.with_decoder ? static_cast<nn::Module&>(*run.with_decoder) : model;
  if (c.verbose)
    std::printf("%s\n%lld parameters\nprecision: %s\n", model.str().c_str(), (long long)model.num_parameters(),
                trainer.describe().c_str());
  run.identity = {{"program", "cnn"},
                  {"model", root.str()},
                  {"batch_size", std::to_string(c.batch_size)},
                  {"seed", std::to_string(c.seed)},
                  {"training_images", std::to_string(train.images.size(0))}};
  if (c.hflip || c.crop_padding > 0)  // absent without: older checkpoints still resume
    run.identity.emplace_back("augment", augmentation_name(c));
  train::add_precision_identity(run.identity, trainer);

  train::TrainLoop loop({.epochs = c.epochs,
                         .steps_per_epoch = steps_per_epoch,
                         .max_steps = c.max_steps,
                         .log_every = c.log_every,
                         .progress = c.progress,
                         .dp = c.dp},
                        {{.model = &root, .trainer = &trainer, .sched = run.sched.get()}});
  loop.add_loader(loader);
  RescaledLinear* spiked = c.spike_every > 0 ? dynamic_cast<RescaledLinear*>(model[kFirstLinear].get()) : nullptr;
  loop.objective = [&](const train::TrainLoop::Batch& b, const train::StepInfo& s) -> train::Objective {
    if (spiked) spiked->set_spike_log2(s.step % c.spike_every == 0 ? c.spike_log2 : 0);
    Variable logits, recon;
    if (run.with_decoder) std::tie(logits, recon) = run.with_decoder->forward(Variable(trainer.input(b[0])));
    else logits = model(Variable(trainer.input(b[0])));
    if (spiked) spiked->set_spike_log2(0);
    const Variable loss = cross_entropy(nn::fp32_input(OpId::cross_entropy, logits), trainer.input(b[1]));
    if (c.loss_weight == 1.0 && !recon.defined()) return {loss, {}};
    Variable weighted = loss * c.loss_weight;  // the precision lab's stress regimes; the unweighted loss is reported
    if (recon.defined())
      weighted = weighted + mse_loss(nn::fp32_input(OpId::mse_loss, recon), b[0].to(trainer.device()).to(DType::f32)) *
                                c.aux_weight;
    return {weighted, {loss.data()}};
  };

  // The epoch's running sums over its steps whose loss was finite (saved with the checkpoint).
  double loss_sum = 0.0, last_loss = 0.0;
  int64_t finite = 0;
  loop.tally = [&](const double* v, int64_t) {
    last_loss = v[0];
    if (std::isfinite(last_loss)) loss_sum += last_loss, ++finite;
    else ++run.nonfinite_losses;
  };
  loop.after_step = [&](const train::StepInfo& s) {
    if (c.after_step) c.after_step(trainer, s.step);
  };
  loop.step_event = [&](const train::StepInfo& s) -> std::optional<nlohmann::json> {
    return nlohmann::json{{"event", "step"},
                          {"step", s.step},
                          {"epoch", s.epoch},
                          {"loss", std::isfinite(last_loss) ? nlohmann::json(last_loss) : nlohmann::json(nullptr)},
                          {"lr", s.lr},
                          {"scale", trainer.last_scale()},  // the scale this step's gradients carried
                          {"skipped", !trainer.last_applied()},
                          {"grad_norm", trainer.last_grad_norm()}};
  };
  loop.progress_loss = [&] { return loss_sum / double(std::max<int64_t>(finite, 1)); };
  loop.epoch_end = [&](int epoch, bool complete) {
    run.steps = loop.steps();
    run.final_train_loss = finite > 0 ? loss_sum / double(finite) : std::nan("");
    evaluate_run(run, c, test, epoch, metrics);
    if (complete) loss_sum = 0.0, finite = 0;
  };
  loop.save_state = [&](TensorDict& ckpt, bool epoch_done) {
    ckpt.set_meta("progress.loss_sum", state_io::format(epoch_done ? 0.0 : loss_sum));
    ckpt.set_meta("progress.finite", std::to_string(epoch_done ? 0 : finite));
    ckpt.set_meta("progress.nonfinite_losses", std::to_string(run.nonfinite_losses));
    ckpt.set_meta("progress.final_train_loss", state_io::format(run.final_train_loss));
  };
  loop.load_state = [&](const TensorDict& ckpt) {
    loss_sum = train::progress_double(ckpt, "loss_sum");
    finite = train::progress_int(ckpt, "finite");
    run.nonfinite_losses = train::progress_int(ckpt, "nonfinite_losses");
    run.final_train_loss = train::progress_double(ckpt, "final_train_loss");
    MT_CHECK(finite >= 0 && run.nonfinite_losses >= 0, "--resume: the checkpoint's loss counts are negative");
  };

  if (loop.resume(c.checkpoint, run.identity) && c.verbose)
    std::printf("resumed from %s at %s\n", c.checkpoint->path().c_str(), loop.position().c_str());
  loop.run(metrics);
  run.steps = loop.steps();
  run.train_secs = loop.train_seconds();
  run.counters = loop.counters();
  return run;
}

}  // namespace examples
