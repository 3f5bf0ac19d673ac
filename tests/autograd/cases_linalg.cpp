// Op cases for matmul, bmm and linear (see support/op_cases.h).
#include "support/op_cases.h"

namespace {
using namespace mixtape;
using namespace mixtape::test;
using V = std::vector<Variable>;

MT_OP_CASE(OpCase{"matmul 2-D",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({3, 4}, dt, 101), rand_input({4, 5}, dt, 102)};
                  },
                  [](const V& v) { return matmul(v[0], v[1]); }});

// Transposed views reach BLAS as CblasTrans; a strided slice is neither layout and gets copied.
MT_OP_CASE(OpCase{"matmul transposed and strided operands",
                  [](DType dt) {
  return std::vector<Tensor>{rand_noncontig({3, 4}, dt, 103), rand_noncontig({4, 2}, dt, 104),
                             rand_input({2, 6}, dt, 105).slice(1, 0, 6, 2)};
                  },
                  [](const V& v) { return matmul(matmul(v[0], v[1]), v[2]); }, 8.0});

MT_OP_CASE(OpCase{"matmul batched with broadcast [2, 1, 3, 4] x [3, 4, 2]",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({2, 1, 3, 4}, dt, 106), rand_noncontig({3, 4, 2}, dt, 107)};
                  },
                  [](const V& v) { return matmul(v[0], v[1]); }});

MT_OP_CASE(OpCase{"matmul N-D x 2-D (folded) and 2-D x N-D",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({2, 3, 4}, dt, 108), rand_input({4, 3}, dt, 109), rand_input({2, 3}, dt, 110)};
                  },
                  [](const V& v) { return matmul(v[2], matmul(v[0], v[1])); }, 8.0});

MT_OP_CASE(OpCase{"matmul with 1-D operands",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({4}, dt, 111), rand_input({2, 4, 3}, dt, 112), rand_input({3}, dt, 113)};
                  },
                  [](const V& v) { return matmul(matmul(v[0], v[1]), v[2]); }, 8.0});

MT_OP_CASE(OpCase{"bmm with a transposed operand",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({2, 3, 4}, dt, 114), rand_noncontig({2, 4, 3}, dt, 115)};
                  },
                  [](const V& v) { return bmm(v[0], v[1]); }});

MT_OP_CASE(OpCase{"linear with bias on a 3-D input",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({2, 3, 4}, dt, 116), rand_input({5, 4}, dt, 117), rand_input({5}, dt, 118)};
                  },
                  [](const V& v) { return linear(v[0], v[1], v[2]); }});

MT_OP_CASE(OpCase{"linear without bias on a 3-D non-contiguous input",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({3, 4, 2}, dt, 119).transpose(0, 2), rand_input({3, 3}, dt, 120)};
                  },
                  [](const V& v) { return linear(v[0], v[1]); }});
}  // namespace
