// cpu_train_step: how long one training step of each example's model takes on the CPU, in each
// precision policy. The yardstick is bench/torch_cpu_reference.py (the same models in PyTorch);
// bench/cpu_speed.sh runs both, alternating, and prints the ratios.
//
// Each (model, policy) builds the example's model exactly as the example does (the builders in
// examples/), a PrecisionTrainer for the policy, and fixed synthetic batches of the example's
// shapes; it runs --warmup untimed steps, then --steps timed ones, and prints a table row and,
// with --json, one JSON object per row:
//   {"impl":"mixtape","model":"cnn","precision":"fp16","threads":2,"batch":64,"steps":40,
//    "ms_per_step":21.3,"steps_per_s":46.9}
//
//   ./build/bench/cpu_train_step --models cnn --precisions fp32,bf16,fp16 --threads 2
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../examples/char_lstm_model.h"
#include "../examples/cnn_train.h"
#include "../examples/dcgan_model.h"
#include "mixtape.h"
#include "tensor/cpu/convert.h"

using namespace mixtape;

namespace {

// A policy as the examples' flags name it: --precision, its default loss scale, --update-rounding.
struct Policy {
  std::string name;  // the row's label
  nn::Precision precision;
  LossScaleSpec::Kind scaling;
  UpdateRounding rounding = UpdateRounding::stochastic;
};

const std::vector<Policy>& all_policies() {
  static const std::vector<Policy> p = {
      {"fp32", nn::Precision::fp32, LossScaleSpec::Kind::none},
      {"bf16", nn::Precision::bf16, LossScaleSpec::Kind::none},
      {"fp16", nn::Precision::fp16, LossScaleSpec::Kind::backoff},
      {"bf16-pure-sr", nn::Precision::bf16_pure, LossScaleSpec::Kind::none, UpdateRounding::stochastic},
      {"bf16-pure-kahan", nn::Precision::bf16_pure, LossScaleSpec::Kind::none, UpdateRounding::kahan},
      {"fp8", nn::Precision::fp8, LossScaleSpec::Kind::none},  // current scaling, E4M3 / E5M2
  };
  return p;
}

PrecisionOptions options_for(const Policy& p) {
  PrecisionOptions o;
  o.precision = p.precision;
  o.loss_scale.kind = p.scaling;
  o.rounding = p.rounding;
  return o;
}

// A model ready to train: step() runs one whole training step on its fixed batch.
struct Bench {
  std::function<void()> step;
  std::vector<std::shared_ptr<void>> keep;  // what step() refers to
};

// examples/cnn: the two-block CNN, AdamW, cross entropy on a [B, 1, 28, 28] batch.
Bench cnn_bench(const Policy& policy, int64_t batch) {
  Generator gen(0);
  auto model = examples::make_cnn(32, 0.3, gen);
  auto trainer = std::make_shared<PrecisionTrainer>(
      *model, OptimizerSpec{.kind = OptimizerKind::adamw, .lr = 2e-3, .weight_decay = 1e-4}, options_for(policy));
  const Tensor x = trainer->input(uniform({batch, 1, 28, 28}, 0.0, 1.0, gen));
  std::vector<int64_t> labels(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) labels[size_t(i)] = (i * 7) % 10;
  const Tensor y = from_vector(labels, {batch});
  Bench b;
  b.keep = {model, trainer};
  b.step = [model, trainer = trainer.get(), x, y] {
    Tape tape;
    trainer->begin_step(tape);
    const Variable logits = (*model)(Variable(x));
    trainer->backward(tape, cross_entropy(nn::fp32_input(OpId::cross_entropy, logits), y));
    trainer->step();
  };
  return b;
}

// examples/char_lstm: Embedding -> 2-layer LSTM -> Linear over a vocabulary of 96, Adam, clip 1,
// cross entropy over B x 100 characters.
Bench char_lstm_bench(const Policy& policy, int64_t batch) {
  constexpr int64_t kVocab = 96, kSeqLen = 100;
  Generator gen(0);
  auto model = std::make_shared<examples::CharLSTM>(kVocab, examples::CharLSTMSize{}, gen);
  PrecisionOptions o = options_for(policy);
  o.max_grad_norm = 1.0;
  auto trainer = std::make_shared<PrecisionTrainer>(*model, OptimizerSpec{.kind = OptimizerKind::adam, .lr = 2e-3}, o);
  std::vector<int64_t> ids(static_cast<size_t>(batch * kSeqLen)), next(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = int64_t((i * 37 + 11) % kVocab);
    next[i] = int64_t((i * 37 + 48) % kVocab);
  }
  const Tensor x = from_vector(ids, {batch, kSeqLen}), y = from_vector(next, {batch, kSeqLen});
  Bench b;
  b.keep = {model, trainer};
  b.step = [model, trainer = trainer.get(), x, y] {
    Tape tape;
    trainer->begin_step(tape);
    const Variable logits = model->forward(x, std::nullopt, trainer->compute_dtype()).logits;
    trainer->backward(tape, examples::sequence_loss(logits, y));
    trainer->step();
  };
  return b;
}

// examples/dcgan: G and D for 32x32 grayscale images (nz 100, widths 32, three stages), each with
// Adam(2e-4, beta1 0.5); one step is examples::gan_step (D on a real and a fake batch, then G
// through the updated D).
Bench dcgan_bench(const Policy& policy, int64_t batch) {
  constexpr int64_t kNz = 100, kWidth = 32, kStages = 3;
  Generator gen(0);
  auto G = examples::make_generator(kNz, kWidth, 1, kStages);
  auto D = examples::make_discriminator(kWidth, 1, kStages);
  nn::init::dcgan_init(*G, gen);
  nn::init::dcgan_init(*D, gen);
  const OptimizerSpec adam{.kind = OptimizerKind::adam, .lr = 2e-4, .beta1 = 0.5};
  auto g_trainer = std::make_shared<PrecisionTrainer>(*G, adam, options_for(policy));
  auto d_trainer = std::make_shared<PrecisionTrainer>(*D, adam, options_for(policy));
  auto d_params = std::make_shared<std::vector<Variable>>(D->parameters());
  auto labels = std::make_shared<std::vector<Tensor>>(
      std::vector<Tensor>{ones({batch, 1}, DType::f32), zeros({batch, 1}, DType::f32)});
  const Tensor real = uniform({batch, 1, 32, 32}, -1.0, 1.0, gen);
  auto noise = std::make_shared<Generator>(1);
  Bench b;
  b.keep = {G, D, g_trainer, d_trainer, d_params, labels, noise};
  b.step = [=] {
    const examples::GanNets nets{*G, *D, *g_trainer, *d_trainer, (*labels)[0], (*labels)[1], *d_params};
    const Tensor z = g_trainer->input(normal({batch, kNz, 1, 1}, 0.0, 1.0, *noise));
    examples::gan_step(nets, real, z, [](examples::GanPhase) {});
  };
  return b;
}

Bench make_bench(const std::string& model, const Policy& policy, int64_t batch) {
  if (model == "cnn") return cnn_bench(policy, batch);
  if (model == "char_lstm") return char_lstm_bench(policy, batch);
  if (model == "dcgan") return dcgan_bench(policy, batch);
  throw Error(detail::cat("cpu_train_step: unknown model '", model, "' (cnn, char_lstm, dcgan)"));
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const size_t end = comma == std::string::npos ? s.size() : comma;
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Time one training step of each example's model on the CPU, in each precision policy."};
  std::string models = "cnn,char_lstm,dcgan", precisions = "fp32,bf16,fp16,bf16-pure-sr,bf16-pure-kahan";
  int threads = 2;
  int64_t batch = 64, steps = 40, warmup = 5;
  bool json = false;
  std::string path;
  app.add_option("--models", models, "comma-separated: cnn, char_lstm, dcgan")->capture_default_str();
  app.add_option("--precisions", precisions, "comma-separated policies")->capture_default_str();
  app.add_option("--threads", threads, "CPU threads")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--batch", batch, "batch size")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--steps", steps, "timed steps")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--warmup", warmup, "untimed steps first")->check(CLI::Range(0, 1 << 20))->capture_default_str();
  app.add_option("--conversion-path", path, "the 16-bit conversions' vector path (default: the best this CPU has)");
  app.add_flag("--json", json, "one JSON object per row instead of the table");
  CLI11_PARSE(app, argc, argv);
  try {
    set_num_threads(threads);
    if (!path.empty()) cpu::set_conversion_path(path);
    if (!json) std::printf("%-10s %-16s %8s %10s %9s\n", "model", "precision", "threads", "ms/step", "steps/s");
    for (const std::string& m : split(models)) {
      for (const std::string& pname : split(precisions)) {
        const Policy* policy = nullptr;
        for (const Policy& p : all_policies())
          if (p.name == pname) policy = &p;
        MT_CHECK(policy, "cpu_train_step: unknown precision '", pname,
                 "' (fp32, bf16, fp16, bf16-pure-sr, bf16-pure-kahan, fp8)");
        Bench b = make_bench(m, *policy, batch);
        for (int64_t i = 0; i < warmup; ++i) b.step();
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < steps; ++i) b.step();
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double ms = 1000.0 * secs / double(steps);
        if (json) {
          std::printf("%s\n", nlohmann::json{{"impl", "mixtape"},
                                             {"model", m},
                                             {"precision", pname},
                                             {"threads", threads},
                                             {"batch", batch},
                                             {"steps", steps},
                                             {"ms_per_step", ms},
                                             {"steps_per_s", double(steps) / secs}}
                                  .dump()
                                  .c_str());
        } else {
          std::printf("%-10s %-16s %8d %10.2f %9.2f\n", m.c_str(), pname.c_str(), threads, ms, double(steps) / secs);
        }
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpu_train_step: %s\n", e.what());
    return 1;
  }
  return 0;
}
