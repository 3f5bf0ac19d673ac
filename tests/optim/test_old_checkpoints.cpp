// Checkpoints written before the optimizers became one class per algorithm (Note [Storage
// policy] in optim/optimizer.h) still load. tests/optim/checkpoints/ holds char_lstm checkpoints
// saved by that code after two steps, one per optimizer under wide (f32 masters) and pure 16-bit
// storage with each rounding:
//   char_lstm --smoke --hidden 8 --embed 4 --layers 1 --seq-len 8 --batch-size 4
//             --steps-per-epoch 3 --epochs 1 --max-steps 2 --sample-len 0
//             --optimizer OPT --precision PRECISION --update-rounding ROUNDING
// Each is restored into the same model and trainer built by today's code, which must take every
// entry and give the same state back, byte for byte, and then train on.
#include "support/catch.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "examples/char_lstm_model.h"
#include "mixtape.h"

using namespace mixtape;

namespace {

struct OldCheckpoint {
  const char* optimizer;
  const char* precision;
  const char* rounding;
  const char* saved_as;  // the optimizer's name in the file
};

// `file` and `now` hold the same tensors (values, dtypes, shapes) and metadata.
void check_same(const TensorDict& file, const TensorDict& now, const std::string& what) {
  CAPTURE(what);
  std::vector<std::string> a = file.names(), b = now.names();  // a file's order is its layout's
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  CHECK(a == b);
  for (const auto& [name, t] : file) {
    CAPTURE(name);
    const Tensor* u = now.find(name);
    REQUIRE(u != nullptr);
    CHECK(t.dtype() == u->dtype());
    CHECK(t.shape() == u->shape());
    CHECK(t.to(Device::cpu()).to(DType::f64).to_vector() == u->to(Device::cpu()).to(DType::f64).to_vector());
  }
  CHECK(file.metadata == now.metadata);
}

}  // namespace

TEST_CASE("optimizer state saved before one class per algorithm loads and trains on", "[optim][checkpoint]") {
  const std::vector<OldCheckpoint> files = {
      {"sgd", "fp32", "stochastic", "SGD"},
      {"adagrad", "fp32", "stochastic", "Adagrad"},
      {"adamw", "fp16", "stochastic", "AdamW"},
      {"rmsprop", "bf16", "stochastic", "RMSprop"},
      {"sgd", "bf16-pure", "kahan", "SGD16"},
      {"adam", "bf16-pure", "stochastic", "AdamW16"},
      {"adamw", "fp16-pure", "nearest", "AdamW16"},
      {"rmsprop", "bf16-pure", "kahan", "RMSprop16"},
      {"adagrad", "bf16-pure", "stochastic", "Adagrad16"},
  };
  for (const OldCheckpoint& f : files) {
    const std::string path = std::string(MIXTAPE_SOURCE_DIR) + "/tests/optim/checkpoints/char_lstm_" + f.optimizer +
                             "_" + f.precision + "_" + f.rounding + ".safetensors";
    CAPTURE(path);
    const TensorDict ckpt = load_safetensors(path);
    CHECK(ckpt.verified);
    CHECK(ckpt.meta("run.optimizer") == f.saved_as);

    // The model and trainer char_lstm builds for these flags.
    Generator gen(0);
    examples::CharLSTM model(ckpt.at("vocab").numel(), {.embed = 4, .hidden = 8, .layers = 1}, gen);
    PrecisionOptions p;
    p.precision = nn::precision_from_name(f.precision);
    const bool fp16 = p.precision == nn::Precision::fp16 || p.precision == nn::Precision::fp16_pure;
    p.loss_scale = parse_loss_scale(fp16 ? "backoff" : "none");
    p.rounding = update_rounding_from_name(f.rounding);
    p.max_grad_norm = 1.0;
    PrecisionTrainer trainer(model, {.kind = optimizer_kind_from_name(f.optimizer), .lr = 1e-2}, p);
    CHECK(std::string(trainer.optimizer().name()) == f.saved_as);

    train::load_training_state(ckpt, "", model, trainer, nullptr);
    check_same(ckpt.sub("model."), model.state_dict(), "model");
    check_same(ckpt.sub("trainer."), trainer.state_dict(), "trainer");

    // And it trains: a step on a batch of windows changes the weights and keeps them finite. (The
    // fp16-pure AdamW run had already blown up in its two steps: exp_avg_sq in f16 underflows to 0
    // and lr * m / eps throws the weights to the thousands, the hazard its warning names; there
    // the scaler skipping the step is the right outcome.)
    Generator data(1);
    const int64_t vocab = ckpt.at("vocab").numel();
    std::vector<int64_t> ids;
    for (const double u : uniform({64}, 0.0, double(vocab), data, DType::f64).to_vector()) ids.push_back(int64_t(u));
    const Tensor input = from_vector(std::vector<int64_t>(ids.begin(), ids.begin() + 32), {4, 8});
    const Tensor target = from_vector(std::vector<int64_t>(ids.begin() + 32, ids.end()), {4, 8});
    const std::vector<double> before = model.state_dict().at("head.weight").to(DType::f64).to_vector();
    Tape tape;
    trainer.begin_step(tape);
    trainer.backward(
        tape, examples::sequence_loss(model.forward(input, std::nullopt, trainer.compute_dtype()).logits, target));
    const bool applied = trainer.step();
    CHECK((applied || p.precision == nn::Precision::fp16_pure));
    const std::vector<double> after = model.state_dict().at("head.weight").to(DType::f64).to_vector();
    CHECK((after != before) == applied);
    for (const double v : after) CHECK(std::isfinite(v));
  }
}
