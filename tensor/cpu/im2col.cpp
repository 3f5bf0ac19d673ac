// Note [Pixel-major columns]
// im2col writes cols [N*OH*OW, C*KH*KW]: row p = (n*OH + oh)*OW + ow is one output pixel, column
// k = (c*KH + kh)*KW + kw one tap of one channel, holding x[n, c, oh*sh - ph + kh*dh,
// ow*sw - pw + kw*dw] (0 in the padding). Then conv2d is y = cols W^T, one GEMM whose reduction
// dim K = C*KH*KW runs along each row of both operands, which is what an 8-bit GEMM quantizing
// its operands row by row along K needs. conv2d's own kernels (tensor/cpu/conv.cpp, Note [im2col
// layout]) build the transpose, [C*KH*KW, pixels], chunk by chunk and group by group for their
// GEMM; these two ops build the whole matrix once, so they have kernels of their own.
//   - im2col: each row is one thread's (Note [Deterministic threads]); a row is filled channel
//     by channel, tap row by tap row, with the taps that fall in the image found once per row.
//   - col2im, its adjoint: each (n, c) plane is one thread's. The plane's KH*KW columns are
//     first read into a [KH*KW, OH*OW] buffer in the compute type (fp32, f64 for f64; a thread's
//     consecutive planes of one image together, their columns being neighbours), then
//     added into a zeroed fp32 (f64) plane tap by tap, (kh, kw) ascending, each tap's row over
//     (oh, ow) ascending: a pixel gets at most one value per tap, so its sum is
//     ((0 + v(kh, kw) first) + next) ... over its taps in (kh, kw) order, whatever the thread
//     count, and is rounded once to cols' dtype. That is the order of conv.cpp's col2im_add,
//     so col2im of the same columns gives conv2d_backward_input's bits.
#include "tensor/cpu/im2col.h"

#include <algorithm>
#include <vector>

#include "tensor/cpu/convert.h"
#include "tensor/cpu/parallel.h"
#include "tensor/cpu/transpose.h"
#include "tensor/cpu/workspace.h"

namespace mixtape::cpu {

namespace {

// The j in [0, count) with i0 + j step in [0, size): [lo, hi) (empty when none). Used for the
// taps of one pixel (step the dilation) and for the pixels of one tap (step the stride).
inline void inside(int64_t i0, int64_t step, int64_t size, int64_t count, int64_t& lo, int64_t& hi) {
  lo = i0 >= 0 ? 0 : (-i0 + step - 1) / step;
  hi = i0 > size - 1 ? 0 : (size - 1 - i0) / step + 1;
  lo = std::min(lo, count);
  hi = std::clamp(hi, lo, count);
}

// The taps of one pixel whose window lies inside the image, for a kernel row of kKW taps one
// element apart (dilation 1 along a contiguous W): the row's copies unrolled.
template <int kKW, class T>
T* copy_window(T* d, const T* src, int64_t C, int64_t KH, int64_t step_c, int64_t step_h) {
  for (int64_t c = 0; c < C; ++c, src += step_c)
    for (int64_t kh = 0; kh < KH; ++kh) {
      const T* s = src + kh * step_h;
      for (int kw = 0; kw < kKW; ++kw) d[kw] = s[kw];
      d += kKW;
    }
  return d;
}

// parallel_for as im2col_rows' `run`.
constexpr auto run_parallel = [](int64_t count, int64_t grain, auto&& body) { parallel_for(count, grain, body); };

// cols[p, :] for the pixels p of [p_begin, p_end). Plain loops, no library calls: a row's pieces
// are KW values long (one for a 1x1 kernel), and a memset or memmove call for each made the 1x1
// columns cost 4 ns a value. run(count, grain, body) runs body over the pixels [0, count) on the
// threads (parallel_for, or im2col_padded's second pass).
template <class T, class Run>
void im2col_rows(const Strided& xt, const ColumnGeometry& g, T* cols, Run&& run) {
  const T* x = static_cast<const T*>(xt.raw_data());
  const Shape& xs = xt.strides();
  const int64_t N = xt.size(0), C = xt.size(1), H = xt.size(2), W = xt.size(3);
  const int64_t KH = g.kernel.h, KW = g.kernel.w, OH = g.out.h, OW = g.out.w, KK = KH * KW, K = C * KK;
  const int64_t step_h = g.dilation.h * xs[2], step_w = g.dilation.w * xs[3];  // between taps, in x
  // The taps inside the image for each window row and column, found once (a division each)
  // rather than for every pixel.
  std::vector<int64_t> rows(size_t(2 * OH)), cols_in(size_t(2 * OW));
  for (int64_t oh = 0; oh < OH; ++oh)
    inside(oh * g.stride.h - g.padding.h, g.dilation.h, H, KH, rows[size_t(2 * oh)], rows[size_t(2 * oh + 1)]);
  for (int64_t ow = 0; ow < OW; ++ow)
    inside(ow * g.stride.w - g.padding.w, g.dilation.w, W, KW, cols_in[size_t(2 * ow)], cols_in[size_t(2 * ow + 1)]);
  run(N * OH * OW, grain_for(K), [&](int64_t p_begin, int64_t p_end) {
    int64_t n = p_begin / (OH * OW), oh = p_begin / OW % OH, ow = p_begin % OW;
    for (int64_t p = p_begin; p < p_end; ++p) {
      const int64_t ih0 = oh * g.stride.h - g.padding.h, iw0 = ow * g.stride.w - g.padding.w;
      // the taps inside the image
      const int64_t kh0 = rows[size_t(2 * oh)], kh1 = rows[size_t(2 * oh + 1)];
      const int64_t kw0 = cols_in[size_t(2 * ow)], kw1 = cols_in[size_t(2 * ow + 1)];
      T* d = cols + p * K;
      if (kh0 == 0 && kh1 == KH && kw0 == 0 && kw1 == KW) {  // every tap inside: no padding to write
        const T* src = x + (n * xs[0] + ih0 * xs[2] + iw0 * xs[3]);
        if (step_w == 1 && (KW == 3 || KW == 4)) {
          if (KW == 3) copy_window<3>(d, src, C, KH, xs[1], step_h);
          else copy_window<4>(d, src, C, KH, xs[1], step_h);
        } else
          for (int64_t c = 0; c < C; ++c, src += xs[1])
            for (int64_t kh = 0; kh < KH; ++kh) {
              const T* s = src + kh * step_h;
              for (int64_t kw = 0; kw < KW; ++kw) *d++ = s[kw * step_w];
            }
      } else if (kh0 == kh1 || kw0 == kw1) {  // every tap in the padding
        for (int64_t k = 0; k < K; ++k) d[k] = T{};
      } else {
        // tap (kh0, kw0) of channel 0, inside the image
        const T* src = x + (n * xs[0] + (ih0 + kh0 * g.dilation.h) * xs[2] + (iw0 + kw0 * g.dilation.w) * xs[3]);
        for (int64_t c = 0; c < C; ++c, src += xs[1])
          for (int64_t kh = 0; kh < KH; ++kh) {
            if (kh < kh0 || kh >= kh1) {
              for (int64_t kw = 0; kw < KW; ++kw) *d++ = T{};
              continue;
            }
            const T* s = src + (kh - kh0) * step_h;
            for (int64_t kw = 0; kw < kw0; ++kw) *d++ = T{};
            for (int64_t kw = kw0; kw < kw1; ++kw) *d++ = s[(kw - kw0) * step_w];
            for (int64_t kw = kw1; kw < KW; ++kw) *d++ = T{};
          }
      }
      if (++ow == OW) {
        ow = 0;
        if (++oh == OH) {
          oh = 0;
          ++n;
        }
      }
    }
  });
}

// colsT[k, p] for every k: Note [Channel-major columns] (im2col.h). The units of work are
// (k, n), a row's piece for one image: OH runs of OW values, each read along a row of x. A
// thread finds the pixels inside the image once for each row k it works on (small images make
// many units of a few values each).
template <class T>
void im2col_channel_rows(const Strided& xt, const ColumnGeometry& g, T* out) {
  const T* x = static_cast<const T*>(xt.raw_data());
  const Shape& xs = xt.strides();
  const int64_t N = xt.size(0), C = xt.size(1), H = xt.size(2), W = xt.size(3);
  const int64_t KH = g.kernel.h, KW = g.kernel.w, OH = g.out.h, OW = g.out.w, L = OH * OW, P = N * L;
  const int64_t step = g.stride.w * xs[3];  // between the pixels of a run, in x
  parallel_for(C * KH * KW * N, grain_for(L), [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1;) {
      const int64_t k = u / N, n0 = u % N, n1 = std::min(N, n0 + (u1 - u));
      const int64_t c = k / (KH * KW), kh = k / KW % KH, kw = k % KW;
      const int64_t ih0 = kh * g.dilation.h - g.padding.h, iw0 = kw * g.dilation.w - g.padding.w;
      int64_t oh0, oh1, ow0, ow1;  // the pixels whose tap (kh, kw) is inside the image
      inside(ih0, g.stride.h, H, OH, oh0, oh1);
      inside(iw0, g.stride.w, W, OW, ow0, ow1);
      if (ow0 == ow1) oh1 = oh0;  // no pixel's tap inside
      // x's element for pixel (oh0, ow0) of image 0
      const int64_t first = c * xs[1] + (ih0 + oh0 * g.stride.h) * xs[2] + (iw0 + ow0 * g.stride.w) * xs[3];
      for (int64_t n = n0; n < n1; ++n) {
        T* d = out + k * P + n * L;
        for (int64_t i = 0; i < oh0 * OW; ++i) d[i] = T{};
        for (int64_t oh = oh0; oh < oh1; ++oh) {
          T* row = d + oh * OW;
          const T* src = x + (first + n * xs[0] + (oh - oh0) * g.stride.h * xs[2]);
          for (int64_t ow = 0; ow < ow0; ++ow) row[ow] = T{};
          if (step == 1) {
            for (int64_t ow = ow0; ow < ow1; ++ow) row[ow] = src[ow - ow0];
          } else {
            for (int64_t ow = ow0; ow < ow1; ++ow) row[ow] = src[(ow - ow0) * step];
          }
          for (int64_t ow = ow1; ow < OW; ++ow) row[ow] = T{};
        }
        for (int64_t i = oh1 * OW; i < L; ++i) d[i] = T{};
      }
      u += n1 - n0;
    }
  });
}

// Note [Padded codes]
// With padding, a window that crosses the border is built tap row by tap row, zeros and copies of
// a few values each; in the dcgan's small images (4 x 4 to 32 x 32, padding 1) most windows do.
// 8-bit codes are therefore first copied into images with the padding around them (code 0 is +0
// in every 8-bit format), N*C*(H + 2p)*(W + 2p) bytes where the columns take KH*KW/(sh*sw) times
// as many, and the columns read from those with no padding: every window lies inside, its rows
// copied KW codes at a time. The codes are the same either way.
template <class T>
void im2col_padded(const Strided& xt, const ColumnGeometry& g, T* cols) {
  const T* x = static_cast<const T*>(xt.raw_data());
  const Shape& xs = xt.strides();
  const int64_t N = xt.size(0), C = xt.size(1), H = xt.size(2), W = xt.size(3);
  const int64_t ph = g.padding.h, pw = g.padding.w;
  // rows and columns of a padded image: the padding before, the image, and what the last window reads
  const int64_t Hp = std::max(ph + H, (g.out.h - 1) * g.stride.h + (g.kernel.h - 1) * g.dilation.h + 1);
  const int64_t Wp = std::max(pw + W, (g.out.w - 1) * g.stride.w + (g.kernel.w - 1) * g.dilation.w + 1);
  T* const padded = workspace<T>(Workspace::padded_images, N * C * Hp * Wp);  // (Note [Workspaces])
  const auto pad = [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      const T* src = x + (q / C * xs[0] + q % C * xs[1]);
      T* plane = padded + q * Hp * Wp;
      std::fill(plane, plane + Hp * Wp, T{});
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) plane[(ph + h) * Wp + pw + w] = src[h * xs[2] + w * xs[3]];
    }
  };
  ColumnGeometry inner = g;
  inner.padding = {0, 0};
  // the images padded, then (in the same parallel region) the columns read from them
  im2col_rows<T>(Strided(padded, xt.dtype(), {N, C, Hp, Wp}, {C * Hp * Wp, Hp * Wp, Wp, 1}, xt.device()), inner, cols,
                 [&](int64_t count, int64_t grain, auto&& columns) {
    parallel_then(N * C, grain_for(Hp * Wp), pad, count, grain, columns);
  });
}

// X: x's type, T's or (fp32 columns) a 16-bit type: each sum rounded once to it. Scaled (fp32
// columns): each entry read as v * scale + 0.
template <class T, class X = T, bool Scaled = false>
void col2im_planes(const Strided& ct, const ColumnGeometry& g, const Strided& xt, float scale = 1.0f) {
  using Acc = compute_t<T>;
  const T* cols = static_cast<const T*>(ct.raw_data());
  const Shape& cs = ct.strides();
  X* x = static_cast<X*>(xt.raw_data());
  const int64_t N = xt.size(0), C = xt.size(1), H = xt.size(2), W = xt.size(3), HW = H * W;
  const int64_t KH = g.kernel.h, KW = g.kernel.w, OH = g.out.h, OW = g.out.w, KK = KH * KW, L = OH * OW;
  const int64_t sh = g.stride.h, sw = g.stride.w;
  // Consecutive planes of one image are read together, up to kGatherValues taps at a time: the
  // planes' columns are neighbours in each row of cols, so the rows are read in runs of
  // planes * KK values (a whole row when they fit) rather than KK values a plane, which left the
  // reads of a small plane (the dcgan's 8 x 8) waiting on a cache miss a row.
  constexpr int64_t kGatherValues = int64_t(1) << 16;
  const int64_t group = std::max<int64_t>(1, kGatherValues / std::max<int64_t>(KK * L, 1));
  // Channel-major fp32 columns (cs[0] == 1: Note [Channel-major columns] in im2col.h) are the
  // planes' tap rows already, each cs[1] values after the last: read where they lie.
  const bool in_place = std::is_same_v<T, float> && cs[0] == 1;
  parallel_for(N * C, grain_for(KK * L), [&](int64_t q_begin, int64_t q_end) {
    std::vector<Acc> taps(in_place ? 0 : static_cast<size_t>(std::min(group, q_end - q_begin) * KK * L)),
        img(static_cast<size_t>(HW));
    for (int64_t q0 = q_begin; q0 < q_end;) {
      const int64_t n = q0 / C, c0 = q0 % C, planes = std::min({group, C - c0, q_end - q0}), E = planes * KK;
      const T* src = cols + n * L * cs[0] + c0 * KK * cs[1];
      const Acc* rows = taps.data();  // the planes' tap rows, ld values apart
      int64_t ld = L;
      if constexpr (std::is_same_v<T, float>)
        if (in_place) {
          rows = src;
          ld = cs[1];
        }
      // Else taps[e, l] = cols[n L + l, c0 KK + e]: the planes' columns as rows of L, eight rows of
      // cols at a time (each read along its row, each tap row written eight values at a time).
      for (int64_t l0 = 0; l0 < L && !in_place; l0 += 8) {
        const int64_t l1 = std::min(L, l0 + 8);
        if constexpr (std::is_same_v<T, float>)
          if (cs[1] == 1) {  // Note [Transposed tiles]
            transpose_tile(src + l0 * cs[0], cs[0], taps.data() + l0, L, l1 - l0, E);
            continue;
          }
        for (int64_t e = 0; e < E; ++e)
          for (int64_t l = l0; l < l1; ++l) taps[size_t(e * L + l)] = load(src[l * cs[0] + e * cs[1]]);
      }
      // Scaled: the product's epilogue, sum * scale + 0, on each entry as it is added below.
      const auto entry = [scale](Acc v) {
        if constexpr (Scaled) return v * scale + Acc(0);
        else return v;
      };
      for (int64_t q = q0; q < q0 + planes; ++q) {
        const Acc* plane = rows + (q - q0) * KK * ld;
        // img[ih, iw] += taps[(kh, kw), (oh, ow)] for ih = oh sh - ph + kh dh, iw = ow sw - pw + kw dw
        std::fill(img.begin(), img.end(), Acc(0));
        for (int64_t kh = 0; kh < KH; ++kh)
          for (int64_t kw = 0; kw < KW; ++kw) {
            const int64_t ih0 = kh * g.dilation.h - g.padding.h, iw0 = kw * g.dilation.w - g.padding.w;
            int64_t oh0, oh1, ow0, ow1;  // the pixels whose tap (kh, kw) is inside the image
            inside(ih0, sh, H, OH, oh0, oh1);
            inside(iw0, sw, W, OW, ow0, ow1);
            if (ow0 == ow1) continue;
            const Acc* tap = plane + (kh * KW + kw) * ld;
            for (int64_t oh = oh0; oh < oh1; ++oh) {
              const Acc* t = tap + oh * OW;
              Acc* dst = img.data() + (ih0 + oh * sh) * W + iw0 + ow0 * sw;
              if (sw == 1) {  // the same additions with a unit stride the compiler can vectorize
                for (int64_t ow = ow0; ow < ow1; ++ow) dst[ow - ow0] += entry(t[ow]);
              } else {
                for (int64_t ow = ow0; ow < ow1; ++ow) dst[(ow - ow0) * sw] += entry(t[ow]);
              }
            }
          }
        store_row(img.data(), x + q * HW, 1, HW);  // each rounded once
      }
      q0 += planes;
    }
  });
}

}  // namespace

void im2col(const Strided& x, const ColumnGeometry& g, const Strided& cols) {
  MT_ASSERT(cols.is_contiguous() && x.dim() == 4 && cols.dim() == 2);
  if (cols.numel() == 0) return;
  // 8-bit codes are copied as char8_t: a byte type that, unlike unsigned char, aliases nothing
  // else, so the compiler keeps the loop's pointers in registers across the byte stores.
  if (is_8bit(cols.dtype())) {
    auto* out = static_cast<char8_t*>(cols.raw_data());
    if (g.padding.h > 0 || g.padding.w > 0) return im2col_padded<char8_t>(x, g, out);
    return im2col_rows<char8_t>(x, g, out, run_parallel);
  }
  dispatch_floating(cols.dtype(), "im2col",
                    [&]<class T>() { im2col_rows<T>(x, g, static_cast<T*>(cols.raw_data()), run_parallel); });
}

void im2col_channel_major(const Strided& x, const ColumnGeometry& g, const Strided& cols_t) {
  MT_ASSERT(cols_t.is_contiguous() && x.dim() == 4 && cols_t.dim() == 2);
  if (cols_t.numel() == 0) return;
  if (is_8bit(cols_t.dtype())) return im2col_channel_rows<char8_t>(x, g, static_cast<char8_t*>(cols_t.raw_data()));
  dispatch_floating(cols_t.dtype(), "im2col",
                    [&]<class T>() { im2col_channel_rows<T>(x, g, static_cast<T*>(cols_t.raw_data())); });
}

void col2im(const Strided& cols, const ColumnGeometry& g, const Strided& x, const float* scale) {
  MT_ASSERT(x.is_contiguous() && x.dim() == 4 && cols.dim() == 2 &&
            (!scale || (cols.dtype() == DType::f32 && x.dtype() != DType::f64)));
  if (x.numel() == 0) return;
  if (scale || (cols.dtype() == DType::f32 && x.dtype() != DType::f32))  // fp32 sums, x of its own dtype
    return dispatch_floating(x.dtype(), "col2im", [&]<class X>() {
      if constexpr (std::is_same_v<compute_t<X>, float>) {
        if (scale) col2im_planes<float, X, true>(cols, g, x, *scale);
        else col2im_planes<float, X>(cols, g, x);
      }
    });
  dispatch_floating(x.dtype(), "col2im", [&]<class T>() { col2im_planes<T>(cols, g, x); });
}

}  // namespace mixtape::cpu
