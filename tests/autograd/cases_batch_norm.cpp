// Op cases for batch norm (see support/op_cases.h).
#include "support/op_cases.h"

namespace {
using namespace mixtape;
using namespace mixtape::test;
using V = std::vector<Variable>;

// Running buffers are made inside each case function, on the input's device: training mode
// updates them in place, and the suites call a case function many times on the same inputs.

MT_OP_CASE(OpCase{"batch_norm training, 4-D non-contiguous input, affine",
                  [](DType dt) {
  return std::vector<Tensor>{rand_noncontig({2, 3, 2, 2}, dt, 51), rand_input({3}, dt, 52, 0.5, 1.5),
                             rand_input({3}, dt, 53)};
                  },
                  [](const V& v) {
  Tensor rm = zeros({3}, DType::f32, v[0].device()), rv = ones({3}, DType::f32, v[0].device());
  return batch_norm(v[0], v[1], v[2], rm, rv, true);
}});

MT_OP_CASE(OpCase{"batch_norm training, 2-D, no affine, no running statistics",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({5, 3}, dt, 54)};
                  },
                  [](const V& v) { return batch_norm(v[0], Variable(), Variable(), Tensor(), Tensor(), true); }});

MT_OP_CASE(OpCase{"batch_norm eval, 3-D [N, C, L], affine",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({3, 2, 4}, dt, 55), rand_input({2}, dt, 56, 0.5, 1.5), rand_input({2}, dt, 57)};
                  },
                  [](const V& v) {
  Tensor rm = from_vector(std::vector<double>{0.1, -0.2}, {2}).to(v[0].device());
  Tensor rv = from_vector(std::vector<double>{0.5, 1.5}, {2}).to(v[0].device());
  return batch_norm(v[0], v[1], v[2], rm, rv, false);
}});

}  // namespace
