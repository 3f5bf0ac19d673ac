// Batch norm on the GPU against the CPU kernels (tensor/cpu/batch_norm.cpp): f32, f16, bf16,
// contiguous and strided inputs, ragged shapes, training and eval, forward and backward, in-place
// running statistics through strided views.
#include "tests/cuda/cuda_test.h"

#include <algorithm>

#include "mixtape.h"

using namespace mixtape;
using namespace mixtape::cuda_test;

namespace {

// Note [Batch norm tolerances]
// The statistics are double sums in a different order than the CPU's; rounded to fp32 they are
// almost always the CPU's bits, and everything after them is the CPU's fp32 expression (Note
// [Batch norm on the GPU] in cuda/batch_norm.cu). Tolerances therefore allow only a flipped last-bit
// rounding: 2 ulps of the stored dtype plus 1e-6 absolute (an fp32 ulp of the O(1) terms that
// cancel in x - mean), and at least 99% of the elements must be bit-identical.
void require_bn_close(const Tensor& got, const Tensor& want, const std::string& what) {
  require_close(host_view(got), want, what, 2.0, 1e-6);
  const double same = fraction_identical(got, want);
  INFO(what << ": " << same * 100.0 << "% bit-identical");
  CHECK(same >= 0.99);
}

const std::vector<Shape>& bn_shapes() {
  static const std::vector<Shape> shapes = {{33, 3, 5, 7},  {1, 17, 5, 7}, {33, 1, 1, 1}, {2, 3, 28, 28},
                                            {1, 1, 28, 28}, {33, 17},      {4, 3, 7}};
  return shapes;
}

}  // namespace

TEST_CASE("cuda batch_norm forward matches the CPU in training and eval", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 100;
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (const Shape& shape : bn_shapes())
      for (bool strided : {false, true})
        for (bool training : {true, false}) {
          ++seed;
          const int64_t C = shape[1];
          // Parameters in the input's dtype or in f32 (mixed precision); running statistics in
          // f32, or in the input's dtype to exercise the 16-bit rounding of the update.
          const DType pdt = seed % 2 ? DType::f32 : dt;
          const DType sdt = seed % 3 == 0 ? dt : DType::f32;
          const Tensor x = random(shape, dt, seed, -2.0, 3.0);  // mean far from zero
          const Tensor w = random({C}, pdt, seed + 1, 0.5, 1.5), b = random({C}, pdt, seed + 2, -0.5, 0.5);
          const Tensor rm = random({C}, sdt, seed + 3, -0.5, 0.5), rv = random({C}, sdt, seed + 4, 0.5, 2.0);
          const bool affine = seed % 5 != 0;
          const Tensor wa = affine ? w : Tensor(), ba = affine ? b : Tensor();
          const std::string what = std::string(dtype_name(dt)) + " " + shape_str(shape) + " " + layout_name(strided) +
                                   (training ? " training" : " eval") + (affine ? "" : " no affine") + ", stats " +
                                   dtype_name(sdt);
          Tensor rm_c = rm.clone(), rv_c = rv.clone();
          const BatchNormOutput want = batch_norm_forward(x, wa, ba, rm_c, rv_c, training, 0.1, 1e-5);
          // Running statistics as strided views on the GPU: written in place through the stride.
          Tensor rm_g = gpu_input(rm, strided), rv_g = gpu_input(rv, strided);
          const BatchNormOutput got =
              batch_norm_forward(gpu_input(x, strided), affine ? on_gpu(w) : Tensor(), affine ? on_gpu(b) : Tensor(),
                                 rm_g, rv_g, training, 0.1, 1e-5);
          REQUIRE(got.mean.dtype() == want.mean.dtype());
          REQUIRE(got.invstd.dtype() == want.invstd.dtype());
          require_bn_close(got.mean, want.mean, what + ": mean");
          require_bn_close(got.invstd, want.invstd, what + ": invstd");
          require_bn_close(got.y, want.y, what + ": y");
          require_bn_close(rm_g, rm_c, what + ": running_mean");
          require_bn_close(rv_g, rv_c, what + ": running_var");
          if (!training) {  // eval leaves the running statistics alone
            require_bit_identical(host_view(rm_g), rm, what + ": running_mean untouched");
            require_bit_identical(host_view(rv_g), rv, what + ": running_var untouched");
          }
        }
}

TEST_CASE("cuda batch_norm forward without running statistics", "[cuda]") {
  MT_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16}) {
    const Tensor x = random({5, 3, 4, 4}, dt, 7, -1.0, 2.0);
    const BatchNormOutput want = batch_norm_forward(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-3);
    const BatchNormOutput got = batch_norm_forward(on_gpu(x), Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-3);
    require_bn_close(got.y, want.y, std::string(dtype_name(dt)) + " y");
    require_bn_close(got.invstd, want.invstd, std::string(dtype_name(dt)) + " invstd");
  }
}

TEST_CASE("cuda batch_norm backward matches the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 500;
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (const Shape& shape : bn_shapes())
      for (bool strided : {false, true})
        for (bool training : {true, false}) {
          ++seed;
          const int64_t C = shape[1];
          const DType pdt = seed % 2 ? DType::f32 : dt;
          const Tensor x = random(shape, dt, seed, -2.0, 3.0), dy = random(shape, dt, seed + 1);
          const bool affine = seed % 5 != 0;
          const Tensor w = affine ? random({C}, pdt, seed + 2, 0.5, 1.5) : Tensor();
          const Tensor rm = random({C}, DType::f32, seed + 3, -0.5, 0.5),
                       rv = random({C}, DType::f32, seed + 4, 0.5, 2.0);
          // The saved statistics come from the CPU forward and are shared by both backwards.
          Tensor rm_c = rm.clone(), rv_c = rv.clone();
          const BatchNormOutput fwd = batch_norm_forward(x, w, Tensor(), rm_c, rv_c, training, 0.1, 1e-5);
          // Which gradients are wanted varies: all, dx only, parameters only.
          const int want_set = int(seed % 3);
          const bool need_dx = want_set != 2, need_params = want_set != 1;
          const std::string what = std::string(dtype_name(dt)) + " " + shape_str(shape) + " " + layout_name(strided) +
                                   (training ? " training" : " eval") + (affine ? "" : " no affine") +
                                   (need_dx ? " dx" : "") + (need_params ? " dw db" : "");
          const BatchNormGrads want =
              batch_norm_backward(dy, x, w, fwd.mean, fwd.invstd, training, need_dx, need_params, need_params, pdt);
          const BatchNormGrads got = batch_norm_backward(
              gpu_input(dy, strided), gpu_input(x, strided), affine ? on_gpu(w) : Tensor(), on_gpu(fwd.mean),
              on_gpu(fwd.invstd), training, need_dx, need_params, need_params, pdt);
          REQUIRE(got.dx.defined() == need_dx);
          REQUIRE(got.dweight.defined() == need_params);
          REQUIRE(got.dbias.defined() == need_params);
          if (need_dx) require_bn_close(got.dx, want.dx, what + ": dx");
          if (need_params) {
            require_bn_close(got.dweight, want.dweight, what + ": dweight");
            require_bn_close(got.dbias, want.dbias, what + ": dbias");
          }
        }
}
