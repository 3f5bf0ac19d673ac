#include "tensor/ops/optim.h"

#include <cmath>

#include "cuda/backend.h"
#include "tensor/cpu/optim.h"
#include "tensor/ops/common.h"

namespace mixtape {

namespace {

// The dtype an update kernel wants its gradient in: the parameter's compute dtype.
DType grad_dtype_for(DType param) { return param == DType::f64 ? DType::f64 : DType::f32; }

void check_param(const char* op, const Tensor& param, const Tensor& grad) {
  ops::check_same(op, {&param, &grad}, /*same_dtype=*/false);
  MT_CHECK(param.dtype() == DType::f32 || param.dtype() == DType::f64, op, ": parameter ", param.meta(),
           " must be f32 or f64; 16-bit parameters are updated through fp32 master weights or a 16-bit "
           "update rule");
  MT_CHECK(grad.dtype() == grad_dtype_for(param.dtype()), op, ": gradient ", grad.meta(), " must be ",
           dtype_name(grad_dtype_for(param.dtype())), " (the unscaled gradient) for parameter ", param.meta());
  MT_CHECK(grad.shape() == param.shape(), op, ": gradient ", grad.meta(), " does not match parameter ", param.meta());
}

// A tensor written in place: same shape, dtype and device as the parameter, and no element
// reachable through two indices (a broadcast view would receive racing updates).
void check_written(const char* op, const Tensor& t, const Tensor& param, const char* what) {
  MT_CHECK(t.defined(), op, ": ", what, " is undefined (parameter ", param.meta(), ")");
  MT_CHECK(t.device() == param.device() && t.dtype() == param.dtype() && t.shape() == param.shape(), op, ": ", what,
           " ", t.meta(), " must match parameter ", param.meta());
  for (int64_t d = 0; d < t.dim(); ++d)
    MT_CHECK(t.shape()[size_t(d)] <= 1 || t.strides()[size_t(d)] != 0, op, ": ", what, " ", t.meta(),
             " is a broadcast view (stride 0 in dim ", d, ") and cannot be updated in place");
}

// The 16-bit copy of an f32 master written in the update's pass (Note [Fused master copy]).
void check_rounded_copy(const char* op, const Tensor* copy, const Tensor& param) {
  if (!copy) return;
  MT_CHECK(copy->defined(), op, ": the rounded copy is undefined (parameter ", param.meta(), ")");
  MT_CHECK(param.dtype() == DType::f32, op, ": a rounded copy needs an f32 master parameter, got ", param.meta());
  MT_CHECK(is_16bit(copy->dtype()), op, ": the rounded copy ", copy->meta(), " must be bf16 or f16");
  MT_CHECK(copy->device() == param.device() && copy->shape() == param.shape(), op, ": the rounded copy ", copy->meta(),
           " must have the shape and device of parameter ", param.meta());
  for (int64_t d = 0; d < copy->dim(); ++d)
    MT_CHECK(copy->shape()[size_t(d)] <= 1 || copy->strides()[size_t(d)] != 0, op, ": the rounded copy ", copy->meta(),
             " is a broadcast view (stride 0 in dim ", d, ") and cannot be written in place");
}

// The optional rounded copy as the kernels take it: absent when there is none.
Strided copy_operand(const Tensor* copy) { return copy ? Strided(*copy) : Strided(); }

void check_hyper(const char* op, bool ok, const char* what, double v) { MT_CHECK(ok, op, ": invalid ", what, " ", v); }

void check_lr_and_decay(const char* op, double lr, double weight_decay) {
  check_hyper(op, std::isfinite(lr) && lr >= 0.0, "learning rate (need a finite value >= 0)", lr);
  check_hyper(op, std::isfinite(weight_decay) && weight_decay >= 0.0, "weight decay (need a finite value >= 0)",
              weight_decay);
}

// The hyper-parameters shared by adam_update_ and adamw16_update_.
void check_adam_hypers(const char* op, double lr, double beta1, double beta2, double eps, double weight_decay,
                       int64_t step) {
  check_lr_and_decay(op, lr, weight_decay);
  check_hyper(op, beta1 >= 0.0 && beta1 < 1.0, "beta1 (need 0 <= beta1 < 1)", beta1);
  check_hyper(op, beta2 >= 0.0 && beta2 < 1.0, "beta2 (need 0 <= beta2 < 1)", beta2);
  check_hyper(op, std::isfinite(eps) && eps >= 0.0, "eps (need a finite value >= 0)", eps);
  MT_CHECK(step >= 1, op, ": step counts updates from 1, got ", step);
}

// The hyper-parameters shared by rmsprop_update_ and rmsprop16_update_.
void check_rmsprop_hypers(const char* op, double lr, double alpha, double eps, double weight_decay, double momentum) {
  check_lr_and_decay(op, lr, weight_decay);
  check_hyper(op, alpha >= 0.0 && alpha < 1.0, "alpha (need 0 <= alpha < 1)", alpha);
  check_hyper(op, std::isfinite(eps) && eps >= 0.0, "eps (need a finite value >= 0)", eps);
  check_hyper(op, std::isfinite(momentum) && momentum >= 0.0, "momentum (need a finite value >= 0)", momentum);
}

// The hyper-parameters shared by adagrad_update_ and adagrad16_update_.
void check_adagrad_hypers(const char* op, double lr, double lr_decay, double eps, double weight_decay, int64_t step) {
  check_lr_and_decay(op, lr, weight_decay);
  check_hyper(op, std::isfinite(lr_decay) && lr_decay >= 0.0, "lr_decay (need a finite value >= 0)", lr_decay);
  check_hyper(op, std::isfinite(eps) && eps >= 0.0, "eps (need a finite value >= 0)", eps);
  MT_CHECK(step >= 1, op, ": step counts updates from 1, got ", step);
}

// The 16-bit rules: a bf16 or f16 parameter, its unscaled f32 gradient, and the rounding rule.
void check_param16(const char* op, const Tensor& param, const Tensor& grad, const Tensor& kahan_comp,
                   Rounding rounding) {
  ops::check_same(op, {&param, &grad}, /*same_dtype=*/false);
  MT_CHECK(is_16bit(param.dtype()), op, ": parameter ", param.meta(),
           " must be bf16 or f16 (16-bit weights and state); f32 parameters use sgd_update_ / adam_update_");
  MT_CHECK(grad.dtype() == DType::f32, op, ": gradient ", grad.meta(),
           " must be f32 (the unscaled gradient) for parameter ", param.meta());
  MT_CHECK(grad.shape() == param.shape(), op, ": gradient ", grad.meta(), " does not match parameter ", param.meta());
  check_written(op, param, param, "parameter");
  if (kahan_comp.defined()) {
    check_written(op, kahan_comp, param, "Kahan compensation buffer");
    MT_CHECK(rounding == Rounding::nearest, op,
             ": Kahan summation rounds to nearest; stochastic rounding takes no compensation buffer");
  }
}

}  // namespace

void sgd_update_(Tensor& param, const Tensor& grad, Tensor& momentum_buf, double lr, double momentum, double dampening,
                 double weight_decay, bool nesterov, int64_t step, Tensor* rounded_copy) {
  const char* op = "sgd_update_";
  check_param(op, param, grad);
  check_written(op, param, param, "parameter");
  if (momentum != 0.0) check_written(op, momentum_buf, param, "momentum buffer");
  check_lr_and_decay(op, lr, weight_decay);
  check_hyper(op, std::isfinite(momentum) && momentum >= 0.0, "momentum (need a finite value >= 0)", momentum);
  check_hyper(op, std::isfinite(dampening), "dampening (need a finite value)", dampening);
  MT_CHECK(!nesterov || (momentum > 0.0 && dampening == 0.0), op,
           ": Nesterov momentum needs momentum > 0 and dampening 0, got momentum ", momentum, ", dampening ",
           dampening);
  MT_CHECK(step >= 1, op, ": step counts updates from 1, got ", step);
  check_rounded_copy(op, rounded_copy, param);
  on_device(
      param.device(),
      [&] {
    cpu::sgd_update(param, grad, momentum_buf, lr, momentum, dampening, weight_decay, nesterov, step,
                    copy_operand(rounded_copy));
      },
      [&] {
    cuda::sgd_update(param, grad, momentum_buf, lr, momentum, dampening, weight_decay, nesterov, step,
                     copy_operand(rounded_copy));
  });
}

void adam_update_(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, double lr, double beta1,
                  double beta2, double eps, double weight_decay, bool decoupled, int64_t step, Tensor* rounded_copy,
                  Tensor* max_exp_avg_sq) {
  const char* op = decoupled ? "adamw_update_" : "adam_update_";
  check_param(op, param, grad);
  check_written(op, param, param, "parameter");
  check_written(op, exp_avg, param, "exp_avg");
  check_written(op, exp_avg_sq, param, "exp_avg_sq");
  if (max_exp_avg_sq) check_written(op, *max_exp_avg_sq, param, "max_exp_avg_sq (amsgrad)");
  check_adam_hypers(op, lr, beta1, beta2, eps, weight_decay, step);
  check_rounded_copy(op, rounded_copy, param);
  const Strided vmax = max_exp_avg_sq ? Strided(*max_exp_avg_sq) : Strided();
  on_device(
      param.device(),
      [&] {
    cpu::adam_update(param, grad, exp_avg, exp_avg_sq, vmax, lr, beta1, beta2, eps, weight_decay, decoupled, step,
                     copy_operand(rounded_copy));
      },
      [&] {
    cuda::adam_update(param, grad, exp_avg, exp_avg_sq, vmax, lr, beta1, beta2, eps, weight_decay, decoupled, step,
                      copy_operand(rounded_copy));
  });
}

void rmsprop_update_(Tensor& param, const Tensor& grad, Tensor& square_avg, Tensor& grad_avg, Tensor& momentum_buf,
                     double lr, double alpha, double eps, double weight_decay, double momentum, bool centered,
                     Tensor* rounded_copy) {
  const char* op = "rmsprop_update_";
  check_param(op, param, grad);
  check_written(op, param, param, "parameter");
  check_written(op, square_avg, param, "square_avg");
  if (centered) check_written(op, grad_avg, param, "grad_avg (centered)");
  if (momentum > 0.0) check_written(op, momentum_buf, param, "momentum buffer");
  check_rmsprop_hypers(op, lr, alpha, eps, weight_decay, momentum);
  check_rounded_copy(op, rounded_copy, param);
  on_device(
      param.device(),
      [&] {
    cpu::rmsprop_update(param, grad, square_avg, grad_avg, momentum_buf, lr, alpha, eps, weight_decay, momentum,
                        centered, copy_operand(rounded_copy));
      },
      [&] {
    cuda::rmsprop_update(param, grad, square_avg, grad_avg, momentum_buf, lr, alpha, eps, weight_decay, momentum,
                         centered, copy_operand(rounded_copy));
  });
}

void adagrad_update_(Tensor& param, const Tensor& grad, Tensor& sum, double lr, double lr_decay, double eps,
                     double weight_decay, int64_t step, Tensor* rounded_copy) {
  const char* op = "adagrad_update_";
  check_param(op, param, grad);
  check_written(op, param, param, "parameter");
  check_written(op, sum, param, "sum");
  check_adagrad_hypers(op, lr, lr_decay, eps, weight_decay, step);
  check_rounded_copy(op, rounded_copy, param);
  on_device(
      param.device(),
      [&] { cpu::adagrad_update(param, grad, sum, lr, lr_decay, eps, weight_decay, step, copy_operand(rounded_copy)); },
      [&] {
    cuda::adagrad_update(param, grad, sum, lr, lr_decay, eps, weight_decay, step, copy_operand(rounded_copy));
      });
}

GradStats grad_stats(const Tensor& g) {
  ops::check_same("grad_stats", {&g});
  ops::check_floating("grad_stats", g);
  // out = [any inf/NaN (0 or 1), max |g| over the finite elements], on g's device.
  Tensor out = empty({2}, g.dtype() == DType::f64 ? DType::f64 : DType::f32, g.device());
  on_device(
      g.device(), [&] { cpu::grad_stats(g, out); }, [&] { cuda::grad_stats(g, out); });
  const std::vector<double> v = out.to_vector();
  return GradStats{v[0] != 0.0, v[1]};
}

std::vector<GradStats> grad_stats(const std::vector<Tensor>& gs) {
  std::vector<GradStats> r(gs.size());
  if (gs.empty()) return r;
  bool batched = true;
  for (const Tensor& g : gs) {
    ops::check_same("grad_stats", {&g});
    ops::check_floating("grad_stats", g);
    batched = batched && g.device().is_cuda() && g.device() == gs[0].device() && g.dtype() != DType::f64;
  }
  if (!batched) {
    for (size_t i = 0; i < gs.size(); ++i) r[i] = grad_stats(gs[i]);
    return r;
  }
  // Row i of `all` = [any inf/NaN, max |g_i| over the finite elements]; one read back for all.
  Tensor all = empty({int64_t(gs.size()), 2}, DType::f32, gs[0].device());
  for (size_t i = 0; i < gs.size(); ++i) {
    Tensor row = all.select(0, int64_t(i));
    cuda::grad_stats(gs[i], row);
  }
  const std::vector<double> v = all.to_vector();
  for (size_t i = 0; i < gs.size(); ++i) r[i] = GradStats{v[2 * i] != 0.0, v[2 * i + 1]};
  return r;
}

namespace {

std::vector<Strided> operands(const std::vector<Tensor>& ts) {
  std::vector<Strided> r;
  r.reserve(ts.size());
  for (const Tensor& t : ts) r.push_back(t.defined() ? Strided(t) : Strided());
  return r;
}

// A multi-tensor operand: defined, on `device`, contiguous.
void check_multi(const char* op, const Tensor& t, Device device, const char* what, size_t i) {
  MT_CHECK(t.defined(), op, ": ", what, " ", i, " is undefined");
  MT_CHECK(t.device() == device, op, ": ", what, " ", i, " ", t.meta(), " is not on ", device);
  MT_CHECK(t.is_contiguous(), op, ": ", what, " ", i, " ", t.meta(), " must be contiguous");
}

void check_state(const char* op, const Tensor& fstate, const Tensor& istate) {
  MT_CHECK(fstate.defined() && fstate.device().is_cuda(), op, ": the step state must be on a CUDA device (the CPU ",
           "decides on the host), got ", fstate.defined() ? fstate.meta() : std::string("undefined"));
  MT_CHECK(fstate.dtype() == DType::f32 && fstate.numel() == formulas::kStepF && fstate.is_contiguous(), op,
           ": the f32 step state ", fstate.meta(), " must hold ", int(formulas::kStepF), " contiguous values");
  if (istate.defined())
    MT_CHECK(istate.dtype() == DType::i64 && istate.numel() == formulas::kStepI && istate.is_contiguous() &&
                 istate.device() == fstate.device(),
             op, ": the i64 step state ", istate.meta(), " must hold ", int(formulas::kStepI), " contiguous values on ",
             fstate.device());
}

}  // namespace

std::vector<Tensor> unscale_and_decide_(const std::vector<Tensor>& grads, const std::vector<float>& scales,
                                        Tensor& fstate, Tensor& istate, const formulas::LossScaleRule& rule,
                                        double max_grad_norm) {
  const char* op = "unscale_and_decide_";
  check_state(op, fstate, istate);
  MT_CHECK(istate.defined(), op, ": the i64 step state is undefined");
  MT_CHECK(grads.size() == scales.size(), op, ": ", grads.size(), " gradients but ", scales.size(), " scales");
  MT_CHECK(std::isfinite(max_grad_norm) && max_grad_norm >= 0.0, op,
           ": max_grad_norm must be finite and >= 0 (0 turns clipping off), got ", max_grad_norm);
  std::vector<Tensor> in, out;
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    MT_CHECK(g.defined() && g.device() == fstate.device(), op, ": gradient ", i, " ",
             g.defined() ? g.meta() : std::string("undefined"), " is not on ", fstate.device());
    MT_CHECK(g.dtype() == DType::f32 || is_16bit(g.dtype()), op, ": gradient ", i, " ", g.meta(),
             " must be f32, f16 or bf16");
    int e = 0;
    MT_CHECK(std::isnormal(scales[i]) && scales[i] > 0.0f && std::frexp(scales[i], &e) == 0.5f, op, ": the scale ",
             scales[i], " of gradient ", i, " is not a power of two in [2^-126, 2^127]");
    in.push_back(g.contiguous());
    out.push_back(empty(g.shape(), DType::f32, g.device()));
  }
  on_device(
      fstate.device(), [&] { MT_ASSERT(false, op, " on the CPU"); },
      [&] { cuda::unscale_and_decide(operands(in), scales, operands(out), fstate, istate, rule, max_grad_norm); });
  return out;
}

void multi_adam_update_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                        const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                        const std::vector<Tensor>& copies, const std::vector<double>& lrs,
                        const std::vector<double>& weight_decays, double beta1, double beta2, double eps,
                        bool decoupled, Tensor& steps, const std::vector<int64_t>& step_index, const Tensor& control) {
  const char* op = decoupled ? "multi_adamw_update_" : "multi_adam_update_";
  check_state(op, control, Tensor());
  const size_t n = params.size();
  MT_CHECK(grads.size() == n && exp_avgs.size() == n && exp_avg_sqs.size() == n && copies.size() == n &&
               lrs.size() == n && weight_decays.size() == n && step_index.size() == n,
           op, ": every list needs one entry per parameter (", n, ")");
  MT_CHECK(steps.defined() && steps.dtype() == DType::i64 && steps.dim() == 1 && steps.is_contiguous() &&
               steps.device() == control.device(),
           op, ": steps must be a contiguous 1-d i64 tensor on ", control.device());
  const Device d = control.device();
  for (size_t i = 0; i < n; ++i) {
    const Tensor& p = params[i];
    check_multi(op, p, d, "parameter", i);
    check_multi(op, grads[i], d, "gradient", i);
    check_multi(op, exp_avgs[i], d, "exp_avg", i);
    check_multi(op, exp_avg_sqs[i], d, "exp_avg_sq", i);
    for (const Tensor* t : {&p, &grads[i], &exp_avgs[i], &exp_avg_sqs[i]})
      MT_CHECK(t->dtype() == DType::f32 && t->shape() == p.shape(), op, ": ", t->meta(), " of parameter ", i, " ",
               p.meta(), " must be f32 and shaped like it");
    if (copies[i].defined()) {
      check_multi(op, copies[i], d, "rounded copy", i);
      check_rounded_copy(op, &copies[i], p);
    }
    check_adam_hypers(op, lrs[i], beta1, beta2, eps, weight_decays[i], 1);
    MT_CHECK(step_index[i] >= 0 && step_index[i] < steps.numel(), op, ": step index ", step_index[i], " of parameter ",
             i, " is outside steps ", steps.meta());
  }
  on_device(
      d, [&] { MT_ASSERT(false, op, " on the CPU"); },
      [&] {
    cuda::multi_adam_update(operands(params), operands(grads), operands(exp_avgs), operands(exp_avg_sqs),
                            operands(copies), lrs, weight_decays, beta1, beta2, eps, decoupled, steps, step_index,
                            control);
      });
}

void sgd16_update_(Tensor& param, const Tensor& grad, Tensor& momentum_buf, Tensor& kahan_comp, double lr,
                   double momentum, double weight_decay, Rounding rounding, uint64_t seed, uint64_t offset) {
  const char* op = "sgd16_update_";
  check_param16(op, param, grad, kahan_comp, rounding);
  if (momentum != 0.0) check_written(op, momentum_buf, param, "momentum buffer");
  check_lr_and_decay(op, lr, weight_decay);
  check_hyper(op, std::isfinite(momentum) && momentum >= 0.0, "momentum (need a finite value >= 0)", momentum);
  on_device(
      param.device(),
      [&] {
    cpu::sgd16_update(param, grad, momentum_buf, kahan_comp, lr, momentum, weight_decay, rounding, seed, offset);
      },
      [&] {
    cuda::sgd16_update(param, grad, momentum_buf, kahan_comp, lr, momentum, weight_decay, rounding, seed, offset);
  });
}

void adamw16_update_(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, Tensor& kahan_comp,
                     double lr, double beta1, double beta2, double eps, double weight_decay, int64_t step,
                     Rounding rounding, uint64_t seed, uint64_t offset, Tensor* max_exp_avg_sq) {
  const char* op = "adamw16_update_";
  check_param16(op, param, grad, kahan_comp, rounding);
  check_written(op, exp_avg, param, "exp_avg");
  check_written(op, exp_avg_sq, param, "exp_avg_sq");
  if (max_exp_avg_sq) check_written(op, *max_exp_avg_sq, param, "max_exp_avg_sq (amsgrad)");
  check_adam_hypers(op, lr, beta1, beta2, eps, weight_decay, step);
  const Strided vmax = max_exp_avg_sq ? Strided(*max_exp_avg_sq) : Strided();
  on_device(
      param.device(),
      [&] {
    cpu::adamw16_update(param, grad, exp_avg, exp_avg_sq, vmax, kahan_comp, lr, beta1, beta2, eps, weight_decay, step,
                        rounding, seed, offset);
      },
      [&] {
    cuda::adamw16_update(param, grad, exp_avg, exp_avg_sq, vmax, kahan_comp, lr, beta1, beta2, eps, weight_decay, step,
                         rounding, seed, offset);
  });
}

void rmsprop16_update_(Tensor& param, const Tensor& grad, Tensor& square_avg, Tensor& grad_avg, Tensor& momentum_buf,
                       Tensor& kahan_comp, double lr, double alpha, double eps, double weight_decay, double momentum,
                       bool centered, Rounding rounding, uint64_t seed, uint64_t offset) {
  const char* op = "rmsprop16_update_";
  check_param16(op, param, grad, kahan_comp, rounding);
  check_written(op, square_avg, param, "square_avg");
  if (centered) check_written(op, grad_avg, param, "grad_avg (centered)");
  if (momentum > 0.0) check_written(op, momentum_buf, param, "momentum buffer");
  check_rmsprop_hypers(op, lr, alpha, eps, weight_decay, momentum);
  on_device(
      param.device(),
      [&] {
    cpu::rmsprop16_update(param, grad, square_avg, grad_avg, momentum_buf, kahan_comp, lr, alpha, eps, weight_decay,
                          momentum, centered, rounding, seed, offset);
      },
      [&] {
    cuda::rmsprop16_update(param, grad, square_avg, grad_avg, momentum_buf, kahan_comp, lr, alpha, eps, weight_decay,
                           momentum, centered, rounding, seed, offset);
  });
}

void adagrad16_update_(Tensor& param, const Tensor& grad, Tensor& sum, Tensor& kahan_comp, double lr, double lr_decay,
                       double eps, double weight_decay, int64_t step, Rounding rounding, uint64_t seed,
                       uint64_t offset) {
  const char* op = "adagrad16_update_";
  check_param16(op, param, grad, kahan_comp, rounding);
  check_written(op, sum, param, "sum");
  check_adagrad_hypers(op, lr, lr_decay, eps, weight_decay, step);
  on_device(
      param.device(),
      [&] {
    cpu::adagrad16_update(param, grad, sum, kahan_comp, lr, lr_decay, eps, weight_decay, step, rounding, seed, offset);
      },
      [&] {
    cuda::adagrad16_update(param, grad, sum, kahan_comp, lr, lr_decay, eps, weight_decay, step, rounding, seed, offset);
  });
}

}  // namespace mixtape
