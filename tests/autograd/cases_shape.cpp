// Op cases for concat, split, stack and cast (see support/op_cases.h).
#include <cmath>

#include "support/op_cases.h"

namespace {
using namespace mixtape;
using namespace mixtape::test;
using V = std::vector<Variable>;

MT_OP_CASE(OpCase{"concat 3 tensors along dim 1, one non-contiguous",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({2, 1, 3}, dt, 101), rand_noncontig({2, 2, 3}, dt, 102),
                             rand_input({2, 3, 3}, dt, 103)};
                  },
                  [](const V& v) {
  Variable y = concat({v[0], v[1], v[2]}, 1);  // [2, 6, 3]
  return y * y;
}});

// Pieces 0 and 2 are read, piece 1 never: the tape zero-fills its gradient (and its Variable
// is gone by backward time, so the node's recorded output shape is used).
MT_OP_CASE(OpCase{"split unequal sizes, middle piece unused",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({3, 7}, dt, 111)};
                  },
                  [](const V& v) {
  std::vector<Variable> p = split(v[0], {2, 4, 1}, 1);  // [3,2] [3,4] [3,1]
  return p[0] * p[0] + p[2];                            // [3, 2]
}});

// Every piece used, each with its own weight; the middle piece also feeds two branches.
MT_OP_CASE(OpCase{"split by chunk size, pieces with different weights",
                  [](DType dt) {
  return std::vector<Tensor>{rand_noncontig({5, 3}, dt, 121), rand_input({3}, dt, 122)};
                  },
                  [](const V& v) {
  std::vector<Variable> p = split(v[0], 2, 0);  // [2,3] [2,3] [1,3]
  Variable a = p[0] * 4.0;
  Variable b = p[1] * v[1] + p[1] * 0.25;
  Variable c = p[2] * -0.5;
  return concat({a, b, c}, 0);  // [5, 3]
}});

MT_OP_CASE(OpCase{"stack 3 tensors along a middle dim",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({2, 3}, dt, 131), rand_noncontig({2, 3}, dt, 132), rand_input({2, 3}, dt, 133)};
                  },
                  [](const V& v) {
  Variable y = stack({v[0], v[1], v[2]}, 1);  // [2, 3, 3]
  return y * stack({v[2], v[0], v[1]}, -2);   // every input used twice
}});

// Note [cast op case]
// A cast case runs in four dtypes and three suites, and only f64 inputs reach the gradient
// check, where any cast away from f64 rounds: with the default step 1e-6, an f32 rounding error
// of ~6e-8 would swamp the central difference. So the inputs lie on a grid (multiples of 1/64
// in [-1, 1], exact in every dtype including bf16) and the step is 2^-10: each perturbed value
// (16k +- 1) / 1024 and every product below are exact in f32, so the f64 -> f32 -> f64 round
// trip is exact in the forward, and the function is bilinear, so the central difference is
// exact too. The analytic gradient passes dY through f32, a relative error <= 2^-24.
//   f64  gradcheck: f64 -> f32 (a recorded cast), multiply in f32, f32 -> f64 (recorded).
//   f32  scale suite: no cast node (same dtype); f64 scale suite: the casts above.
//   f16/bf16 suite: the 16-bit -> f32 widening (the cast that queries cast_beta), multiply in
//        f32, round once back to the case dtype; the f64 reference runs the f64 path.
Tensor grid_input(const Shape& shape, DType dt, uint64_t seed) {
  Tensor t = rand_input(shape, DType::f64, seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.flat_set(i, std::round(t.flat_get(i) * 64.0) / 64.0);
  return t.to(dt);
}

MT_OP_CASE(OpCase{"cast to f32, multiply, cast back to the input dtype",
                  [](DType dt) {
  return std::vector<Tensor>{grid_input({3, 4}, dt, 141), grid_input({4}, dt, 142)};
                  },
                  [](const V& v) {
  const DType dt = v[0].dtype();
  Variable y = cast(v[0], DType::f32) * cast(v[1], DType::f32);
  return cast(y, dt);
},
           /*tol16=*/4.0, /*check16=*/true, /*fd_step=*/0.0009765625, /*fd_tol=*/1e-6});

// Widening to f64 and back: a node in the f32 and 16-bit runs, the identity (x itself) in f64.
// f64 stays on the CPU, so the device suite leaves this case out.
MT_OP_CASE(OpCase{.name = "cast to f64 and back, through a transcendental",
                  .inputs =
                      [](DType dt) {
  return std::vector<Tensor>{rand_noncontig({3, 4}, dt, 151)};
                  },
                  .fn =
                      [](const V& v) {
  const DType dt = v[0].dtype();
  Variable w = cast(v[0], DType::f64);
  return cast(tanh(w) * w, dt);
                  },
           .on_device = false});

}  // namespace
