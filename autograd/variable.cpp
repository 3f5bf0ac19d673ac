#include "autograd/variable.h"

namespace mixtape {

Variable::Variable(Tensor data, bool requires_grad, std::string name) : impl_(std::make_shared<VarImpl>()) {
  MT_CHECK(data.defined(), "Variable: data tensor is undefined");
  MT_CHECK(!requires_grad || is_floating(data.dtype()),
           "Variable: only floating tensors can require a "
           "gradient, got ",
           data.meta());
  impl_->data = std::move(data);
  impl_->requires_grad = requires_grad;
  impl_->name = std::move(name);
}

void Variable::set_data(const Tensor& t) {
  MT_CHECK(t.shape() == data().shape() && t.dtype() == data().dtype() && t.device() == data().device(),
           "Variable::set_data: new data ", t.meta(), " does not match ", data().meta());
  impl().data = t;
}

Variable& Variable::set_requires_grad(bool r) {
  MT_CHECK(is_leaf() || !r, "set_requires_grad: only leaf variables can be marked");
  MT_CHECK(!r || is_floating(dtype()), "set_requires_grad: ", data().meta(), " is not floating");
  impl().requires_grad = r;
  return *this;
}

}  // namespace mixtape
