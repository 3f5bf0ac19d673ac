// Elementwise kernels on plain tensors: hand-computed values at the edges (signed zero, inf, NaN)
// for the formulas whose code is not the textbook branch (Note [Branch-free leaky ReLU]).
#include "support/catch.h"

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "mixtape.h"
#include "tensor/core/elementwise_formulas.h"
#include "support/test_util.h"
#include "tensor/cpu/convert.h"
#include "tensor/cpu/math.h"

using namespace mixtape;

namespace {

// Bitwise comparison of floats (so -0 differs from +0 and NaN equals NaN).
bool same_bits(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

}  // namespace

TEST_CASE("leaky_relu forward and backward: values, signed zeros, inf and NaN", "[tensor][elementwise]") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> xs = {3.0f, -2.5f, 0.0f, -0.0f, 1e-30f, -1e-30f, inf, -inf, nan};
  const std::vector<float> dys = {2.0f, -4.0f, 1.0f, -1.0f, -0.0f, 8.0f, 1.0f, 0.5f, 3.0f};
  const float a = 0.25f;
  // y = x for x > 0, else a x;  dx = dy for x > 0, else a dy.
  const std::vector<float> y_want = {3.0f, -0.625f, 0.0f, -0.0f, 1e-30f, -0.25e-30f, inf, -inf, nan};
  const std::vector<float> dx_want = {2.0f, -1.0f, 0.25f, -0.25f, -0.0f, 2.0f, 1.0f, 0.125f, 0.75f};

  const Tensor x = from_vector(xs, {3, 3}), dy = from_vector(dys, {3, 3});
  const std::vector<float> y = leaky_relu(x, a).values<float>();
  const std::vector<float> dx = unary_backward(UnaryOp::leaky_relu, x, Tensor(), dy, a).values<float>();
  for (size_t i = 0; i < xs.size(); ++i) {
    INFO("x = " << xs[i]);
    CHECK(same_bits(y[i], y_want[i]));
    CHECK(same_bits(dx[i], dx_want[i]));
  }

  // A strided (transposed) input gives the same values at the same logical positions.
  const std::vector<float> yt = leaky_relu(x.t(), a).values<float>();
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 3; ++c) CHECK(same_bits(yt[size_t(r * 3 + c)], y_want[size_t(c * 3 + r)]));

  // 16-bit inputs: computed in fp32 and rounded once; these values are exact in fp16 and bf16.
  for (DType dt : {DType::f16, DType::bf16}) {
    const std::vector<double> got =
        leaky_relu(from_vector(std::vector<double>{2.0, -2.0, -0.5}, {3}, dt), 0.5).to_vector();
    CHECK(got == std::vector<double>{2.0, -1.0, -0.25});
  }
}

TEST_CASE("relu, clamp and abs never hide a NaN; pow(x, 0) has gradient 0 at x = 0", "[tensor][elementwise]") {
  // Note [NaN in the formulas]: PyTorch's values. relu and clamp pass NaN forward and pass the
  // gradient through at a NaN input; abs's gradient at NaN is NaN; d(x^0)/dx = 0 everywhere.
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (DType dt : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    INFO(dtype_name(dt));
    const Tensor x = from_vector(std::vector<double>{nan, -1.0, 0.0, -0.0, 2.0}, {5}, dt);
    const Tensor dy = from_vector(std::vector<double>{3.0, 3.0, 3.0, 3.0, 3.0}, {5}, dt);
    const std::vector<double> relu_y = unary(UnaryOp::relu, x).to_vector();
    CHECK(std::isnan(relu_y[0]));
    CHECK(relu_y[1] == 0.0);
    CHECK(relu_y[4] == 2.0);
    const std::vector<double> relu_dx = unary_backward(UnaryOp::relu, x, Tensor(), dy).to_vector();
    CHECK(relu_dx == std::vector<double>{3.0, 0.0, 0.0, 0.0, 3.0});
    const std::vector<double> clamp_y = unary(UnaryOp::clamp, x, -0.5, 1.0).to_vector();
    CHECK(std::isnan(clamp_y[0]));
    const std::vector<double> clamp_dx = unary_backward(UnaryOp::clamp, x, Tensor(), dy, -0.5, 1.0).to_vector();
    CHECK(clamp_dx == std::vector<double>{3.0, 0.0, 3.0, 3.0, 0.0});
    const std::vector<double> abs_dx = unary_backward(UnaryOp::abs, x, Tensor(), dy).to_vector();
    CHECK(std::isnan(abs_dx[0]));
    CHECK(abs_dx[1] == -3.0);
    CHECK(abs_dx[2] == 0.0);
    const Tensor y0 = unary(UnaryOp::pow, x, 0.0);
    const std::vector<double> pow_dx = unary_backward(UnaryOp::pow, x, y0, dy, 0.0).to_vector();
    CHECK(pow_dx[2] == 0.0);  // was 0 * 0^-1 = 0 * inf = NaN
    CHECK(pow_dx[3] == 0.0);
    CHECK(pow_dx[4] == 0.0);
    // A NaN or inf gradient still shows: dy * 0 is NaN (as PyTorch's masked derivative times dy).
    const Tensor bad_dy = from_vector(std::vector<double>{inf, nan, 1.0, 1.0, 1.0}, {5}, dt);
    const std::vector<double> pow_bad = unary_backward(UnaryOp::pow, x, y0, bad_dy, 0.0).to_vector();
    CHECK(std::isnan(pow_bad[0]));
    CHECK(std::isnan(pow_bad[1]));
  }
  // Through the tape: a NaN activation reaches the input's gradient.
  Variable v(from_vector(std::vector<double>{nan, 1.0, -1.0}, {3}), true);
  {
    Tape tape;
    tape.backward(sum(relu(v) * v));
  }
  const std::vector<double> g = v.grad()->unscaled().to_vector();
  CHECK(std::isnan(g[0]));
  CHECK(g[1] == 2.0);
  CHECK(g[2] == 0.0);
}

namespace {

// One activation's expected values at kActX with dy = 2, from PyTorch 1.13 in f64
// (torch.nn.functional.gelu, silu, elu, softplus) except where a comment says otherwise.
struct ActivationValues {
  UnaryOp op;
  double a, b;
  std::vector<double> y, dx;
};

constexpr double kInf = std::numeric_limits<double>::infinity(), kNaN = std::numeric_limits<double>::quiet_NaN();
const std::vector<double> kActX = {2.0, -1.5, 0.5, 0.0, -0.0, 30.0, -30.0, kInf, -kInf, kNaN};

// got within rel * |want| + abs_tol of want; NaN only for NaN, inf only for the same inf.
bool close_to(double got, double want, double rel, double abs_tol) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return got == want;
  return std::abs(got - want) <= rel * std::abs(want) + abs_tol;
}

}  // namespace

TEST_CASE("gelu, silu, elu and softplus match PyTorch: values, signed zeros, inf and NaN", "[tensor][elementwise]") {
  // A NaN input gives a NaN output everywhere and never a hidden gradient (Note [NaN in the
  // formulas]); elu's and softplus's gradients at NaN are PyTorch's: dy, and NaN.
  const std::vector<ActivationValues> cases = {
      // At x = -30, x Phi(x) with Phi from erfc (Note [GELU with erfc]; Python's math.erfc): PyTorch's
      // 1 + erf(x / sqrt 2) is 0 there, and it answers -0 and -8.841876809271286e-195.
      {UnaryOp::gelu,
       0.0,
       0.0,
       {1.9544997361036416, -0.10021080190328704, 0.34573123063700656, 0.0, -0.0, 30.0, -1.4720141781446293e-196, kInf,
        kNaN, kNaN},
       {2.170463602156394, -0.2549383844599592, 1.7349902493123257, 1.0, 1.0, 2.0, -8.832063381416988e-195, kNaN, kNaN,
        kNaN}},
      {UnaryOp::gelu_tanh,
       0.0,
       0.0,
       {1.954597694087775, -0.10042842301976707, 0.34571400982514394, 0.0, -0.0, 30.0, -0.0, kInf, kNaN, kNaN},
       {2.1721985132472366, -0.25542158630286615, 1.7347398070692848, 1.0, 1.0, 2.0, 0.0, kNaN, kNaN, kNaN}},
      {UnaryOp::silu,
       0.0,
       0.0,
       {1.7615941559557646, -0.2736382857095345, 0.3112296656009273, 0.0, -0.0, 29.999999999997197,
        -2.8072868906517896e-12, kInf, kNaN, kNaN},
       {2.181568497569791, -0.08258830859828589, 1.4799223746053038, 1.0, 1.0, 2.000000000005422,
        -5.427421321926268e-12, kNaN, kNaN, kNaN}},
      // elu(-0) = alpha * expm1(-0) = -0; PyTorch 1.13 computes exp(x) - 1 there and answers +0.
      {UnaryOp::elu,
       0.5,
       0.0,
       {2.0, -0.3884349199257851, 0.5, 0.0, -0.0, 30.0, -0.4999999999999532, kInf, -0.5, kNaN},
       {2.0, 0.22313016014842982, 2.0, 1.0, 1.0, 2.0, 9.357622968840175e-14, 2.0, 0.0, 2.0}},
      {UnaryOp::softplus,
       1.0,
       20.0,
       {2.1269280110429727, 0.2014132779827524, 0.9740769841801067, 0.6931471805599453, 0.6931471805599453, 30.0,
        9.357622968839737e-14, kInf, 0.0, kNaN},
       {1.7615941559557649, 0.36485104761271264, 1.2449186624037092, 1.0, 1.0, 2.0, 1.87152459376786e-13, 2.0, 0.0,
        kNaN}},
      // beta = 2, threshold = 1.5: x where 2x > 1.5 (x = 2 and 30), log1p(exp(2x)) / 2 elsewhere.
      {UnaryOp::softplus,
       2.0,
       1.5,
       {2.0, 0.02429367578687103, 0.6566308437591114, 0.34657359027997264, 0.34657359027997264, 30.0,
        4.37825538134826e-27, kInf, 0.0, kNaN},
       {2.0, 0.09485174635513358, 1.4621171572600098, 1.0, 1.0, 2.0, 1.751302152539304e-26, 2.0, 0.0, kNaN}},
  };
  for (const ActivationValues& c : cases)
    for (DType dt : {DType::f64, DType::f32}) {
      INFO(unary_op_name(c.op) << "(a=" << c.a << ", b=" << c.b << ") " << dtype_name(dt));
      // libm within a few ulps; exp(-x^2) turns x's rounding into a relative error of 2 x^2 ulps
      // (gelu at x = -30: 1800 ulps of f64). In f32, results below the range flush to (signed) zero.
      const double rel = dt == DType::f64 ? 1e-12 : 4e-6, abs_tol = dt == DType::f64 ? 0.0 : 1e-37;
      const Tensor x = from_vector(kActX, {int64_t(kActX.size())}, dt);
      const Tensor dy = full(x.shape(), 2.0, dt);
      const Tensor yt = unary(c.op, x, c.a, c.b);
      const std::vector<double> y = yt.to_vector();
      const std::vector<double> dx = unary_backward(c.op, x, yt, dy, c.a, c.b).to_vector();
      for (size_t i = 0; i < kActX.size(); ++i) {
        INFO("x = " << kActX[i] << ": y = " << y[i] << " (want " << c.y[i] << "), dx = " << dx[i] << " (want "
                    << c.dx[i] << ")");
        CHECK(close_to(y[i], c.y[i], rel, abs_tol));
        CHECK(close_to(dx[i], c.dx[i], rel, abs_tol));
        if (c.y[i] == 0.0 && std::abs(kActX[i]) <= 0.0) CHECK(std::signbit(y[i]) == std::signbit(c.y[i]));
      }
    }
  // fp32 keeps gelu's negative tail (Note [GELU with erfc]) to within 2 x^2 ulps (above); x Phi(x)
  // from Python's math.erfc. PyTorch's fp32 answers -1.2671947e-4 and 0.
  const std::vector<double> tail = gelu(from_vector(std::vector<double>{-4.0, -6.0}, {2})).to_vector();
  CHECK(tail[0] == Approx(-0.00012668496733247986).epsilon(4e-6));
  CHECK(tail[1] == Approx(-5.919525870226207e-09).epsilon(1e-5));
  // approximate as torch's string: "none" (the default) or "tanh"; anything else is refused.
  const Tensor x = from_vector(std::vector<double>{-1.5, 0.5, 2.0}, {3});
  CHECK(gelu(x, "tanh").to_vector() == unary(UnaryOp::gelu_tanh, x).to_vector());
  CHECK(gelu(x, "none").to_vector() == gelu(x).to_vector());
  CHECK_THROWS_WITH(gelu(x, "exact"), Catch::Contains("gelu: approximate must be \"none\" or \"tanh\", got \"exact\""));
}

TEST_CASE("hardtanh is PyTorch's: clamps, keeps NaN and signed zeros, gradient 0 at and beyond the bounds",
          "[tensor][elementwise]") {
  const double inf = kInf, nan = kNaN;
  const std::vector<double> xs = {-2.0, -1.0, -0.5, 0.0, -0.0, 0.5, 1.0, 2.0, inf, -inf, nan};
  // torch.nn.functional.hardtanh(x, -1, 1) and its gradient for dy = 2 (torch 1.13, f64 and f32).
  const std::vector<double> y_want = {-1.0, -1.0, -0.5, 0.0, -0.0, 0.5, 1.0, 1.0, 1.0, -1.0, nan};
  const std::vector<double> dx_want = {0.0, 0.0, 2.0, 2.0, 2.0, 2.0, 0.0, 0.0, 0.0, 0.0, 2.0};
  for (DType dt : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    INFO(dtype_name(dt));
    const Tensor x = from_vector(xs, {int64_t(xs.size())}, dt);
    const std::vector<double> y = hardtanh(x).to_vector();
    const std::vector<double> dx =
        unary_backward(UnaryOp::hardtanh, x, Tensor(), full(x.shape(), 2.0, dt), -1.0, 1.0).to_vector();
    for (size_t i = 0; i < xs.size(); ++i) {
      INFO("x = " << xs[i]);
      CHECK(same_bits(float(y[i]), float(y_want[i])));
      CHECK(same_bits(float(dx[i]), float(dx_want[i])));
    }
  }
  CHECK_THROWS_WITH(hardtanh(from_vector(xs, {int64_t(xs.size())}), 1.0, -1.0),
                    Catch::Contains("hardtanh") && Catch::Contains("max_val"));
}

TEST_CASE("the activations round once from fp32 and read strided inputs", "[tensor][elementwise]") {
  // Inputs exact in f16 and bf16: the 16-bit result is the f32 result rounded once.
  const std::vector<double> xs = {-3.0, -1.25, -0.5, -0.0, 0.0, 0.375, 0.75, 1.5, 2.5, 6.0};
  const Tensor x32 = from_vector(xs, {2, 5}, DType::f32);
  const Tensor dy32 =
      from_vector(std::vector<double>{1.0, -2.0, 0.5, 3.0, -1.0, 0.25, 2.0, -0.5, 1.0, 4.0}, {2, 5}, DType::f32);
  struct Op {
    UnaryOp op;
    double a, b;
  };
  for (const Op& o : {Op{UnaryOp::gelu, 0, 0}, Op{UnaryOp::gelu_tanh, 0, 0}, Op{UnaryOp::silu, 0, 0},
                      Op{UnaryOp::elu, 1.5, 0}, Op{UnaryOp::softplus, 2.0, 3.0}, Op{UnaryOp::hardtanh, -0.5, 1.0}}) {
    INFO(unary_op_name(o.op));
    const Tensor y32 = unary(o.op, x32, o.a, o.b);
    const Tensor dx32 = unary_backward(o.op, x32, y32, dy32, o.a, o.b);
    for (DType dt : {DType::f16, DType::bf16}) {
      INFO(dtype_name(dt));
      const Tensor x = x32.to(dt), dy = dy32.to(dt);
      CHECK(unary(o.op, x, o.a, o.b).to_vector() == y32.to(dt).to_vector());
      CHECK(unary_backward(o.op, x, unary(o.op, x, o.a, o.b), dy, o.a, o.b).to_vector() == dx32.to(dt).to_vector());
    }
    // A transposed view gives the values of its contiguous copy, bit for bit.
    const std::vector<double> yt = unary(o.op, x32.t(), o.a, o.b).to_vector();
    const std::vector<double> yc = unary(o.op, x32.t().contiguous(), o.a, o.b).to_vector();
    for (size_t i = 0; i < yt.size(); ++i) CHECK(same_bits(float(yt[i]), float(yc[i])));
  }
}

TEST_CASE("unary_backward reads x and y exactly where backward_reads_x / _y say", "[tensor][elementwise]") {
  // The CPU kernel loads only the operands these flags name (tensor/cpu/elementwise.cpp): an
  // operand flagged as unread must not change the gradient, checked with a NaN in its place, and
  // one flagged as read must matter somewhere, checked on a few points.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> xs = {1.5f, -0.75f, 2.0f}, ys = {0.25f, 3.0f, -1.5f};
  auto check = [&]<UnaryOp OP>() {
    INFO("op " << int(OP));
    const float a = 0.5f, b = 2.5f, dy = 1.25f;
    bool x_matters = false, y_matters = false;
    for (float x : xs)
      for (float y : ys) {
        const float g = formulas::unary_backward<OP, cpu::HostMath>(x, y, dy, a, b);
        const float no_x = formulas::unary_backward<OP, cpu::HostMath>(nan, y, dy, a, b);
        const float no_y = formulas::unary_backward<OP, cpu::HostMath>(x, nan, dy, a, b);
        if (!formulas::backward_reads_x<OP>) CHECK(same_bits(no_x, g));
        if (!formulas::backward_reads_y<OP>) CHECK(same_bits(no_y, g));
        x_matters = x_matters || !same_bits(no_x, g);
        y_matters = y_matters || !same_bits(no_y, g);
      }
    CHECK(x_matters == formulas::backward_reads_x<OP>);
    CHECK(y_matters == formulas::backward_reads_y<OP>);
  };
  for (int op = 0; op <= int(UnaryOp::rdiv_scalar); ++op)
    formulas::dispatch_unary(UnaryOp(op), [&]<UnaryOp OP>() { check.template operator()<OP>(); });
}

TEST_CASE("relu on bit patterns equals the generic kernel", "[tensor][elementwise]") {
  // Note [ReLU on bit patterns]: without a rounding census relu and its gradient select on the bit
  // patterns; with one open the generic kernel (load, select, store) runs. For f16 and bf16 every
  // x pattern of the 65,536; for f32 every pattern of the top 16 bits (sign, exponent: zeros,
  // subnormals, inf, NaN) with mixed low bits. Each x against two dy tensors (two permutations
  // of the same patterns, so NaN, inf, zeros and subnormals meet each kind of x), contiguous and
  // through a transposed view.
  const auto run = [&]<class U>(DType dt) {
    INFO(dtype_name(dt));
    const auto patterns = [&](uint32_t mul) {
      Tensor t = empty({256, 256}, dt);
      auto* p = static_cast<U*>(t.raw_data());
      for (uint32_t i = 0; i < 65536; ++i) {
        const uint32_t k = (i * mul) & 0xFFFFu;
        p[i] = sizeof(U) == 2 ? U(k) : U(k << 16 | ((k * 40503u) & 0xFFFFu));
      }
      return t;
    };
    const auto bits = [](const Tensor& t) {
      const Tensor c = t.contiguous();
      const auto* p = static_cast<const U*>(c.raw_data());
      return std::vector<U>(p, p + c.numel());
    };
    const Tensor x = patterns(1);
    for (bool transposed : {false, true}) {
      INFO((transposed ? "transposed" : "contiguous"));
      const Tensor xv = transposed ? x.transpose(0, 1) : x;
      std::vector<U> fast = bits(relu(xv)), generic;
      {
        RoundingCensus census;
        generic = bits(relu(xv));
      }
      CHECK(fast == generic);
      for (uint32_t mul : {40503u, 7u}) {
        const Tensor dy = transposed ? patterns(mul).transpose(0, 1) : patterns(mul);
        fast = bits(unary_backward(UnaryOp::relu, xv, Tensor(), dy));
        {
          RoundingCensus census;
          generic = bits(unary_backward(UnaryOp::relu, xv, Tensor(), dy));
        }
        CHECK(fast == generic);
      }
    }
  };
  run.template operator()<uint16_t>(DType::f16);
  run.template operator()<uint16_t>(DType::bf16);
  run.template operator()<uint32_t>(DType::f32);
}

TEST_CASE("leaky_relu gives the same bits on every conversion path", "[tensor][elementwise]") {
  // Note [Vector leaky ReLU]: the AVX-512 rows against the scalar reference, forward and backward,
  // on random floats of every magnitude, zeros, infinities, NaN and subnormals, in rows whose
  // lengths leave every tail (f32 rows are read in place, 16-bit ones through the chunk buffers).
  std::vector<float> xs, dys;
  uint32_t state = 12345;
  const auto next = [&] { return state = state * 1664525u + 1013904223u; };
  for (int i = 0; i < 4099; ++i) {
    xs.push_back(std::bit_cast<float>(next()));
    dys.push_back(std::bit_cast<float>(next()));
  }
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (float v : {0.0f, -0.0f, inf, -inf, nan, -nan, 1e-45f, -1e-45f, 1.0f, -1.0f}) {
    xs.push_back(v);
    dys.push_back(v == 0.0f ? 1.5f : -v);  // at x = 0 the slope is a: dy must not be 0 there
  }
  for (DType dt : {DType::f32, DType::bf16, DType::f16})
    for (int64_t cols : {int64_t(1), int64_t(7), int64_t(587), int64_t(4109)}) {  // 4109 = 7 x 587
      INFO(dtype_name(dt) << " rows of " << cols);
      const Tensor x = from_vector(xs, {int64_t(xs.size()) / cols, cols}).to(dt);
      const Tensor dy = from_vector(dys, {int64_t(dys.size()) / cols, cols}).to(dt);
      std::vector<std::vector<uint8_t>> outs;
      for (const std::string& path : cpu::conversion_paths()) {
        test::ConversionPathScope scope(path);
        for (const Tensor& t : {leaky_relu(x, 0.01), unary_backward(UnaryOp::leaky_relu, x, Tensor(), dy, 0.01)}) {
          const auto* p = static_cast<const uint8_t*>(t.raw_data());
          outs.emplace_back(p, p + t.numel() * dtype_size(dt));
        }
      }
      for (size_t i = 2; i < outs.size(); ++i) CHECK(outs[i] == outs[i % 2]);
    }
}
