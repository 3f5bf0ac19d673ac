#include "tensor/ops/common.h"

namespace mixtape {

namespace ops {

void check_same(const char* op, std::initializer_list<const Tensor*> ts, bool same_dtype) {
  const Tensor* first = nullptr;
  for (const Tensor* t : ts) {
    MT_CHECK(t->defined(), op, ": got an undefined tensor");
    if (!first) {
      first = t;
      continue;
    }
    MT_CHECK(t->device() == first->device(), op, ": tensors on different devices: ", first->meta(), " and ", t->meta());
    MT_CHECK(!same_dtype || t->dtype() == first->dtype(), op, ": dtype mismatch: ", first->meta(), " and ", t->meta(),
             " (cast one of them with .to(dtype))");
  }
}

void check_floating(const char* op, const Tensor& t) {
  MT_CHECK(is_floating(t.dtype()), op, ": expected a floating tensor, got ", t.meta());
}

void check_dim(const char* op, const Tensor& t, int64_t ndim, const char* what) {
  MT_CHECK(t.dim() == ndim, op, ": expected ", what, " with ", ndim, " dims, got ", t.meta());
}

}  // namespace ops
}  // namespace mixtape
