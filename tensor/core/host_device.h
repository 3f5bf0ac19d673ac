// MT_HOST_DEVICE marks plain C++ that the CUDA kernels compile for the device too (the shared
// elementwise formulas, the strided offset arithmetic): __host__ __device__ under nvcc, nothing
// under the host compiler.
#pragma once

#if defined(__CUDACC__)
#define MT_HOST_DEVICE __host__ __device__
#else
#define MT_HOST_DEVICE
#endif
