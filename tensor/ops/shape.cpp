#include "tensor/ops/shape.h"

#include <algorithm>

#include "cuda/backend.h"
#include "tensor/cpu/shape.h"
#include "tensor/ops/common.h"

namespace mixtape {

namespace {

// Inputs of concat/stack: defined, one device, one dtype, at least one dim. Names the index of
// the offending input.
void check_inputs(const char* op, const std::vector<Tensor>& xs) {
  MT_CHECK(!xs.empty(), op, ": got an empty list of tensors");
  for (size_t i = 0; i < xs.size(); ++i) {
    MT_CHECK(xs[i].defined(), op, ": input ", i, " is an undefined tensor");
    MT_CHECK(xs[i].device() == xs[0].device(), op, ": input ", i, " ", xs[i].meta(), " is on ", xs[i].device(),
             " but input 0 ", xs[0].meta(), " is on ", xs[0].device());
    MT_CHECK(xs[i].dtype() == xs[0].dtype(), op, ": input ", i, " ", xs[i].meta(),
             " has a different dtype than input 0 ", xs[0].meta(), " (cast with .to(dtype))");
  }
}

}  // namespace

Tensor concat(const std::vector<Tensor>& xs, int64_t dim) {
  check_inputs("concat", xs);
  const Tensor& first = xs.front();
  MT_CHECK(first.dim() > 0, "concat: input 0 ", first.meta(), " is a scalar; concat needs at least 1 dim");
  const int64_t d = wrap_dim(dim, first.dim(), "concat");
  Shape shape = first.shape();
  shape[size_t(d)] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    bool match = x.dim() == first.dim();
    for (int64_t k = 0; match && k < x.dim(); ++k) match = k == d || x.size(k) == first.size(k);
    MT_CHECK(match, "concat: input ", i, " ", x.meta(), " does not match input 0 ", first.meta(),
             " (shapes must be equal except in dim ", d, ")");
    shape[size_t(d)] += x.size(d);
  }
  Tensor out = empty(shape, first.dtype(), first.device());
  const std::vector<Strided> inputs(xs.begin(), xs.end());
  on_device(
      first.device(), [&] { cpu::concat(inputs, d, out); }, [&] { cuda::concat(inputs, d, out); });
  return out;
}

std::vector<int64_t> split_sizes(int64_t n, int64_t chunk_size, const char* op) {
  MT_CHECK(chunk_size > 0, op, ": chunk size must be positive, got ", chunk_size);
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < n; start += chunk_size) sizes.push_back(std::min(chunk_size, n - start));
  if (sizes.empty()) sizes.push_back(0);  // an empty dim splits into one empty piece
  return sizes;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  ops::check_same("split", {&x});
  MT_CHECK(x.dim() > 0, "split: cannot split the scalar ", x.meta());
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  MT_CHECK(!sizes.empty(), "split: got no piece sizes for ", x.meta());
  int64_t total = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    MT_CHECK(sizes[i] >= 0, "split: piece ", i, " has negative size ", sizes[i], " in ", shape_str(sizes));
    total += sizes[i];
  }
  MT_CHECK(total == x.size(d), "split: sizes ", shape_str(sizes), " sum to ", total, " but dim ", d, " of ", x.meta(),
           " has size ", x.size(d));
  std::vector<Tensor> pieces;
  pieces.reserve(sizes.size());
  int64_t start = 0;
  for (int64_t s : sizes) {
    pieces.push_back(x.narrow(d, start, s));
    start += s;
  }
  return pieces;
}

std::vector<Tensor> split(const Tensor& x, int64_t chunk_size, int64_t dim) {
  ops::check_same("split", {&x});
  MT_CHECK(x.dim() > 0, "split: cannot split the scalar ", x.meta());
  return split(x, split_sizes(x.size(wrap_dim(dim, x.dim(), "split")), chunk_size, "split"), dim);
}

Tensor stack(const std::vector<Tensor>& xs, int64_t dim) {
  check_inputs("stack", xs);
  const Tensor& first = xs.front();
  for (size_t i = 0; i < xs.size(); ++i)
    MT_CHECK(xs[i].shape() == first.shape(), "stack: input ", i, " ", xs[i].meta(), " does not match input 0 ",
             first.meta(), " (stack needs equal shapes)");
  const int64_t d = wrap_dim(dim, first.dim() + 1, "stack");
  std::vector<Tensor> unsqueezed;
  unsqueezed.reserve(xs.size());
  for (const Tensor& x : xs) unsqueezed.push_back(x.unsqueeze(d));
  return concat(unsqueezed, d);
}

}  // namespace mixtape
