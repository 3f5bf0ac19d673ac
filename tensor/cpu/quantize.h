// CPU kernels of the scaled 8-bit operands (tensor/ops/quantize.h): quantizing a matrix block by
// block, and the 8-bit GEMM with its epilogue. The CUDA launchers of the same names mirror them.
#pragma once

#include <cstdint>
#include <memory>

#include "tensor/core/scale_formulas.h"
#include "tensor/core/strided.h"
#include "tensor/cpu/gemm.h"

namespace mixtape::cpu {

// x [R, K] (floating, any strides) -> codes [R, K] (contiguous, q.format) and scale_inv
// [ceil(R / br), ceil(K / bc)] (f32, contiguous): each block's amax (NaN wins; inf when the block
// holds one), its s = scales::block_scale(q, amax), codes = from_float_rn(x * s), scale_inv =
// 1 / s. stats: i64 [kQuantStats] (QuantStat). Every rounding of a tensor to an 8-bit format with
// a scale happens here. The result is the same for any thread count.
void quantize(const Strided& x, const BlockQuant& q, const Strided& codes, const Strided& scale_inv,
              const Strided& stats);

// B's packed panels kept across the GEMMs of one operand b (Note [Reused 8-bit B operands] in
// quantize.cpp): which codes they were packed from, and how often b has been multiplied.
struct ReusedB {
  std::unique_ptr<PackedB> packed;
  const void* codes = nullptr;
  int64_t rs = 0, cs = 0, n = 0, k = 0;
  int uses = 0;
};

// y [M, N] = a [M, K] b [N, K]^T (+ bias [N]) in the values the codes stand for; each operand is its
// codes (any strides) with scale_inv (contiguous) over blocks of *_br x *_bc. Scales that change along K (blocks
// shorter than K: powers of two) are applied by the GEMM as it widens the codes, scales constant
// along K multiply the fp32 sums: y = sum * (sa[i] * sb[j]) + bias[j], rounded once. `reuse`
// (optional): b's entry, which keeps b packed from its second GEMM on (the same bits). With
// `images` > 0 the M rows are the pixels of that many images and y (contiguous, M N elements) is
// laid out [images, N, M / images]: row n HW + p, column j at y[n][j][p] (Note [Image rows]).
void scaled_matmul_nt(const Strided& a, const Strided& a_scale_inv, int64_t a_br, int64_t a_bc, const Strided& b,
                      const Strided& b_scale_inv, int64_t b_br, int64_t b_bc, const Strided& bias, const Strided& y,
                      ReusedB* reuse = nullptr, int64_t images = 0);

}  // namespace mixtape::cpu
