// Numerics: every kernel loads its operands into the compute type (float for f32/f16/bf16,
// double for f64), computes, and rounds once on store (dtype.h). For + - * / sqrt on 16-bit
// inputs this equals native 16-bit arithmetic bit for bit (fp32 has >= 2p+2 bits).
#include "tensor/cpu/elementwise.h"

#include <cmath>

#include "tensor/cpu/loops.h"
#include "tensor/cpu/math.h"
#include "tensor/core/elementwise_formulas.h"

namespace mixtape::cpu {

namespace {

// Note [Branch-free leaky ReLU]
// `x > 0 ? x : x * a` compiles to a branch (with -ftrapping-math the compiler may not evaluate the
// multiply on both paths), which mispredicts on half the elements of zero-mean activations: about
// 7-10 ns per element against 1-1.5 ns for this form. Multiplying by the slope picked from a
// two-entry table gives the same bits in every case (x * 1 == x, including -0, inf and NaN).
template <class C>
inline C leaky_slope(C x, C a) {
  const C slope[2] = {a, C(1)};
  return slope[x > C(0)];
}

// The host's scalar math for the shared formulas (tensor/core/elementwise_formulas.h).
struct HostMath {
  template <class C>
  static C exp(C x) {
    return std::exp(x);
  }
  template <class C>
  static C log(C x) {
    return std::log(x);
  }
  template <class C>
  static C sqrt(C x) {
    return std::sqrt(x);
  }
  template <class C>
  static C abs(C x) {
    return std::abs(x);
  }
  template <class C>
  static C pow(C x, C a) {
    return std::pow(x, a);
  }
  template <class C>
  static C tanh(C x) {
    return tanh_c(x);
  }  // Note [Float tanh]
  template <class C>
  static C leaky_slope(C x, C a) {
    return cpu::leaky_slope(x, a);
  }
};

}  // namespace

void unary(UnaryOp op, const Strided& x, const Strided& out, double a, double b) {
  dispatch_floating(x.dtype(), unary_op_name(op), [&]<class T>() {
    using C = compute_t<T>;
    const T* px = static_cast<const T*>(x.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    formulas::dispatch_unary(op, [&]<UnaryOp OP>() {
      parallel_for_each_offset<2>(out.shape(), {out.strides(), x.strides()}, [&](const std::array<int64_t, 2>& o) {
        po[o[0]] = store<T>(formulas::unary_forward<OP, HostMath>(load(px[o[1]]), C(a), C(b)));
      });
    });
  });
}

void unary_backward(UnaryOp op, const Strided& x, const Strided& y, const Strided& dy, const Strided& dx, double a,
                    double b) {
  dispatch_floating(dx.dtype(), unary_op_name(op), [&]<class T>() {
    using C = compute_t<T>;
    const T* px = static_cast<const T*>(x.raw_data());
    const T* py = static_cast<const T*>(y.raw_data());
    const T* pdy = static_cast<const T*>(dy.raw_data());
    T* pdx = static_cast<T*>(dx.raw_data());
    formulas::dispatch_unary(op, [&]<UnaryOp OP>() {
      parallel_for_each_offset<4>(dx.shape(), {dx.strides(), x.strides(), y.strides(), dy.strides()},
                                  [&](const std::array<int64_t, 4>& o) {
        pdx[o[0]] = store<T>(
            formulas::unary_backward<OP, HostMath>(load(px[o[1]]), load(py[o[2]]), load(pdy[o[3]]), C(a), C(b)));
      });
    });
  });
}

void binary(BinaryOp op, const Strided& a, const Strided& b, const Strided& out) {
  dispatch_floating(out.dtype(), binary_op_name(op), [&]<class T>() {
    const T* pa = static_cast<const T*>(a.raw_data());
    const T* pb = static_cast<const T*>(b.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    formulas::dispatch_binary(op, [&]<BinaryOp OP>() {
      parallel_for_each_offset<3>(out.shape(),
                                  {out.strides(), broadcast_strides(a, out.shape()), broadcast_strides(b, out.shape())},
                                  [&](const std::array<int64_t, 3>& o) {
        po[o[0]] = store<T>(formulas::binary<OP>(load(pa[o[1]]), load(pb[o[2]])));
      });
    });
  });
}

}  // namespace mixtape::cpu
