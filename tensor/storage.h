// Storage: one allocation of bytes on one device, shared by every view of it.
#pragma once

#include <cstddef>
#include <memory>

#include "tensor/core/device.h"

namespace mixtape {

class Storage {
 public:
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
};

}  // namespace mixtape
