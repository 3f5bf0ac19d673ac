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

// ---- cross_entropy options, nll_loss, binary_cross_entropy, l1_loss, smooth_l1_loss ----------

// Labels with some positions set to `ignore` (every third).
Tensor labels_with_ignored(const Shape& s, int64_t n, uint64_t seed, int64_t ignore) {
  Tensor t = rand_labels(s, n, seed);
  for (int64_t i = 0; i < t.numel(); i += 3) t.flat_set(i, double(ignore));
  return t;
}
// Class weights in the logits' dtype and device.
Tensor class_weights(const Variable& x, int64_t C) {
  std::vector<double> w;
  for (int64_t c = 0; c < C; ++c) w.push_back(0.5 + 0.25 * double(c));
  return from_vector(w, {C}, x.dtype()).to(x.device());
}

MT_OP_CASE(OpCase{"cross_entropy mean, class weights and ignore_index",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({6, 5}, dt, 321, -2.0, 2.0), labels_with_ignored({6}, 5, 322, -100)};
                  },
                  [](const V& v) {
  return cross_entropy(v[0], v[1].data(), Reduction::mean, {class_weights(v[0], 5), -100, 0.0});
}});
MT_OP_CASE(OpCase{"cross_entropy mean, label smoothing 0.2, ignore_index 1, non-contiguous logits",
                  [](DType dt) {
  return std::vector<Tensor>{rand_noncontig({5, 4}, dt, 323, -2.0, 2.0), rand_labels({5}, 4, 324)};
                  },
                  [](const V& v) {
  return cross_entropy(v[0], v[1].data(), Reduction::mean, {Tensor(), 1, 0.2});
}});
MT_OP_CASE(OpCase{"cross_entropy none, weights and label smoothing, logits [N, C, d]",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({2, 3, 4}, dt, 325, -2.0, 2.0), labels_with_ignored({2, 4}, 3, 326, 2)};
                  },
                  [](const V& v) {
  return cross_entropy(v[0], v[1].data(), Reduction::none, {class_weights(v[0], 3), 2, 0.1});
}});
MT_OP_CASE(OpCase{"cross_entropy sum, weights and label smoothing",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({4, 5}, dt, 327, -2.0, 2.0), rand_labels({4}, 5, 328)};
                  },
                  [](const V& v) {
  return cross_entropy(v[0], v[1].data(), Reduction::sum, {class_weights(v[0], 5), -100, 0.3});
}});

MT_OP_CASE(OpCase{"nll_loss mean of log_softmax",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({4, 5}, dt, 331, -2.0, 2.0), rand_labels({4}, 5, 332)};
                  },
                  [](const V& v) { return nll_loss(log_softmax(v[0], 1), v[1].data()); }});
MT_OP_CASE(OpCase{"nll_loss mean, class weights and ignore_index, non-contiguous input",
                  [](DType dt) {
  return std::vector<Tensor>{rand_noncontig({6, 4}, dt, 333, -3.0, 0.0), labels_with_ignored({6}, 4, 334, -1)};
                  },
                  [](const V& v) {
  return nll_loss(v[0], v[1].data(), Reduction::mean, {class_weights(v[0], 4), -1, 0.0});
}});
MT_OP_CASE(OpCase{"nll_loss none, [N, C, d]",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({2, 3, 2}, dt, 335, -3.0, 0.0), rand_labels({2, 2}, 3, 336)};
                  },
                  [](const V& v) { return nll_loss(v[0], v[1].data(), Reduction::none); }});

// Probabilities inside (0.05, 0.95): finite differences stay away from the clamp and the floor.
MT_OP_CASE(OpCase{"binary_cross_entropy mean",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({3, 4}, dt, 341, 0.05, 0.95), rand_input({3, 4}, dt, 342, 0.0, 1.0)};
                  },
                  [](const V& v) { return binary_cross_entropy(v[0], v[1], Reduction::mean); }});
MT_OP_CASE(OpCase{"binary_cross_entropy none, non-contiguous probabilities, 0/1 targets",
                  [](DType dt) {
  Tensor t = rand_labels({3, 4}, 2, 344).to(dt);
  return std::vector<Tensor>{rand_noncontig({3, 4}, dt, 343, 0.05, 0.95), t};
                  },
                  [](const V& v) { return binary_cross_entropy(v[0], v[1], Reduction::none); }});
MT_OP_CASE(OpCase{"binary_cross_entropy of a sigmoid, sum",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({2, 5}, dt, 345, -3.0, 3.0), rand_input({2, 5}, dt, 346, 0.0, 1.0)};
                  },
                  [](const V& v) { return binary_cross_entropy(sigmoid(v[0]), v[1], Reduction::sum); }});

// |a - b| bounded away from 0 (and from beta for smooth_l1), where the losses have kinks.
MT_OP_CASE(OpCase{"l1_loss mean",
                  [](DType dt) {
  return std::vector<Tensor>{rand_away_from_zero({3, 4}, dt, 351, 0.25, 1.5), zeros({3, 4}, dt)};
                  },
                  [](const V& v) { return l1_loss(v[0], v[1], Reduction::mean); }});
MT_OP_CASE(OpCase{"l1_loss none, non-contiguous input",
                  [](DType dt) {
  Tensor b = rand_input({3, 4}, dt, 353);
  return std::vector<Tensor>{rand_noncontig({3, 4}, dt, 352, 1.5, 2.5), b};
                  },
                  [](const V& v) { return l1_loss(v[0], v[1], Reduction::none); }});
MT_OP_CASE(OpCase{"smooth_l1_loss mean, beta 1, both branches",
                  [](DType dt) {
  // |d| in [0.1, 0.6] (quadratic) for one half, [1.4, 2.5] (linear) for the other.
  Tensor a = rand_away_from_zero({4, 4}, DType::f64, 354, 0.1, 0.6);
  Tensor far = rand_away_from_zero({2, 4}, DType::f64, 355, 1.4, 2.5);
  for (int64_t i = 0; i < 8; ++i) a.flat_set(8 + i, far.flat_get(i));
  return std::vector<Tensor>{a.to(dt), zeros({4, 4}, dt)};
                  },
                  [](const V& v) { return smooth_l1_loss(v[0], v[1], Reduction::mean, 1.0); }});
MT_OP_CASE(OpCase{"smooth_l1_loss sum, beta 0.5",
                  [](DType dt) {
  return std::vector<Tensor>{rand_away_from_zero({3, 4}, dt, 356, 0.6, 2.0), zeros({3, 4}, dt)};
                  },
                  [](const V& v) { return smooth_l1_loss(v[0], v[1], Reduction::sum, 0.5); }});
MT_OP_CASE(OpCase{"smooth_l1_loss none, beta 2",
                  [](DType dt) {
  return std::vector<Tensor>{rand_away_from_zero({2, 3}, dt, 357, 0.1, 1.5), zeros({2, 3}, dt)};
                  },
                  [](const V& v) { return smooth_l1_loss(v[0], v[1], Reduction::none, 2.0); }});

}  // namespace
