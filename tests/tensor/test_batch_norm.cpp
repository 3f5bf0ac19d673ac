// Batch norm on plain tensors: hand-computed values, running statistics, gradients, error
// messages.
#include "support/catch.h"

#include <bit>
#include <cmath>
#include <string>
#include <vector>

#include "mixtape.h"
#include "support/test_util.h"
#include "tensor/cpu/convert.h"

using namespace mixtape;
using Catch::Contains;

using mixtape::test::error_of;

namespace {

Tensor f32(const std::vector<double>& v, const Shape& s) { return from_vector(v, s, DType::f32); }

}  // namespace

TEST_CASE("batch_norm training normalizes with batch statistics and updates running ones", "[batch_norm]") {
  // Channel 0: 1 2 3 4 (mean 2.5, biased var 1.25, unbiased 5/3).
  // Channel 1: 2 2 2 6 (mean 3, biased var 3, unbiased 4).
  Tensor x = f32({1, 2, 2, 2, 3, 2, 4, 6}, {4, 2});
  Tensor rm = zeros({2}), rv = ones({2});
  BatchNormOutput r = batch_norm_forward(x, Tensor(), Tensor(), rm, rv, true, 0.1, 1e-5);
  CHECK(r.mean.dtype() == DType::f32);
  CHECK(r.mean.flat_get(0) == Approx(2.5));
  CHECK(r.mean.flat_get(1) == Approx(3.0));
  CHECK(r.invstd.flat_get(0) == Approx(1.0 / std::sqrt(1.25 + 1e-5)));
  CHECK(r.invstd.flat_get(1) == Approx(1.0 / std::sqrt(3.0 + 1e-5)));
  // running = 0.9 * running + 0.1 * batch, with the unbiased variance.
  CHECK(rm.flat_get(0) == Approx(0.25));
  CHECK(rm.flat_get(1) == Approx(0.3));
  CHECK(rv.flat_get(0) == Approx(0.9 + 0.1 * 5.0 / 3.0));
  CHECK(rv.flat_get(1) == Approx(0.9 + 0.1 * 4.0));
  CHECK(r.y.flat_get(0) == Approx((1 - 2.5) / std::sqrt(1.25 + 1e-5)));
  CHECK(r.y.flat_get(7) == Approx((6 - 3.0) / std::sqrt(3.0 + 1e-5)));

  // A second step keeps blending.
  batch_norm(x, Tensor(), Tensor(), rm, rv, true, 0.1, 1e-5);
  CHECK(rm.flat_get(0) == Approx(0.9 * 0.25 + 0.25));

  // Affine part and a 4-D input: statistics over N, H, W; 16-bit input keeps fp32 statistics.
  Tensor x4 = from_vector(std::vector<double>{1, 3, 10, 10, 5, 7, 10, 30}, {2, 2, 1, 2}, DType::f16);
  Tensor w = f32({2, 1}, {2}), b = f32({0.5, -1}, {2});
  BatchNormOutput r4 = batch_norm_forward(x4, w, b, Tensor(), Tensor(), true, 0.1, 0.0);
  CHECK(r4.y.dtype() == DType::f16);
  CHECK(r4.mean.dtype() == DType::f32);
  CHECK(r4.mean.flat_get(0) == Approx(4.0));   // 1 3 5 7
  CHECK(r4.mean.flat_get(1) == Approx(15.0));  // 10 10 10 30
  CHECK(r4.invstd.flat_get(0) == Approx(1.0 / std::sqrt(5.0)));
  CHECK(r4.y.flat_get(0) == Approx(2.0 * (1 - 4) / std::sqrt(5.0) + 0.5).epsilon(1e-3));
}

TEST_CASE("batch_norm eval mode uses the running statistics and leaves them alone", "[batch_norm]") {
  Tensor x = f32({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor rm = f32({1, -1}, {2}), rv = f32({4, 0.25}, {2});
  Tensor w = f32({3, 1}, {2}), b = f32({0, 10}, {2});
  Tensor y = batch_norm(x, w, b, rm, rv, false, 0.1, 0.0);
  for (int64_t n = 0; n < 3; ++n) {
    CHECK(y.flat_get(2 * n) == Approx(3.0 * (x.flat_get(2 * n) - 1) / 2.0));
    CHECK(y.flat_get(2 * n + 1) == Approx((x.flat_get(2 * n + 1) + 1) / 0.5 + 10));
  }
  CHECK(rm.to_vector() == std::vector<double>{1, -1});
  CHECK(rv.to_vector() == std::vector<double>{4, 0.25});

  // Eval-mode gradient is the affine map's: dx = dy * w * invstd.
  Variable xv(x, true);
  Tape tape;
  Variable out = batch_norm(xv, Variable(w), Variable(b), rm, rv, false, 0.1, 0.0);
  tape.backward(sum(out));
  CHECK(xv.grad()->g.flat_get(0) == Approx(1.5));
  CHECK(xv.grad()->g.flat_get(1) == Approx(2.0));
}

TEST_CASE("batch_norm training gradient sums to zero per channel and weight grads keep their dtype", "[batch_norm]") {
  Generator gen(3);
  Variable x(uniform({4, 3, 2}, -1, 1, gen, DType::bf16), true);
  Variable w(uniform({3}, 0.5, 1.5, gen), true), b(zeros({3}), true);  // f32 parameters, bf16 input
  Tape tape;
  Variable y = batch_norm(x, w, b, Tensor(), Tensor(), true);
  tape.backward(y, ScaledGrad{uniform({4, 3, 2}, -1, 1, gen, DType::bf16), 1.0f});
  CHECK(x.grad()->g.dtype() == DType::bf16);
  CHECK(w.grad()->g.dtype() == DType::f32);
  CHECK(b.grad()->g.dtype() == DType::f32);
  // d/dx of a mean-subtracted output: the gradient has (near) zero mean over each channel.
  Tensor dx = x.grad()->g.to(DType::f64);
  for (int64_t c = 0; c < 3; ++c) CHECK(std::abs(sum(dx.select(1, c)).item()) < 0.05);
}

TEST_CASE("batch_norm rejects bad inputs with messages naming the shapes", "[batch_norm]") {
  Tensor x = zeros({2, 3});
  CHECK_THAT(error_of([&] { batch_norm(x, zeros({4}), Tensor(), Tensor(), Tensor(), true); }),
             Contains("weight f32[4]") && Contains("f32[2, 3]") && Contains("3 channels"));
  CHECK_THAT(error_of([&] { batch_norm(x, Tensor(), Tensor(), zeros({2}), ones({2}), true); }),
             Contains("running_mean f32[2]") && Contains("f32[2, 3]"));
  CHECK_THAT(error_of([&] { batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false); }),
             Contains("running_mean is required"));
  CHECK_THAT(error_of([&] {
               batch_norm(zeros({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true);
             }),
             Contains("more than one value per channel"));
  CHECK_THAT(error_of([&] { batch_norm(zeros({3}), Tensor(), Tensor(), Tensor(), Tensor(), true); }),
             Contains("at least 2 dims"));
}

// Note [Batch norm vectors]: the AVX-512 row loops must give the scalar loops' bits, forward
// (output, statistics, running statistics) and backward (dx, dweight, dbias), in training and
// eval mode, for planes shorter than a vector, planes across two row chunks (> 256 positions),
// channels-last strides, and every floating dtype the loops see as f32.
TEST_CASE("batch_norm gives the same bits on every vector path", "[batch_norm]") {
  auto bits = [](const Tensor& t) {
    std::vector<uint64_t> b;
    for (double v : t.to_vector()) b.push_back(std::bit_cast<uint64_t>(v));
    return b;
  };
  const std::vector<std::string> paths = cpu::conversion_paths();
  const std::string saved = cpu::conversion_path();
  Generator gen(11);
  int compared = 0;
  for (const Shape& shape : {Shape{4, 3, 7, 7}, Shape{2, 5, 17, 19}, Shape{3, 2, 1, 5}, Shape{6, 4}})
    for (bool channels_last : {false, true})
      for (DType dt : {DType::f32, DType::f16, DType::bf16})
        for (bool training : {true, false}) {
          if (channels_last && shape.size() != 4) continue;
          INFO("shape " << shape_str(shape) << (channels_last ? " channels-last" : "") << ", " << dtype_name(dt)
                        << (training ? ", training" : ", eval"));
          const int64_t C = shape[1];
          Tensor x = add(uniform(shape, -2.0, 2.0, gen), full(shape, 3.0, DType::f32, Device::cpu())).to(dt);
          if (channels_last) x = x.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
          const Tensor w = uniform({C}, 0.5, 1.5, gen), b = uniform({C}, -0.5, 0.5, gen);
          const Tensor dy = uniform(shape, -1.0, 1.0, gen).to(dt);
          const Tensor rm0 = uniform({C}, -0.5, 0.5, gen), rv0 = uniform({C}, 0.5, 1.5, gen);
          std::vector<std::vector<uint64_t>> ref;
          for (const std::string& path : paths) {
            INFO("path " << path);
            cpu::set_conversion_path(path);
            const Tensor rm = rm0.clone(), rv = rv0.clone();
            const BatchNormOutput f = batch_norm_forward(x, w, b, rm, rv, training, 0.1, 1e-5);
            const BatchNormGrads g =
                batch_norm_backward(dy, x, w, f.mean, f.invstd, training, true, true, true, DType::f32);
            const std::vector<std::vector<uint64_t>> got = {bits(f.y), bits(f.mean), bits(f.invstd),  bits(rm),
                                                            bits(rv),  bits(g.dx),   bits(g.dweight), bits(g.dbias)};
            if (ref.empty()) {  // the first path is the scalar reference
              ref = got;
              continue;
            }
            for (size_t k = 0; k < got.size(); ++k) {
              INFO("result " << k);
              CHECK(got[k] == ref[k]);
            }
            ++compared;
          }
        }
  cpu::set_conversion_path(saved);
  CHECK((paths.size() == 1 || compared > 0));
}
