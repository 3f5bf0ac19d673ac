#include "autograd/functions/batch_norm.h"

#include "autograd/tape.h"
#include "tensor/ops/batch_norm.h"

namespace mixtape {

Variable batch_norm(const Variable& x, const Variable& weight, const Variable& bias, const Tensor& running_mean,
                    const Tensor& running_var, bool training, double momentum, double eps,
                    const Tensor& cumulative_count) {
  const Tensor w = weight.defined() ? weight.data() : Tensor();
  const Tensor b = bias.defined() ? bias.data() : Tensor();
  BatchNormOutput r =
      batch_norm_forward(x.data(), w, b, running_mean, running_var, training, momentum, eps, cumulative_count);
  const DType param_dtype = w.defined() ? w.dtype() : b.defined() ? b.dtype() : x.dtype();
  // Saved: the input, the weight (dx scales by it) and the statistics that normalized.
  return record(OpId::batch_norm, {x, weight, bias}, r.y,
                [xs = x.data(), w, mean = r.mean, invstd = r.invstd, training, param_dtype](
                    const std::vector<Tensor>& dy, const std::vector<bool>& needs) {
    BatchNormGrads g =
        batch_norm_backward(dy[0], xs, w, mean, invstd, training, needs[0], needs[1], needs[2], param_dtype);
    return std::vector<Tensor>{g.dx, g.dweight, g.dbias};
  });
}

}  // namespace mixtape
