// Op cases for softmax, log-softmax and the losses (see support/op_cases.h).
#include "support/op_cases.h"

namespace {
using namespace mixtape;
using namespace mixtape::test;
using V = std::vector<Variable>;

MT_OP_CASE(OpCase{"softmax dim 1",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({3, 4}, dt, 71, -2.0, 2.0)};
                  },
                  [](const V& v) { return softmax(v[0], 1); }});
MT_OP_CASE(OpCase{"log_softmax dim 1",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({3, 4}, dt, 72, -2.0, 2.0)};
                  },
                  [](const V& v) { return log_softmax(v[0], 1); }});
MT_OP_CASE(OpCase{"softmax last dim of a non-contiguous 3-D input",
                  [](DType dt) {
  return std::vector<Tensor>{rand_noncontig({2, 3, 4}, dt, 73, -2.0, 2.0)};
                  },
                  [](const V& v) { return softmax(v[0], -1); }});
MT_OP_CASE(OpCase{"log_softmax last dim of a non-contiguous 3-D input",
                  [](DType dt) {
  return std::vector<Tensor>{rand_noncontig({2, 3, 4}, dt, 74, -2.0, 2.0)};
                  },
                  [](const V& v) { return log_softmax(v[0], 2); }});

MT_OP_CASE(OpCase{"cross_entropy mean",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({4, 5}, dt, 81, -2.0, 2.0), rand_labels({4}, 5, 82)};
                  },
                  [](const V& v) { return cross_entropy(v[0], v[1].data(), Reduction::mean); }});
MT_OP_CASE(OpCase{"cross_entropy sum, non-contiguous logits",
                  [](DType dt) {
  return std::vector<Tensor>{rand_noncontig({4, 5}, dt, 83, -2.0, 2.0), rand_labels({4}, 5, 84)};
                  },
                  [](const V& v) { return cross_entropy(v[0], v[1].data(), Reduction::sum); }});
MT_OP_CASE(OpCase{"cross_entropy none, logits [N, C, d]",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({2, 3, 2}, dt, 85, -2.0, 2.0), rand_labels({2, 2}, 3, 86)};
                  },
                  [](const V& v) { return cross_entropy(v[0], v[1].data(), Reduction::none); }});

MT_OP_CASE(OpCase{"binary_cross_entropy_with_logits mean",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({3, 4}, dt, 91, -3.0, 3.0), rand_input({3, 4}, dt, 92, 0.0, 1.0)};
                  },
                  [](const V& v) { return binary_cross_entropy_with_logits(v[0], v[1], Reduction::mean); }});
MT_OP_CASE(OpCase{"binary_cross_entropy_with_logits none",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({2, 3}, dt, 93, -3.0, 3.0), rand_input({2, 3}, dt, 94, 0.0, 1.0)};
                  },
                  [](const V& v) { return binary_cross_entropy_with_logits(v[0], v[1], Reduction::none); }});

MT_OP_CASE(OpCase{"mse_loss mean",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({3, 4}, dt, 95), rand_input({3, 4}, dt, 96)};
                  },
                  [](const V& v) { return mse_loss(v[0], v[1], Reduction::mean); }});
MT_OP_CASE(OpCase{"mse_loss sum",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({3, 4}, dt, 97), rand_input({3, 4}, dt, 98)};
                  },
                  [](const V& v) { return mse_loss(v[0], v[1], Reduction::sum); }});
MT_OP_CASE(OpCase{"mse_loss none",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({2, 3}, dt, 99), rand_input({2, 3}, dt, 100)};
                  },
                  [](const V& v) { return mse_loss(v[0], v[1], Reduction::none); }});

}  // namespace
