// Note [im2col layout]
// For a chunk of nb images the column matrix is col[C*KH*KW, nb*OH*OW]: row r = (c*KH + kh)*KW + kw,
// column j = n*OH*OW + oh*OW + ow holds x[n, c, oh*sh - ph + kh*dh, ow*sw - pw + kw*dw] (0 in the
// padding). Then conv2d is one GEMM per chunk, Y[OC, nb*L] = W[OC, C*KH*KW] col, and a scatter
// to [N, OC, OH, OW] (adding the bias, rounding once). Chunking bounds the buffer at
// kColumnBudget elements; a Fashion-MNIST CNN batch fits in one chunk, so one GEMM per batch.
// A grouped convolution (groups G) is G such convolutions per chunk, one per group: group g reads
// input channels [g C/G, (g+1) C/G), the weight rows [g OC/G, (g+1) OC/G) (each a [OC/G, C/G*KH*KW]
// block of the row-major weight) and writes those output channels. With G = 1 this is exactly
// the single convolution above.
// The column matrix, the gathered output gradient and the weight matrix hold the GEMM's operand
// type (gemm_operand_t below); only the GEMM's output is in the compute type, rounded once.
//   - bf16 keeps bf16: the GEMM packs its operands into the bf16 pairs of dot_bf16 in any case
//     (Note [16-bit GEMM] in linalg.cpp), so the convolution copies 16-bit values.
//   - f16 is widened to f32 first, exactly, once per input value (widen_images): im2col then
//     copies f32 values, and the GEMM (fma_f32, f16's arithmetic) reads f32 operands. Left in
//     f16, every value would be widened again in each panel or tile that reads it, and the
//     column matrix holds each input value KH*KW times. The GEMM sums the same f32 values
//     either way, so the bits are the same.
#include "tensor/cpu/conv.h"

#include <algorithm>
#include <memory>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "tensor/cpu/convert.h"
#include "tensor/cpu/gemm.h"
#include "tensor/cpu/gemm_blocks.h"
#include "tensor/cpu/linalg.h"
#include "tensor/cpu/parallel.h"
#include "tensor/cpu/target_region.h"
#include "tensor/cpu/workspace.h"

namespace mixtape::cpu {

namespace {

constexpr int64_t kColumnBudget = int64_t(1) << 23;  // elements of the column buffer (32 MiB in f32)

// Geometry of one convolution: the image side [N, G*C, H, W] and the column side [N, G*OC, OH, OW],
// with C and OC the channels of one group of G.
struct Geom {
  int64_t N, C, H, W, OC, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, G;
  int64_t rows() const { return C * KH * KW; }  // rows of col, columns of W
  int64_t L() const { return OH * OW; }         // columns of col per image
  int64_t chunk() const {                       // images per GEMM
    const int64_t per_image = std::max<int64_t>(1, std::max(rows(), OC) * L());
    return std::clamp<int64_t>(kColumnBudget / per_image, 1, std::max<int64_t>(1, N));
  }
};

Geom make_geom(const Shape& img, const Shape& cols, const Shape& w, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
               int64_t dh, int64_t dw, int64_t groups) {
  MT_ASSERT(groups > 0 && img[1] % groups == 0 && cols[1] % groups == 0);
  return Geom{
      img[0], img[1] / groups, img[2], img[3], cols[1] / groups, cols[2], cols[3], w[2], w[3], sh, sw, ph, pw, dh,
      dw,     groups};
}

// ow in [lo, hi) keeps iw = iw0 + ow * s inside [0, W); outside it the column reads padding.
inline void valid_range(int64_t iw0, int64_t s, int64_t W, int64_t OW, int64_t& lo, int64_t& hi) {
  lo = iw0 >= 0 ? 0 : (-iw0 + s - 1) / s;
  hi = iw0 > W - 1 ? 0 : (W - 1 - iw0) / s + 1;
  lo = std::min(lo, OW);
  hi = std::clamp(hi, lo, OW);
}

// The type a convolution of T holds its GEMM operands in (Note [im2col layout]).
template <class T>
using gemm_operand_t = std::conditional_t<std::is_same_v<T, half>, float, T>;

// The C channels of nb images starting at x (strides xs) as contiguous f32 planes,
// dst[nb, C, H, W], or only the channels [c_first, c_first + c_count) of them (the other planes
// of dst are left as they are); returns dst's strides.
template <class T>
Shape widen_images(const T* x, const Shape& xs, const Geom& g, int64_t nb, float* dst, int64_t c_first = 0,
                   int64_t c_count = -1) {
  const int64_t HW = g.H * g.W;
  if (c_count < 0) c_count = g.C;
  // Each plane is one thread's; only conversions, so any split gives the same bits.
  parallel_for(nb * c_count, grain_for(HW), [&](int64_t begin, int64_t end) {
    for (int64_t q = begin; q < end; ++q) {
      const int64_t n = q / c_count, c = c_first + q % c_count;
      const T* plane = x + n * xs[0] + c * xs[1];
      float* d = dst + (n * g.C + c) * HW;
      if (xs[3] == 1 && xs[2] == g.W) load_row_to(plane, 1, HW, d);
      else
        for (int64_t h = 0; h < g.H; ++h) load_row_to(plane + h * xs[2], xs[3], g.W, d + h * g.W);
    }
  });
  return {g.C * HW, HW, g.W, 1};
}

// The rows oh of an output plane [OH, OW] whose input row ih(oh) = oh sh - ph + kh dh lies in the
// image: [oh0, oh1).
inline void valid_rows(const Geom& g, int64_t kh, int64_t& oh0, int64_t& oh1) {
  oh0 = 0;
  oh1 = g.OH;
  while (oh0 < oh1 && oh0 * g.sh - g.ph + kh * g.dh < 0) ++oh0;
  while (oh1 > oh0 && (oh1 - 1) * g.sh - g.ph + kh * g.dh >= g.H) --oh1;
}

// Note [im2col runs]
// When the input rows lie as far apart as the output rows (sh * row stride == OW) and a row's
// valid columns read consecutive elements (sw * element stride == 1): a stride-1 convolution that
// keeps the width, the cnn's, the image's part of a column row is one copy. Output (oh, ow) reads
// input offset S + oh * OW + ow, so the valid rows [oh0, oh1) are one run of consecutive elements
// from their first valid pixel to their last; the run also copies, into each row's columns
// outside [lo, hi), the neighbouring pixels of the rows above and below, which are then
// overwritten with the padding's zeros. One copy of up to OH * OW elements replaces OH copies of
// at most OW (14 and 28 for the cnn, each a library call), and the values are the same.
template <class T>
void im2col_run(const T* plane, const Shape& xs, const Geom& g, int64_t kh, int64_t iw0, int64_t lo, int64_t hi,
                T* dst) {
  const auto ih = [&](int64_t oh) { return oh * g.sh - g.ph + kh * g.dh; };
  int64_t oh0, oh1;
  valid_rows(g, kh, oh0, oh1);
  std::fill(dst, dst + oh0 * g.OW, T{});
  std::fill(dst + oh1 * g.OW, dst + g.L(), T{});
  if (oh0 == oh1) return;
  const T* src = plane + ih(oh0) * xs[2] + (iw0 + lo * g.sw) * xs[3];
  std::copy(src, src + (oh1 - 1 - oh0) * g.OW + (hi - lo), dst + oh0 * g.OW + lo);
  for (int64_t oh = oh0; oh < oh1; ++oh) {
    T* d = dst + oh * g.OW;
    for (int64_t ow = 0; ow < lo; ++ow) d[ow] = T{};
    for (int64_t ow = hi; ow < g.OW; ++ow) d[ow] = T{};
  }
}

// Note [im2col vectors]
// A strided convolution's column rows are short gathers: output ow of a row reads input
// iw0 + ow sw, and the dcgan's rows are 4 to 16 outputs long, each copied element by element
// (0.7 to 1.1 ns an output). On the AVX-512 conversion path (avx512_path_active()), a row whose
// outputs fit one vector (16 floats, or 32 16-bit values) and whose inputs fit two is one or two
// masked loads, one lane permute that picks every es-th input (es = sw * element stride) and
// zeroes the padding lanes, and one masked store; the masks and the permutation depend only on
// (kh, kw), so they are made once per column row. The lanes move bits unchanged, so the columns
// are the same; test_linalg_conv.cpp compares the paths.
#if defined(__x86_64__)
MT_TARGET_BEGIN("avx512f,avx512bw,avx512vl")
namespace avx512 {

// E: float (sixteen lanes) or uint16_t (thirty-two).
template <class E>
constexpr int64_t kLanes = int64_t(64 / sizeof(E));

// Whether an output row of OW values, lo..hi of them read es apart, fits (see the Note).
template <class E>
bool row_fits(int64_t OW, int64_t lo, int64_t hi, int64_t es) {
  return OW <= kLanes<E> && (hi <= lo || es * (hi - lo - 1) + 1 <= 2 * kLanes<E>);
}

// Column rows (c, kh, kw) of the nb images at x for the channels c_first + i, i < c_count, row i
// at rows + i row_stride (its nb * L columns); iw0 = kw dw - pw and [lo, hi) the outputs whose
// input column is in the image (row_fits holds). The masks and permutations are made once for
// all the channels: made for every row, they cost more than the dcgan's short rows.
template <class E>
void gather_rows(const E* x, const Shape& xs, const Geom& g, int64_t nb, int64_t c_first, int64_t c_count, int64_t kh,
                 int64_t iw0, int64_t lo, int64_t hi, E* rows, int64_t row_stride) {
  constexpr int64_t V = kLanes<E>;
  using Mask = std::conditional_t<sizeof(E) == 4, __mmask16, __mmask32>;
  const int64_t L = g.L(), OW = g.OW, es = g.sw * xs[3];
  const int64_t span = hi > lo ? es * (hi - lo - 1) + 1 : 0;  // inputs from the first valid one to the last
  const auto first = [](int64_t k) { return Mask(first_lanes(k, int(V))); };
  const Mask m0 = first(std::min(span, V)), m1 = first(std::max<int64_t>(span - V, 0)), out = first(OW);
  // Two output rows to a vector where both fit in it and each reads one vector of input: the
  // dcgan's 8- and 4-pixel rows filled a half or a quarter of a vector each. Lane OW + ow of such
  // a vector takes the second row's input from the permutation's second operand.
  const bool pairs = 2 * OW <= V && span <= V;
  using Index = std::conditional_t<sizeof(E) == 4, int32_t, int16_t>;
  alignas(64) Index index[V] = {}, index2[V] = {};
  Mask keep = 0, keep2 = 0;
  for (int64_t ow = lo; ow < hi; ++ow) {
    index[ow] = index2[ow] = Index(es * (ow - lo));
    keep = Mask(keep | (Mask(1) << ow));
    if (pairs) {
      index2[OW + ow] = Index(V + es * (ow - lo));
      keep2 = Mask(keep2 | (Mask(1) << ow) | (Mask(1) << (OW + ow)));
    }
  }
  const __m512i perm = _mm512_load_si512(index), perm2 = _mm512_load_si512(index2);
  const Mask out2 = first(2 * OW);
  int64_t oh0, oh1;
  valid_rows(g, kh, oh0, oh1);
  // Rows are stored whole vectors wide where the vector ends inside this column row: the lanes
  // past OW land on the next output row, which is written after (its own row, or the zero rows
  // filled after each image). Masked stores of a few lanes each were the cost of this loop.
  // Input vectors are loaded whole where they end inside x (the lanes the permutation does not
  // keep are dropped); masked loads, only near x's end, made most of this loop's time.
  const E* const x_end = x + (nb - 1) * xs[0] + (g.C - 1) * xs[1] + (g.H - 1) * xs[2] + (g.W - 1) * xs[3] + 1;
  const auto load = [&](Mask m, const E* p) {
    if constexpr (sizeof(E) == 4) return p + V <= x_end ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
    else return p + V <= x_end ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi16(m, p);
  };
  // The lanes of a and b that perm picks (the others zero), stored at d: the whole vector where it
  // ends before `end`, else its first `last` lanes.
  const auto put = [&](Mask k, __m512i p, auto a, auto b, E* d, Mask last, const E* end) {
    if constexpr (sizeof(E) == 4) {
      const __m512 v = _mm512_maskz_permutex2var_ps(k, a, p, b);
      if (d + V <= end) _mm512_storeu_ps(d, v);
      else _mm512_mask_storeu_ps(d, last, v);
    } else {
      const __m512i v = _mm512_maskz_permutex2var_epi16(k, a, p, b);
      if (d + V <= end) _mm512_storeu_si512(d, v);
      else _mm512_mask_storeu_epi16(d, last, v);
    }
  };
  for (int64_t i = 0; i < c_count; ++i) {
    const int64_t c = c_first + i;
    E* const row = rows + i * row_stride;
    E* const end = row + nb * L;
    for (int64_t n = 0; n < nb; ++n) {
      E* dst = row + n * L;
      const E* plane = x + n * xs[0] + c * xs[1] + (iw0 + lo * g.sw) * xs[3];
      auto src_of = [&](int64_t oh) { return plane + (oh * g.sh - g.ph + kh * g.dh) * xs[2]; };
      int64_t oh = oh0;
      for (; pairs && oh + 1 < oh1; oh += 2)
        put(keep2, perm2, load(m0, src_of(oh)), load(m0, src_of(oh + 1)), dst + oh * OW, out2, end);
      for (; oh < oh1; ++oh) put(keep, perm, load(m0, src_of(oh)), load(m1, src_of(oh) + V), dst + oh * OW, out, end);
      std::fill(dst, dst + oh0 * OW, E{});
      std::fill(dst + oh1 * OW, dst + L, E{});
    }
  }
}

// The adjoint, for col2im_add: column row (c, kh, kw) of the nb images added into their planes
// of img (contiguous, f32): img[ih, iw0 + ow sw] += row[n L + oh OW + ow], one vector add per
// output row. The lane permute spreads the row's values to their pixels, and the add and store
// are masked to those pixels: every other pixel is left as it is (adding 0 would turn -0 into
// +0), and each pixel gets the same one addition as in the scalar loop, in the same order.
// For the channels c_first + i, i < c_count, row i at rows + i row_stride (masks and
// permutations made once, as in gather_rows).
void scatter_add_rows(const float* rows, int64_t row_stride, const Geom& g, int64_t nb, int64_t c_first,
                      int64_t c_count, int64_t kh, int64_t iw0, int64_t lo, int64_t hi, float* img) {
  constexpr int64_t V = 16;
  const int64_t L = g.L(), OW = g.OW, es = g.sw;
  alignas(64) int32_t index[2 * V] = {};
  uint32_t targets = 0;  // pixels of the span [iw0 + lo sw, iw0 + lo sw + 2V) that get a value
  for (int64_t ow = lo; ow < hi; ++ow) {
    index[es * (ow - lo)] = int32_t(ow);
    targets |= uint32_t(1) << (es * (ow - lo));
  }
  const __m512i perm0 = _mm512_load_si512(index), perm1 = _mm512_load_si512(index + V);
  const __mmask16 t0 = __mmask16(targets), t1 = __mmask16(targets >> V);
  const __mmask16 in = __mmask16(first_lanes(OW, V));
  int64_t oh0, oh1;
  valid_rows(g, kh, oh0, oh1);
  // The rows are visited `step` apart, in `step` passes: a masked load reading within the 64 or
  // 128 bytes of the masked store just before it (the next image row, W floats on) cannot take
  // its value from the store and waits for it to reach the cache, and the cnn's 14-pixel rows,
  // visited in order, spent 80% of this loop waiting so. Each pixel gets one value per call, so
  // the order changes no sum.
  const int64_t step = (2 * V + g.sh * g.W - 1) / (g.sh * g.W) + 1;
  for (int64_t i = 0; i < c_count; ++i) {
    const float* row = rows + i * row_stride;
    for (int64_t n = 0; n < nb; ++n) {
      float* plane = img + (n * g.C + c_first + i) * g.H * g.W + iw0 + lo * es;
      for (int64_t pass = 0; pass < step; ++pass)
        for (int64_t oh = oh0 + pass; oh < oh1; oh += step) {
          const __m512 v = _mm512_maskz_loadu_ps(in, row + n * L + oh * OW);
          float* d = plane + (oh * g.sh - g.ph + kh * g.dh) * g.W;
          _mm512_mask_storeu_ps(d, t0, _mm512_add_ps(_mm512_maskz_loadu_ps(t0, d), _mm512_permutexvar_ps(perm0, v)));
          if (t1)
            _mm512_mask_storeu_ps(d + V, t1,
                                  _mm512_add_ps(_mm512_maskz_loadu_ps(t1, d + V), _mm512_permutexvar_ps(perm1, v)));
        }
    }
  }
}

}  // namespace avx512
MT_TARGET_END
#endif

// col[rows, nb*L] for the nb images starting at x (strides xs), in x's type; or its rows
// [r_first, r_first + r_count) alone, at col. Only copies: a bf16 element is moved as its
// uint16_t bits, which the compiler vectorizes as it does floats.
template <class T>
void im2col(const T* x, const Shape& xs, const Geom& g, int64_t nb, T* col, int64_t r_first = 0, int64_t r_count = -1) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    im2col(reinterpret_cast<const uint16_t*>(x), xs, g, nb, reinterpret_cast<uint16_t*>(col), r_first, r_count);
    return;
  }
  if (r_count < 0) r_count = g.rows();
  const int64_t L = g.L(), cols = nb * L;
  // Note [im2col runs]: the input rows are as far apart as the output rows, element by element.
  const bool one_run = g.sw * xs[3] == 1 && g.sh * xs[2] == g.OW;
  // Note [im2col vectors]: short gathered rows of 4- and 2-byte elements.
  [[maybe_unused]] const bool vector =
      (std::is_same_v<T, float> || std::is_same_v<T, uint16_t>)&&!one_run && xs[3] > 0 && avx512_path_active();
  const int64_t taps = g.KH * g.KW;
  // Each row (c, kh, kw) is one thread's (Note [Deterministic threads]).
  parallel_for(r_count, grain_for(cols), [&](int64_t r_begin, int64_t r_end) {
    const int64_t ra = r_first + r_begin, rb = r_first + r_end;  // this thread's rows
    [[maybe_unused]] auto fits = [&](int64_t kw, int64_t& iw0, int64_t& lo, int64_t& hi) {
      iw0 = kw * g.dw - g.pw;
      valid_range(iw0, g.sw, g.W, g.OW, lo, hi);
#if defined(__x86_64__)
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, uint16_t>)
        return vector && avx512::row_fits<T>(g.OW, lo, hi, g.sw * xs[3]);
#endif
      return false;
    };
#if defined(__x86_64__)
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, uint16_t>) {
      // The vector rows, tap by tap: the channels of this thread's rows that share (kh, kw).
      for (int64_t k = 0; k < taps && vector; ++k) {
        int64_t iw0, lo, hi;
        if (!fits(k % g.KW, iw0, lo, hi)) continue;
        const int64_t c0 = std::max<int64_t>(0, (ra - k + taps - 1) / taps), c1 = (rb - k + taps - 1) / taps;
        if (c0 < c1)
          avx512::gather_rows(x, xs, g, nb, c0, c1 - c0, k / g.KW, iw0, lo, hi, col + (c0 * taps + k - r_first) * cols,
                              taps * cols);
      }
    }
#endif
    for (int64_t r = ra; r < rb; ++r) {
      const int64_t c = r / taps, kh = r / g.KW % g.KH, kw = r % g.KW;
      T* row = col + (r - r_first) * cols;
      int64_t iw0, lo, hi;
      if (fits(kw, iw0, lo, hi)) continue;  // done above
      for (int64_t n = 0; n < nb; ++n) {
        const T* plane = x + n * xs[0] + c * xs[1];
        if (one_run && lo < hi) {
          im2col_run(plane, xs, g, kh, iw0, lo, hi, row + n * L);
          continue;
        }
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          T* dst = row + n * L + oh * g.OW;
          const int64_t ih = oh * g.sh - g.ph + kh * g.dh;
          if (ih < 0 || ih >= g.H) {
            std::fill(dst, dst + g.OW, T{});
            continue;
          }
          const T* src = plane + ih * xs[2];
          std::fill(dst, dst + lo, T{});
          if (g.sw * xs[3] == 1) {  // unit stride along the row: a plain copy
            std::copy(src + iw0 + lo, src + iw0 + hi, dst + lo);
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) dst[ow] = src[(iw0 + ow * g.sw) * xs[3]];
          }
          std::fill(dst + hi, dst + g.OW, T{});
        }
      }
    }
  });
}

// col[rows, nb*L] in the GEMM operand type of T (Note [im2col layout]).
// Or its rows [r_first, r_first + r_count) alone.
template <class T>
void columns(const T* x, const Shape& xs, const Geom& g, int64_t nb, gemm_operand_t<T>* col, int64_t r_first = 0,
             int64_t r_count = -1) {
  if constexpr (std::is_same_v<T, half>) {
    float* wide = workspace<float>(Workspace::conv_input, nb * g.C * g.H * g.W);
    const int64_t taps = g.KH * g.KW, rows = r_count < 0 ? g.rows() - r_first : r_count;
    const int64_t c_first = r_first / taps, c_count = rows > 0 ? (r_first + rows - 1) / taps + 1 - c_first : 0;
    im2col(wide, widen_images(x, xs, g, nb, wide, c_first, c_count), g, nb, col, r_first, r_count);  // its channels
  } else {
    im2col(x, xs, g, nb, col, r_first, r_count);
  }
}

// img[nb, C, H, W] (contiguous, compute type) += col2im(col): the adjoint of im2col.
template <class C>
void col2im_add(const C* col, const Geom& g, int64_t nb, C* img) {
  const int64_t L = g.L(), cols = nb * L;
  // Note [im2col vectors], the adjoint: short strided rows of f32 on the AVX-512 path.
  [[maybe_unused]] const bool vector = std::is_same_v<C, float> && avx512_path_active();
  // Each channel's planes are one thread's, summed in the serial order (Note [Deterministic
  // threads]): the rows (c, kh, kw) of one c add into the same pixels.
  // A pixel's additions come in (kh, kw) order whichever loop is outer; taps outside lets the
  // vector rows of one tap take all the thread's channels at once.
  parallel_for(g.C, grain_for(g.KH * g.KW * cols), [&](int64_t c_begin, int64_t c_end) {
    for (int64_t kh = 0; kh < g.KH; ++kh)
      for (int64_t kw = 0; kw < g.KW; ++kw) {
        const int64_t iw0 = kw * g.dw - g.pw;
        int64_t lo, hi;
        valid_range(iw0, g.sw, g.W, g.OW, lo, hi);
#if defined(__x86_64__)
        if constexpr (std::is_same_v<C, float>) {
          if (vector && avx512::row_fits<float>(g.OW, lo, hi, g.sw)) {
            if (lo < hi)
              avx512::scatter_add_rows(col + ((c_begin * g.KH + kh) * g.KW + kw) * cols, g.KH * g.KW * cols, g, nb,
                                       c_begin, c_end - c_begin, kh, iw0, lo, hi, img);
            continue;
          }
        }
#endif
        for (int64_t c = c_begin; c < c_end; ++c) {
          const C* row = col + ((c * g.KH + kh) * g.KW + kw) * cols;
          for (int64_t n = 0; n < nb; ++n) {
            C* plane = img + (n * g.C + c) * g.H * g.W;
            for (int64_t oh = 0; oh < g.OH; ++oh) {
              const int64_t ih = oh * g.sh - g.ph + kh * g.dh;
              if (ih < 0 || ih >= g.H) continue;
              const C* src = row + n * L + oh * g.OW;
              C* dst = plane + ih * g.W;
              if (g.sw == 1) {  // the same additions with a unit stride the compiler can vectorize
                for (int64_t ow = lo; ow < hi; ++ow) dst[iw0 + ow] += src[ow];
              } else {
                for (int64_t ow = lo; ow < hi; ++ow) dst[iw0 + ow * g.sw] += src[ow];
              }
            }
          }
        }
      }
  });
}

// Y[M, N] = op(A) op(B) (+ Y when accumulating), operands stored as T and Y in T's compute type:
// the own GEMM in T's arithmetic for f32 and the 16-bit types, OpenBLAS for f64.
template <class T, class C = compute_t<T>>
void conv_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B,
               int64_t ldb, bool accumulate, C* Y, int64_t ldy) {
  if constexpr (std::is_same_v<T, double>) {
    gemm_raw(trans_a, trans_b, M, N, K, A, lda, B, ldb, accumulate, Y, ldy);
  } else {
    constexpr DType dt = dtype_of<T>::value;
    const GemmOperand a = trans_a ? GemmOperand{dt, A, 1, lda} : GemmOperand{dt, A, lda, 1};
    const GemmOperand b = trans_b ? GemmOperand{dt, B, 1, ldb} : GemmOperand{dt, B, ldb, 1};
    gemm(gemm_arith_for(dt), M, N, K, a, b, accumulate, Y, ldy);
  }
}

// Note [Conv image groups]
// conv2d and its gradients take the images of a chunk in groups small enough that a group's
// column matrix (kGroupColumns elements) stays in the core's L2 cache: im2col, the GEMM and the
// scatter of a group (for the input gradient: the gather, the GEMM, col2im and the store) each
// read what the step before just wrote. One GEMM over the whole batch wrote the cnn's 14 MB
// column matrix to memory, read it back to pack it, and forked the threads for every step.
//   - conv2d and the input gradient: one group per thread at a time. A GEMM's element is the
//     same chain of FMAs whichever columns it is computed with (Note [Deterministic GEMM]).
//   - the weight gradient sums over the images, so each thread takes whole panels of dW's
//     columns (rows of col, im2col'd for its rows alone) through all the groups in order, each
//     GEMM continuing the chains of the one before (accumulate): the one GEMM's chains, in order.
// So the results are the same bits. A chunk whose GEMM gemm() would cut along K (gemm_splits_k)
// and the f64 path keep the one GEMM.
constexpr int64_t kGroupColumns = int64_t(1) << 17;  // elements of a group's column matrix (512 KiB of f32)

// Images whose column matrix fits kGroupColumns (at least one).
inline int64_t images_that_fit(const Geom& g) {
  return std::max<int64_t>(1, kGroupColumns / std::max<int64_t>(1, g.rows() * g.L()));
}

// Images per group for a chunk of nb (at least one group per thread), or 0 when the chunk's GEMM
// [M, nb L, K] must stay whole.
template <class T>
int64_t images_per_group(const Geom& g, int64_t nb, int64_t M, int64_t K) {
  if constexpr (std::is_same_v<T, double>) {
    return 0;
  } else {
    if (gemm_splits_k(M, nb * g.L(), K)) return 0;
    const int64_t threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    return std::max<int64_t>(1, std::min(images_that_fit(g), (nb + threads - 1) / threads));
  }
}

// conv_gemm on the calling thread, for one group (E is not double).
template <class E>
void group_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const E* A, int64_t lda, const E* B,
                int64_t ldb, bool accumulate, float* Y, int64_t ldy) {
  constexpr DType dt = dtype_of<E>::value;
  const GemmOperand a = trans_a ? GemmOperand{dt, A, 1, lda} : GemmOperand{dt, A, lda, 1};
  const GemmOperand b = trans_b ? GemmOperand{dt, B, 1, ldb} : GemmOperand{dt, B, ldb, 1};
  gemm_on_thread(gemm_arith_for(dt), M, N, K, a, b, accumulate, Y, ldy);
}

// w [OC, C, KH, KW] as a row-major [OC, C*KH*KW] matrix of E (T, or f32 for f16): w itself when
// it is that already, else a copy.
template <class T, class E = gemm_operand_t<T>>
const E* weight_matrix(const Strided& w, std::vector<E>& copy) {
  const T* p = static_cast<const T*>(w.raw_data());
  if constexpr (std::is_same_v<T, E>)
    if (w.is_contiguous()) return p;
  copy.resize(size_t(w.numel()));
  if constexpr (!std::is_same_v<T, E>) {
    if (w.is_contiguous()) {  // f16 widened in one pass
      load_row_to(p, 1, w.numel(), copy.data());
      return copy.data();
    }
  }
  const Shape& s = w.shape();
  const Shape& st = w.strides();
  size_t k = 0;
  for (int64_t o = 0; o < s[0]; ++o)
    for (int64_t c = 0; c < s[1]; ++c)
      for (int64_t i = 0; i < s[2]; ++i)
        for (int64_t j = 0; j < s[3]; ++j) {
          const T v = p[o * st[0] + c * st[1] + i * st[2] + j * st[3]];
          if constexpr (std::is_same_v<T, E>) copy[k++] = v;
          else copy[k++] = load(v);
        }
  return copy.data();
}

template <class T, class C = compute_t<T>>
std::vector<C> load_bias(const Strided& b) {
  std::vector<C> v;
  if (!b.defined()) return v;
  const T* p = static_cast<const T*>(b.raw_data());
  v.resize(size_t(b.numel()));
  for (int64_t i = 0; i < b.numel(); ++i) v[size_t(i)] = load(p[i * b.strides()[0]]);
  return v;
}

// dst[l] = store<T>(src[l] + *bias) for l < len (src[l] alone when bias is null); src is
// scratch, overwritten on the 16-bit path, which adds in place and rounds the row at once.
template <class T, class C>
void add_bias_and_store(C* src, const C* bias, T* dst, int64_t len) {
  if constexpr (std::is_same_v<T, C>) {
    if (bias) {
      const C b = *bias;
      for (int64_t l = 0; l < len; ++l) dst[l] = src[l] + b;
    } else {
      std::copy(src, src + len, dst);
    }
  } else {
    if (bias) {
      const C b = *bias;
      for (int64_t l = 0; l < len; ++l) src[l] += b;
    }
    store_n(src, dst, len);
  }
}

// G[OC, nb*L] = dy[n0 + n, oc, oh, ow] for the chunk (dy [N, OC, OH, OW], any strides), in
// the GEMM operand type of T.
template <class T, class E = gemm_operand_t<T>>
void gather_columns(const T* dy, const Shape& ds, const Geom& g, int64_t n0, int64_t nb, E* G) {
  const int64_t L = g.L(), cols = nb * L;
  parallel_for(g.OC, grain_for(cols), [&](int64_t oc_begin, int64_t oc_end) {
    for (int64_t oc = oc_begin; oc < oc_end; ++oc)
      for (int64_t n = 0; n < nb; ++n) {
        const T* plane = dy + (n0 + n) * ds[0] + oc * ds[1];
        E* dst = G + oc * cols + n * L;
        if constexpr (std::is_same_v<T, E>) {
          if (ds[3] == 1 && ds[2] == g.OW) {
            std::copy(plane, plane + L, dst);
          } else {
            for (int64_t oh = 0; oh < g.OH; ++oh)
              for (int64_t ow = 0; ow < g.OW; ++ow) dst[oh * g.OW + ow] = plane[oh * ds[2] + ow * ds[3]];
          }
        } else if (ds[3] == 1 && ds[2] == g.OW) {
          load_row_to(plane, 1, L, dst);
        } else {
          for (int64_t oh = 0; oh < g.OH; ++oh) load_row_to(plane + oh * ds[2], ds[3], g.OW, dst + oh * g.OW);
        }
      }
  });
}

template <class T>
void conv_forward(const Strided& x, const Strided& w, const Strided& bias, const Geom& g, const Strided& out) {
  using C = compute_t<T>;
  using E = gemm_operand_t<T>;
  std::vector<E> wcopy;
  const E* wm = weight_matrix<T>(w, wcopy);
  const std::vector<C> bv = load_bias<T>(bias);
  const int64_t L = g.L(), R = g.rows(), nb_max = g.chunk();
  const T* px = static_cast<const T*>(x.raw_data());
  T* po = static_cast<T*>(out.raw_data());
  const int64_t OCt = g.G * g.OC;  // output channels of all groups
  for (int64_t n0 = 0; n0 < g.N; n0 += nb_max) {
    const int64_t nb = std::min(nb_max, g.N - n0), cols = nb * L;
    const int64_t per_group = images_per_group<T>(g, nb, g.OC, R);
    for (int64_t grp = 0; grp < g.G; ++grp) {
      // y[OC, n L] (scratch) to out for images [i0, i0 + n), planes p0 .. p1: the bias added,
      // rounded once
      auto store_images = [&](C* y_rows, int64_t i0, int64_t n, int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p) {
          const int64_t i = p / g.OC, oc = grp * g.OC + p % g.OC;
          C* src = y_rows + (p % g.OC) * n * L + i * L;
          T* dst = po + ((i0 + i) * OCt + oc) * L;
          add_bias_and_store(src, bv.empty() ? nullptr : &bv[size_t(oc)], dst, L);
        }
      };
      if constexpr (!std::is_same_v<T, double>) {
        if (per_group > 0) {  // Note [Conv image groups]
          parallel_for((nb + per_group - 1) / per_group, 1, [&](int64_t q0, int64_t q1) {
            E* gcol = workspace<E>(Workspace::conv_columns, R * per_group * L);
            C* gy = workspace<C>(Workspace::conv_rows, g.OC * per_group * L);
            for (int64_t q = q0; q < q1; ++q) {
              const int64_t i0 = n0 + q * per_group, n = std::min(per_group, n0 + nb - i0);
              columns(px + i0 * x.strides()[0] + grp * g.C * x.strides()[1], x.strides(), g, n, gcol);
              group_gemm<E>(false, false, g.OC, n * L, R, wm + grp * g.OC * R, R, gcol, n * L, false, gy, n * L);
              store_images(gy, i0, n, 0, n * g.OC);
            }
          });
          continue;
        }
      }
      E* col = workspace<E>(Workspace::conv_columns, R * cols);
      C* y = workspace<C>(Workspace::conv_rows, g.OC * cols);
      columns(px + n0 * x.strides()[0] + grp * g.C * x.strides()[1], x.strides(), g, nb, col);
      // Y = W_g col: (OC, nb*L) = (OC, C*KH*KW) (C*KH*KW, nb*L)
      conv_gemm<E>(false, false, g.OC, cols, R, wm + grp * g.OC * R, R, col, cols, false, y, cols);
      parallel_for(nb * g.OC, grain_for(L), [&](int64_t begin, int64_t end) { store_images(y, n0, nb, begin, end); });
    }
  }
}

template <class T>
void conv_input_grad(const Strided& dy, const Strided& w, const Strided& bias, const Geom& g, const Strided& dx) {
  using C = compute_t<T>;
  using E = gemm_operand_t<T>;
  std::vector<E> wcopy;
  const E* wm = weight_matrix<T>(w, wcopy);
  const std::vector<C> bv = load_bias<T>(bias);
  const int64_t L = g.L(), R = g.rows(), nb_max = g.chunk(), HW = g.H * g.W;
  const T* pdy = static_cast<const T*>(dy.raw_data());
  T* pdx = static_cast<T*>(dx.raw_data());
  const int64_t Ct = g.G * g.C;  // input channels of all groups
  for (int64_t n0 = 0; n0 < g.N; n0 += nb_max) {
    const int64_t nb = std::min(nb_max, g.N - n0), cols = nb * L;
    const int64_t per_group = images_per_group<T>(g, nb, R, g.OC);
    for (int64_t grp = 0; grp < g.G; ++grp) {
      // images [i0, i0 + n) of img (planes p0 .. p1) to dx: the bias added, rounded once
      auto store_images = [&](C* images, int64_t i0, int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p) {
          const int64_t i = p / g.C, c = grp * g.C + p % g.C;
          add_bias_and_store(images + p * HW, bv.empty() ? nullptr : &bv[size_t(c)], pdx + ((i0 + i) * Ct + c) * HW,
                             HW);
        }
      };
      if constexpr (!std::is_same_v<T, double>) {
        if (per_group > 0) {  // Note [Conv image groups]
          parallel_for((nb + per_group - 1) / per_group, 1, [&](int64_t q0, int64_t q1) {
            E* gG = workspace<E>(Workspace::conv_rows, g.OC * per_group * L);
            C* gdcol = workspace<C>(Workspace::conv_columns, R * per_group * L);
            C* gimg = workspace<C>(Workspace::conv_images, per_group * g.C * HW);
            for (int64_t q = q0; q < q1; ++q) {
              const int64_t i0 = n0 + q * per_group, n = std::min(per_group, n0 + nb - i0);
              gather_columns(pdy + grp * g.OC * dy.strides()[1], dy.strides(), g, i0, n, gG);
              group_gemm<E>(true, false, R, n * L, g.OC, wm + grp * g.OC * R, R, gG, n * L, false, gdcol, n * L);
              std::fill(gimg, gimg + n * g.C * HW, C(0));
              col2im_add(gdcol, g, n, gimg);
              store_images(gimg, i0, 0, n * g.C);
            }
          });
          continue;
        }
      }
      E* G = workspace<E>(Workspace::conv_rows, g.OC * cols);
      C* dcol = workspace<C>(Workspace::conv_columns, R * cols);
      C* img = workspace<C>(Workspace::conv_images, nb * g.C * HW);
      gather_columns(pdy + grp * g.OC * dy.strides()[1], dy.strides(), g, n0, nb, G);
      // dcol = W_g^T G: (C*KH*KW, nb*L) = (OC, C*KH*KW)^T (OC, nb*L)
      conv_gemm<E>(true, false, R, cols, g.OC, wm + grp * g.OC * R, R, G, cols, false, dcol, cols);
      std::fill(img, img + nb * g.C * HW, C(0));
      col2im_add(dcol, g, nb, img);
      parallel_for(nb * g.C, grain_for(HW), [&](int64_t begin, int64_t end) { store_images(img, n0, begin, end); });
    }
  }
}

template <class T>
void conv_weight_grad(const Strided& x, const Strided& dy, const Geom& g, const Strided& dw) {
  using C = compute_t<T>;
  using E = gemm_operand_t<T>;
  const int64_t L = g.L(), R = g.rows(), nb_max = g.chunk();
  std::vector<C> acc(size_t(g.G * g.OC * R), C(0));  // dW as [G*OC, C*KH*KW], group blocks in order
  const T* px = static_cast<const T*>(x.raw_data());
  const T* pdy = static_cast<const T*>(dy.raw_data());
  for (int64_t n0 = 0; n0 < g.N; n0 += nb_max) {
    const int64_t nb = std::min(nb_max, g.N - n0), cols = nb * L;
    for (int64_t grp = 0; grp < g.G; ++grp) {
      if constexpr (!std::is_same_v<T, double>) {
        if (!gemm_splits_k(g.OC, R, cols)) {
          // Note [Conv image groups]: each thread takes whole GEMM panels of dW's columns (rows of
          // col) through the image groups in order, so each element's chain runs through K in
          // order, as in the one GEMM (accumulate continues it).
          const int64_t per_group = images_that_fit(g);
          constexpr int64_t kPanel = 32;
          parallel_for((R + kPanel - 1) / kPanel, 1, [&](int64_t b0, int64_t b1) {
            const int64_t r0 = b0 * kPanel, rn = std::min(R, b1 * kPanel) - r0;
            E* gcol = workspace<E>(Workspace::conv_columns, rn * per_group * L);
            E* gG = workspace<E>(Workspace::conv_rows, g.OC * per_group * L);
            for (int64_t i0 = n0; i0 < n0 + nb; i0 += per_group) {
              const int64_t n = std::min(per_group, n0 + nb - i0);
              columns(px + i0 * x.strides()[0] + grp * g.C * x.strides()[1], x.strides(), g, n, gcol, r0, rn);
              gather_columns(pdy + grp * g.OC * dy.strides()[1], dy.strides(), g, i0, n, gG);
              group_gemm<E>(false, true, g.OC, rn, n * L, gG, n * L, gcol, n * L, true,
                            acc.data() + grp * g.OC * R + r0, R);
            }
          });
          continue;
        }
      }
      E* col = workspace<E>(Workspace::conv_columns, R * cols);
      E* G = workspace<E>(Workspace::conv_rows, g.OC * cols);
      columns(px + n0 * x.strides()[0] + grp * g.C * x.strides()[1], x.strides(), g, nb, col);
      gather_columns(pdy + grp * g.OC * dy.strides()[1], dy.strides(), g, n0, nb, G);
      // dW_g += G col^T: (OC, C*KH*KW) = (OC, nb*L) (C*KH*KW, nb*L)^T, accumulated across chunks
      conv_gemm<E>(false, true, g.OC, R, cols, G, cols, col, cols, true, acc.data() + grp * g.OC * R, R);
    }
  }
  store_row(acc.data(), static_cast<T*>(dw.raw_data()), 1, int64_t(acc.size()));  // each rounded once
}

// acc[k] += row[w + k] for each group of four of each of the H rows (W values each, `step`
// apart), the rest of a row into acc[0], in double. A function of its own, with no call inside:
// where the plane's conversion call sat in the same loop, GCC kept the sums on the stack, in
// half-register accesses that stalled.
template <class C>
void add_rows(const C* rows, int64_t H, int64_t W, int64_t step, double (&acc)[4]) {
  double a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
  for (int64_t h = 0; h < H; ++h) {
    const C* row = rows + h * step;
    int64_t w = 0;
    for (; w + 4 <= W; w += 4) {
      a0 += double(row[w]);
      a1 += double(row[w + 1]);
      a2 += double(row[w + 2]);
      a3 += double(row[w + 3]);
    }
    for (; w < W; ++w) a0 += double(row[w]);
  }
  acc[0] = a0;
  acc[1] = a1;
  acc[2] = a2;
  acc[3] = a3;
}

// db[oc] = sum over n, h, w of dy[n, oc, h, w], accumulated in double (a large reduction).
template <class T>
void conv_bias_grad(const Strided& dy, const Strided& db) {
  const int64_t N = dy.size(0), OC = dy.size(1), H = dy.size(2), W = dy.size(3);
  const Shape& ds = dy.strides();
  const T* p = static_cast<const T*>(dy.raw_data());
  T* pdb = static_cast<T*>(db.raw_data());
  // Each channel's whole sum is one thread's (Note [Deterministic threads]).
  parallel_for(OC, grain_for(N * H * W), [&](int64_t oc_begin, int64_t oc_end) {
    // A plane with contiguous rows is read (or widened) whole, the rest row by row; the sums run
    // row by row either way.
    const bool whole = ds[3] == 1 && ds[2] == W;
    std::vector<compute_t<T>> buf(static_cast<size_t>(whole ? H * W : W));
    for (int64_t oc = oc_begin; oc < oc_end; ++oc) {
      double acc[4] = {0.0, 0.0, 0.0, 0.0};  // independent partial sums keep the adds pipelined
      for (int64_t n = 0; n < N; ++n) {
        const T* plane = p + n * ds[0] + oc * ds[1];
        if (whole) {
          add_rows(load_row(plane, 1, H * W, buf.data()), H, W, W, acc);
        } else {
          for (int64_t h = 0; h < H; ++h) {
            load_row_to(plane + h * ds[2], ds[3], W, buf.data());
            add_rows(buf.data(), 1, W, W, acc);
          }
        }
      }
      pdb[oc * db.strides()[0]] = store<T>((acc[0] + acc[1]) + (acc[2] + acc[3]));
    }
  });
}

}  // namespace

void conv2d_backward_bias(const Strided& dy, const Strided& db) {
  dispatch_floating(db.dtype(), "conv2d_backward_bias", [&]<class T>() { conv_bias_grad<T>(dy, db); });
}

void conv2d(const Strided& x, const Strided& w, const Strided& bias, int64_t stride_h, int64_t stride_w, int64_t pad_h,
            int64_t pad_w, int64_t dil_h, int64_t dil_w, int64_t groups, const Strided& out) {
  MT_ASSERT(out.is_contiguous());
  const Geom g = make_geom(x.shape(), out.shape(), w.shape(), stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups);
  if (out.numel() == 0) return;
  dispatch_floating(out.dtype(), "conv2d", [&]<class T>() { conv_forward<T>(x, w, bias, g, out); });
}

void conv2d_backward_input(const Strided& dy, const Strided& w, const Strided& bias, int64_t stride_h, int64_t stride_w,
                           int64_t pad_h, int64_t pad_w, int64_t dil_h, int64_t dil_w, int64_t groups,
                           const Strided& dx) {
  MT_ASSERT(dx.is_contiguous());
  const Geom g = make_geom(dx.shape(), dy.shape(), w.shape(), stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups);
  if (dx.numel() == 0) return;
  dispatch_floating(dx.dtype(), "conv2d_backward_input", [&]<class T>() { conv_input_grad<T>(dy, w, bias, g, dx); });
}

void conv2d_backward_weight(const Strided& x, const Strided& dy, int64_t stride_h, int64_t stride_w, int64_t pad_h,
                            int64_t pad_w, int64_t dil_h, int64_t dil_w, int64_t groups, const Strided& dw) {
  MT_ASSERT(dw.is_contiguous());
  const Geom g = make_geom(x.shape(), dy.shape(), dw.shape(), stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups);
  if (dw.numel() == 0) return;
  dispatch_floating(dw.dtype(), "conv2d_backward_weight", [&]<class T>() { conv_weight_grad<T>(x, dy, g, dw); });
}

}  // namespace mixtape::cpu
