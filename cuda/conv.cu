// 2-D convolution on the GPU: im2col / col2im kernels around cuda::gemm, mirroring
// tensor/cpu/conv.cpp (its Note [im2col layout]): NCHW, weight [OC, C, KH, KW], stride, padding
// and dilation per dim, and groups (one GEMM per group, as the CPU: group g's input channels
// [g C/G, (g+1) C/G), weight rows and output channels [g OC/G, (g+1) OC/G); every pointer below is
// offset to its group). conv2d_backward_input doubles as conv_transpose2d's forward and
// conv2d / conv2d_backward_weight as its backward passes (tensor/ops/conv.cpp), so the geometry is
// always read from the tensors given (img = [N, C, H, W] side, cols = [N, OC, OH, OW] side), never
// recomputed from the conv formulas.
//
// Note [Conv on the GEMM]
//   forward      out_n[OC, L] = W[OC, R] col_n[R, L] + bias[oc]         one batched GEMM per chunk,
//                                                                     written straight into out
//   input grad   dcol_n[R, L] = W^T[R, OC] dy_n[OC, L]   (fp32)        batched GEMM, then a col2im
//                dx[n, c, h, w] = sum of its dcol entries (+ bias[c]) gather, rounded once
//   weight grad  dW[OC, R] += G[OC, nb*L] col[R, nb*L]^T                one GEMM per chunk, summed
//                                                                     across chunks in fp32
//   bias grad    db[oc] = sum over n, h, w of dy, in double (as the CPU)
// with R = C*KH*KW rows (r = (c*KH + kh)*KW + kw) and L = OH*OW. The column buffer holds the input
// dtype (im2col only copies, so it is exact); GEMMs accumulate in fp32 and every output is rounded
// once. col2im is a gather, each input pixel summing its own contributions in (kh, kw) order as
// the CPU's scatter adds them, so no atomics and a deterministic sum. A 1x1, stride-1, unpadded
// conv skips im2col: the image plane already is the column matrix.
#include <algorithm>
#include <type_traits>

#include "cuda/backend.h"
#include "cuda/common.cuh"
#include "cuda/gemm.h"

namespace mixtape::cuda {

namespace {

// Elements of one column-buffer chunk: bounds the workspace (64 MiB in f32) and, like the CPU's
// kColumnBudget, lets a Fashion-MNIST CNN batch go through in one chunk.
constexpr int64_t kColumnBudget = int64_t(1) << 24;

// Note [Padded column rows]
// The column buffers (im2col's col, the weight gradient's G) are our own workspaces, so their
// rows start on 16-byte boundaries: the row stride is the row length rounded up to kRowAlign
// elements. The GEMM then reads every full 16-byte chunk of a row with one vector load and only
// the last, ragged chunk element by element (Note [GEMM tiles]). Unpadded, a row of the cnn's
// second conv (14 x 14 = 196 outputs, 392 bytes in 16 bits) starts 8 bytes off a 16-byte
// boundary every other row, and the GEMM read the whole operand element by element. The padding
// is never read (the GEMM bounds every load by the row length) and never written.
// Operands read in place are the caller's layout: the weight ([OC, C*KH*KW] rows, 9 elements for a
// 3x3 conv of one channel), dy in the input gradient and x in a transposed conv's forward (rows of
// OH*OW elements, 49 for a 7 x 7 plane). When such rows are misaligned, cuda::gemm copies them into
// padded rows itself (Note [Staged operands] in gemm.cu), one launch, rather than each launcher
// here keeping a copy of its own.
constexpr int64_t kRowAlign = 8;
int64_t padded(int64_t n) { return (n + kRowAlign - 1) / kRowAlign * kRowAlign; }

// Geometry of one convolution: the image side [N, G*C, H, W] and the column side [N, G*OC, OH, OW],
// with C and OC the channels of one group of G.
struct Geom {
  int64_t N, C, H, W, OC, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, G;
  int64_t R() const { return C * KH * KW; }  // rows of col, columns of W
  int64_t L() const { return OH * OW; }      // columns of col per image
  bool pointwise() const {                   // 1x1, stride 1, no padding: col_n is the image plane
    return KH == 1 && KW == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0 && OH == H && OW == W;
  }
};

Geom make_geom(const Shape& img, const Shape& cols, const Shape& w, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
               int64_t dh, int64_t dw, int64_t groups) {
  MT_CHECK(groups > 0 && img[1] % groups == 0 && cols[1] % groups == 0, "cuda conv: groups ", groups,
           " must divide the channels ", img[1], " and ", cols[1]);
  return Geom{
      img[0], img[1] / groups, img[2], img[3], cols[1] / groups, cols[2], cols[3], w[2], w[3], sh, sw, ph, pw, dh,
      dw,     groups};
}

// Images per chunk when one image needs `per_image` workspace elements.
int64_t chunk_images(const Geom& g, int64_t per_image) {
  return std::clamp<int64_t>(kColumnBudget / std::max<int64_t>(1, per_image), 1, std::max<int64_t>(1, g.N));
}

// The stride of l = h * Wd + w over an [Hd, Wd] plane with strides (hs, ws), when one stride
// reaches every element in that order; -1 when the plane is not a single strided run.
int64_t plane_stride(int64_t Hd, int64_t Wd, int64_t hs, int64_t ws) {
  if (Wd == 1) return hs;
  if (Hd == 1 || hs == Wd * ws) return ws;
  return -1;
}

// Geometry the kernels read (plain values, passed by value).
struct KGeom {
  int64_t C, H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw;
};
KGeom kgeom(const Geom& g) { return {g.C, g.H, g.W, g.OH, g.OW, g.KH, g.KW, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw}; }

// col[r * rs + n * ns + l] = x[n0 + n, c, oh*sh - ph + kh*dh, ow*sw - pw + kw*dw] (0 in the padding)
// for r < R = C*KH*KW, n < nb, l = oh*OW + ow < L; x has strides xs. A copy: no rounding.
// One thread per column element, l fastest (coalesced writes).
template <class T>
__global__ void im2col_kernel(const T* x, int64_t xs0, int64_t xs1, int64_t xs2, int64_t xs3, KGeom g, int64_t nb,
                              T* col, int64_t rs, int64_t ns) {
  const int64_t L = g.OH * g.OW, total = g.C * g.KH * g.KW * nb * L;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t l = idx % L, q = idx / L, n = q % nb, r = q / nb;
    const int64_t kw = r % g.KW, kh = (r / g.KW) % g.KH, c = r / (g.KW * g.KH);
    const int64_t ih = (l / g.OW) * g.sh - g.ph + kh * g.dh, iw = (l % g.OW) * g.sw - g.pw + kw * g.dw;
    T v = store<T>(0.0f);
    if (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W) v = x[n * xs0 + c * xs1 + ih * xs2 + iw * xs3];
    col[r * rs + n * ns + l] = v;
  }
}

// G[oc * gs + n * L + l] = dy[n, oc, l / OW, l % OW] for n < nb (dy strides ds, already offset to
// the chunk's first image). A copy into the weight gradient's [OC, nb*L] layout, rows gs apart
// (Note [Padded column rows]).
template <class T>
__global__ void gather_columns_kernel(const T* dy, int64_t ds0, int64_t ds1, int64_t ds2, int64_t ds3, int64_t OC,
                                      int64_t OH, int64_t OW, int64_t nb, T* G, int64_t gs) {
  const int64_t L = OH * OW, total = OC * nb * L;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t l = idx % L, q = idx / L, n = q % nb, oc = q / nb;
    G[oc * gs + n * L + l] = dy[n * ds0 + oc * ds1 + (l / OW) * ds2 + (l % OW) * ds3];
  }
}

// dx[n * dx_ns + c * HW + ih * W + iw] (chunk- and group-offset; dx_ns = C*HW of all groups) =
// sum over (kh, kw) of dcol[n * ns + r * rs + oh*OW + ow] where ih = oh*sh - ph + kh*dh and
// iw = ow*sw - pw + kw*dw, plus bias[c], rounded once. The adjoint of im2col as a gather: each
// thread owns one pixel, adding in the CPU's (kh, kw) order.
template <class T>
__global__ void col2im_kernel(const float* dcol, int64_t rs, int64_t ns, KGeom g, int64_t nb, const T* bias,
                              int64_t bias_stride, T* dx, int64_t dx_ns) {
  const int64_t HW = g.H * g.W, total = nb * g.C * HW;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t iw = idx % g.W, ih = (idx / g.W) % g.H, c = (idx / HW) % g.C, n = idx / (HW * g.C);
    const float* src = dcol + n * ns;
    float sum = 0.0f;
    for (int64_t kh = 0; kh < g.KH; ++kh) {
      const int64_t th = ih + g.ph - kh * g.dh;  // = oh * sh when this tap reaches the pixel
      if (th < 0 || th % g.sh != 0 || th / g.sh >= g.OH) continue;
      const int64_t oh = th / g.sh;
      for (int64_t kw = 0; kw < g.KW; ++kw) {
        const int64_t tw = iw + g.pw - kw * g.dw;
        if (tw < 0 || tw % g.sw != 0 || tw / g.sw >= g.OW) continue;
        sum += src[((c * g.KH + kh) * g.KW + kw) * rs + oh * g.OW + tw / g.sw];
      }
    }
    if (bias) sum += load(bias[c * bias_stride]);
    dx[n * dx_ns + idx % (g.C * HW)] = store<T>(sum);
  }
}

// dst[i] = src[i] rounded once (the fp32 weight-gradient accumulator to the weight's dtype).
template <class T>
__global__ void round_kernel(const float* src, T* dst, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = store<T>(src[i]);
}

// db[oc] = sum over (n, h, w) of dy[n, oc, h, w]: one block per channel, accumulated in double
// like the CPU's conv_bias_grad (a large reduction; double keeps the result independent of order
// in practice). blockDim.x = kBlock.
template <class T>
__global__ void bias_grad_kernel(const T* dy, int64_t ds0, int64_t ds1, int64_t ds2, int64_t ds3, int64_t N, int64_t H,
                                 int64_t W, T* db, int64_t db_stride) {
  __shared__ double scratch[32];
  const int64_t oc = blockIdx.x, HW = H * W, total = N * HW;
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < total; i += blockDim.x) {
    const int64_t n = i / HW, h = (i % HW) / W, w = i % W;
    acc += double(load(dy[n * ds0 + oc * ds1 + h * ds2 + w * ds3]));
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) db[oc * db_stride] = store<T>(acc);
}

// w [OC, C, KH, KW] as the row-major [OC, R] GEMM operand (copied into `copy` when not
// contiguous).
const Strided& weight_matrix(const Strided& w, Workspace& copy) { return contiguous(w, copy); }

template <class T>
void conv_forward(const Strided& x, const Strided& w, const Strided& bias, const Geom& g, const Strided& out) {
  Workspace w_copy;
  const Strided& wm = weight_matrix(w, w_copy);
  const int64_t R = g.R(), L = g.L(), OCt = g.G * g.OC;
  const Shape& xs = x.strides();
  const Stream stream = stream_of(out);
  const T* pw = static_cast<const T*>(wm.raw_data());
  const T* px = static_cast<const T*>(x.raw_data());
  const T* pbias = bias.defined() ? static_cast<const T*>(bias.raw_data()) : nullptr;
  T* po = static_cast<T*>(out.raw_data());
  GemmParams p;
  p.device = out.device().index;
  p.caller = "conv2d forward";
  p.M = g.OC, p.N = L, p.K = R;
  p.in_dtype = p.out_dtype = out.dtype();
  p.c_row_stride = L, p.c_col_stride = 1, p.c_batch_stride = OCt * L;
  if (bias.defined()) {
    p.bias_stride = bias.strides()[0];
    p.bias_along = BiasAlong::rows;
  }
  // Group grp's operands: W_g [OC, R], its bias and its output channels.
  const auto set_group = [&](int64_t grp) {
    p.a = {pw + grp * g.OC * R, R, 1, 0};  // shared by every image
    if (pbias) p.bias = pbias + grp * g.OC * p.bias_stride;
  };
  const int64_t ps = plane_stride(g.H, g.W, xs[2], xs[3]);
  if (g.pointwise() && ps >= 0) {  // col_n = x_n viewed as [C, H*W]
    for (int64_t grp = 0; grp < g.G; ++grp) {
      set_group(grp);
      p.b = {px + grp * g.C * xs[1], xs[1], ps, xs[0]};
      p.batch = g.N;
      p.c = po + grp * g.OC * L;
      gemm(p, stream);
    }
    return;
  }
  const int64_t Lp = padded(L);  // Note [Padded column rows]
  const int64_t nb_max = chunk_images(g, R * Lp);
  Workspace col({nb_max * R * Lp}, out.dtype(), out.device());
  for (int64_t n0 = 0; n0 < g.N; n0 += nb_max) {
    const int64_t nb = std::min(nb_max, g.N - n0);
    for (int64_t grp = 0; grp < g.G; ++grp) {
      im2col_kernel<T><<<grid_for(R * nb * L), kBlock, 0, stream>>>(px + n0 * xs[0] + grp * g.C * xs[1], xs[0], xs[1],
                                                                    xs[2], xs[3], kgeom(g), nb,
                                                                    static_cast<T*>(col.raw_data()), Lp, R * Lp);
      MT_CUDA_CHECK_LAUNCH("im2col_kernel");
      // out_n [OC, L] = W_g [OC, R] col_n [R, L], col_n's rows Lp apart
      set_group(grp);
      p.b = {col.raw_data(), Lp, 1, R * Lp};
      p.batch = nb;
      p.c = po + n0 * OCt * L + grp * g.OC * L;
      gemm(p, stream);
    }
  }
}

template <class T>
void conv_input_grad(const Strided& dy_in, const Strided& w, const Strided& bias, const Geom& g, const Strided& dx) {
  Workspace w_copy, dy_copy;
  const Strided& wm = weight_matrix(w, w_copy);
  const int64_t R = g.R(), L = g.L(), HW = g.H * g.W, Ct = g.G * g.C;
  const Stream stream = stream_of(dx);
  // dy_n as the [OC, L] operand: strided in place when its (oh, ow) plane is one strided run.
  int64_t ps = plane_stride(g.OH, g.OW, dy_in.strides()[2], dy_in.strides()[3]);
  const Strided& dy = ps < 0 ? contiguous(dy_in, dy_copy) : dy_in;
  if (ps < 0) ps = 1;
  const Shape& ds = dy.strides();
  const T* pw = static_cast<const T*>(wm.raw_data());
  const T* pdy = static_cast<const T*>(dy.raw_data());
  T* pdx = static_cast<T*>(dx.raw_data());
  const T* pbias = bias.defined() ? static_cast<const T*>(bias.raw_data()) : nullptr;
  const int64_t bias_stride = bias.defined() ? bias.strides()[0] : 0;
  GemmParams p;
  p.device = dx.device().index;
  p.caller = "conv2d input gradient";
  p.M = R, p.N = L, p.K = g.OC;
  p.in_dtype = dx.dtype();
  if (g.pointwise()) {  // dx_n [C, HW] = W_g^T dy_n (+ bias[c]) per group, no col2im
    p.out_dtype = dx.dtype();
    p.batch = g.N;
    p.c_row_stride = HW, p.c_col_stride = 1, p.c_batch_stride = Ct * HW;
    if (pbias) {
      p.bias_stride = bias_stride;
      p.bias_along = BiasAlong::rows;
    }
    for (int64_t grp = 0; grp < g.G; ++grp) {
      p.a = {pw + grp * g.OC * R, 1, R, 0};  // W_g^T [R, OC]: element (r, oc) at oc * R + r
      p.b = {pdy + grp * g.OC * ds[1], ds[1], ps, ds[0]};
      p.c = pdx + grp * g.C * HW;
      if (pbias) p.bias = pbias + grp * g.C * bias_stride;
      gemm(p, stream);
    }
    return;
  }
  const int64_t nb_max = chunk_images(g, R * L);
  Workspace dcol({nb_max * R * L}, DType::f32, dx.device());
  p.out_dtype = DType::f32;
  p.c = dcol.raw_data();
  p.c_row_stride = L, p.c_col_stride = 1, p.c_batch_stride = R * L;
  for (int64_t n0 = 0; n0 < g.N; n0 += nb_max) {
    const int64_t nb = std::min(nb_max, g.N - n0);
    for (int64_t grp = 0; grp < g.G; ++grp) {
      // dcol_n [R, L] = W_g^T [R, OC] dy_n [OC, L], fp32
      p.a = {pw + grp * g.OC * R, 1, R, 0};
      p.b = {pdy + n0 * ds[0] + grp * g.OC * ds[1], ds[1], ps, ds[0]};
      p.batch = nb;
      gemm(p, stream);
      col2im_kernel<T><<<grid_for(nb * g.C * HW), kBlock, 0, stream>>>(
          static_cast<const float*>(dcol.raw_data()), L, R * L, kgeom(g), nb,
          pbias ? pbias + grp * g.C * bias_stride : nullptr, bias_stride, pdx + n0 * Ct * HW + grp * g.C * HW, Ct * HW);
      MT_CUDA_CHECK_LAUNCH("col2im_kernel");
    }
  }
}

template <class T>
void conv_weight_grad(const Strided& x, const Strided& dy, const Geom& g, const Strided& dw) {
  const int64_t R = g.R(), L = g.L(), OCt = g.G * g.OC;
  const Shape& xs = x.strides();
  const Shape& ds = dy.strides();
  const Stream stream = stream_of(dw);
  const int64_t nb_max = chunk_images(g, std::max(R, g.OC) * L);
  const int64_t chunks = (g.N + nb_max - 1) / nb_max;
  const int64_t cs = padded(nb_max * L);  // row stride of col and G (Note [Padded column rows])
  Workspace col({R * cs}, dw.dtype(), dw.device());
  Workspace G({g.OC * cs}, dw.dtype(), dw.device());
  // Several chunks sum in an fp32 accumulator, rounded once at the end (the CPU's beta = 1 sgemm).
  Workspace acc = chunks > 1 ? Workspace({OCt * R}, DType::f32, dw.device()) : Workspace();
  GemmParams p;
  p.device = dw.device().index;
  p.caller = "conv2d weight gradient";
  p.M = g.OC, p.N = R;
  p.in_dtype = dw.dtype();
  p.out_dtype = chunks > 1 ? DType::f32 : dw.dtype();
  p.c_row_stride = R, p.c_col_stride = 1;
  const T* px = static_cast<const T*>(x.raw_data());
  const T* pdy = static_cast<const T*>(dy.raw_data());
  T* pcol = static_cast<T*>(col.raw_data());
  T* pG = static_cast<T*>(G.raw_data());
  for (int64_t n0 = 0; n0 < g.N; n0 += nb_max) {
    const int64_t nb = std::min(nb_max, g.N - n0), cols = nb * L;
    for (int64_t grp = 0; grp < g.G; ++grp) {
      im2col_kernel<T><<<grid_for(R * cols), kBlock, 0, stream>>>(px + n0 * xs[0] + grp * g.C * xs[1], xs[0], xs[1],
                                                                  xs[2], xs[3], kgeom(g), nb, pcol, cs, L);
      MT_CUDA_CHECK_LAUNCH("im2col_kernel");
      gather_columns_kernel<T><<<grid_for(g.OC * cols), kBlock, 0, stream>>>(
          pdy + n0 * ds[0] + grp * g.OC * ds[1], ds[0], ds[1], ds[2], ds[3], g.OC, g.OH, g.OW, nb, pG, cs);
      MT_CUDA_CHECK_LAUNCH("gather_columns_kernel");
      // dW_g (+)= G col^T: (OC, R) = (OC, nb*L) (R, nb*L)^T, both with rows cs apart
      p.K = cols;
      p.a = {pG, cs, 1, 0};
      p.b = {pcol, 1, cs, 0};  // col^T [nb*L, R]: element (k, r) at r * cs + k
      p.beta = n0 == 0 ? 0.0f : 1.0f;
      if (chunks > 1) p.c = static_cast<float*>(acc.raw_data()) + grp * g.OC * R;
      else p.c = static_cast<T*>(dw.raw_data()) + grp * g.OC * R;
      gemm(p, stream);
    }
  }
  if (chunks > 1) {
    round_kernel<T><<<grid_for(OCt * R), kBlock, 0, stream>>>(static_cast<const float*>(acc.raw_data()),
                                                              static_cast<T*>(dw.raw_data()), OCt * R);
    MT_CUDA_CHECK_LAUNCH("round_kernel");
  }
}

// The launchers' common checks: dtypes agree, the written tensor is contiguous.
void check_conv(const char* op, const Strided& a, const Strided& b, const Strided& bias, const Strided& out) {
  MT_CHECK(a.dim() == 4 && b.dim() == 4 && out.dim() == 4 && out.is_contiguous(), "cuda::", op,
           ": expected 4-d operands and a contiguous output, got ", a.meta(), ", ", b.meta(), " -> ", out.meta());
  MT_CHECK(a.dtype() == out.dtype() && b.dtype() == out.dtype() && (!bias.defined() || bias.dtype() == out.dtype()),
           "cuda::", op, ": operands must share the output's dtype: ", a.meta(), ", ", b.meta(), " -> ", out.meta());
}

}  // namespace

void conv2d(const Strided& x, const Strided& w, const Strided& bias, int64_t stride_h, int64_t stride_w, int64_t pad_h,
            int64_t pad_w, int64_t dil_h, int64_t dil_w, int64_t groups, const Strided& out) {
  check_conv("conv2d", x, w, bias, out);
  DeviceGuard guard(out.device().index);
  const Geom g = make_geom(x.shape(), out.shape(), w.shape(), stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups);
  if (out.numel() == 0) return;
  dispatch_floating(out.dtype(), "conv2d", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) conv_forward<T>(x, w, bias, g, out);  // f64 never gets here
  });
}

void conv2d_backward_input(const Strided& dy, const Strided& w, const Strided& bias, int64_t stride_h, int64_t stride_w,
                           int64_t pad_h, int64_t pad_w, int64_t dil_h, int64_t dil_w, int64_t groups,
                           const Strided& dx) {
  check_conv("conv2d_backward_input", dy, w, bias, dx);
  DeviceGuard guard(dx.device().index);
  const Geom g = make_geom(dx.shape(), dy.shape(), w.shape(), stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups);
  if (dx.numel() == 0) return;
  dispatch_floating(dx.dtype(), "conv2d_backward_input", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) conv_input_grad<T>(dy, w, bias, g, dx);
  });
}

void conv2d_backward_weight(const Strided& x, const Strided& dy, int64_t stride_h, int64_t stride_w, int64_t pad_h,
                            int64_t pad_w, int64_t dil_h, int64_t dil_w, int64_t groups, const Strided& dw) {
  check_conv("conv2d_backward_weight", x, dy, Strided(), dw);
  DeviceGuard guard(dw.device().index);
  const Geom g = make_geom(x.shape(), dy.shape(), dw.shape(), stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups);
  if (dw.numel() == 0) return;
  dispatch_floating(dw.dtype(), "conv2d_backward_weight", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) conv_weight_grad<T>(x, dy, g, dw);
  });
}

void conv2d_backward_bias(const Strided& dy, const Strided& db) {
  MT_CHECK(dy.dim() == 4 && db.dim() == 1 && db.size(0) == dy.size(1) && db.dtype() == dy.dtype(),
           "cuda::conv2d_backward_bias: expected dy [N, OC, OH, OW] and db [OC] of one dtype, got ", dy.meta(), " and ",
           db.meta());
  DeviceGuard guard(db.device().index);
  if (db.numel() == 0) return;
  dispatch_floating(db.dtype(), "conv2d_backward_bias", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) {  // f64 never gets here
      const Shape& ds = dy.strides();
      bias_grad_kernel<T><<<unsigned(dy.size(1)), kBlock, 0, stream_of(db)>>>(
          static_cast<const T*>(dy.raw_data()), ds[0], ds[1], ds[2], ds[3], dy.size(0), dy.size(2), dy.size(3),
          static_cast<T*>(db.raw_data()), db.strides()[0]);
      MT_CUDA_CHECK_LAUNCH("bias_grad_kernel");
    }
  });
}

}  // namespace mixtape::cuda
