// Pure 16-bit training (the "bf16-pure" and "fp16-pure" policies of docs/design.md section 5):
// weights AND optimizer state stored in bf16 or f16, no fp32 copy. Zamirai, Zhang, Aberger, De
// Sa, "Revisiting BFloat16 Training", Algorithms 2-5: SGD and AdamW (and, by the same recipe,
// RMSprop and Adagrad: docs/mixed-precision.md) whose weight update is rounded
//   nearest     to nearest even: updates below half an ulp of the weight are lost (their
//               "standard" algorithm; training stalls late, their Theorem 1)
//   stochastic  stochastically, from a Philox stream (unbiased: E[w_new] = w + u)
//   kahan       to nearest, with a 16-bit Kahan compensation buffer per parameter that carries
//               the lost low part into the next update (2x weight memory)
// Every optimizer (SGD, Adam / AdamW, RMSprop, Adagrad) takes this form when its parameters are
// 16-bit (Note [Storage policy] in optim/optimizer.h); the kernels are sgd16_update_ /
// adamw16_update_ / rmsprop16_update_ / adagrad16_update_ (tensor/ops/optim.h, formulas there).
//
//   SGD opt(bf16_params, {.lr = 0.1, .momentum = 0.9, .rounding = UpdateRounding::kahan});
//   ... backward ...;  opt.step();  opt.zero_grad();
//   // with loss scaling (fp16-pure): scaled_step(opt, scaler) from optim/scaled_step.h
//
// Note [16-bit hyper-parameters]
// In a 16-bit unit the decay rates are 16-bit numbers too, and rounding can change the
// algorithm: beta2 = 0.999 is 1.0 in bf16 (ulp 2^-8 below 1), which would stop the second
// moment from ever forgetting. As Zamirai et al. (appendix C.1, BERT) we then use the largest
// representable value below 1 instead: 1 - 2^-8 = 0.99609375 in bf16 (the paper writes 0.997,
// which is not a bf16 value; it rounds to 0.99609375), 1 - 2^-11 in f16. Every decay rate
// (SGD momentum, AdamW beta1, beta2, RMSprop alpha and momentum) is rounded to the parameter's
// format to nearest even; a rate below 1 that rounds to 1 is replaced so, and the optimizer says
// so once: warnings() lists the messages and each is printed once per process to stderr.
// Learning rate, eps and weight decay enter the fp32 compute as given (rounding them moves
// values by < 2^-8 relative and never changes the algorithm).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/core/dtype.h"

namespace mixtape {

enum class UpdateRounding : uint8_t { nearest, stochastic, kahan };
const char* update_rounding_name(UpdateRounding r);                 // "nearest", "stochastic", "kahan"
UpdateRounding update_rounding_from_name(const std::string& name);  // throws on an unknown name

// A decay rate as a 16-bit unit holds it (Note [16-bit hyper-parameters]).
struct DecayRate16 {
  double value;   // the rate used: rounded to the format, or the largest value below 1
  bool adjusted;  // the rate was below 1 but rounded to 1, so it was replaced
};
DecayRate16 decay_rate_16(double rate, DType format);

// Prints each distinct message once per process to stderr ("mixtape warning: ...").
void warn_once(const std::string& msg);

}  // namespace mixtape
