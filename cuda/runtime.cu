// CUDA runtime: device discovery, memory and copies. Every CUDA call is checked; a failure
// becomes a mixtape::Error naming the call, file and line.
#include <cuda_runtime.h>

#include "cuda/runtime.h"
#include "tensor/error.h"

#define MT_CUDA_CHECK(call)                                                                  \
  do {                                                                                       \
    const cudaError_t err_ = (call);                                                         \
    if (err_ != cudaSuccess)                                                                 \
      throw ::mixtape::Error(::mixtape::detail::cat(#call, " failed at ", __FILE__, ":",     \
                                                    __LINE__, ": ", cudaGetErrorString(err_))); \
  } while (0)

namespace mixtape::cuda {

bool built_with_cuda() { return true; }

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: report none
    return 0;
  }
  return n;
}

bool is_available() { return device_count() > 0; }

void* device_malloc(size_t nbytes, int device) {
  MT_CUDA_CHECK(cudaSetDevice(device));
  void* p = nullptr;
  if (nbytes > 0) MT_CUDA_CHECK(cudaMalloc(&p, nbytes));
  return p;
}

void device_free(void* ptr, int device) noexcept {
  if (!ptr) return;
  cudaSetDevice(device);
  cudaFree(ptr);
}

void copy_host_to_device(void* dst, const void* src, size_t nbytes, int device) {
  MT_CUDA_CHECK(cudaSetDevice(device));
  MT_CUDA_CHECK(cudaMemcpy(dst, src, nbytes, cudaMemcpyHostToDevice));
}

void copy_device_to_host(void* dst, const void* src, size_t nbytes, int device) {
  MT_CUDA_CHECK(cudaSetDevice(device));
  MT_CUDA_CHECK(cudaMemcpy(dst, src, nbytes, cudaMemcpyDeviceToHost));
}

void copy_device_to_device(void* dst, const void* src, size_t nbytes, int device) {
  MT_CUDA_CHECK(cudaSetDevice(device));
  MT_CUDA_CHECK(cudaMemcpy(dst, src, nbytes, cudaMemcpyDeviceToDevice));
}

}  // namespace mixtape::cuda
