// 8-bit training (autograd/fp8.h): each GEMM of a linear layer reads the operands its recipe gives
// (checked against the 16-bit GEMMs of the values the codes stand for), per-operator gradient
// scaling with E5M2's range, delayed scaling's history and its state dict, the telemetry records,
// and a small model that trains under every recipe.
#include "support/catch.h"

#include <cmath>

#include "mixtape.h"
#include "support/test_util.h"

using namespace mixtape;

namespace {

// The values of an operand as quantized by `spec`, in bf16 (exact for the power-of-two recipes).
Tensor fake_quant(const Tensor& x, const QuantSpec& spec) { return dequantize(quantize(x, spec), DType::bf16); }

QuantSpec block_spec(DType f, bool weight) {
  return {.format = f, .layout = weight ? ScaleLayout{128, 128} : ScaleLayout{1, 128}, .rule = ScaleRule::pow2_up};
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || (x[i] != x[i] && y[i] != y[i]))) return false;
  return true;
}

}  // namespace

TEST_CASE("fp8 linear: fprop, dgrad and wgrad each read the operands of their own recipe blocks", "[fp8][autograd]") {
  Generator gen(3);
  // x [2, 3, 200] in bf16 (a batch of 6 rows), w [130, 200]: K = 200 crosses a 128 block, the
  // weight's 130 rows cross one too.
  Variable x(normal({2, 3, 200}, 0.0, 1.0, gen, DType::bf16), true);
  Variable w(normal({130, 200}, 0.0, 0.05, gen), true);
  Variable b(normal({130}, 0.0, 0.1, gen), true);
  const Tensor r = normal({2, 3, 130}, 0.0, 1e-3, gen, DType::bf16);  // dy
  Fp8Context fp8({.recipe = Fp8Recipe::block});
  Variable y;
  {
    Tape tape;
    tape.set_fp8(&fp8);
    fp8.begin_step();
    y = linear(x, cast(w, DType::bf16), cast(b, DType::bf16));
    tape.backward(y, ScaledGrad{r, 1.0f});
  }
  // The references: plain bf16 GEMMs (the same fp32 arithmetic) on the values each operand's codes
  // stand for, quantized along that GEMM's K.
  const Tensor x2 = x.data().reshape({6, 200}), w16 = w.data().to(DType::bf16), d2 = r.reshape({6, 130});
  const Tensor y_ref = linear(fake_quant(x2, block_spec(DType::e4m3, false)),
                              fake_quant(w16, block_spec(DType::e4m3, true)), b.data().to(DType::bf16));
  CHECK(same_bits(y.data().reshape({6, 130}), y_ref));
  // dgrad: dx = dy w, K = out: dY rows in 1 x 128 tiles, w^T in 128 x 128 blocks.
  const Tensor dx_ref = linear(fake_quant(d2, block_spec(DType::e5m2, false)),
                               fake_quant(w16.transpose(0, 1), block_spec(DType::e4m3, true)));
  REQUIRE(x.grad().has_value());
  CHECK(x.grad()->scale == 1.0f);
  CHECK(same_bits(x.grad()->g.reshape({6, 200}), dx_ref));
  // wgrad: dw = dy^T x, K = the 6 rows: both operands transposed, 1 x 128 tiles along the rows.
  const Tensor dw_ref = linear(fake_quant(d2.transpose(0, 1), block_spec(DType::e5m2, false)),
                               fake_quant(x2.transpose(0, 1), block_spec(DType::e4m3, false)));
  REQUIRE(w.grad().has_value());
  CHECK(same_bits(w.grad()->g.to(DType::bf16), dw_ref));
  // The bias gradient is the bf16 path's: the column sums of dy.
  CHECK(same_bits(b.grad()->g.to(DType::bf16), linear_backward_bias(r)));
  // Six operands, recorded in order.
  const std::vector<Fp8Record>& recs = fp8.records();
  REQUIRE(recs.size() == 6);
  const char* gemms[] = {"fprop", "fprop", "dgrad", "dgrad", "wgrad", "wgrad"};
  const Fp8Role roles[] = {Fp8Role::input,  Fp8Role::weight, Fp8Role::grad,
                           Fp8Role::weight, Fp8Role::grad,   Fp8Role::input};
  for (size_t i = 0; i < 6; ++i) {
    CHECK(std::string(recs[i].gemm) == gemms[i]);
    CHECK(recs[i].role == roles[i]);
    CHECK(recs[i].format == (roles[i] == Fp8Role::grad ? DType::e5m2 : DType::e4m3));
    CHECK(recs[i].site == 0);
  }
  CHECK(recs[2].stats.count == 6 * 130);
}

TEST_CASE("fp8 linear under nvfp4: E2M1 inputs and weights in blocks of 16 and 16 x 16, E5M2 gradients",
          "[fp8][autograd]") {
  // The same shapes as above; the references are scaled_matmul_nt of the operands quantized as the
  // recipe says (a two-level operand's 1 / S multiplies the sums, so dequantized bf16 values,
  // rounded twice, would not give the GEMM's bits).
  Generator gen(4);
  Variable x(normal({2, 3, 200}, 0.0, 1.0, gen, DType::bf16), true);
  Variable w(normal({130, 200}, 0.0, 0.05, gen), true);
  const Tensor r = normal({2, 3, 130}, 0.0, 1e-3, gen, DType::bf16);
  Fp8Context fp8({.recipe = Fp8Recipe::nvfp4});
  Variable y;
  {
    Tape tape;
    tape.set_fp8(&fp8);
    fp8.begin_step();
    y = linear(x, cast(w, DType::bf16), Variable());
    tape.backward(y, ScaledGrad{r, 1.0f});
  }
  auto spec = [](DType f, bool weight) {
    return QuantSpec{
        .format = f, .layout = weight ? ScaleLayout{16, 16} : ScaleLayout{1, 16}, .rule = ScaleRule::nvfp4};
  };
  const Tensor x2 = x.data().reshape({6, 200}), w16 = w.data().to(DType::bf16), d2 = r.reshape({6, 130});
  const Tensor y_ref = scaled_matmul_nt(quantize(x2, spec(DType::e2m1, false)), quantize(w16, spec(DType::e2m1, true)),
                                        Tensor(), DType::bf16);
  CHECK(same_bits(y.data().reshape({6, 130}), y_ref));
  const Tensor dx_ref = scaled_matmul_nt(quantize(d2, spec(DType::e5m2, false)),
                                         quantize(w16.transpose(0, 1), spec(DType::e2m1, true)), Tensor(), DType::bf16);
  REQUIRE(x.grad().has_value());
  CHECK(same_bits(x.grad()->g.reshape({6, 200}), dx_ref));
  const Tensor dw_ref = scaled_matmul_nt(quantize(d2.transpose(0, 1), spec(DType::e5m2, false)),
                                         quantize(x2.transpose(0, 1), spec(DType::e2m1, false)), Tensor(), DType::bf16);
  REQUIRE(w.grad().has_value());
  CHECK(same_bits(w.grad()->g.to(DType::bf16), dw_ref));
  for (const Fp8Record& rec : fp8.records()) {
    CHECK(rec.format == (rec.role == Fp8Role::grad ? DType::e5m2 : DType::e2m1));
    CHECK(rec.stats.scale_inv_max > 0.0f);
  }
  // E2M1's 8 magnitudes: the forward is within a few tenths of the bf16 product, not bit-close.
  const Tensor y16 = linear(x2, w16, Tensor());
  const std::vector<double> a = y.data().reshape({6, 130}).to_vector(), b16 = y16.to_vector();
  double err = 0.0, mag = 0.0;
  for (size_t i = 0; i < a.size(); ++i) err += std::fabs(a[i] - b16[i]), mag += std::fabs(b16[i]);
  INFO("mean relative error " << err / mag);
  CHECK(err / mag < 0.35);
  CHECK(err / mag > 0.01);
}

TEST_CASE("fp8 linear: per-tensor recipes agree with the product of the dequantized operands", "[fp8][autograd]") {
  Generator gen(4);
  const Tensor x0 = normal({16, 64}, 0.0, 1.0, gen, DType::bf16), w0 = normal({32, 64}, 0.0, 0.1, gen);
  const Tensor r = normal({16, 32}, 0.0, 1e-4, gen, DType::bf16);
  for (Fp8Recipe recipe : {Fp8Recipe::current, Fp8Recipe::rowwise, Fp8Recipe::mx}) {
    INFO(fp8_recipe_name(recipe));
    Variable x(x0, true), w(w0, true);
    Fp8Context fp8({.recipe = recipe});
    Variable y;
    {
      Tape tape;
      tape.set_fp8(&fp8);
      fp8.begin_step();
      y = linear(x, cast(w, DType::bf16));
      tape.backward(y, ScaledGrad{r, 1.0f});
    }
    // Close to the bf16 products: E4M3 holds 3 fraction bits, E5M2 2.
    const Tensor y16 = linear(x0, w0.to(DType::bf16)).to(DType::f64);
    const Tensor dw16 = matmul(r.to(DType::f64).transpose(0, 1), x0.to(DType::f64));
    auto rel = [](const Tensor& a, const Tensor& b) {
      const std::vector<double> u = a.to_vector(), v = b.to_vector();
      double num = 0, den = 0;
      for (size_t i = 0; i < u.size(); ++i) num += (u[i] - v[i]) * (u[i] - v[i]), den += v[i] * v[i];
      return std::sqrt(num / den);
    };
    CHECK(rel(y.data().to(DType::f64), y16) < 0.05);
    CHECK(rel(w.grad()->unscaled().to(DType::f64), dw16) < 0.1);
    // The gradient operands are scaled to E5M2's range: nothing flushed although |dy| ~ 1e-4.
    for (const Fp8Record& rec : fp8.records())
      if (rec.role == Fp8Role::grad) CHECK(rec.stats.flushed == 0);
  }
}

TEST_CASE("fp8 linear: per-operator gradient scaling picks beta from E5M2's range, the operand keeps s = 1",
          "[fp8][autograd][gradscale]") {
  Generator gen(5);
  Variable x(normal({64, 32}, 0.0, 1.0, gen, DType::bf16), true);
  Variable w(normal({16, 32}, 0.0, 0.1, gen), true);
  // |dy| ~ 1e-7: below E5M2's smallest subnormal 2^-16 = 1.5e-5 at scale 1.
  const Tensor r = normal({64, 16}, 0.0, 1e-7, gen, DType::bf16);
  GradientScalingRule rule;
  Fp8Context fp8({.recipe = Fp8Recipe::current});
  {
    Tape tape;
    tape.set_fp8(&fp8);
    tape.set_scaling_rule(&rule);
    fp8.begin_step();
    tape.backward(linear(x, cast(w, DType::bf16)), ScaledGrad{r, 1.0f});
  }
  // beta lifts dY into E5M2: the dX gradient carries it, the grad operands were quantized at s = 1
  // and flushed almost nothing.
  REQUIRE(x.grad().has_value());
  const float beta = x.grad()->scale;
  CHECK(beta >= std::ldexp(1.0f, 10));
  const double max_dy = amax(abs(r)).to_vector()[0];
  CHECK(beta * max_dy <= 57344.0);  // the cap: no overflow by construction
  int grads = 0;
  for (const Fp8Record& rec : fp8.records())
    if (rec.role == Fp8Role::grad) {
      ++grads;
      CHECK(rec.stats.scale_inv_min == 1.0f);
      CHECK(rec.stats.saturated == 0);
      CHECK(double(rec.stats.flushed) <= 0.01 * double(rec.stats.count));
    }
  CHECK(grads == 1);  // quantized once: wgrad reads dgrad's codes transposed (a per-tensor layout)
  // The rule recorded a cast query against E5M2.
  bool found = false;
  for (const ScaleRecord& s : rule.step_records())
    found |= s.kind == ScaleRecord::Kind::cast && s.format == DType::e5m2;
  CHECK(found);
  // Without the rule (and with no amax scale: a given s of 1) the same dY flushes to zero.
  const Quantized plain = quantize(r, {.format = DType::e5m2, .given_scale = 1.0f});
  CHECK(double(plain.stats.flushed) > 0.9 * double(plain.stats.count));
}

TEST_CASE("fp8 delayed scaling: a step quantizes with the scale its history gave, and the history resumes",
          "[fp8][autograd]") {
  Generator gen(6);
  const Tensor w0 = normal({8, 16}, 0.0, 0.5, gen);
  auto step = [&](Fp8Context& fp8, float x_scale) {
    Variable x(normal({4, 16}, 0.0, 1.0, gen, DType::bf16) * double(x_scale), true);
    Variable w(w0, true);
    Tape tape;
    tape.set_fp8(&fp8);
    fp8.begin_step();
    Variable y = linear(x, cast(w, DType::bf16));
    tape.backward(y, ScaledGrad{full(y.shape(), 1e-3, DType::bf16), 1.0f});
    return fp8.records();
  };
  Fp8Options o{.recipe = Fp8Recipe::delayed, .amax_history_len = 3};
  Fp8Context a(o);
  const std::vector<Fp8Record> s1 = step(a, 1.0f);
  CHECK(s1[0].stats.scale_inv_min == 1.0f);  // no history yet: s = 1, as Transformer Engine starts
  const float amax1 = s1[0].stats.amax;
  const std::vector<Fp8Record> s2 = step(a, 4.0f);  // an amax spike: step 2 still uses step 1's scale
  CHECK(s2[0].stats.scale_inv_min == 1.0f / (448.0f / amax1));
  CHECK(s2[0].stats.saturated > 0);
  // Resume: a context loaded from a's state continues exactly as a does.
  Fp8Context b(o);
  b.load_state_dict(a.state_dict());
  Generator saved = gen;
  const std::vector<Fp8Record> a3 = step(a, 1.0f);
  gen = saved;
  const std::vector<Fp8Record> b3 = step(b, 1.0f);
  REQUIRE(a3.size() == b3.size());
  for (size_t i = 0; i < a3.size(); ++i) {
    CHECK(a3[i].stats.scale_inv_min == b3[i].stats.scale_inv_min);
    CHECK(a3[i].stats.saturated == b3[i].stats.saturated);
  }
  CHECK(a3[0].stats.scale_inv_min == 1.0f / (448.0f / std::max(amax1, s2[0].stats.amax)));  // max of the history
  CHECK(b.totals(Fp8Role::input).count == a.totals(Fp8Role::input).count);
  // A state saved under other options is refused, naming both.
  Fp8Context c({.recipe = Fp8Recipe::delayed, .amax_history_len = 5});
  CHECK_THAT(test::error_of([&] { c.load_state_dict(a.state_dict()); }),
             Catch::Contains("history 3 max") && Catch::Contains("history 5 max"));
  Fp8Context d({.recipe = Fp8Recipe::rowwise});
  CHECK_THAT(test::error_of([&] { d.load_state_dict(a.state_dict()); }), Catch::Contains("this run uses 'rowwise"));
  // Without the options entry, a history of another length is still refused, naming the entry.
  TensorDict bare = a.state_dict();
  bare.metadata.erase("options");
  CHECK_THAT(test::error_of([&] { c.load_state_dict(bare); }),
             Catch::Contains("amax_history_len") && Catch::Contains("site0.input"));
  // A history whose numbers could not have been saved is refused, and the context keeps its state:
  // a position or op that is not a whole number, a negative or NaN amax, a zero scale.
  const TensorDict good = a.state_dict();
  const Tensor h = good.at("site0.input");  // [3 amaxes, position, pending, scale, op]
  const std::vector<std::pair<int64_t, double>> bad = {{3, 1.5},          {6, 0.25},     {0, -1.0},
                                                       {1, std::nan("")}, {4, INFINITY}, {5, 0.0}};
  for (const auto& [index, value] : bad) {
    std::vector<double> v = h.to_vector();
    v[size_t(index)] = value;
    TensorDict broken = good;
    for (auto& [name, t] : broken.tensors)
      if (name == "site0.input") t = from_vector(v, {int64_t(v.size())}, DType::f32);
    CAPTURE(index, value);
    CHECK_THAT(test::error_of([&] { b.load_state_dict(broken); }), Catch::Contains("'site0.input'"));
  }
  const TensorDict kept = b.state_dict();
  CHECK(kept.at("site0.input").to_vector() == a.state_dict().at("site0.input").to_vector());
}

TEST_CASE("fp8 options: bad combinations name the field", "[fp8]") {
  CHECK_THAT(test::error_of([] { Fp8Context({.forward_format = DType::bf16}); }), Catch::Contains("forward_format"));
  CHECK_THAT(test::error_of([] { Fp8Context({.grad_format = DType::e2m1}); }), Catch::Contains("grad_format"));
  CHECK_THAT(test::error_of([] { Fp8Context({.mx_rule = ScaleRule::amax}); }), Catch::Contains("mx_rule"));
  CHECK_THAT(test::error_of([] { Fp8Context({.amax_history_len = 0}); }), Catch::Contains("amax_history_len"));
  CHECK_THAT(test::error_of([] { fp8_recipe_from_name("tensorwise"); }),
             Catch::Contains("current, delayed, rowwise, mx, block"));
}

TEST_CASE("fp8 policy: a small MLP trains under every recipe and element format", "[fp8][training]") {
  // y = 0.1 x the sum of the inputs (variance 0.32), learned by a two-layer MLP; every recipe gets
  // within reach of bf16.
  auto train = [](nn::Precision p, Fp8Options o) {
    Generator gen(11);
    nn::Sequential model;
    model.push_back(std::make_shared<nn::Linear>(32, 64, true, gen));
    model.push_back(std::make_shared<nn::ReLU>());
    model.push_back(std::make_shared<nn::Linear>(64, 1, true, gen));
    PrecisionTrainer t(model, {.kind = OptimizerKind::adamw, .lr = 3e-3}, {.precision = p, .fp8 = o});
    Generator data(12);
    double last = 0.0;
    for (int s = 0; s < 150; ++s) {
      const Tensor x = normal({64, 32}, 0.0, 1.0, data);
      const Tensor target = sum(x, {1}, true) * 0.1;
      Tape tape;
      t.begin_step(tape);
      Variable loss = mse_loss(nn::fp32_input(OpId::mse_loss, model(Variable(t.input(x)))), Variable(target));
      t.backward(tape, loss);
      t.step();
      last = loss.data().to_vector()[0];
    }
    return last;
  };
  const double bf16 = train(nn::Precision::bf16, {});
  INFO("bf16 final loss " << bf16);
  CHECK(bf16 < 0.05);
  for (Fp8Options o : {Fp8Options{.recipe = Fp8Recipe::current}, Fp8Options{.recipe = Fp8Recipe::delayed},
                       Fp8Options{.recipe = Fp8Recipe::rowwise}, Fp8Options{.recipe = Fp8Recipe::mx},
                       Fp8Options{.recipe = Fp8Recipe::mx, .mx_element = DType::e2m1, .mx_rule = ScaleRule::pow2_up},
                       Fp8Options{.recipe = Fp8Recipe::block}, Fp8Options{.recipe = Fp8Recipe::nvfp4}}) {
    const double fp8 = train(nn::Precision::fp8, o);
    INFO(fp8_recipe_name(o.recipe) << " " << dtype_name(o.mx_element) << ": final loss " << fp8);
    CHECK(fp8 < 3.0 * bf16 + 0.02);
  }
}

namespace {

// The values a per-tensor E4M3 / E5M2 operand stands for, exactly, in f64 (code x 1 / s).
Tensor dq64(const Tensor& x, DType format) {
  const Shape s = x.shape();
  return dequantize(quantize(x.reshape({1, x.numel()}), {.format = format}), DType::f64).view(s);
}

double max_rel(const Tensor& a, const Tensor& ref) {
  const std::vector<double> u = a.to_vector(), v = ref.to_vector();
  double scale = 0.0, err = 0.0;
  for (size_t i = 0; i < u.size(); ++i) {
    scale = std::max(scale, std::fabs(v[i]));
    err = std::max(err, std::fabs(u[i] - v[i]));
  }
  return err / scale;
}

}  // namespace

TEST_CASE("fp8 convolutions: the GEMMs over the column matrix give the convolutions of the quantized values",
          "[fp8][autograd][conv]") {
  // Per-tensor current scaling: the column matrix has x's amax (padding adds zeros), so its codes
  // are x's; the f64 convolution of the values the codes stand for is the reference, to bf16's
  // rounding of the output (2^-9 of the largest) and fp32 sums.
  Generator gen(8);
  for (bool transposed : {false, true}) {
    INFO((transposed ? "conv_transpose2d" : "conv2d"));
    Variable x(normal({2, 3, 7, 6}, 0.0, 1.0, gen, DType::bf16), true);
    Variable w(normal(transposed ? Shape{3, 4, 3, 3} : Shape{4, 3, 3, 3}, 0.0, 0.2, gen), true);
    Variable b(normal({4}, 0.0, 0.1, gen), true);
    Fp8Context fp8({.recipe = Fp8Recipe::current});
    Variable y;
    Tensor dy;
    {
      Tape tape;
      tape.set_fp8(&fp8);
      fp8.begin_step();
      const Variable w16 = cast(w, DType::bf16), b16 = cast(b, DType::bf16);
      y = transposed ? conv_transpose2d(x, w16, b16, 2, 1, 1) : conv2d(x, w16, b16, 2, 1);
      dy = normal(y.shape(), 0.0, 1e-3, gen, DType::bf16);
      tape.backward(y, ScaledGrad{dy, 1.0f});
    }
    const Tensor xq = dq64(x.data(), DType::e4m3), wq = dq64(w.data().to(DType::bf16), DType::e4m3);
    const Tensor dyq = dq64(dy, DType::e5m2), b64 = b.data().to(DType::bf16).to(DType::f64);
    const Tensor y_ref = transposed ? conv_transpose2d(xq, wq, b64, 2, 1, 1) : conv2d(xq, wq, b64, 2, 1);
    CHECK(max_rel(y.data(), y_ref) < 5e-3);
    const Tensor dx_ref = transposed ? conv_transpose2d_backward_input(dyq, wq, x.shape(), 2, 1, 1)
                                     : conv2d_backward_input(dyq, wq, x.shape(), 2, 1, 1);
    CHECK(max_rel(x.grad()->g, dx_ref) < 5e-3);
    const Tensor dw_ref = transposed ? conv_transpose2d_backward_weight(xq, dyq, w.shape(), 2, 1, 1)
                                     : conv2d_backward_weight(xq, dyq, w.shape(), 2, 1, 1);
    CHECK(max_rel(w.grad()->unscaled(), dw_ref) < 5e-3);
    // fprop, dgrad, wgrad: three operands quantized (input, weight, grad), the rest transposed views.
    CHECK(fp8.records().size() == 3);
  }
}

TEST_CASE("fp8 conv2d: per-tensor codes before columns are the columns' codes, with x's telemetry",
          "[fp8][autograd][conv]") {
  // Note [Codes before columns]: under current and delayed scaling conv2d quantizes x and builds
  // the columns from its codes; y, dx and dW are the bits of the GEMMs over the quantized column
  // matrix. A 1x1 kernel with stride 2 skips pixels: the columns are quantized then.
  Generator gen(21);
  struct Geometry {
    int64_t k, stride, pad;
    bool codes_first;
  };
  for (Fp8Recipe recipe : {Fp8Recipe::current, Fp8Recipe::delayed})
    for (Geometry geo : {Geometry{3, 1, 1, true}, Geometry{3, 2, 1, true}, Geometry{1, 2, 0, false}}) {
      INFO(fp8_recipe_name(recipe) << " kernel " << geo.k << " stride " << geo.stride);
      const Tensor x16 = normal({2, 3, 7, 7}, 0.0, 1.0, gen, DType::bf16);
      // One pixel that only the full column matrix holds large: with a stride-2 1x1 kernel (1, 1)
      // is skipped, so x's amax and the columns' differ.
      x16.narrow(2, 1, 1).narrow(3, 1, 1).copy_(full({2, 3, 1, 1}, 30.0, DType::bf16));
      Variable x(x16, true);
      Variable w(normal({4, 3, geo.k, geo.k}, 0.0, 0.2, gen, DType::bf16), true);
      Variable b(normal({4}, 0.0, 0.1, gen, DType::bf16), true);
      Fp8Context fp8({.recipe = recipe});
      Variable y;
      Tensor dy;
      {
        Tape tape;
        tape.set_fp8(&fp8);
        fp8.begin_step();
        y = conv2d(x, w, b, geo.stride, geo.pad);
        dy = normal(y.shape(), 0.0, 1e-2, gen, DType::bf16);
        tape.backward(y, ScaledGrad{dy, 1.0f});
      }
      QuantStats in;
      for (const Fp8Record& r : fp8.records())
        if (r.role == Fp8Role::input && std::string(r.gemm) == "fprop") in = r.stats;
      const Tensor cols = im2col(x16, geo.k, geo.stride, geo.pad);
      CHECK(in.count == (geo.codes_first ? x16.numel() : cols.numel()));
      // (delayed scaling's first step quantizes with the history's initial scale, 1)
      const float given = recipe == Fp8Recipe::delayed ? 1.0f : 0.0f;
      const QuantSpec s{.format = DType::e4m3, .given_scale = given}, sg{.format = DType::e5m2, .given_scale = given};
      const Quantized cq = quantize(cols, s), wq = quantize(w.data().reshape({4, 3 * geo.k * geo.k}), s);
      CHECK(in.amax == cq.stats.amax);
      const int64_t oh = y.size(2), ow = y.size(3), P = 2 * oh * ow;
      const Tensor ym = scaled_matmul_nt(cq, wq, b.data(), DType::bf16);
      CHECK(same_bits(y.data(), ym.view({2, oh, ow, 4}).permute({0, 3, 1, 2}).contiguous()));
      const Quantized dq = quantize(dy.permute({0, 2, 3, 1}).reshape({P, 4}), sg);
      const Tensor dw = scaled_matmul_nt(dq.t(), cq.t(), Tensor(), DType::bf16);
      CHECK(same_bits(w.grad()->g, dw.view(w.shape())));  // (scale 1)
      const Tensor dcols = scaled_matmul_nt(dq, wq.t(), Tensor(), DType::f32);
      CHECK(same_bits(x.grad()->g, col2im(dcols, x.shape(), geo.k, geo.stride, geo.pad).to(DType::bf16)));
    }
}

TEST_CASE("fp8 LSTM layer: the node's forward and activation gradients are the unrolled graph's bits",
          "[fp8][autograd][lstm]") {
  // Note [8-bit LSTM layer]: the same step ops and quantizations as the unrolled graph (a linear
  // node per step), so out, h_n, c_n and the gradients of proj, h0 and c0 are equal bit for bit;
  // the recurrent weight's gradient is one GEMM over all steps (its own per-tensor scales), close
  // to the unrolled sum of T separately quantized and rounded pieces.
  // Current scaling runs the recurrence kernel (Note [8-bit LSTM recurrence]): with 24 rows its
  // two threads meet at a barrier every step; with one thread, or 5 rows, there is none.
  constexpr int64_t T = 6, H = 8;
  const int threads = num_threads();
  for (const auto& [B, nt] : std::vector<std::pair<int64_t, int>>{{5, 2}, {24, 2}, {24, 1}})
    for (Fp8Recipe recipe : {Fp8Recipe::current, Fp8Recipe::rowwise, Fp8Recipe::mx}) {
      for (int64_t tdim : {0, 1}) {
        INFO(fp8_recipe_name(recipe) << " time_dim " << tdim << " batch " << B << ", " << nt << " threads");
        set_num_threads(nt);
        Generator gen(31);
        const Tensor proj0 = normal(tdim == 0 ? Shape{T, B, 4 * H} : Shape{B, T, 4 * H}, 0.0, 1.0, gen, DType::bf16);
        const Tensor w0 = normal({4 * H, H}, 0.0, 0.3, gen, DType::bf16),
                     b0 = normal({4 * H}, 0.0, 0.1, gen, DType::bf16);
        const Tensor h00 = normal({B, H}, 0.0, 0.5, gen, DType::bf16), c00 = normal({B, H}, 0.0, 0.5, gen, DType::bf16);
        const Tensor dout = normal(tdim == 0 ? Shape{T, B, H} : Shape{B, T, H}, 0.0, 1e-2, gen, DType::bf16);
        struct Run {
          Tensor out, h, c, dproj, dh0, dc0, dw, db;
        };
        auto run = [&](bool fused) {
          Variable proj(proj0, true), w(w0, true), b(b0, true), h0(h00, true), c0(c00, true);
          Fp8Context fp8({.recipe = recipe});
          Run r;
          {
            Tape tape;
            tape.set_fp8(&fp8);
            fp8.begin_step();
            Variable out, h = h0, c = c0;
            if (fused) {
              LstmLayerResult l = lstm_layer_fp8(fp8, proj, w, b, h0, c0, tdim);
              out = l.out;
              h = l.h;
              c = l.c;
            } else {  // nn::LSTM's unrolled graph
              const std::vector<Variable> steps = split(proj, 1, tdim);
              std::vector<Variable> outs;
              for (int64_t t = 0; t < T; ++t) {
                auto [c_next, h_next] = lstm_cell(squeeze(steps[size_t(t)], tdim) + linear(h, w, b), c);
                c = c_next;
                h = h_next;
                outs.push_back(h);
              }
              out = stack(outs, tdim);
            }
            r.out = out.data();
            r.h = h.data();
            r.c = c.data();
            tape.backward(out, ScaledGrad{dout, 1.0f});
          }
          r.dproj = proj.grad()->g;  // (scale 1)
          r.dh0 = h0.grad()->g;
          r.dc0 = c0.grad()->g;
          r.dw = w.grad()->g;
          r.db = b.grad()->g;
          return r;
        };
        const Run f = run(true), u = run(false);
        set_num_threads(threads);
        CHECK(same_bits(f.out, u.out));
        CHECK(same_bits(f.h, u.h));
        CHECK(same_bits(f.c, u.c));
        CHECK(same_bits(f.dproj, u.dproj));
        CHECK(same_bits(f.dh0, u.dh0));
        CHECK(same_bits(f.dc0, u.dc0));
        CHECK(max_rel(f.dw, u.dw) < 0.1);
        CHECK(max_rel(f.db, u.db) < 2e-2);
      }
    }
}
