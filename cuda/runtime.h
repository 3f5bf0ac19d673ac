// CUDA runtime seam: device discovery, device memory and copies. Implemented in runtime.cu when
// mixtape is built with CUDA; otherwise every entry point throws "built without CUDA".
#pragma once

#include <cstddef>

namespace mixtape::cuda {

bool built_with_cuda();
int device_count();  // 0 when built without CUDA or when no GPU is visible
bool is_available();

void* device_malloc(size_t nbytes, int device);
void device_free(void* ptr, int device) noexcept;
void copy_host_to_device(void* dst, const void* src, size_t nbytes, int device);
void copy_device_to_host(void* dst, const void* src, size_t nbytes, int device);
void copy_device_to_device(void* dst, const void* src, size_t nbytes, int device);

}  // namespace mixtape::cuda
