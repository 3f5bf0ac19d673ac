// cnn: a two-block convolutional classifier on Fashion-MNIST.
//
//   conv(1->32, 3x3) - BN - ReLU - maxpool 2     [B, 32, 14, 14]
//   conv(32->64, 3x3) - BN - ReLU - maxpool 2    [B, 64, 7, 7]
//   flatten - linear(3136->128) - ReLU - dropout - linear(128->10)
//
// AdamW with a cosine learning-rate schedule over the whole run, under any precision policy
// (--precision, --loss-scale, --update-rounding: optim/precision.h). Reads the IDX files of the
// Debian package dataset-fashion-mnist by default; --data points at any MNIST-format directory.
//
//   ./cnn --epochs 12 --metrics cnn.jsonl                      # the README's accuracy run
//   ./cnn --precision fp16 --loss-scale backoff --epochs 2     # the main job: mixed precision
//   ./cnn --smoke --metrics m.jsonl --out-dir /tmp              # a few steps, for CI
#include <cstdio>
#include <filesystem>

#include "common.h"
#include "mixtape.h"

using namespace mixtape;

namespace {

std::shared_ptr<nn::Sequential> make_model(int64_t width, double dropout, Generator& gen) {
  const int64_t w1 = width, w2 = 2 * width;
  return std::make_shared<nn::Sequential>(
      std::make_shared<nn::Conv2d>(1, w1, 3, 1, 1, 1, true, gen), std::make_shared<nn::BatchNorm2d>(w1),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Conv2d>(w1, w2, 3, 1, 1, 1, true, gen), std::make_shared<nn::BatchNorm2d>(w2),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(w2 * 7 * 7, 128, true, gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Dropout>(dropout, gen), std::make_shared<nn::Linear>(128, 10, true, gen));
}

struct EvalResult {
  double loss = 0.0, accuracy = 0.0;
};

EvalResult evaluate(nn::Sequential& model, const PrecisionTrainer& trainer, const data::LabeledImages& test,
                    int64_t batch_size) {
  model.eval();
  NoGrad no_grad;
  data::DataLoader loader(data::TensorDataset({test.images, test.labels}), {.batch_size = batch_size, .shuffle = false});
  double loss_sum = 0.0;
  int64_t correct = 0, n = 0;
  for (data::Batch& b : loader.epoch(0)) {
    const Variable logits = nn::fp32_input(OpId::cross_entropy, model(Variable(trainer.input(b[0]))));
    loss_sum += cross_entropy(logits, b[1], Reduction::sum).item();
    // argmax over classes, compared with the labels
    const std::vector<float> l = logits.data().values<float>();
    const std::vector<int64_t> y = b[1].values<int64_t>();
    for (int64_t i = 0; i < b.size(); ++i) {
      int64_t best = 0;
      for (int64_t c = 1; c < 10; ++c)
        if (l[size_t(i * 10 + c)] > l[size_t(i * 10 + best)]) best = c;
      correct += best == y[size_t(i)];
    }
    n += b.size();
  }
  model.train();
  return {loss_sum / double(n), double(correct) / double(n)};
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
  std::string data_dir = data::kFashionMnistDir, out_dir = ".";
  int64_t width = 32, limit = 0, log_every = 50;
  double dropout = 0.3, weight_decay = 1e-4;
  bool smoke = false;
  app.add_option("--data", data_dir, "directory with the (Fashion-)MNIST IDX files")->capture_default_str();
  app.add_option("--out-dir", out_dir, "where the checkpoint cnn.safetensors goes")->capture_default_str();
  app.add_option("--width", width, "channels of the first conv (the second has twice as many)")
      ->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--dropout", dropout, "dropout before the last layer")->check(CLI::Range(0.0, 0.95))->capture_default_str();
  app.add_option("--weight-decay", weight_decay, "AdamW weight decay")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--limit", limit, "use only the first N training images (0: all)")->check(CLI::NonNegativeNumber);
  app.add_option("--log-every", log_every, "steps between step events in the metrics")->check(CLI::Range(1, 1000000));
  app.add_flag("--smoke", smoke, "a few steps on a subset (CI smoke run)");
  CLI11_PARSE(app, argc, argv);

  try {
    if (smoke) {
      flags.epochs = 1;
      limit = 2048;
      width = 8;
      log_every = 4;
    }
    set_num_threads(flags.threads);
    const auto t_start = std::chrono::steady_clock::now();
    data::LabeledImages train = data::load_fashion_mnist(data_dir, data::MnistSplit::train, {.limit = limit > 0 ? limit : -1});
    data::LabeledImages test = data::load_fashion_mnist(data_dir, data::MnistSplit::test, {.limit = smoke ? 1000 : -1});
    std::printf("cnn: %lld training and %lld test images from %s\n", (long long)train.images.size(0),
                (long long)test.images.size(0), data_dir.c_str());

    Generator gen(flags.seed);
    auto model = make_model(width, dropout, gen);
    std::printf("%s\n%lld parameters\n", model->str().c_str(), (long long)model->num_parameters());
    PrecisionTrainer trainer(*model, {.kind = OptimizerKind::adamw, .lr = flags.lr, .weight_decay = weight_decay},
                             precision.options(flags.seed));
    std::printf("precision: %s\n", trainer.describe().c_str());
    Optimizer& opt = trainer.optimizer();

    data::DataLoader loader(data::TensorDataset({train.images, train.labels}),
                            {.batch_size = flags.batch_size, .shuffle = true, .drop_last = true, .seed = flags.seed});
    const int64_t steps_per_epoch = train.images.size(0) / flags.batch_size;
    const int64_t total_steps = steps_per_epoch * flags.epochs;
    LRScheduler sched(opt, CosineAnnealingLR(total_steps));

    examples::Metrics metrics(flags.metrics);
    examples::Progress progress(flags.epochs, steps_per_epoch);
    int64_t step = 0;
    double train_secs = 0.0;
    EvalResult last{};
    bool stop = false;
    for (int epoch = 1; epoch <= flags.epochs && !stop; ++epoch) {
      progress.start_epoch();
      const auto t_epoch = std::chrono::steady_clock::now();
      double loss_sum = 0.0;
      int64_t in_epoch = 0;
      for (data::Batch& b : loader.epoch(epoch)) {
        Tape tape;
        trainer.begin_step(tape);
        const Variable logits = (*model)(Variable(trainer.input(b[0])));
        Variable loss = cross_entropy(nn::fp32_input(OpId::cross_entropy, logits), b[1]);
        trainer.backward(tape, loss);
        const float scale = trainer.scale();  // the scale this step's gradients carry
        const bool applied = trainer.step();
        sched.step();
        metrics.write_telemetry(trainer);
        ++step;
        ++in_epoch;
        const double l = loss.item();
        loss_sum += l;
        progress.update(epoch, in_epoch, loss_sum / double(in_epoch));
        if (step % log_every == 0)
          metrics.write({{"event", "step"}, {"step", step}, {"epoch", epoch}, {"loss", l}, {"lr", opt.lr()},
                         {"scale", scale}, {"skipped", !applied}, {"grad_norm", trainer.last_grad_norm()}});
        if (flags.max_steps > 0 && step >= flags.max_steps) {
          stop = true;
          break;
        }
      }
      progress.update(epoch, in_epoch, loss_sum / double(std::max<int64_t>(in_epoch, 1)), true);
      train_secs += examples::seconds_since(t_epoch);
      last = evaluate(*model, trainer, test, 256);
      std::printf("epoch %d: train loss %.4f  test loss %.4f  test accuracy %.2f%%\n", epoch,
                  loss_sum / double(std::max<int64_t>(in_epoch, 1)), last.loss, 100.0 * last.accuracy);
      metrics.write({{"event", "eval"}, {"epoch", epoch}, {"test_loss", last.loss}, {"test_accuracy", last.accuracy}});
    }

    std::filesystem::create_directories(out_dir);
    TensorDict ckpt;
    for (const auto& [name, t] : model->state_dict()) ckpt.add("model." + name, t);
    ckpt.merge("trainer.", trainer.state_dict());
    ckpt.set_meta("step", std::to_string(step));
    const std::string path = (std::filesystem::path(out_dir) / "cnn.safetensors").string();
    save_safetensors(path, ckpt);

    const double wall = examples::seconds_since(t_start);
    std::printf("%s\n", examples::precision_summary(trainer).c_str());
    std::printf("final test accuracy %.2f%% after %lld steps; wall %.1f s (training %.1f s, %.1f steps/s); checkpoint %s\n",
                100.0 * last.accuracy, (long long)step, wall, train_secs, double(step) / train_secs, path.c_str());
    nlohmann::json summary = {{"event", "summary"},       {"final_test_accuracy", last.accuracy},
                              {"final_test_loss", last.loss}, {"steps", step},
                              {"wall_s", wall},               {"steps_per_s", double(step) / train_secs}};
    examples::add_precision_summary(summary, trainer);
    metrics.write(summary);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cnn: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
