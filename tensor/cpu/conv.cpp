// Note [im2col layout]
// For a chunk of nb images the column matrix is col[C*KH*KW, nb*OH*OW]: row r = (c*KH + kh)*KW + kw,
// column j = n*OH*OW + oh*OW + ow holds x[n, c, oh*sh - ph + kh*dh, ow*sw - pw + kw*dw] (0 in the
// padding). Then conv2d is one GEMM per chunk, Y[OC, nb*L] = W[OC, C*KH*KW] col, and a scatter
// to [N, OC, OH, OW] (adding the bias, rounding once). Chunking bounds the buffer at
// kColumnBudget elements; a Fashion-MNIST CNN batch fits in one chunk, so one GEMM per batch.
#include "tensor/cpu/conv.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "tensor/cpu/convert.h"
#include "tensor/cpu/linalg.h"
#include "tensor/cpu/parallel.h"

namespace mixtape::cpu {

namespace {

constexpr int64_t kColumnBudget = int64_t(1) << 23;  // elements of the column buffer (32 MiB in f32)

// Scratch buffer left uninitialized: every kernel writes it fully before reading.
template <class C>
std::unique_ptr<C[]> scratch(int64_t n) {
  return std::make_unique_for_overwrite<C[]>(size_t(std::max<int64_t>(n, 1)));
}

// Geometry of one convolution: the image side [N, C, H, W] and the column side [N, OC, OH, OW].
struct Geom {
  int64_t N, C, H, W, OC, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw;
  int64_t rows() const { return C * KH * KW; }  // rows of col, columns of W
  int64_t L() const { return OH * OW; }         // columns of col per image
  int64_t chunk() const {                       // images per GEMM
    const int64_t per_image = std::max<int64_t>(1, std::max(rows(), OC) * L());
    return std::clamp<int64_t>(kColumnBudget / per_image, 1, std::max<int64_t>(1, N));
  }
};

Geom make_geom(const Shape& img, const Shape& cols, const Shape& w, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
               int64_t dh, int64_t dw) {
  return Geom{img[0], img[1], img[2], img[3], cols[1], cols[2], cols[3], w[2], w[3], sh, sw, ph, pw, dh, dw};
}

// ow in [lo, hi) keeps iw = iw0 + ow * s inside [0, W); outside it the column reads padding.
inline void valid_range(int64_t iw0, int64_t s, int64_t W, int64_t OW, int64_t& lo, int64_t& hi) {
  lo = iw0 >= 0 ? 0 : (-iw0 + s - 1) / s;
  hi = iw0 > W - 1 ? 0 : (W - 1 - iw0) / s + 1;
  lo = std::min(lo, OW);
  hi = std::clamp(hi, lo, OW);
}

// col[rows, nb*L] for the nb images starting at x (strides xs), in the compute type.
template <class T, class C>
void im2col(const T* x, const Shape& xs, const Geom& g, int64_t nb, C* col) {
  const int64_t L = g.L(), cols = nb * L;
  // Each row (c, kh, kw) is one thread's (Note [Deterministic threads]).
  parallel_for(g.rows(), grain_for(cols), [&](int64_t r_begin, int64_t r_end) {
    for (int64_t r = r_begin; r < r_end; ++r) {
      const int64_t c = r / (g.KH * g.KW), kh = r / g.KW % g.KH, kw = r % g.KW;
      C* row = col + r * cols;
      const int64_t iw0 = kw * g.dw - g.pw;
      int64_t lo, hi;
      valid_range(iw0, g.sw, g.W, g.OW, lo, hi);
      for (int64_t n = 0; n < nb; ++n) {
        const T* plane = x + n * xs[0] + c * xs[1];
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          C* dst = row + n * L + oh * g.OW;
          const int64_t ih = oh * g.sh - g.ph + kh * g.dh;
          if (ih < 0 || ih >= g.H) {
            std::fill(dst, dst + g.OW, C(0));
            continue;
          }
          const T* src = plane + ih * xs[2];
          std::fill(dst, dst + lo, C(0));
          if (g.sw * xs[3] == 1) {  // unit stride along the row: a plain (vectorizable) copy
            const T* s = src + iw0;
            for (int64_t ow = lo; ow < hi; ++ow) dst[ow] = load(s[ow]);
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) dst[ow] = load(src[(iw0 + ow * g.sw) * xs[3]]);
          }
          std::fill(dst + hi, dst + g.OW, C(0));
        }
      }
    }
  });
}

// im2col of images [n0, n0 + nb) of x. A 16-bit x is first converted to the compute type,
// once per element, into buf [nb, C, H, W]: im2col then copies each value KH*KW times without
// converting it again.
template <class T, class C>
void im2col_chunk(const T* x, const Shape& xs, const Geom& g, int64_t n0, int64_t nb, C* buf, C* col) {
  if constexpr (std::is_same_v<T, C>) {
    (void)buf;
    im2col(x + n0 * xs[0], xs, g, nb, col);
  } else {
    const int64_t HW = g.H * g.W;
    parallel_for(nb * g.C, grain_for(HW), [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        const T* plane = x + (n0 + p / g.C) * xs[0] + (p % g.C) * xs[1];
        for (int64_t h = 0; h < g.H; ++h) load_row_to(plane + h * xs[2], xs[3], g.W, buf + p * HW + h * g.W);
      }
    });
    im2col(buf, Shape{g.C * HW, HW, g.W, 1}, g, nb, col);
  }
}

// img[nb, C, H, W] (contiguous, compute type) += col2im(col): the adjoint of im2col.
template <class C>
void col2im_add(const C* col, const Geom& g, int64_t nb, C* img) {
  const int64_t L = g.L(), cols = nb * L;
  // Each channel's planes are one thread's, summed in the serial order (Note [Deterministic
  // threads]): the rows (c, kh, kw) of one c add into the same pixels.
  parallel_for(g.C, grain_for(g.KH * g.KW * cols), [&](int64_t c_begin, int64_t c_end) {
    for (int64_t c = c_begin; c < c_end; ++c)
      for (int64_t kh = 0; kh < g.KH; ++kh)
        for (int64_t kw = 0; kw < g.KW; ++kw) {
          const C* row = col + ((c * g.KH + kh) * g.KW + kw) * cols;
          const int64_t iw0 = kw * g.dw - g.pw;
          int64_t lo, hi;
          valid_range(iw0, g.sw, g.W, g.OW, lo, hi);
          for (int64_t n = 0; n < nb; ++n) {
            C* plane = img + (n * g.C + c) * g.H * g.W;
            for (int64_t oh = 0; oh < g.OH; ++oh) {
              const int64_t ih = oh * g.sh - g.ph + kh * g.dh;
              if (ih < 0 || ih >= g.H) continue;
              const C* src = row + n * L + oh * g.OW;
              C* dst = plane + ih * g.W;
              for (int64_t ow = lo; ow < hi; ++ow) dst[iw0 + ow * g.sw] += src[ow];
            }
          }
        }
  });
}

// w [OC, C, KH, KW] (any strides) as a row-major [OC, C*KH*KW] matrix in the compute type.
template <class T, class C = compute_t<T>>
std::vector<C> load_weight(const Strided& w) {
  const T* p = static_cast<const T*>(w.raw_data());
  const Shape& s = w.shape();
  const Shape& st = w.strides();
  std::vector<C> m(size_t(w.numel()));
  size_t k = 0;
  for (int64_t o = 0; o < s[0]; ++o)
    for (int64_t c = 0; c < s[1]; ++c)
      for (int64_t i = 0; i < s[2]; ++i)
        for (int64_t j = 0; j < s[3]; ++j) m[k++] = load(p[o * st[0] + c * st[1] + i * st[2] + j * st[3]]);
  return m;
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

// G[OC, nb*L] = dy[n0 + n, oc, oh, ow] for the chunk (dy [N, OC, OH, OW], any strides).
template <class T, class C>
void gather_columns(const T* dy, const Shape& ds, const Geom& g, int64_t n0, int64_t nb, C* G) {
  const int64_t L = g.L(), cols = nb * L;
  parallel_for(g.OC, grain_for(cols), [&](int64_t oc_begin, int64_t oc_end) {
    for (int64_t oc = oc_begin; oc < oc_end; ++oc)
      for (int64_t n = 0; n < nb; ++n) {
        const T* plane = dy + (n0 + n) * ds[0] + oc * ds[1];
        C* dst = G + oc * cols + n * L;
        for (int64_t oh = 0; oh < g.OH; ++oh) load_row_to(plane + oh * ds[2], ds[3], g.OW, dst + oh * g.OW);
      }
  });
}

template <class T>
void conv_forward(const Strided& x, const Strided& w, const Strided& bias, const Geom& g, const Strided& out) {
  using C = compute_t<T>;
  const std::vector<C> wm = load_weight<T>(w), bv = load_bias<T>(bias);
  const int64_t L = g.L(), R = g.rows(), nb_max = g.chunk();
  const auto col = scratch<C>(R * nb_max * L), y = scratch<C>(g.OC * nb_max * L);
  const auto xbuf = scratch<C>(std::is_same_v<T, C> ? 0 : nb_max * g.C * g.H * g.W);
  const T* px = static_cast<const T*>(x.raw_data());
  T* po = static_cast<T*>(out.raw_data());
  for (int64_t n0 = 0; n0 < g.N; n0 += nb_max) {
    const int64_t nb = std::min(nb_max, g.N - n0), cols = nb * L;
    im2col_chunk(px, x.strides(), g, n0, nb, xbuf.get(), col.get());
    // Y = W col: (OC, nb*L) = (OC, C*KH*KW) (C*KH*KW, nb*L)
    gemm_raw(false, false, g.OC, cols, R, wm.data(), R, col.get(), cols, C(0), y.get(), cols);
    parallel_for(nb * g.OC, grain_for(L), [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        const int64_t n = p / g.OC, oc = p % g.OC;
        C* src = y.get() + oc * cols + n * L;
        T* dst = po + ((n0 + n) * g.OC + oc) * L;
        add_bias_and_store(src, bv.empty() ? nullptr : &bv[size_t(oc)], dst, L);
      }
    });
  }
}

template <class T>
void conv_input_grad(const Strided& dy, const Strided& w, const Strided& bias, const Geom& g, const Strided& dx) {
  using C = compute_t<T>;
  const std::vector<C> wm = load_weight<T>(w), bv = load_bias<T>(bias);
  const int64_t L = g.L(), R = g.rows(), nb_max = g.chunk(), HW = g.H * g.W;
  const auto G = scratch<C>(g.OC * nb_max * L), dcol = scratch<C>(R * nb_max * L), img = scratch<C>(nb_max * g.C * HW);
  const T* pdy = static_cast<const T*>(dy.raw_data());
  T* pdx = static_cast<T*>(dx.raw_data());
  for (int64_t n0 = 0; n0 < g.N; n0 += nb_max) {
    const int64_t nb = std::min(nb_max, g.N - n0), cols = nb * L;
    gather_columns(pdy, dy.strides(), g, n0, nb, G.get());
    // dcol = W^T G: (C*KH*KW, nb*L) = (OC, C*KH*KW)^T (OC, nb*L)
    gemm_raw(true, false, R, cols, g.OC, wm.data(), R, G.get(), cols, C(0), dcol.get(), cols);
    std::fill(img.get(), img.get() + nb * g.C * HW, C(0));
    col2im_add(dcol.get(), g, nb, img.get());
    parallel_for(nb * g.C, grain_for(HW), [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        const int64_t c = p % g.C;
        C* src = img.get() + p * HW;
        T* dst = pdx + (n0 * g.C + p) * HW;
        add_bias_and_store(src, bv.empty() ? nullptr : &bv[size_t(c)], dst, HW);
      }
    });
  }
}

template <class T>
void conv_weight_grad(const Strided& x, const Strided& dy, const Geom& g, const Strided& dw) {
  using C = compute_t<T>;
  const int64_t L = g.L(), R = g.rows(), nb_max = g.chunk();
  const auto col = scratch<C>(R * nb_max * L), G = scratch<C>(g.OC * nb_max * L);
  const auto xbuf = scratch<C>(std::is_same_v<T, C> ? 0 : nb_max * g.C * g.H * g.W);
  std::vector<C> acc(size_t(g.OC * R), C(0));
  const T* px = static_cast<const T*>(x.raw_data());
  const T* pdy = static_cast<const T*>(dy.raw_data());
  for (int64_t n0 = 0; n0 < g.N; n0 += nb_max) {
    const int64_t nb = std::min(nb_max, g.N - n0), cols = nb * L;
    im2col_chunk(px, x.strides(), g, n0, nb, xbuf.get(), col.get());
    gather_columns(pdy, dy.strides(), g, n0, nb, G.get());
    // dW += G col^T: (OC, C*KH*KW) = (OC, nb*L) (C*KH*KW, nb*L)^T, accumulated across chunks
    gemm_raw(false, true, g.OC, R, cols, G.get(), cols, col.get(), cols, C(1), acc.data(), R);
  }
  T* pdw = static_cast<T*>(dw.raw_data());
  for (size_t k = 0; k < acc.size(); ++k) pdw[k] = store<T>(acc[k]);
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
    for (int64_t oc = oc_begin; oc < oc_end; ++oc) {
      double acc[4] = {0.0, 0.0, 0.0, 0.0};  // independent partial sums keep the adds pipelined
      std::vector<compute_t<T>> buf(static_cast<size_t>(W));
      for (int64_t n = 0; n < N; ++n)
        for (int64_t h = 0; h < H; ++h) {
          const compute_t<T>* row = buf.data();
          load_row_to(p + n * ds[0] + oc * ds[1] + h * ds[2], ds[3], W, buf.data());
          int64_t w = 0;
          for (; w + 4 <= W; w += 4)
            for (int k = 0; k < 4; ++k) acc[k] += double(row[w + k]);
          for (; w < W; ++w) acc[0] += double(row[w]);
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
            int64_t pad_w, int64_t dil_h, int64_t dil_w, const Strided& out) {
  MT_ASSERT(out.is_contiguous());
  const Geom g = make_geom(x.shape(), out.shape(), w.shape(), stride_h, stride_w, pad_h, pad_w, dil_h, dil_w);
  if (out.numel() == 0) return;
  dispatch_floating(out.dtype(), "conv2d", [&]<class T>() { conv_forward<T>(x, w, bias, g, out); });
}

void conv2d_backward_input(const Strided& dy, const Strided& w, const Strided& bias, int64_t stride_h, int64_t stride_w,
                           int64_t pad_h, int64_t pad_w, int64_t dil_h, int64_t dil_w, const Strided& dx) {
  MT_ASSERT(dx.is_contiguous());
  const Geom g = make_geom(dx.shape(), dy.shape(), w.shape(), stride_h, stride_w, pad_h, pad_w, dil_h, dil_w);
  if (dx.numel() == 0) return;
  dispatch_floating(dx.dtype(), "conv2d_backward_input", [&]<class T>() { conv_input_grad<T>(dy, w, bias, g, dx); });
}

void conv2d_backward_weight(const Strided& x, const Strided& dy, int64_t stride_h, int64_t stride_w, int64_t pad_h,
                            int64_t pad_w, int64_t dil_h, int64_t dil_w, const Strided& dw) {
  MT_ASSERT(dw.is_contiguous());
  const Geom g = make_geom(x.shape(), dy.shape(), dw.shape(), stride_h, stride_w, pad_h, pad_w, dil_h, dil_w);
  if (dw.numel() == 0) return;
  dispatch_floating(dw.dtype(), "conv2d_backward_weight", [&]<class T>() { conv_weight_grad<T>(x, dy, g, dw); });
}

}  // namespace mixtape::cpu
