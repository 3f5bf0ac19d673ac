#include "autograd/functions/shape.h"

#include "autograd/tape.h"
#include "tensor/ops/shape.h"

namespace mixtape {

namespace {

std::vector<Tensor> data_of(const char* op, const std::vector<Variable>& xs) {
  std::vector<Tensor> ts;
  ts.reserve(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    MT_CHECK(xs[i].defined(), op, ": input ", i, " is an undefined Variable");
    ts.push_back(xs[i].data());
  }
  return ts;
}

}  // namespace

Variable concat(const std::vector<Variable>& xs, int64_t dim) {
  const std::vector<Tensor> ts = data_of("concat", xs);
  Tensor y = mixtape::concat(ts, dim);
  const int64_t d = wrap_dim(dim, y.dim(), "concat");
  std::vector<int64_t> sizes;
  for (const Tensor& t : ts) sizes.push_back(t.size(d));
  // dX_i = the window of dY that X_i filled (a view; the scale is shared).
  return record(OpId::concat, xs, y, [d, sizes](const std::vector<Tensor>& dy, const std::vector<bool>& needs) {
    std::vector<Tensor> dxs(sizes.size());
    int64_t start = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (needs[i]) dxs[i] = dy[0].narrow(d, start, sizes[i]);
      start += sizes[i];
    }
    return dxs;
  });
}

std::vector<Variable> split(const Variable& x, const std::vector<int64_t>& sizes, int64_t dim) {
  std::vector<Tensor> pieces = mixtape::split(x.data(), sizes, dim);
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  // dys arrive at one common scale, zeros for unused pieces (Tape::backward): dX = concat(dys).
  return record_multi(OpId::split, {x}, std::move(pieces),
                      [d](const std::vector<Tensor>& dys, const std::vector<bool>&) {
    return std::vector<Tensor>{mixtape::concat(dys, d)};
  });
}

std::vector<Variable> split(const Variable& x, int64_t chunk_size, int64_t dim) {
  MT_CHECK(x.defined() && x.dim() > 0, "split: cannot split ", x.defined() ? x.data().meta() : "an undefined Variable");
  return split(x, split_sizes(x.size(wrap_dim(dim, x.dim(), "split")), chunk_size, "split"), dim);
}

Variable stack(const std::vector<Variable>& xs, int64_t dim) {
  const std::vector<Tensor> ts = data_of("stack", xs);
  Tensor y = mixtape::stack(ts, dim);
  const int64_t d = wrap_dim(dim, y.dim(), "stack");
  // dX_i = dY[..., i, ...] along the new dim (a view).
  return record(OpId::stack, xs, y, [d, n = xs.size()](const std::vector<Tensor>& dy, const std::vector<bool>& needs) {
    std::vector<Tensor> dxs(n);
    for (size_t i = 0; i < n; ++i)
      if (needs[i]) dxs[i] = dy[0].select(d, int64_t(i));
    return dxs;
  });
}

Variable cast(const Variable& x, DType dtype) {
  MT_CHECK(x.defined(), "cast: got an undefined Variable");
  MT_CHECK(is_floating(x.dtype()) && is_floating(dtype),
           "cast: only casts between floating dtypes are "
           "differentiable, got ",
           x.data().meta(), " -> ", dtype_name(dtype));
  if (dtype == x.dtype()) return x;
  const DType from = x.dtype();
  // The cast that Zhao's cast rule governs: a 16-bit tensor widened (before softmax / loss).
  const bool widens_16bit = is_16bit(from) && !is_16bit(dtype);
  return record_scaled(OpId::cast, {x}, x.data().to(dtype),
                       [from, widens_16bit](const std::vector<ScaledGrad>& dys, const std::vector<bool>&) {
    const ScaledGrad& dy = dys[0];
    const float beta = widens_16bit ? cast_beta(CastGradQuery{&dy, from}) : 1.0f;
    MT_CHECK(is_power_of_two(beta), "cast backward: the scaling rule returned beta = ", beta,
             ", which is not a power of two");
    // Scale in the wide dtype (exact), then round once to x's dtype (RNE).
    return std::vector<ScaledGrad>{{rescale(dy.g, beta).to(from), beta * dy.scale}};
  });
}

}  // namespace mixtape
