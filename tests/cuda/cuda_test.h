// Shared by the CUDA tests: the visible skip, moving tensors between devices, inputs with odd
// layouts, and comparisons against the CPU reference (STYLE.md 1: atol + |ref| * eps(dtype)).
//
// Every TEST_CASE here is tagged [cuda] and starts with MT_REQUIRE_GPU(). Without a visible GPU
// it prints "SKIPPED: no CUDA device ..." and returns; ctest matches that line and reports the
// test as skipped (tests/CMakeLists.txt), so a machine without a GPU never counts it as passed.
#pragma once

#include "support/catch.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "cuda/runtime.h"
#include "tensor/tensor.h"

#define MT_REQUIRE_GPU()                                                                                           \
  do {                                                                                                             \
    if (!::mixtape::cuda::is_available()) {                                                                        \
      std::cout << "SKIPPED: no CUDA device ("                                                                     \
                << (::mixtape::cuda::built_with_cuda() ? "built with CUDA, no GPU visible" : "built without CUDA") \
                << "); this test did not run\n";                                                                   \
      return;                                                                                                      \
    }                                                                                                              \
  } while (0)

namespace mixtape::cuda_test {

inline Device gpu() { return Device::cuda(0); }
inline Tensor on_gpu(const Tensor& t) { return t.to(gpu()); }
inline Tensor on_cpu(const Tensor& t) { return t.to(Device::cpu()); }

// Uniform values in [lo, hi) of `dtype` (drawn in f32, rounded once), on the CPU.
inline Tensor random(const Shape& shape, DType dtype, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Generator gen(seed);
  return uniform(shape, lo, hi, gen, dtype);
}

// The same values as `t` (on t's device) in a non-contiguous layout: every element sits at an
// even position of the last dim of a buffer twice as wide, and the two last dims are swapped in
// memory when there are two or more dims.
inline Tensor strided_copy(const Tensor& t) {
  if (t.dim() == 0) return t.clone();
  Shape wide = t.shape();
  wide.back() *= 2;
  Tensor buf = zeros(wide, t.dtype(), t.device());
  Tensor view = buf.slice(-1, 0, wide.back(), 2);
  if (t.dim() >= 2) {
    // Lay the buffer out transposed: allocate (..., W, H) and view it as (..., H, W).
    Shape swapped = t.shape();
    std::swap(swapped[swapped.size() - 1], swapped[swapped.size() - 2]);
    swapped.back() *= 2;
    Tensor tbuf = zeros(swapped, t.dtype(), t.device());
    view = tbuf.slice(-1, 0, swapped.back(), 2).transpose(-1, -2);
  }
  view.copy_(t);
  return view;
}

// Raw bits of each element of a CPU copy of t, in row-major order.
inline std::vector<uint64_t> element_bits(const Tensor& t) {
  const Tensor c = on_cpu(t).contiguous();
  const size_t es = dtype_size(c.dtype());
  std::vector<uint64_t> bits(size_t(c.numel()), 0);
  const auto* p = static_cast<const unsigned char*>(c.raw_data());
  for (size_t i = 0; i < bits.size(); ++i) std::memcpy(&bits[i], p + i * es, es);
  return bits;
}

// Same shape, dtype and bits, element for element (NaN payloads included).
inline void require_bit_identical(const Tensor& got, const Tensor& want, const std::string& what) {
  INFO(what << ": got " << got.meta() << ", want " << want.meta());
  REQUIRE(got.shape() == want.shape());
  REQUIRE(got.dtype() == want.dtype());
  const std::vector<uint64_t> g = element_bits(got), w = element_bits(want);
  const std::vector<double> gv = on_cpu(got).to_vector(), wv = on_cpu(want).to_vector();
  size_t mismatches = 0, first = g.size();
  for (size_t i = 0; i < g.size(); ++i)
    if (g[i] != w[i] && mismatches++ == 0) first = i;
  if (mismatches) {
    INFO(mismatches << " of " << g.size() << " elements differ; first at " << first << ": got " << gv[first]
                    << " (bits 0x" << std::hex << g[first] << "), want " << std::dec << wv[first] << " (bits 0x"
                    << std::hex << w[first] << ")");
    CHECK(mismatches == 0);
  }
}

// Unit roundoff of the dtype a result is stored in.
inline double eps_of(DType d) {
  switch (d) {
    case DType::f16: return std::ldexp(1.0, -11);
    case DType::bf16: return std::ldexp(1.0, -8);
    case DType::f64: return std::ldexp(1.0, -53);
    default: return std::ldexp(1.0, -24);
  }
}

// |got - want| <= atol + |want| * rel_ulps * eps(dtype of got), elementwise; inf and NaN must
// match. rel_ulps covers rounding the output once (1-2) plus a different summation order.
inline void require_close(const Tensor& got, const Tensor& want, const std::string& what, double rel_ulps = 4.0,
                          double atol = 0.0) {
  INFO(what << ": got " << got.meta() << ", want " << want.meta());
  REQUIRE(got.shape() == want.shape());
  const std::vector<double> g = on_cpu(got).to_vector(), w = on_cpu(want).to_vector();
  const double eps = eps_of(got.dtype());
  size_t bad = 0, first = g.size();
  double worst = 0.0;
  for (size_t i = 0; i < g.size(); ++i) {
    bool ok;
    if (std::isnan(w[i]) || std::isnan(g[i])) ok = std::isnan(w[i]) && std::isnan(g[i]);
    else if (std::isinf(w[i]) || std::isinf(g[i])) ok = g[i] == w[i];
    else {
      const double err = std::fabs(g[i] - w[i]), tol = atol + std::fabs(w[i]) * rel_ulps * eps;
      ok = err <= tol;
      if (tol > 0) worst = std::max(worst, err / tol);
    }
    if (!ok && bad++ == 0) first = i;
  }
  if (bad) {
    INFO(bad << " of " << g.size() << " elements out of tolerance (atol " << atol << ", " << rel_ulps << " ulps of "
             << dtype_name(got.dtype()) << "); first at " << first << ": got " << g[first] << ", want " << w[first]);
    CHECK(bad == 0);
  }
}

// ---- strided layouts without a GPU copy kernel ----------------------------------------------
// A non-contiguous layout is built on the CPU (strided_copy's layout), its whole storage is
// copied over, and the same view is taken on the other side: so a test of, say, batch norm
// exercises only the batch norm kernels and the runtime's copies, never the copy kernel.

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

// strided_copy's layout on the GPU, built as above.
inline Tensor strided_on_gpu(const Tensor& t) {
  const Tensor g = gpu_input(t, true);
  if (t.numel() > 1) REQUIRE_FALSE(g.is_contiguous());
  return g;
}

// The GPU copies of x to test: contiguous and strided.
inline std::vector<std::pair<const char*, Tensor>> layouts(const Tensor& x) {
  return {{"contiguous", on_gpu(x)}, {"strided", strided_on_gpu(x)}};
}

}  // namespace mixtape::cuda_test
