// 8-bit operands on the GPU: not written yet; the launchers say so.
#include "cuda/backend.h"
#include "tensor/core/error.h"

namespace mixtape::cuda {

void quantize(const Strided&, const BlockQuant&, const Strided&, const Strided&, const Strided&) {
  throw Error("quantize: 8-bit operands run on the CPU only for now (no CUDA kernel yet)");
}

void scaled_matmul_nt(const Strided&, const Strided&, int64_t, int64_t, const Strided&, const Strided&, int64_t,
                      int64_t, const Strided&, const Strided&) {
  throw Error("scaled_matmul_nt: 8-bit operands run on the CPU only for now (no CUDA kernel yet)");
}

}  // namespace mixtape::cuda
