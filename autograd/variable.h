// Variable: a tensor that takes part in autograd. It holds its data, whether it requires a
// gradient, and, for leaves, the accumulated ScaledGrad. Like Tensor it is a cheap handle:
// copies share the same variable.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "autograd/scaled_grad.h"
#include "tensor/tensor.h"

namespace mixtape {

struct VarImpl {
  Tensor data;
  bool requires_grad = false;
  bool is_leaf = true;             // false for outputs of recorded ops
  std::optional<ScaledGrad> grad;  // leaves only: accumulated across backward calls
  std::string name;                // optional, for telemetry and messages
  // Gradients that reached this variable during the running backward pass; combined with the
  // branch rule (autograd/scaling.h) once every consumer has contributed.
  std::vector<ScaledGrad> pending;
};

class Variable {
 public:
  Variable() = default;
  explicit Variable(Tensor data, bool requires_grad = false, std::string name = {});

  bool defined() const { return impl_ != nullptr; }
  const Tensor& data() const { return impl().data; }
  // Replace the values in place (optimizers). Shape, dtype and device must not change.
  void set_data(const Tensor& t);
  bool requires_grad() const { return impl().requires_grad; }
  Variable& set_requires_grad(bool r);
  bool is_leaf() const { return impl().is_leaf; }
  const std::string& name() const { return impl().name; }
  void set_name(std::string n) { impl().name = std::move(n); }

  // Leaf gradient: defined after a backward pass reached this variable.
  const std::optional<ScaledGrad>& grad() const { return impl().grad; }
  void set_grad(std::optional<ScaledGrad> g) { impl().grad = std::move(g); }
  void zero_grad() { impl().grad.reset(); }

  // Shortcuts to the data.
  const Shape& shape() const { return data().shape(); }
  int64_t dim() const { return data().dim(); }
  int64_t size(int64_t d) const { return data().size(d); }
  int64_t numel() const { return data().numel(); }
  DType dtype() const { return data().dtype(); }
  Device device() const { return data().device(); }
  double item() const { return data().item(); }

  VarImpl& impl() const {
    MT_CHECK(impl_, "use of an undefined Variable");
    return *impl_;
  }
  const std::shared_ptr<VarImpl>& ptr() const { return impl_; }
  bool same(const Variable& o) const { return impl_ == o.impl_; }

 private:
  std::shared_ptr<VarImpl> impl_;
};

}  // namespace mixtape
