// The dcgan example's networks and its training step, shared by examples/dcgan.cpp and
// bench/cpu_train_step.cpp.
#pragma once

#include <cmath>
#include <memory>
#include <vector>

#include "mixtape.h"

namespace examples {

inline std::shared_ptr<mixtape::nn::Sequential> make_generator(int64_t nz, int64_t ngf, int64_t nc, int64_t stages) {
  namespace nn = mixtape::nn;
  auto g = std::make_shared<nn::Sequential>();
  int64_t ch = ngf << (stages - 1);
  // z [B, nz, 1, 1] -> [B, ch, 4, 4]
  g->push_back(std::make_shared<nn::ConvTranspose2d>(nz, ch, 4, 1, 0, 0, 1, false));
  g->push_back(std::make_shared<nn::BatchNorm2d>(ch));
  g->push_back(std::make_shared<nn::ReLU>());
  // each stage doubles the side and halves the channels: [B, ch, s, s] -> [B, ch/2, 2s, 2s]
  for (int64_t i = 1; i < stages; ++i, ch /= 2) {
    g->push_back(std::make_shared<nn::ConvTranspose2d>(ch, ch / 2, 4, 2, 1, 0, 1, false));
    g->push_back(std::make_shared<nn::BatchNorm2d>(ch / 2));
    g->push_back(std::make_shared<nn::ReLU>());
  }
  // [B, ngf, S/2, S/2] -> [B, nc, S, S] in [-1, 1]
  g->push_back(std::make_shared<nn::ConvTranspose2d>(ch, nc, 4, 2, 1, 0, 1, false));
  g->push_back(std::make_shared<nn::Tanh>());
  return g;
}

inline std::shared_ptr<mixtape::nn::Sequential> make_discriminator(int64_t ndf, int64_t nc, int64_t stages) {
  namespace nn = mixtape::nn;
  auto d = std::make_shared<nn::Sequential>();
  // [B, nc, S, S] -> [B, ndf, S/2, S/2]; no batch norm on the input layer (Radford et al.)
  d->push_back(std::make_shared<nn::Conv2d>(nc, ndf, 4, 2, 1, 1, false));
  d->push_back(std::make_shared<nn::LeakyReLU>(0.2));
  int64_t ch = ndf;
  for (int64_t i = 1; i < stages; ++i, ch *= 2) {
    d->push_back(std::make_shared<nn::Conv2d>(ch, ch * 2, 4, 2, 1, 1, false));
    d->push_back(std::make_shared<nn::BatchNorm2d>(ch * 2));
    d->push_back(std::make_shared<nn::LeakyReLU>(0.2));
  }
  // [B, ch, 4, 4] -> [B, 1, 1, 1] -> [B, 1]: one logit per image
  d->push_back(std::make_shared<nn::Conv2d>(ch, 1, 4, 1, 0, 1, false));
  d->push_back(std::make_shared<nn::Flatten>());
  return d;
}

// Mean of sigmoid(logits): the discriminator's average probability that its inputs are real.
inline mixtape::Tensor mean_prob(const mixtape::Variable& logits) {
  return mixtape::mean(mixtape::sigmoid(logits.data()));
}

inline void set_requires_grad(mixtape::nn::Module& m, bool on) {
  for (mixtape::Variable p : m.parameters()) p.set_requires_grad(on);
}

// The two networks and their trainers as one step uses them; labels are [B, 1] ones and zeros on
// the networks' device, d_params D's parameters.
struct GanNets {
  mixtape::nn::Sequential &G, &D;
  mixtape::PrecisionTrainer &g_trainer, &d_trainer;
  const mixtape::Tensor &real_labels, &fake_labels;
  const std::vector<mixtape::Variable>& d_params;
};

// A step's losses and D's mean probabilities that real (fake) images are real, as one-element
// tensors where they were computed: gan_step reads nothing back (the example logs them,
// examples::LossLog). Whether each network's scaler skipped its step is in its trainer.
struct GanStepResult {
  mixtape::Tensor loss_d, loss_g, d_real, d_fake;
  std::vector<mixtape::Tensor> values() const { return {loss_d, loss_g, d_real, d_fake}; }
};

// The phases of a step, in order; gan_step reports the end of each.
enum class GanPhase { g_fwd, d_fwd, d_bwd, d_opt, dg_fwd, dg_bwd, g_bwd, g_opt };

// Note [One generator pass per step]
// G(z) runs once per step on the outer tape `g_tape`. The discriminator's update sees a detached
// copy (a fresh Variable over the same data) on its own inner tape, so its backward pass stops at
// D's input. For G's update, D runs on another detached copy `fake_in` that requires a gradient,
// with D's parameters marked as not requiring one (their gradients would be thrown away): that
// backward pass yields dLoss_G/dfake, which seeds g_tape.backward(fake, ...). This is exactly the
// gradient of one backward pass through D and G together, split in two so each network's
// backward cost can be timed.
// Under a precision policy both halves belong to G's step: G's trainer is attached to dg_tape
// (its gradient-scaling rule and telemetry), G's loss is seeded with G's loss scale S_G, and
// fake_in's gradient carries its scale into g_tape, so G's parameters receive gradients scaled
// by S_G (times the per-op factors of G's rule under --loss-scale gradient) and G's scaler
// alone decides whether the step is applied. D's parameters take no part: they do not require
// a gradient during that pass (checked every step), and D's own step has already consumed D's
// gradients.

// One step on a batch of real images (any device, [B, nc, S, S]) and noise z (G's compute dtype,
// on its device, [B, nz, 1, 1]): D's update, then G's, each through its own trainer. Calls
// on_phase(p) as each phase p ends (the example times them and writes telemetry there).
template <class OnPhase>
GanStepResult gan_step(const GanNets& gan, const mixtape::Tensor& real_images, const mixtape::Tensor& z,
                       OnPhase&& on_phase) {
  using namespace mixtape;
  PrecisionTrainer &g_trainer = gan.g_trainer, &d_trainer = gan.d_trainer;
  nn::Sequential &G = gan.G, &D = gan.D;
  GanStepResult r;
  const Variable real(d_trainer.input(real_images));

  Tape g_tape;  // G's forward pass, kept for its update (Note [One generator pass per step])
  g_trainer.begin_step(g_tape);
  const Variable fake = G(Variable(z));
  on_phase(GanPhase::g_fwd);

  // Discriminator: maximize log D(x) + log(1 - D(G(z))), i.e. minimize
  // BCE(D(x), 1) + BCE(D(G(z)), 0) with G(z) detached. Real and fake batches go through D
  // separately, so each batch norm sees one kind of image per batch (as in Radford et al.).
  // The losses are computed in fp32 from the 16-bit logits (Note [The fp32 allow-list]).
  {
    Tape d_tape;
    d_trainer.begin_step(d_tape);
    const Variable out_real = D(real);
    const Variable out_fake = D(Variable(d_trainer.input(fake.data())));
    const Variable err =
        binary_cross_entropy_with_logits(nn::fp32_input(OpId::bce_with_logits, out_real), gan.real_labels) +
        binary_cross_entropy_with_logits(nn::fp32_input(OpId::bce_with_logits, out_fake), gan.fake_labels);
    on_phase(GanPhase::d_fwd);
    d_trainer.backward(d_tape, err);
    on_phase(GanPhase::d_bwd);
    d_trainer.step();
    on_phase(GanPhase::d_opt);
    r.loss_d = err.data();
    r.d_real = mean_prob(out_real);
    r.d_fake = mean_prob(out_fake);
  }

  // Generator: minimize BCE(D(G(z)), 1) (the non-saturating loss) through the updated D.
  {
    set_requires_grad(D, false);
    Tape dg_tape;
    g_trainer.attach(dg_tape);
    const Variable fake_in(fake.data(), true);
    const Variable err =
        binary_cross_entropy_with_logits(nn::fp32_input(OpId::bce_with_logits, D(fake_in)), gan.real_labels);
    on_phase(GanPhase::dg_fwd);
    g_trainer.backward(dg_tape, err);  // seeded with G's loss scale
    set_requires_grad(D, true);
    for (const Variable& p : gan.d_params)
      MT_CHECK(!p.grad(), "D's parameter ", p.name(), " received a gradient from G's loss");
    on_phase(GanPhase::dg_bwd);
    g_trainer.backward(g_tape, fake, *fake_in.grad());
    on_phase(GanPhase::g_bwd);
    g_trainer.step();
    on_phase(GanPhase::g_opt);
    r.loss_g = err.data();
  }
  return r;
}

}  // namespace examples
