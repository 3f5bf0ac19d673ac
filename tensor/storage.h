// Storage: one allocation of bytes on one device, shared by every view of it.
#pragma once

#include <cstddef>
#include <memory>

#include "tensor/core/block_cache.h"
#include "tensor/core/device.h"

namespace mixtape {

class Storage {
 public:
  // readout: on a CUDA device, take the bytes from the device's readout block when it has room
  // (Note [Readout block] in cuda/runtime.h); elsewhere, or when it is full, ordinary memory.
  Storage(size_t nbytes, Device device, bool readout = false);
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
  bool readout_ = false;  // in the readout block
};

// The host side's caching allocator (Note [Host caching allocator] in storage.cpp): what it holds
// and has handed out (buffers of 64 KiB and more), and a way to give its cached blocks back.
AllocatorStats host_allocator_stats();
void empty_host_cache();

}  // namespace mixtape
