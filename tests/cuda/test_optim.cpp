// Fused optimizer updates on the GPU against the CPU kernels (tensor/cpu/optim.cpp), several
// steps in a row: every parameter and state element must be bit-identical after every step
// (Note [Bit-identical updates] in cuda/optim.cu), including the 16-bit rules with nearest,
// stochastic (same Philox words) and Kahan rounding.
#include "tests/cuda/cuda_test.h"

#include "mixtape.h"

using namespace mixtape;
using namespace mixtape::cuda_test;

namespace {

// Ragged sizes, 1-D and 2-D (the strided layout of a 2-D tensor is transposed in memory).
const std::vector<Shape>& param_shapes() {
  static const std::vector<Shape> shapes = {{1}, {7}, {3, 11}, {257}, {10, 100}, {33, 17}};
  return shapes;
}

void require_same(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  require_bit_identical(host_view(gpu), cpu, what);
}

}  // namespace

TEST_CASE("cuda sgd_update is bit-identical to the CPU over several steps", "[cuda]") {
  MT_REQUIRE_GPU();
  struct Hyper {
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  const std::vector<Hyper> hypers = {{0.0, 0.0, 0.0, false},  {0.0, 0.0, 1e-2, false}, {0.9, 0.0, 0.0, false},
                                     {0.9, 0.1, 5e-4, false}, {0.9, 0.0, 1e-2, true},  {0.5, 0.0, 0.0, true}};
  uint64_t seed = 1;
  for (DType dt : {DType::f32})
    for (const Shape& s : param_shapes())
      for (const Hyper& h : hypers)
        for (bool strided : {false, true}) {
          ++seed;
          Tensor p_c = random(s, dt, seed);
          // A buffer with junk in it: step 1 must ignore its old contents.
          Tensor b_c = random(s, dt, seed + 1);
          Tensor p_g = gpu_input(p_c, strided), b_g = gpu_input(b_c, strided);
          Tensor none_c, none_g;
          Tensor& bc = h.momentum != 0.0 ? b_c : none_c;
          Tensor& bg = h.momentum != 0.0 ? b_g : none_g;
          for (int64_t step = 1; step <= 4; ++step) {
            const Tensor g = random(s, dt, seed * 100 + uint64_t(step), -0.5, 0.5);
            sgd_update_(p_c, g, bc, 0.05, h.momentum, h.dampening, h.weight_decay, h.nesterov, step);
            sgd_update_(p_g, gpu_input(g, strided), bg, 0.05, h.momentum, h.dampening, h.weight_decay, h.nesterov,
                        step);
            const std::string what = std::string(dtype_name(dt)) + " " + shape_str(s) + " " + layout_name(strided) +
                                     " momentum " + std::to_string(h.momentum) + " dampening " +
                                     std::to_string(h.dampening) + " wd " + std::to_string(h.weight_decay) +
                                     (h.nesterov ? " nesterov" : "") + " step " + std::to_string(step);
            require_same(p_g, p_c, what + ": param");
            if (h.momentum != 0.0) require_same(b_g, b_c, what + ": momentum buffer");
          }
        }
}

TEST_CASE("cuda adam_update and adamw are bit-identical to the CPU over several steps", "[cuda]") {
  MT_REQUIRE_GPU();
  struct Hyper {
    double beta1, beta2, weight_decay;
    bool decoupled;
  };
  // beta1 = 0.3 makes 1 - beta1 >= 0.5: the other branch of the lerp.
  const std::vector<Hyper> hypers = {{0.9, 0.999, 0.0, false}, {0.9, 0.999, 1e-2, false}, {0.9, 0.99, 0.0, true},
                                     {0.9, 0.999, 1e-1, true}, {0.3, 0.9, 1e-2, false},   {0.3, 0.9, 1e-2, true}};
  uint64_t seed = 2000;
  for (DType dt : {DType::f32})
    for (const Shape& s : param_shapes())
      for (const Hyper& h : hypers)
        for (bool strided : {false, true}) {
          ++seed;
          Tensor p_c = random(s, dt, seed), m_c = zeros(s, dt), v_c = zeros(s, dt);
          Tensor p_g = gpu_input(p_c, strided), m_g = gpu_input(m_c, strided), v_g = gpu_input(v_c, strided);
          for (int64_t step = 1; step <= 4; ++step) {
            const Tensor g = random(s, dt, seed * 100 + uint64_t(step), -0.5, 0.5);
            adam_update_(p_c, g, m_c, v_c, 1e-2, h.beta1, h.beta2, 1e-8, h.weight_decay, h.decoupled, step);
            adam_update_(p_g, gpu_input(g, strided), m_g, v_g, 1e-2, h.beta1, h.beta2, 1e-8, h.weight_decay,
                         h.decoupled, step);
            const std::string what = std::string(dtype_name(dt)) + " " + shape_str(s) + " " + layout_name(strided) +
                                     (h.decoupled ? " adamw" : " adam") + " beta1 " + std::to_string(h.beta1) + " wd " +
                                     std::to_string(h.weight_decay) + " step " + std::to_string(step);
            require_same(p_g, p_c, what + ": param");
            require_same(m_g, m_c, what + ": exp_avg");
            require_same(v_g, v_c, what + ": exp_avg_sq");
          }
        }
}

TEST_CASE("cuda master updates write the 16-bit copy bit-identical to the CPU", "[cuda]") {
  // Note [Fused master copy]: the fp32 master and its rounded copy, both devices, one pass each.
  MT_REQUIRE_GPU();
  uint64_t seed = 3000;
  for (DType low : {DType::f16, DType::bf16})
    for (const Shape& s : param_shapes())
      for (int rule = 0; rule < 3; ++rule)  // sgd, sgd + Nesterov momentum, adamw
        for (bool strided : {false, true}) {
          ++seed;
          Tensor p_c = random(s, DType::f32, seed), m_c = zeros(s, DType::f32), v_c = zeros(s, DType::f32);
          Tensor q_c = p_c.to(low);
          Tensor p_g = gpu_input(p_c, strided), m_g = gpu_input(m_c, strided), v_g = gpu_input(v_c, strided);
          Tensor q_g = gpu_input(q_c, strided);
          for (int64_t step = 1; step <= 3; ++step) {
            const Tensor g = random(s, DType::f32, seed * 100 + uint64_t(step), -0.5, 0.5);
            const Tensor g_g = gpu_input(g, strided);
            if (rule < 2) {
              sgd_update_(p_c, g, m_c, 0.05, 0.9, 0.0, 1e-2, rule == 1, step, &q_c);
              sgd_update_(p_g, g_g, m_g, 0.05, 0.9, 0.0, 1e-2, rule == 1, step, &q_g);
            } else {
              adam_update_(p_c, g, m_c, v_c, 1e-2, 0.9, 0.999, 1e-8, 1e-2, true, step, &q_c);
              adam_update_(p_g, g_g, m_g, v_g, 1e-2, 0.9, 0.999, 1e-8, 1e-2, true, step, &q_g);
            }
            const std::string what = std::string(dtype_name(low)) + " copy " + shape_str(s) + " " +
                                     layout_name(strided) + " rule " + std::to_string(rule) + " step " +
                                     std::to_string(step);
            require_same(p_g, p_c, what + ": master");
            require_same(q_g, q_c, what + ": rounded copy");
            require_bit_identical(q_c, p_c.to(low), what + ": CPU copy equals the rounded master");
          }
        }
}

namespace {

enum class Rule { nearest, stochastic, kahan };

const char* rule_name(Rule r) {
  return r == Rule::nearest ? "nearest" : r == Rule::stochastic ? "stochastic" : "kahan";
}

}  // namespace

TEST_CASE("cuda sgd16_update is bit-identical to the CPU in all three rounding modes", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 4000;
  for (DType dt : {DType::bf16, DType::f16})
    for (const Shape& s : param_shapes())
      for (Rule rule : {Rule::nearest, Rule::stochastic, Rule::kahan})
        for (double momentum : {0.0, 0.9})
          for (bool strided : {false, true}) {
            ++seed;
            const double wd = seed % 2 ? 1e-2 : 0.0;
            // Weights around 1 and updates of ~1e-3: below the 16-bit ulp, where the rules differ.
            Tensor p_c = random(s, dt, seed, 0.5, 2.0), m_c = zeros(s, dt), k_c = zeros(s, dt);
            Tensor p_g = gpu_input(p_c, strided), m_g = gpu_input(m_c, strided), k_g = gpu_input(k_c, strided);
            Tensor none_c, none_g;
            Tensor& mc = momentum != 0.0 ? m_c : none_c;
            Tensor& mg = momentum != 0.0 ? m_g : none_g;
            Tensor& kc = rule == Rule::kahan ? k_c : none_c;
            Tensor& kg = rule == Rule::kahan ? k_g : none_g;
            const Rounding rounding = rule == Rule::stochastic ? Rounding::stochastic : Rounding::nearest;
            uint64_t offset = 12345;
            for (int step = 1; step <= 5; ++step) {
              const Tensor g = random(s, DType::f32, seed * 100 + uint64_t(step), -1.0, 1.0);
              sgd16_update_(p_c, g, mc, kc, 1e-3, momentum, wd, rounding, seed, offset);
              sgd16_update_(p_g, gpu_input(g, strided), mg, kg, 1e-3, momentum, wd, rounding, seed, offset);
              offset += uint64_t(numel_of(s));
              const std::string what = std::string(dtype_name(dt)) + " " + shape_str(s) + " " + layout_name(strided) +
                                       " " + rule_name(rule) + " momentum " + std::to_string(momentum) + " wd " +
                                       std::to_string(wd) + " step " + std::to_string(step);
              require_same(p_g, p_c, what + ": param");
              if (momentum != 0.0) require_same(m_g, m_c, what + ": momentum buffer");
              if (rule == Rule::kahan) require_same(k_g, k_c, what + ": Kahan compensation");
            }
          }
}

TEST_CASE("cuda adamw16_update is bit-identical to the CPU in all three rounding modes", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 6000;
  for (DType dt : {DType::bf16, DType::f16})
    for (const Shape& s : param_shapes())
      for (Rule rule : {Rule::nearest, Rule::stochastic, Rule::kahan})
        for (double wd : {0.0, 1e-2})
          for (bool strided : {false, true}) {
            ++seed;
            Tensor p_c = random(s, dt, seed, 0.5, 2.0), m_c = zeros(s, dt), v_c = zeros(s, dt), k_c = zeros(s, dt);
            Tensor p_g = gpu_input(p_c, strided), m_g = gpu_input(m_c, strided), v_g = gpu_input(v_c, strided);
            Tensor k_g = gpu_input(k_c, strided);
            Tensor none_c, none_g;
            Tensor& kc = rule == Rule::kahan ? k_c : none_c;
            Tensor& kg = rule == Rule::kahan ? k_g : none_g;
            const Rounding rounding = rule == Rule::stochastic ? Rounding::stochastic : Rounding::nearest;
            uint64_t offset = uint64_t(1) << 33;  // counters past 32 bits
            for (int64_t step = 1; step <= 5; ++step) {
              const Tensor g = random(s, DType::f32, seed * 100 + uint64_t(step), -1.0, 1.0);
              adamw16_update_(p_c, g, m_c, v_c, kc, 1e-3, 0.9, 0.999, 1e-8, wd, step, rounding, seed, offset);
              adamw16_update_(p_g, gpu_input(g, strided), m_g, v_g, kg, 1e-3, 0.9, 0.999, 1e-8, wd, step, rounding,
                              seed, offset);
              offset += uint64_t(numel_of(s));
              const std::string what = std::string(dtype_name(dt)) + " " + shape_str(s) + " " + layout_name(strided) +
                                       " " + rule_name(rule) + " wd " + std::to_string(wd) + " step " +
                                       std::to_string(step);
              require_same(p_g, p_c, what + ": param");
              require_same(m_g, m_c, what + ": exp_avg");
              require_same(v_g, v_c, what + ": exp_avg_sq");
              if (rule == Rule::kahan) require_same(k_g, k_c, what + ": Kahan compensation");
            }
          }
}

TEST_CASE("cuda 16-bit updates: the rounding modes really differ", "[cuda]") {
  MT_REQUIRE_GPU();
  // Guards the bit-identity tests above against a kernel that ignored the rule: with updates far
  // below the bf16 ulp of the weights, nearest rounding leaves every weight unchanged while
  // stochastic rounding and Kahan move some.
  const Shape s = {1000};
  const Tensor p0 = random(s, DType::bf16, 9, 1.0, 2.0);
  const Tensor g = random(s, DType::f32, 10, 0.5, 1.0);
  std::vector<Tensor> results;
  for (Rule rule : {Rule::nearest, Rule::stochastic, Rule::kahan}) {
    Tensor p = on_gpu(p0), k = on_gpu(zeros(s, DType::bf16)), none;
    Tensor& kr = rule == Rule::kahan ? k : none;
    const Rounding rounding = rule == Rule::stochastic ? Rounding::stochastic : Rounding::nearest;
    for (int step = 0; step < 8; ++step)
      sgd16_update_(p, on_gpu(g), none, kr, 1e-3, 0.0, 0.0, rounding, 5, uint64_t(step) * 1000);
    results.push_back(on_cpu(p));
  }
  CHECK(fraction_identical(results[0], p0) == 1.0);  // each step's |u| <= 1e-3 < ulp/2 = 2^-8: never moves
  CHECK(fraction_identical(results[1], p0) < 0.9);
  CHECK(fraction_identical(results[2], p0) < 0.9);
}
