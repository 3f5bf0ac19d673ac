// Op cases for gather, index_select, where and masked_fill (see support/op_cases.h). Indices,
// conditions and masks are i64 inputs, so the suites differentiate only the floating ones.
#include "support/op_cases.h"

namespace {
using namespace mixtape;
using namespace mixtape::test;
using V = std::vector<Variable>;

Tensor index_of(const std::vector<int64_t>& v, const Shape& shape) { return from_vector(v, shape); }

MT_OP_CASE(OpCase{"gather dim 1, repeated indices, index smaller than the input in dim 0",
                  [](DType dt) {
  return std::vector<Tensor>{rand_noncontig({3, 5}, dt, 201), index_of({4, 0, 4, 2, 1, 1, 1, 3}, {2, 4})};
                  },
                  [](const V& v) { return gather(v[0], 1, v[1].data()); }});

MT_OP_CASE(OpCase{"gather dim 0 of a broadcast input, non-contiguous index",
                  [](DType dt) {
  const Tensor idx = index_of({0, 2, 1, 2, 2, 0, 1, 1, 0, 0, 2, 2, 1, 0, 1}, {3, 5}).t();  // [5, 3], strided
  return std::vector<Tensor>{rand_input({1, 3}, dt, 202), idx};
                  },
                  [](const V& v) {
  const Variable x = expand(transpose(v[0], 0, 1), {3, 4});  // [3, 4], stride 0 along dim 1
  return gather(x, 0, v[1].data());                          // [5, 3]
}});

MT_OP_CASE(OpCase{"index_select dim 0 with repeats, non-contiguous input",
                  [](DType dt) {
  return std::vector<Tensor>{rand_noncontig({4, 3}, dt, 211), index_of({2, 0, 2, 3, 2}, {5})};
                  },
                  [](const V& v) { return index_select(v[0], 0, v[1].data()); }});

MT_OP_CASE(OpCase{"index_select dim -1 of a 3-d input, repeated index, output used twice",
                  [](DType dt) {
  return std::vector<Tensor>{rand_noncontig({2, 3, 4}, dt, 212), index_of({3, 1, 3}, {3})};
                  },
                  [](const V& v) {
  const Variable y = index_select(v[0], -1, v[1].data());  // [2, 3, 3]
  return y * y + y;
}});

MT_OP_CASE(OpCase{"where with a broadcast condition and broadcast operands",
                  [](DType dt) {
  return std::vector<Tensor>{index_of({1, 0, 1}, {3, 1}), rand_input({1, 4}, dt, 221), rand_noncontig({3, 4}, dt, 222)};
                  },
                  [](const V& v) { return where(v[0].data(), v[1], v[2]); }});

MT_OP_CASE(OpCase{"masked_fill with a broadcast mask, non-contiguous input",
                  [](DType dt) {
  return std::vector<Tensor>{rand_noncontig({3, 4}, dt, 231), index_of({0, 1, 1, 0}, {4})};
                  },
                  [](const V& v) { return masked_fill(v[0], v[1].data(), -2.5); }});

}  // namespace
