#include "tensor/storage.h"

#include <cstdlib>
#include <new>

#include "cuda/runtime.h"
#include "tensor/core/error.h"

namespace mixtape {

namespace {
constexpr size_t kHostAlignment = 64;  // one cache line; enough for AVX-512 loads
}

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  on_device(
      device,
      [&] {
    const size_t rounded = (nbytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
    data_ = rounded ? std::aligned_alloc(kHostAlignment, rounded) : nullptr;
    MT_CHECK(rounded == 0 || data_, "Storage: out of host memory allocating ", nbytes, " bytes");
      },
      [&] { data_ = cuda::device_malloc(nbytes, device.index); });
}

Storage::~Storage() {
  on_device(
      device_, [&] { std::free(data_); }, [&] { cuda::device_free(data_, device_.index); });
}

}  // namespace mixtape
