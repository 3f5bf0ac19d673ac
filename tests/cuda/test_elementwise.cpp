// cuda::unary, unary_backward and binary against the CPU kernels (tensor/cpu/elementwise.cpp),
// on contiguous, strided and broadcast (stride 0) inputs of ragged sizes, in f32, f16 and bf16.
//
// Every op whose formula is plain IEEE arithmetic (+ - * / sqrt, comparisons, selects) must match
// bit for bit. exp, log, pow, sigmoid, tanh and the activations gelu, gelu_tanh, silu, elu and
// softplus call libm on the CPU and libdevice on the GPU
// (Note [Device libm] in cuda/elementwise.cu): they are compared with require_close at a few
// ulps of the output dtype.
#include "tests/cuda/cuda_test.h"

#include <bit>
#include <limits>

#include "mixtape.h"

using namespace mixtape;
using namespace mixtape::cuda_test;

namespace {

constexpr DType kTypes[] = {DType::f32, DType::f16, DType::bf16};

struct OpCase {
  UnaryOp op;
  double a = 0.0, b = 0.0;
  double lo = -3.0, hi = 3.0;  // input range
  bool libm = false;           // forward calls exp/log/pow/erfc/expm1/log1p (Note [Device libm])
};

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases = {
      {UnaryOp::neg},
      {UnaryOp::exp, 0, 0, -3, 3, true},
      {UnaryOp::log, 0, 0, 0.05, 4, true},
      {UnaryOp::sqrt, 0, 0, 0.0, 4},
      {UnaryOp::abs},
      {UnaryOp::relu},
      {UnaryOp::sigmoid, 0, 0, -6, 6, true},
      {UnaryOp::tanh, 0, 0, -4, 4, true},
      {UnaryOp::tanh, 0, 0, -0.002, 0.002, true},  // the series branch of tanh_f32
      {UnaryOp::leaky_relu, 0.01},
      {UnaryOp::leaky_relu, 0.3},
      {UnaryOp::clamp, -0.5, 0.75},
      {UnaryOp::pow, 2.0, 0, 0.05, 3, true},
      {UnaryOp::pow, 2.5, 0, 0.05, 3, true},
      {UnaryOp::pow, -1.5, 0, 0.05, 3, true},
      {UnaryOp::pow, 0.0, 0, -2, 2, true},  // x^0: gradient dy * 0, also at x = 0
      {UnaryOp::gelu, 0, 0, -6, 6, true},
      {UnaryOp::gelu_tanh, 0, 0, -6, 6, true},
      {UnaryOp::silu, 0, 0, -6, 6, true},
      {UnaryOp::elu, 1.0, 0, -4, 4, true},
      {UnaryOp::elu, 0.3, 0, -0.01, 0.01, true},  // expm1 near 0
      {UnaryOp::softplus, 1.0, 20.0, -6, 6, true},
      {UnaryOp::softplus, 2.0, 1.5, -2, 2, true},  // both branches: x where 2x > 1.5
      {UnaryOp::hardtanh, -1.0, 1.0},
      {UnaryOp::hardtanh, -0.25, 0.5},
      {UnaryOp::add_scalar, 0.1},
      {UnaryOp::mul_scalar, -1.7},
      {UnaryOp::div_scalar, 3.0},
      {UnaryOp::rsub_scalar, 0.3},
      {UnaryOp::rdiv_scalar, 1.3, 0, 0.1, 3},
  };
  return cases;
}

// Ragged sizes: 1, 7, 33, 257 and 1005 elements, and a 3-d shape for the strided layouts.
const std::vector<Shape>& shapes() {
  static const std::vector<Shape> s = {{1}, {7}, {33}, {257}, {3, 5, 67}, {2, 1, 9, 4}};
  return s;
}

// Bitwise equality, except that a NaN matches any NaN in f32: NaN sign and payload are not part
// of the contract for arithmetic (x86 produces the negative default NaN 0xFFC00000, NVIDIA GPUs
// 0x7FFFFFFF). 16-bit outputs have one NaN, 0x7FFF, on both devices and compare bitwise.
void require_same_values(const Tensor& got, const Tensor& want, const std::string& what) {
  if (is_16bit(want.dtype())) return require_bit_identical(got, want, what);
  INFO(what << ": got " << got.meta() << ", want " << want.meta());
  REQUIRE(got.shape() == want.shape());
  const std::vector<uint64_t> g = element_bits(got), w = element_bits(want);
  const std::vector<double> gv = on_cpu(got).to_vector(), wv = on_cpu(want).to_vector();
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (g[i] != w[i] && !(std::isnan(gv[i]) && std::isnan(wv[i])) && bad++ == 0) first = i;
  if (bad) {
    INFO(bad << " of " << g.size() << " differ; first at " << first << ": got " << gv[first] << ", want " << wv[first]);
    CHECK(bad == 0);
  }
}

// Tolerance of libm ops (rel_ulps counts eps_of = half an ulp of the output dtype). f32: 8 ulps.
// CUDA's expf and logf are within 2 and 1 ulp of the correctly rounded result and powf within a
// few (CUDA Programming Guide, mathematical functions appendix), glibc's within about 0.5, and
// sigmoid and pow's backward add one or two rounded operations. A 16-bit output is the rounding
// of two nearly equal f32 values, so it may differ in its last ulp. atol covers subnormal results.
void require_libm_close(const Tensor& got, const Tensor& want, const std::string& what) {
  if (want.dtype() == DType::f32) return require_close(got, want, what, 16.0, 1e-37);
  const double min_sub = want.dtype() == DType::f16 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -133);
  require_close(got, want, what, 2.0, min_sub);
}

// pow's and the activations' backwards compute from x with libm (Note [Device libm]); every
// other backward is arithmetic on the given x, y and dy.
bool backward_calls_libm(UnaryOp op) {
  switch (op) {
    case UnaryOp::pow:
    case UnaryOp::gelu:
    case UnaryOp::gelu_tanh:
    case UnaryOp::silu:
    case UnaryOp::elu:
    case UnaryOp::softplus: return true;
    default: return false;
  }
}

// The layouts an input comes in: fresh, strided (every other element of a transposed buffer) and,
// where the op reads one value per row, a broadcast view (stride 0 in the last dim).
enum class Layout { contiguous, strided, broadcast };
const char* layout_name(Layout l) {
  return l == Layout::contiguous ? "contiguous" : l == Layout::strided ? "strided" : "broadcast";
}
Tensor layout_gpu(const Tensor& cpu, Layout l) {
  switch (l) {
    case Layout::contiguous: return on_gpu(cpu);
    case Layout::strided: return strided_copy(on_gpu(cpu));
    case Layout::broadcast: return on_gpu(cpu.narrow(-1, 0, 1).contiguous()).expand(cpu.shape());
  }
  return on_gpu(cpu);
}
// The CPU twin of layout_gpu's values (broadcast repeats column 0).
Tensor layout_cpu(const Tensor& cpu, Layout l) {
  return l == Layout::broadcast ? cpu.narrow(-1, 0, 1).contiguous().expand(cpu.shape()) : cpu;
}

}  // namespace

TEST_CASE("cuda unary ops forward match the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 1;
  for (const OpCase& c : op_cases())
    for (DType dt : kTypes)
      for (const Shape& shape : shapes())
        for (Layout l : {Layout::contiguous, Layout::strided, Layout::broadcast}) {
          const Tensor base = random(shape, dt, ++seed, c.lo, c.hi);
          const Tensor want = unary(c.op, layout_cpu(base, l), c.a, c.b);
          const Tensor got = unary(c.op, layout_gpu(base, l), c.a, c.b);
          const std::string what = std::string(unary_op_name(c.op)) + "(a=" + std::to_string(c.a) + ") " +
                                   dtype_name(dt) + " " + shape_str(shape) + " " + layout_name(l);
          REQUIRE(got.device() == gpu());
          if (c.libm) require_libm_close(got, want, what);
          else require_same_values(got, want, what);
        }
}

TEST_CASE("cuda unary ops forward on a broadcast view read stride 0", "[cuda]") {
  MT_REQUIRE_GPU();
  for (DType dt : kTypes) {
    const Tensor col = random({5, 1}, dt, 3, -2, 2);
    const Tensor want = unary(UnaryOp::mul_scalar, col.expand({5, 33}), 3.0);
    require_bit_identical(unary(UnaryOp::mul_scalar, on_gpu(col).expand({5, 33}), 3.0), want, "mul_scalar broadcast");
  }
}

TEST_CASE("cuda unary ops on special values match the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> v = {
      0.0f,   -0.0f,   1.0f,  -1.0f,  inf,      -inf,      std::numeric_limits<float>::quiet_NaN(),
      1e-40f, -1e-40f, 3e-8f, -3e-8f, 65504.0f, -65504.0f, 0.75f,
      -0.5f,  1e30f,   -1e30f};
  Tensor base = empty({int64_t(v.size())}, DType::f32);
  std::memcpy(base.raw_data(), v.data(), v.size() * 4);
  for (DType dt : kTypes) {
    const Tensor x = base.to(dt);
    for (const OpCase& c : op_cases()) {
      if (c.libm) continue;  // libm differs at specials only in NaN/inf conventions already covered
      const std::string what = std::string(unary_op_name(c.op)) + " specials " + dtype_name(dt);
      require_same_values(unary(c.op, on_gpu(x), c.a, c.b), unary(c.op, x, c.a, c.b), what);
      const Tensor y = unary(c.op, x, c.a, c.b);
      const Tensor dy = random(x.shape(), dt, 77);
      require_same_values(unary_backward(c.op, on_gpu(x), on_gpu(y), on_gpu(dy), c.a, c.b),
                          unary_backward(c.op, x, y, dy, c.a, c.b), what + " backward");
    }
  }
}

TEST_CASE("cuda unary ops backward match the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 500;
  for (const OpCase& c : op_cases())
    for (DType dt : kTypes)
      for (const Shape& shape : shapes())
        for (Layout l : {Layout::contiguous, Layout::strided}) {
          const Tensor x = random(shape, dt, ++seed, c.lo, c.hi);
          const Tensor y = unary(c.op, x, c.a, c.b);  // the CPU's forward output feeds both backwards
          const Tensor dy = random(shape, dt, ++seed, -2.0, 2.0);
          const Tensor want = unary_backward(c.op, x, y, dy, c.a, c.b);
          // Each operand in its own layout: x strided, y and dy contiguous or strided.
          const Tensor got = unary_backward(c.op, layout_gpu(x, l), layout_gpu(y, l), layout_gpu(dy, l), c.a, c.b);
          const std::string what = std::string(unary_op_name(c.op)) + " backward " + dtype_name(dt) + " " +
                                   shape_str(shape) + " " + layout_name(l);
          if (backward_calls_libm(c.op)) require_libm_close(got, want, what);
          else require_same_values(got, want, what);
        }
  // The front-end's stand-ins: backward of ops that read neither x nor y.
  const Tensor dy = random({257}, DType::f16, 9);
  require_bit_identical(unary_backward(UnaryOp::mul_scalar, Tensor(), Tensor(), on_gpu(dy), 0.3),
                        unary_backward(UnaryOp::mul_scalar, Tensor(), Tensor(), dy, 0.3),
                        "mul_scalar backward, dy only");
}

TEST_CASE("cuda binary ops match the CPU with broadcasting and strides", "[cuda]") {
  MT_REQUIRE_GPU();
  // (a shape, b shape): equal, trailing broadcast, middle broadcast, scalar-like, rank mismatch.
  const std::vector<std::pair<Shape, Shape>> pairs = {
      {{1}, {1}},          {{7}, {7}},         {{257}, {257}},          {{3, 5, 67}, {3, 5, 67}},
      {{4, 1, 5}, {3, 5}}, {{33}, {1}},        {{1}, {7, 33}},          {{2, 1, 9, 4}, {9, 1}},
      {{6, 1}, {1, 35}},   {{3, 5, 67}, {67}}, {{5, 1, 67}, {5, 3, 67}}};
  uint64_t seed = 900;
  for (BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div})
    for (DType dt : kTypes)
      for (const auto& [sa, sb] : pairs) {
        const Tensor a = random(sa, dt, ++seed, -3, 3);
        Tensor b = random(sb, dt, ++seed, -3, 3);
        if (op == BinaryOp::div) b = unary(UnaryOp::add_scalar, unary(UnaryOp::abs, b), 0.25);  // away from 0
        const Tensor want = binary(op, a, b);
        const std::string what =
            std::string(binary_op_name(op)) + " " + dtype_name(dt) + " " + shape_str(sa) + " with " + shape_str(sb);
        require_bit_identical(binary(op, on_gpu(a), on_gpu(b)), want, what);
        require_bit_identical(binary(op, strided_copy(on_gpu(a)), on_gpu(b)), want, what + ", a strided");
        require_bit_identical(binary(op, strided_copy(on_gpu(a)), strided_copy(on_gpu(b))), want,
                              what + ", both strided");
      }
  // Exactness where 16-bit arithmetic is exact in fp32: fp16 1 + 2^-11 (a tie) rounds to even.
  const Tensor one = on_gpu(full({3}, 1.0, DType::f16)), tiny = on_gpu(full({3}, std::ldexp(1.0, -11), DType::f16));
  CHECK(host_view(binary(BinaryOp::add, one, tiny)).flat_get(1) == 1.0);
}
