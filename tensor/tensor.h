// Tensor: a cheap handle to a shared implementation (storage, shape, strides, offset, dtype).
// Copies of a Tensor share everything; views share the storage with their own shape/strides.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "tensor/core/device.h"
#include "tensor/core/dtype.h"
#include "tensor/core/rng.h"
#include "tensor/core/shape.h"
#include "tensor/core/strided.h"
#include "tensor/storage.h"

namespace mixtape {

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;       // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;
};

class Tensor {
 public:
  Tensor() = default;  // undefined tensor
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Shape& strides() const { return impl().strides; }
  int64_t offset() const { return impl().offset; }
  int64_t dim() const { return int64_t(impl().shape.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the back
  int64_t numel() const { return numel_of(impl().shape); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  bool is_contiguous() const;
  bool same_storage(const Tensor& o) const { return storage() == o.storage(); }
  std::string meta() const;  // "f32[2, 3]", or "f32[2, 3] cuda:0" off the host
  // The tensor as its kernels take it (Note [Kernel arguments] in tensor/core/strided.h); an
  // undefined tensor gives an absent Strided.
  operator Strided() const;

  // Pointer to element 0 (storage base + offset). data<T>() checks T against the dtype.
  void* raw_data() const;
  template <class T>
  T* data() const {
    MT_CHECK(dtype_of<T>::value == dtype(), "Tensor::data<", dtype_name(dtype_of<T>::value), ">: tensor has dtype ",
             dtype_name(dtype()));
    return static_cast<T*>(raw_data());
  }

  // ---- views (share storage) ----
  Tensor view(Shape shape) const;     // requires a compatible layout; one -1 allowed
  Tensor reshape(Shape shape) const;  // view when possible, else a contiguous copy
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;  // drops `dim`
  Tensor expand(Shape shape) const;                 // broadcast view (stride 0)
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor t() const { return transpose(0, 1); }

  // ---- copies ----
  Tensor contiguous() const;  // self when already contiguous
  Tensor clone() const;       // always a fresh contiguous copy
  // Cast. 16-bit targets round to nearest even, or stochastically from `gen` (Note [Stochastic
  // rounding] in half.h). Returns self when nothing changes.
  Tensor to(DType dtype, Rounding rounding = Rounding::nearest, Generator* gen = nullptr) const;
  Tensor to(Device device) const;
  void copy_(const Tensor& src);  // elementwise copy into self, broadcasting src, casting RNE

  // ---- element access (slow; for tests, printing, small host work) ----
  double item() const;                    // one-element tensor
  double flat_get(int64_t i) const;       // logical row-major index, honours strides
  void flat_set(int64_t i, double v);     // rounds to the dtype (RNE)
  std::vector<double> to_vector() const;  // all elements in row-major order, as double
  template <class T>
  std::vector<T> values() const;  // elements converted to T

  std::string str(int64_t max_per_dim = 6) const;

  TensorImpl& impl() const {
    MT_CHECK(impl_, "use of an undefined tensor");
    return *impl_;
  }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// ---- factories ---------------------------------------------------------------------------
Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Device device = Device::cpu());
// zeros() for a few numbers the host reads now and then (a loss log, a loss scaler's state): on a
// CUDA device they live in its readout block, which every synchronization reads whole, so reading
// them after one costs nothing (Note [Readout block] in cuda/runtime.h); elsewhere, zeros().
Tensor readout_zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor empty_like(const Tensor& t);
Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::f32);
// From host values: data.size() must equal the shape's element count. Rounds to dtype (RNE).
Tensor from_vector(const std::vector<double>& data, const Shape& shape, DType dtype = DType::f32);
Tensor from_vector(const std::vector<float>& data, const Shape& shape, DType dtype = DType::f32);
Tensor from_vector(const std::vector<int64_t>& data, const Shape& shape);
Tensor scalar_tensor(double value, DType dtype = DType::f32);
// counter += by for every element of an i64 tensor (any strides, not a broadcast view), in place
// on the tensor's device: a GPU counter such as BatchNorm's num_batches_tracked advances without
// a host round trip. Throws on other dtypes; a sum outside int64's range wraps (two's complement)
// on both devices, as torch's add_ on int64 does: a step counter never gets there.
void increment_(Tensor& counter, int64_t by = 1);

// Random factories (Philox, see rng.h). Values are drawn in f32 (f64 for f64 tensors) and then
// rounded to the dtype.
Tensor uniform(const Shape& shape, double lo, double hi, Generator& gen, DType dtype = DType::f32);
Tensor normal(const Shape& shape, double mean, double stddev, Generator& gen, DType dtype = DType::f32);
Tensor bernoulli(const Shape& shape, double p, Generator& gen, DType dtype = DType::f32);

// Process-wide default generator (seed 0 until set). Not thread-safe; training programs
// pass their own generators.
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace mixtape
