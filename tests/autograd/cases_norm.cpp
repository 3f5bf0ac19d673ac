// Op cases for layer norm and group norm (see support/op_cases.h).
#include "support/op_cases.h"

namespace {
using namespace mixtape;
using namespace mixtape::test;
using V = std::vector<Variable>;

MT_OP_CASE(OpCase{"layer_norm over the last dim of a non-contiguous input, affine",
                  [](DType dt) {
  return std::vector<Tensor>{rand_noncontig({4, 5}, dt, 301), rand_input({5}, dt, 302, 0.5, 1.5),
                             rand_input({5}, dt, 303)};
                  },
                  [](const V& v) { return layer_norm(v[0], {5}, v[1], v[2]); }});

MT_OP_CASE(OpCase{"layer_norm over the last two dims, weight without bias",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({2, 3, 4}, dt, 304, -1.0, 2.0), rand_input({3, 4}, dt, 305, 0.5, 1.5)};
                  },
                  [](const V& v) {
  return layer_norm(v[0], {3, 4}, v[1], Variable(), 1e-3);
}});

MT_OP_CASE(OpCase{"layer_norm without affine parameters",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({3, 6}, dt, 306)};
                  },
                  [](const V& v) { return layer_norm(v[0], {6}); }});

MT_OP_CASE(OpCase{"group_norm 2 groups, 4-D non-contiguous input, affine",
                  [](DType dt) {
  return std::vector<Tensor>{rand_noncontig({2, 4, 3, 2}, dt, 307), rand_input({4}, dt, 308, 0.5, 1.5),
                             rand_input({4}, dt, 309)};
                  },
                  [](const V& v) { return group_norm(v[0], 2, v[1], v[2]); }});

MT_OP_CASE(OpCase{"group_norm one channel per group (instance norm), 3-D",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({2, 3, 5}, dt, 310), rand_input({3}, dt, 311, 0.5, 1.5),
                             rand_input({3}, dt, 312)};
                  },
                  [](const V& v) { return group_norm(v[0], 3, v[1], v[2]); }});

MT_OP_CASE(OpCase{"group_norm one group (layer norm over C, H, W), no affine",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({3, 2, 2, 2}, dt, 313)};
                  },
                  [](const V& v) { return group_norm(v[0], 1); }});

}  // namespace
