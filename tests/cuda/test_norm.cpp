// Layer norm and group norm on the GPU against the CPU kernels (tensor/cpu/norm.cpp): f32, f16,
// bf16, contiguous and strided inputs, ragged groups, with and without affine parameters (in the
// input's dtype or f32), forward and backward; and batch norm's cumulative average (momentum =
// None) read from a device counter.
#include "tests/cuda/cuda_test.h"

#include <string>

#include "mixtape.h"

using namespace mixtape;
using namespace mixtape::cuda_test;

namespace {

// Note [Batch norm tolerances] in test_batch_norm.cpp holds here too (Note [Norm on the GPU]):
// double sums in another order, the CPU's fp32 expression after them, so at most a flipped last
// bit, and at least 99% of the elements bit-identical.
void require_norm_close(const Tensor& got, const Tensor& want, const std::string& what) {
  require_close(host_view(got), want, what, 2.0, 1e-6);
  const double same = fraction_identical(got, want);
  INFO(what << ": " << same * 100.0 << "% bit-identical");
  CHECK(same >= 0.99);
}

struct NormShape {
  Shape x;
  int64_t groups;    // group_norm's num_groups; 0: layer_norm
  Shape normalized;  // layer_norm's normalized_shape
};

const std::vector<NormShape>& norm_shapes() {
  static const std::vector<NormShape> shapes = {
      {{33, 6, 5, 7}, 3, {}}, {{2, 32, 28, 28}, 8, {}}, {{5, 3, 1}, 3, {}},        {{1, 4, 300}, 1, {}},
      {{33, 17}, 0, {17}},    {{4, 3, 700}, 0, {700}},  {{2, 3, 5, 7}, 0, {5, 7}}, {{1, 1}, 0, {1}},
  };
  return shapes;
}

Shape param_shape(const NormShape& s) { return s.groups ? Shape{s.x[1]} : s.normalized; }

NormOutput forward(const NormShape& s, const Tensor& x, const Tensor& w, const Tensor& b) {
  return s.groups ? group_norm_forward(x, s.groups, w, b) : layer_norm_forward(x, s.normalized, w, b);
}

NormGrads backward(const NormShape& s, const Tensor& dy, const Tensor& x, const Tensor& w, const NormOutput& f,
                   bool need_dx, bool need_params, DType pdt) {
  return s.groups
             ? group_norm_backward(dy, x, s.groups, w, f.mean, f.invstd, need_dx, need_params, need_params, pdt)
             : layer_norm_backward(dy, x, s.normalized, w, f.mean, f.invstd, need_dx, need_params, need_params, pdt);
}

}  // namespace

TEST_CASE("cuda layer_norm and group_norm match the CPU, forward and backward", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 900;
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (const NormShape& s : norm_shapes())
      for (bool strided : {false, true}) {
        ++seed;
        const DType pdt = seed % 2 ? DType::f32 : dt;
        const bool affine = seed % 5 != 0;
        const Shape ps = param_shape(s);
        const Tensor x = random(s.x, dt, seed, -2.0, 3.0), dy = random(s.x, dt, seed + 1);
        const Tensor w = affine ? random(ps, pdt, seed + 2, 0.5, 1.5) : Tensor();
        const Tensor b = affine ? random(ps, pdt, seed + 3, -0.5, 0.5) : Tensor();
        const int want_set = int(seed % 3);
        const bool need_dx = want_set != 2, need_params = affine && want_set != 1;
        const std::string what = std::string(s.groups ? "group_norm " : "layer_norm ") + dtype_name(dt) + " " +
                                 shape_str(s.x) + " " + layout_name(strided) + (affine ? "" : " no affine") +
                                 (need_dx ? " dx" : "") + (need_params ? " dw db" : "");
        const NormOutput want = forward(s, x, w, b);
        const NormOutput got =
            forward(s, gpu_input(x, strided), affine ? on_gpu(w) : Tensor(), affine ? on_gpu(b) : Tensor());
        require_norm_close(got.mean, want.mean, what + ": mean");
        require_norm_close(got.invstd, want.invstd, what + ": invstd");
        require_norm_close(got.y, want.y, what + ": y");
        // Both backwards from the CPU's saved statistics.
        const NormGrads gw = backward(s, dy, x, w, want, need_dx, need_params, pdt);
        NormOutput saved = want;
        saved.mean = on_gpu(want.mean);
        saved.invstd = on_gpu(want.invstd);
        const NormGrads gg = backward(s, gpu_input(dy, strided), gpu_input(x, strided), affine ? on_gpu(w) : Tensor(),
                                      saved, need_dx, need_params, pdt);
        REQUIRE(gg.dx.defined() == need_dx);
        REQUIRE(gg.dweight.defined() == need_params);
        if (need_dx) require_norm_close(gg.dx, gw.dx, what + ": dx");
        if (need_params) {
          require_norm_close(gg.dweight, gw.dweight, what + ": dweight");
          require_norm_close(gg.dbias, gw.dbias, what + ": dbias");
        }
      }
}

TEST_CASE("cuda batch_norm's cumulative average reads the counter on the device", "[cuda]") {
  MT_REQUIRE_GPU();
  const Tensor x = random({8, 3, 4, 4}, DType::f32, 77, -1.0, 2.0);
  for (int64_t count : {1, 2, 7}) {
    INFO("count " << count);
    Tensor rm = random({3}, DType::f32, 78), rv = random({3}, DType::f32, 79, 0.5, 1.5);
    const Tensor n = from_vector(std::vector<int64_t>{count}, Shape{});
    Tensor rm_g = on_gpu(rm), rv_g = on_gpu(rv);
    batch_norm_forward(x, Tensor(), Tensor(), rm, rv, true, 0.0, 1e-5, n);
    batch_norm_forward(on_gpu(x), Tensor(), Tensor(), rm_g, rv_g, true, 0.0, 1e-5, on_gpu(n));
    require_norm_close(rm_g, rm, "running_mean");
    require_norm_close(rv_g, rv, "running_var");
  }
  // Through the module: the same running statistics on both devices after three batches.
  nn::BatchNorm2d cpu_bn(3, 1e-5, std::nullopt), gpu_bn(3, 1e-5, std::nullopt);
  gpu_bn.to(gpu());
  for (uint64_t k = 0; k < 3; ++k) {
    const Tensor xb = random({4, 3, 5, 5}, DType::f32, 80 + k, -1.0, 1.0 + double(k));
    cpu_bn(Variable(xb));
    gpu_bn(Variable(on_gpu(xb)));
  }
  CHECK(on_cpu(gpu_bn.num_batches_tracked()).item() == 3.0);
  require_norm_close(gpu_bn.running_mean(), cpu_bn.running_mean(), "module running_mean");
  require_norm_close(gpu_bn.running_var(), cpu_bn.running_var(), "module running_var");
}
