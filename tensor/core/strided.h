// Strided: a tensor as the kernels of both devices see it.
//
// Note [Kernel arguments]
// The CPU kernels (tensor/cpu/) and the CUDA launchers (cuda/) take their operands as Strided
// values: the address of element 0, the dtype, the shape and strides in elements, and the device
// the address is on. That is all a kernel needs, and it is what candle's backends get as
// (storage, Layout, DType): never the Tensor, its shared storage or its views. Because this
// header includes nothing above tensor/core/, the layers point one way:
//   tensor/ (Tensor, the op front-ends in tensor/ops/)  ->  cuda/  ->  tensor/core/
// and tensor/cpu/ likewise sees only tensor/core/. An op front-end validates its Tensors,
// allocates the outputs, and passes them on; a Tensor converts to its Strided implicitly
// (Tensor::operator Strided), and an undefined Tensor (an optional argument left out, such as a
// missing bias) to an absent Strided, whose defined() is false. A kernel writes its outputs
// through the Strided it was given: `const` is about the view, not the memory behind it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "tensor/core/device.h"
#include "tensor/core/dtype.h"
#include "tensor/core/error.h"
#include "tensor/core/shape.h"

namespace mixtape {

class Strided {
 public:
  Strided() = default;  // absent: an optional argument that was not given
  Strided(void* data, DType dtype, Shape shape, Shape strides, Device device)
      : data_(data),
        dtype_(dtype),
        shape_(std::move(shape)),
        strides_(std::move(strides)),
        device_(device),
        defined_(true) {}
  // A contiguous operand of `shape` at `data`.
  static Strided contiguous(void* data, DType dtype, Shape shape, Device device) {
    Shape strides = contiguous_strides(shape);
    return Strided(data, dtype, std::move(shape), std::move(strides), device);
  }

  bool defined() const { return defined_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }  // in elements
  int64_t dim() const { return int64_t(shape_.size()); }
  int64_t size(int64_t d) const { return shape_[size_t(wrap_dim(d, dim(), "Strided::size"))]; }
  int64_t numel() const { return numel_of(shape_); }
  bool is_contiguous() const { return is_contiguous_layout(shape_, strides_); }
  std::string meta() const;  // "f32[2, 3]" or "f32[2, 3] cuda:0", as Tensor::meta

  // Address of element 0. data<T>() checks T against the dtype.
  void* raw_data() const { return data_; }
  template <class T>
  T* data() const {
    MT_CHECK(dtype_of<T>::value == dtype_, "Strided::data<", dtype_name(dtype_of<T>::value), ">: operand has dtype ",
             dtype_name(dtype_));
    return static_cast<T*>(data_);
  }

  // Elements [start, start + length) of `dim`, as Tensor::narrow (start and length in range).
  Strided narrow(int64_t dim, int64_t start, int64_t length) const;

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::f32;
  Shape shape_, strides_;
  Device device_;
  bool defined_ = false;
};

// t's strides with dim `dim` set to 0: for walking another tensor's positions while the
// coordinate along `dim` comes from elsewhere (gather's index values).
inline Shape strides_without(const Strided& t, int64_t dim) {
  Shape s = t.strides();
  s[size_t(dim)] = 0;
  return s;
}

}  // namespace mixtape
