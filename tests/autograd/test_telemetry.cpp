// Precision telemetry: the one-pass statistics kernel (tensor/ops/grad_telemetry.h) against
// hand-computed counts, and the Telemetry observer on a tape (autograd/telemetry.h).
#include "support/catch.h"

#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "mixtape.h"

using namespace mixtape;
using Catch::Contains;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The nonzero histogram bins as {exponent: count}.
std::map<int64_t, int64_t> bins(const GradTelemetry& s) {
  std::map<int64_t, int64_t> m;
  for (size_t k = 0; k < s.hist.size(); ++k)
    if (s.hist[k] != 0) m[s.hist_lo + int64_t(k)] = s.hist[k];
  return m;
}

}  // namespace

TEST_CASE("grad_telemetry counts f16 underflow, subnormals and overflow", "[telemetry]") {
  // 2^-25 is the f16 rounding tie between 0 and 2^-24 (ties to even: 0); 3e-8 is just above it.
  // 2^-14 - 2^-26 is within half a subnormal step of 2^-14, so it rounds up to the smallest normal.
  // 4e-5 (2^-14.6) is a subnormal near the top of the subnormal range. 65519 rounds down to
  // 65504; 65520 = 65504 + ulp/2 is the first value that rounds to inf.
  const double tie = std::ldexp(1.0, -25), below_normal = std::ldexp(1.0, -14) - std::ldexp(1.0, -26);
  const std::vector<double> v = {0,  1e-8,  tie,   3e-8,  1e-6, -1e-6, 4e-5,  below_normal, 1,
                                 -3, 65504, 65519, 65520, 7e4,  kInf,  -kInf, kNaN};
  const Tensor x = from_vector(v, {int64_t(v.size())});
  const GradTelemetry s = grad_telemetry(x, DType::f16);
  CHECK(s.numel == 17);
  CHECK(s.nonzero == 13);   // every finite value but the 0
  CHECK(s.underflow == 2);  // 1e-8, 2^-25
  CHECK(s.subnormal == 4);  // 3e-8 (-> 2^-24), 1e-6, -1e-6, 4e-5
  CHECK(s.overflow == 5);   // 65520, 7e4, inf, -inf, NaN
  CHECK(s.max_abs == 7e4);
  CHECK(s.hist_lo == -150);
  CHECK(s.hist.size() == 281);
  // floor(log2|x|): 1e-8 -> -27, 2^-25 and 3e-8 -> -25, 1e-6 -> -20, 4e-5 and 2^-14 - 2^-26 -> -15.
  CHECK(bins(s) ==
        std::map<int64_t, int64_t>{{-27, 1}, {-25, 2}, {-20, 2}, {-15, 2}, {0, 1}, {1, 1}, {15, 3}, {16, 1}});

  // The same values against bf16: nothing this small or large leaves its range.
  const GradTelemetry b = grad_telemetry(x, DType::bf16);
  CHECK(b.nonzero == 13);
  CHECK(b.underflow == 0);
  CHECK(b.subnormal == 0);
  CHECK(b.overflow == 3);
  CHECK(bins(b) == bins(s));  // the histogram does not depend on the format
}

TEST_CASE("grad_telemetry counts bf16 underflow, subnormals and overflow", "[telemetry]") {
  // bf16 subnormals are multiples of 2^-133 (about 9.2e-41): 1e-41 < 2^-134 rounds to 0, 1e-40
  // rounds to 2^-133. The largest bf16 is about 3.3895e38 with ulp 2^120: 3.4e38 rounds to inf.
  const std::vector<double> v = {1e-41, 1e-40, 1e-30, 3.4e38, 3.0e38, 1.0};
  const Tensor x = from_vector(v, {2, 3});
  const GradTelemetry b = grad_telemetry(x, DType::bf16);
  CHECK(b.nonzero == 6);
  CHECK(b.underflow == 1);
  CHECK(b.subnormal == 1);
  CHECK(b.overflow == 1);
  CHECK(b.max_abs == double(float(3.4e38)));
  CHECK(bins(b) == std::map<int64_t, int64_t>{{-137, 1}, {-133, 1}, {-100, 1}, {0, 1}, {127, 2}});

  const GradTelemetry h = grad_telemetry(x, DType::f16);
  CHECK(h.underflow == 3);  // 1e-41, 1e-40, 1e-30
  CHECK(h.subnormal == 0);
  CHECK(h.overflow == 2);  // 3.4e38, 3e38
}

TEST_CASE("grad_telemetry histogram bins: powers of two and values between", "[telemetry]") {
  const double below_one = double(std::nextafter(1.0f, 0.0f));
  const std::vector<double> v = {
      1, 2, 3, 4, 0.75, below_one, -0.5, std::ldexp(1.0, -149), std::ldexp(1.0, -126), std::ldexp(1.0, 127)};
  const Tensor x = from_vector(v, {int64_t(v.size())});
  const GradTelemetry s = grad_telemetry(x, DType::f16);
  // Bin e holds [2^e, 2^(e+1)): 1 -> 0, 2 and 3 -> 1, 4 -> 2; 0.75, 1 - 2^-24, 0.5 -> -1;
  // the smallest f32 subnormal 2^-149 -> -149.
  CHECK(bins(s) == std::map<int64_t, int64_t>{{-149, 1}, {-126, 1}, {-1, 3}, {0, 1}, {1, 2}, {2, 1}, {127, 1}});

  // A narrow range clamps into its edge bins.
  const GradTelemetry n = grad_telemetry(x, DType::f16, true, -2, 1);
  CHECK(n.hist == std::vector<int64_t>{2, 3, 1, 4});  // [-2]: 2^-149, 2^-126; [1]: 2, 3, 4, 2^127

  // f64 values outside the f32 exponent range land in the default range's edge bins, and the
  // f64 path rounds once (2^-25 + 2^-60 is above the tie, so it becomes the subnormal 2^-24).
  const Tensor d = from_vector(
      std::vector<double>{std::ldexp(1.0, -200), std::ldexp(1.0, 300), std::ldexp(1.0, -25) + std::ldexp(1.0, -60)},
      {3}, DType::f64);
  const GradTelemetry sd = grad_telemetry(d, DType::f16);
  CHECK(bins(sd) == std::map<int64_t, int64_t>{{-150, 1}, {-25, 1}, {130, 1}});
  CHECK(sd.underflow == 1);
  CHECK(sd.subnormal == 1);
  CHECK(sd.overflow == 1);
  CHECK(sd.max_abs == std::ldexp(1.0, 300));

  // Without a histogram only the counts are computed.
  const GradTelemetry off = grad_telemetry(x, DType::f16, false);
  CHECK(off.hist.empty());
  CHECK(off.nonzero == 10);
}

TEST_CASE("grad_telemetry reads 16-bit storage and strided views", "[telemetry]") {
  // Stored in f16 and measured against f16: rounding is the identity, so nothing underflows;
  // the subnormal 2^-24 and the inf are what remains visible.
  const Tensor h =
      from_vector(std::vector<double>{0, std::ldexp(1.0, -24), std::ldexp(1.0, -14), 1, kInf}, {5}, DType::f16);
  const GradTelemetry sh = grad_telemetry(h, DType::f16);
  CHECK(sh.nonzero == 3);
  CHECK(sh.underflow == 0);
  CHECK(sh.subnormal == 1);
  CHECK(sh.overflow == 1);
  CHECK(bins(sh) == std::map<int64_t, int64_t>{{-24, 1}, {-14, 1}, {0, 1}});

  // Stored in bf16 and measured against f16: a prediction (2^-26 vanishes, 99840 overflows).
  const Tensor b = from_vector(std::vector<double>{std::ldexp(1.0, -26), 1e5, 0.5}, {3}, DType::bf16);
  const GradTelemetry sb = grad_telemetry(b, DType::f16);
  CHECK(sb.underflow == 1);
  CHECK(sb.overflow == 1);
  CHECK(sb.max_abs == 99840.0);  // 1e5 as stored in bf16

  // A transposed view counts the same elements.
  const Tensor m = from_vector(std::vector<double>{1e-8, 1, 2, 1e-6, 0, 7e4}, {2, 3}).t();
  const GradTelemetry sm = grad_telemetry(m, DType::f16);
  CHECK(sm.nonzero == 5);
  CHECK(sm.underflow == 1);
  CHECK(sm.subnormal == 1);
  CHECK(sm.overflow == 1);

  const GradTelemetry e = grad_telemetry(zeros({0, 3}), DType::f16);
  CHECK(e.numel == 0);
  CHECK(e.nonzero == 0);
  CHECK(e.max_abs == 0.0);
}

TEST_CASE("grad_telemetry rejects bad arguments", "[telemetry]") {
  const Tensor x = ones({2});
  CHECK_THROWS_WITH(grad_telemetry(x, DType::f32), Contains("grad_telemetry") && Contains("f16 or bf16"));
  CHECK_THROWS_WITH(grad_telemetry(from_vector(std::vector<int64_t>{1}, {1}), DType::f16), Contains("grad_telemetry"));
  CHECK_THROWS_WITH(grad_telemetry(x, DType::f16, true, 3, 2), Contains("[3, 2]"));
  CHECK_THROWS_WITH(Telemetry({.every_n_steps = -1}), Contains("every_n_steps"));
  CHECK_THROWS_WITH(Telemetry({.format = DType::f32}), Contains("f16 or bf16"));
}

// ---- the observer on a tape ------------------------------------------------------------------

namespace {

// fc: y = x W^T + b with x = {x0, x1}, W = [[1, 0.5], [-1, -2]], b = {0.5, -0.5}; loss = sum(relu(y)).
// For x = {1, 2}: y = {2.5, -5.5}, relu passes only y0, so at loss scale S:
//   d relu_out = S {1, 1},  dy = S {1, 0},  dW = dy^T x = S [[1, 2], [0, 0]],  db = S {1, 0}.
struct TinyNet {
  Variable w{from_vector(std::vector<double>{1, 0.5, -1, -2}, {2, 2}), true, "fc.weight"};
  Variable b{from_vector(std::vector<double>{0.5, -0.5}, {2}), true, "fc.bias"};
  Variable loss(const Variable& x, DType compute = DType::f32) const {
    const Variable wc = compute == DType::f32 ? w : cast(w, compute);
    const Variable bc = compute == DType::f32 ? b : cast(b, compute);
    return sum(relu(linear(x, wc, bc)));
  }
};

const TelemetryRecord& find(const std::vector<TelemetryRecord>& rs, const std::string& name,
                            TelemetryRecord::Kind kind) {
  for (const TelemetryRecord& r : rs)
    if (r.name == name && r.kind == kind) return r;
  FAIL("no telemetry record named " << name);
  return rs.front();
}

}  // namespace

TEST_CASE("Telemetry records every node gradient and every parameter with names and scales", "[telemetry]") {
  TinyNet net;
  const Variable x(from_vector(std::vector<double>{1, 2}, {1, 2}));
  Telemetry tel;
  Tape tape;
  REQUIRE(tel.begin_step(0, tape));
  CHECK(tape.observer() == &tel);
  tape.backward(net.loss(x), 1024.0f);

  // Backward runs sum (#0), relu (#1), linear (#2); linear's x needs no gradient.
  const std::vector<TelemetryRecord>& rs = tel.records();
  REQUIRE(rs.size() == 6);
  std::vector<std::string> names;
  for (const TelemetryRecord& r : rs) names.push_back(r.name);
  CHECK(names == std::vector<std::string>{"sum#0:0", "relu#1:0", "fc.weight", "fc.bias", "fc.weight", "fc.bias"});
  for (size_t i = 0; i < rs.size(); ++i) {
    CHECK(rs[i].kind == (i < 4 ? TelemetryRecord::Kind::node : TelemetryRecord::Kind::param));
    CHECK(rs[i].scale == 1024.0f);
    CHECK(rs[i].dtype == DType::f32);
  }
  CHECK(rs[2].op == "linear");
  CHECK(rs[2].node == 2);
  CHECK(rs[2].input == 1);
  CHECK(rs[3].input == 2);

  // relu's input gradient S {1, 0}: one nonzero value 2^10.
  CHECK(rs[1].stats.nonzero == 1);
  CHECK(rs[1].stats.max_abs == 1024.0);
  CHECK(bins(rs[1].stats) == std::map<int64_t, int64_t>{{10, 1}});
  const TelemetryRecord& dw = find(rs, "fc.weight", TelemetryRecord::Kind::param);
  CHECK(dw.shape == Shape{2, 2});
  CHECK(dw.stats.nonzero == 2);
  CHECK(dw.stats.max_abs == 2048.0);
  CHECK(bins(dw.stats) == std::map<int64_t, int64_t>{{10, 1}, {11, 1}});
  CHECK(dw.underflow_rate() == 0.0);

  // The JSON Lines: one object per record.
  std::ostringstream os;
  tel.write_jsonl(os, 7);
  std::istringstream is(os.str());
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(is, line);) lines.push_back(nlohmann::json::parse(line));
  REQUIRE(lines.size() == 6);
  const nlohmann::json& j = lines[4];  // the fc.weight param record
  CHECK(j["event"] == "telemetry");
  CHECK(j["step"] == 7);
  CHECK(j["name"] == "fc.weight");
  CHECK(j["kind"] == "param");
  CHECK_FALSE(j.contains("op"));
  CHECK(j["scale"] == 1024.0);
  CHECK(j["format"] == "f16");
  CHECK(j["numel"] == 4);
  CHECK(j["nonzero"] == 2);
  CHECK(j["underflow"] == 0.0);
  CHECK(j["overflow"] == 0);
  CHECK(j["max_abs"] == 2048.0);
  CHECK(j["hist_lo"] == -150);
  CHECK(j["hist"] == nlohmann::json::parse("[[10,1],[11,1]]"));
  CHECK(lines[2]["op"] == "linear");
  CHECK(lines[2]["kind"] == "node");
}

TEST_CASE("Telemetry shows how the loss scale moves gradients out of f16 underflow", "[telemetry]") {
  // x = {2^-30, 2^-29}: dW = S [[2^-30, 2^-29], [0, 0]] (y keeps the signs of b, so the mask is {1, 0}).
  TinyNet net;
  const Variable x(from_vector(std::vector<double>{std::ldexp(1.0, -30), std::ldexp(1.0, -29)}, {1, 2}));
  Telemetry tel;
  auto weight_record = [&](float scale) {
    Tape tape;
    tel.begin_step(0, tape);
    net.w.zero_grad();
    tape.backward(net.loss(x), scale);
    return find(tel.records(), "fc.weight", TelemetryRecord::Kind::param);
  };
  const TelemetryRecord s1 = weight_record(1.0f);  // 2^-30, 2^-29: below 2^-25, both vanish in f16
  CHECK(s1.scale == 1.0f);
  CHECK(s1.underflow_rate() == 1.0);
  CHECK(s1.subnormal_rate() == 0.0);
  const TelemetryRecord s2 = weight_record(1024.0f);  // 2^-20, 2^-19: f16 subnormals
  CHECK(s2.scale == 1024.0f);
  CHECK(s2.underflow_rate() == 0.0);
  CHECK(s2.subnormal_rate() == 1.0);
  CHECK(bins(s2.stats) == std::map<int64_t, int64_t>{{-20, 1}, {-19, 1}});
  const TelemetryRecord s3 = weight_record(65536.0f * 16.0f);  // 2^-10, 2^-9: normal
  CHECK(s3.underflow_rate() == 0.0);
  CHECK(s3.subnormal_rate() == 0.0);
}

TEST_CASE("Telemetry under f16 compute names the casts after their parameters", "[telemetry]") {
  TinyNet net;
  const Variable x(from_vector(std::vector<double>{1, 2}, {1, 2}, DType::f16));
  Telemetry tel({.format = DType::bf16, .histogram = false});
  Tape tape;
  tel.begin_step(0, tape);
  tape.backward(net.loss(x, DType::f16), 256.0f);
  // Backward: sum #0, relu #1, linear #2 (inputs: the f16 casts of W and b), cast(b) #3, cast(W) #4;
  // the leaves follow in the order they first received a gradient.
  std::vector<std::string> names;
  for (const TelemetryRecord& r : tel.records()) names.push_back(r.name);
  CHECK(names == std::vector<std::string>{"sum#0:0", "relu#1:0", "linear#2:1", "linear#2:2", "fc.bias", "fc.weight",
                                          "fc.bias", "fc.weight"});
  const TelemetryRecord& w16 = tel.records()[2];
  CHECK(w16.dtype == DType::f16);  // the gradient of the f16 copy
  CHECK(w16.scale == 256.0f);
  CHECK(w16.stats.hist.empty());
  CHECK(w16.stats.max_abs == 512.0);
  const TelemetryRecord& w32 = tel.records()[5];
  CHECK(w32.op == "cast");
  CHECK(w32.dtype == DType::f32);  // the master weight's gradient
  CHECK(w32.scale == 256.0f);
}

TEST_CASE("Telemetry is off unless attached, and samples every n steps", "[telemetry]") {
  TinyNet net;
  const Variable x(from_vector(std::vector<double>{1, 2}, {1, 2}));
  {
    Tape tape;  // nothing attached by default
    CHECK(tape.observer() == nullptr);
  }
  Telemetry tel({.every_n_steps = 3});
  CHECK(tel.records_step(0));
  CHECK_FALSE(tel.records_step(1));
  CHECK(tel.records_step(6));
  int64_t recorded = 0;
  for (int64_t step = 0; step < 5; ++step) {
    Tape tape;
    const bool on = tel.begin_step(step, tape);
    CHECK(on == (step % 3 == 0));
    CHECK(tape.observer() == (on ? &tel : nullptr));
    tape.backward(net.loss(x), 1.0f);
    std::ostringstream os;
    tel.write_jsonl(os, step);
    CHECK(tel.records().size() == (on ? 6u : 0u));
    CHECK(os.str().empty() == !on);
    recorded += on;
  }
  CHECK(recorded == 2);

  // A step that is not sampled detaches the observer from a tape reused across steps.
  Tape tape;
  tel.begin_step(0, tape);
  CHECK(tape.observer() == &tel);
  tel.begin_step(1, tape);
  CHECK(tape.observer() == nullptr);
  tape.backward(net.loss(x), 1.0f);
  CHECK(tel.records().empty());

  Telemetry never({.every_n_steps = 0});
  Tape t2;
  CHECK_FALSE(never.begin_step(0, t2));
  CHECK(t2.observer() == nullptr);

  // Only parameters, through a caller's sink.
  Telemetry params({.nodes = false});
  Tape t3;
  params.begin_step(0, t3);
  t3.backward(net.loss(x), 1.0f);
  std::vector<std::string> lines;
  params.write_jsonl([&](std::string_view l) { lines.emplace_back(l); }, 0);
  REQUIRE(lines.size() == 2);
  CHECK_THAT(lines[0], Contains("\"name\":\"fc.weight\"") && Contains("\"kind\":\"param\""));
}
