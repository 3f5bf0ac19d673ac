// Moving strided tensors between the CPU and the GPU without a GPU copy kernel, for the tests of
// kernels that read inputs through strides or update state in place (test_nn, test_pool,
// test_lstm, test_optim). A non-contiguous layout is built on the CPU (cuda_test::strided_copy's
// layout), its whole storage is copied over, and the same view is taken on the other side; so a
// test of, say, batch norm exercises only the batch norm kernels and the runtime's copies.
#pragma once

#include <memory>
#include <string>

#include "tests/cuda/cuda_test.h"

namespace mixtape::cuda_test {

// The view v rebuilt on `dev` over a copy of its whole storage: same shape, strides, offset.
inline Tensor same_layout_on(const Tensor& v, Device dev) {
  const TensorImpl& im = v.impl();
  const int64_t n = int64_t(im.storage->nbytes() / dtype_size(im.dtype));
  const Tensor flat(std::make_shared<TensorImpl>(TensorImpl{im.storage, {n}, {1}, 0, im.dtype}));
  const Tensor moved = flat.to(dev);
  return Tensor(std::make_shared<TensorImpl>(TensorImpl{moved.storage(), im.shape, im.strides, im.offset, im.dtype}));
}

// The CPU tensor t on the GPU: contiguous, or (strided) in strided_copy's layout.
inline Tensor gpu_input(const Tensor& t, bool strided) {
  if (!strided || t.dim() == 0) return on_gpu(t);
  return same_layout_on(strided_copy(t), gpu());
}

// A GPU tensor of any layout back on the CPU with the same layout.
inline Tensor host_view(const Tensor& g) { return g.is_contiguous() ? on_cpu(g) : same_layout_on(g, Device::cpu()); }

inline const char* layout_name(bool strided) { return strided ? "strided" : "contiguous"; }

// Fraction of elements whose bits agree (for results documented as almost always bit-identical).
inline double fraction_identical(const Tensor& got, const Tensor& want) {
  const std::vector<uint64_t> g = element_bits(host_view(got)), w = element_bits(host_view(want));
  if (g.empty()) return 1.0;
  size_t same = 0;
  for (size_t i = 0; i < g.size() && i < w.size(); ++i) same += g[i] == w[i];
  return double(same) / double(g.size());
}

}  // namespace mixtape::cuda_test
