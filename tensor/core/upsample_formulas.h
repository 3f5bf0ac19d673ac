// The index math of upsample (nearest and bilinear, as torch.nn.functional.interpolate in torch
// 1.13), written once for both devices: tensor/cpu/pool.cpp and cuda/pool.cu take the input
// positions and weights of every output position from here, so both devices read the same inputs
// with the same weights and combine them in the same order (Note [No contracted multiply-adds] in
// CMakeLists.txt keeps the arithmetic unfused on both). C is the compute type: float for
// f32/f16/bf16, double for f64 (CPU only).
//
// Note [Upsample index math]
// Along each axis (rows, then columns) output position o reads input positions i0 <= i1 with the
// weights w0 = 1 - w1 and w1; the 2-D output is the axes' product (bilinear_value). PyTorch's
// rules, checked against torch 1.13 (outputs and gradients, input sizes 1-11 to output sizes 1-24
// and scale factors 0.3-3.3) by `python3 tests/tensor/upsample_reference.py sweep`:
//   - out == in: a copy, i0 = i1 = o, w1 = 0, whatever the scale factor says (PyTorch
//     special-cases it in both modes and both passes; for nearest also out == 2 in: i = o / 2).
//   - nearest: i0 = i1 = min(floor(o s), in - 1), in float whatever the dtype (f64 too), with
//     s = 1 / scale_factor when a factor was given (and not recomputed), else in / out.
//   - bilinear, align_corners false: src = max(s (o + 0.5) - 0.5, 0) with s = 1 / scale_factor or
//     in / out, rounded to C; i0 = floor(src), i1 = min(i0 + 1, in - 1), w1 = src - i0.
//   - bilinear, align_corners true: src = s o with s = (in - 1) / (out - 1), 0 when out == 1.
// PyTorch computes s (o + 0.5) - 0.5 in double and rounds it once to C. For C = float the double
// product of the float s and o + 0.5 is exact and so is the subtraction (with sizes below 2^23,
// the front-end's limit, s > 2^-23, so the result needs fewer than 53 bits), so it equals one
// fused multiply-add in float, which the device computes without doubles.
// i0 and i1 never decrease with o, so the outputs that read an input position form a range
// (upsample_readers): the GPU's backward gathers over it instead of scattering with atomics.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "tensor/core/host_device.h"

namespace mixtape {

enum class UpsampleMode : uint8_t { nearest, bilinear };
inline const char* upsample_mode_name(UpsampleMode m) { return m == UpsampleMode::nearest ? "nearest" : "bilinear"; }

// Sizes along an axis above this are refused: the index math needs o + 0.5 exact in float.
inline constexpr int64_t kUpsampleMaxSize = int64_t(1) << 23;

}  // namespace mixtape

namespace mixtape::formulas {

// One axis of an upsample: `in` input positions read by `out` output positions.
template <class C>
struct UpsampleAxis {
  int64_t in = 1, out = 1;
  C scale = 0;  // s of Note [Upsample index math]
  bool linear = false, align_corners = false;
};

// Host only: the axis's s as PyTorch computes it. scale_factor > 0 is the factor the caller gave
// (used for s); 0 when the sizes decide (size given, or recompute_scale_factor).
template <class C>
inline UpsampleAxis<C> upsample_axis(int64_t in, int64_t out, UpsampleMode mode, bool align_corners,
                                     double scale_factor) {
  UpsampleAxis<C> a;
  a.in = in;
  a.out = out;
  a.linear = mode == UpsampleMode::bilinear;
  a.align_corners = align_corners;
  if (!a.linear) a.scale = C(scale_factor > 0 ? float(1.0 / scale_factor) : float(in) / float(out));
  else if (align_corners) a.scale = out > 1 ? C(in - 1) / C(out - 1) : C(0);
  else a.scale = scale_factor > 0 ? C(1.0 / scale_factor) : C(in) / C(out);
  return a;
}

// What output position o reads along the axis: input positions i0 <= i1 and their weights.
template <class C>
struct UpsampleTaps {
  int64_t i0, i1;
  C w0, w1;
};

template <class C>
MT_HOST_DEVICE inline UpsampleTaps<C> upsample_taps(const UpsampleAxis<C>& a, int64_t o) {
  if (a.out == a.in) return {o, o, C(1), C(0)};
  if (!a.linear) {
    int64_t i = a.out == 2 * a.in ? o / 2 : int64_t(float(o) * float(a.scale));  // floor: the product is >= 0
    if (i > a.in - 1) i = a.in - 1;
    return {i, i, C(1), C(0)};
  }
  C src;
  if (a.align_corners) {
    src = a.scale * C(o);
  } else {
    if constexpr (std::is_same_v<C, float>) src = fmaf(a.scale, float(o) + 0.5f, -0.5f);  // Note [Upsample index math]
    else src = a.scale * (C(o) + C(0.5)) - C(0.5);
    if (src < C(0)) src = C(0);
  }
  int64_t i0 = int64_t(src);
  // The bounds of the note keep i0 <= in - 1; the clamp keeps every read inside the input anyway.
  if (i0 > a.in - 1) i0 = a.in - 1;
  const C w1 = src - C(i0);
  return {i0, i0 < a.in - 1 ? i0 + 1 : i0, C(1) - w1, w1};
}

// The outputs [lo, hi) whose taps include input position i (i0(o) <= i <= i1(o)), found by
// bisection: i0 and i1 never decrease with o.
template <class C>
MT_HOST_DEVICE inline void upsample_readers(const UpsampleAxis<C>& a, int64_t i, int64_t& lo, int64_t& hi) {
  int64_t l = 0, r = a.out;
  while (l < r) {  // the first o with i1(o) >= i
    const int64_t m = l + (r - l) / 2;
    if (upsample_taps(a, m).i1 >= i) r = m;
    else l = m + 1;
  }
  lo = l;
  r = a.out;
  while (l < r) {  // the first o with i0(o) > i
    const int64_t m = l + (r - l) / 2;
    if (upsample_taps(a, m).i0 > i) r = m;
    else l = m + 1;
  }
  hi = l;
}

// The bilinear output from the four inputs x<row tap><column tap>: rows outside, columns inside,
// as PyTorch's CPU kernel. The backward sends g w_row w_col, computed as (g w_row) w_col, to each
// of the four inputs, in the order (i0, i0), (i0, i1), (i1, i0), (i1, i1) (row tap, column tap)
// on both devices: linear in g, so a power-of-two gradient scale passes through exactly.
template <class C>
MT_HOST_DEVICE inline C bilinear_value(const UpsampleTaps<C>& th, const UpsampleTaps<C>& tw, C x00, C x01, C x10,
                                       C x11) {
  return th.w0 * (tw.w0 * x00 + tw.w1 * x01) + th.w1 * (tw.w0 * x10 + tw.w1 * x11);
}

}  // namespace mixtape::formulas
