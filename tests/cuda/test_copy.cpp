// cuda::copy_cast and cuda::fill against the CPU kernels (tensor/cpu/copy.cpp), bit for bit.
// copy_cast is where values become 16 bits on the device, so the 16-bit conversions are checked
// on every f16 and bf16 bit pattern and on f32 values at every rounding decision: each pattern,
// the midpoint to its upper neighbour, the midpoint +- 1 f32 ulp, NaNs, infinities, subnormals,
// values past the largest finite and below the smallest subnormal.
//
// f64 tensors are CPU-only (`empty` refuses f64 on a CUDA device), so f64 -> 16-bit casts cannot
// reach the device; single rounding from a wider type is checked through i64 -> 16-bit instead.
#include "tests/cuda/cuda_test.h"

#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include "mixtape.h"

using namespace mixtape;
using namespace mixtape::cuda_test;

namespace {

constexpr DType k16[] = {DType::f16, DType::bf16};

// A 1-D CPU tensor holding exactly these bits.
Tensor from_bits16(const std::vector<uint16_t>& bits, DType dt) {
  Tensor t = empty({int64_t(bits.size())}, dt);
  std::memcpy(t.raw_data(), bits.data(), bits.size() * 2);
  return t;
}
Tensor from_floats(const std::vector<float>& v) {
  Tensor t = empty({int64_t(v.size())}, DType::f32);
  std::memcpy(t.raw_data(), v.data(), v.size() * 4);
  return t;
}

std::vector<uint16_t> all_patterns() {
  std::vector<uint16_t> p(65536);
  for (uint32_t i = 0; i < 65536; ++i) p[i] = uint16_t(i);
  return p;
}

float decode(uint16_t b, DType dt) { return dt == DType::f16 ? bits16::half_to_float(b) : bits16::bf16_to_float(b); }
bool is_nan16(uint16_t b, DType dt) {
  return dt == DType::f16 ? ((b & 0x7C00u) == 0x7C00u && (b & 0x3FFu)) : ((b & 0x7F80u) == 0x7F80u && (b & 0x7Fu));
}

// f32 values exercising every rounding case of the 16-bit format dt (see the file comment).
std::vector<float> rounding_cases(DType dt) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v;
  for (uint32_t p = 0; p < 0x8000u; ++p) {  // magnitudes; both signs pushed below
    const uint16_t b = uint16_t(p);
    if (is_nan16(b, dt)) continue;
    const float x = decode(b, dt);
    v.push_back(x);
    if (std::isinf(x)) continue;
    // Upper neighbour: the next pattern, or for the largest finite the value one ulp above it
    // (the point where overflow to inf starts at its midpoint).
    const uint16_t nb = uint16_t(p + 1);
    const double lo = x;
    const double hi =
        std::isinf(decode(nb, dt)) ? lo + (lo - double(decode(uint16_t(p - 1), dt))) : double(decode(nb, dt));
    const float mid = float((lo + hi) / 2);  // exact: one bit more than the 16-bit format
    REQUIRE(double(mid) == (lo + hi) / 2);
    v.push_back(mid);
    v.push_back(std::nextafter(mid, inf));
    v.push_back(std::nextafter(mid, -inf));
    v.push_back(std::nextafter(x, inf));  // just above a representable value
  }
  // Specials: infinities, f32 extremes, tiny values around half the smallest subnormal.
  const float tiny = dt == DType::f16 ? 0x1p-24f : std::numeric_limits<float>::denorm_min() * 65536.0f;
  for (float s : {inf, std::numeric_limits<float>::max(), std::numeric_limits<float>::min(),
                  std::numeric_limits<float>::denorm_min(), tiny / 2, std::nextafter(tiny / 2, inf),
                  std::nextafter(tiny / 2, 0.0f), tiny / 4, tiny * 0.75f, 65504.0f, 65519.996f, 65520.0f, 65536.0f,
                  1e-30f, 1e-45f, 3.3895314e38f, 3.4e38f})
    v.push_back(s);
  const size_t n = v.size();
  for (size_t i = 0; i < n; ++i) v.push_back(-v[i]);
  // NaNs: quiet and signalling, both signs, several payloads.
  for (uint32_t nan :
       {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu, 0x7FA00000u, 0x7F802000u, 0xFFBFFFFFu})
    v.push_back(std::bit_cast<float>(nan));
  // Random floats across the whole range.
  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i) {
    const float f = std::bit_cast<float>(uint32_t(rng()));
    if (!std::isnan(f)) v.push_back(f);
  }
  return v;
}

// Random values of dtype dt (integers in [-300, 300) for i64), on the CPU.
Tensor random_of(const Shape& shape, DType dt, uint64_t seed) {
  if (dt != DType::i64) return random(shape, dt, seed, -300.0, 300.0);
  return random(shape, DType::f32, seed, -300.0, 300.0).to(DType::i64);
}

}  // namespace

TEST_CASE("cuda 16-bit to f32 is exact on all 65536 patterns", "[cuda]") {
  MT_REQUIRE_GPU();
  for (DType dt : k16) {
    const Tensor cpu = from_bits16(all_patterns(), dt);
    const Tensor want = cpu.to(DType::f32);  // NaN payloads included (half_to_float keeps them)
    require_bit_identical(on_gpu(cpu).to(DType::f32), want, std::string(dtype_name(dt)) + " -> f32");
    // Non-contiguous source and destination.
    Tensor dst = strided_copy(zeros({65536}, DType::f32, gpu()));
    dst.copy_(strided_copy(on_gpu(cpu)));
    require_bit_identical(dst, want, std::string(dtype_name(dt)) + " -> f32, strided");
    // The reference keeps NaN payloads (which __half2float alone would not) and decodes 0x3C00.
    CHECK(element_bits(want)[0x7C01 | (dt == DType::bf16 ? 0x0380 : 0)] ==
          (dt == DType::f16 ? 0x7F802000u : 0x7F810000u));
    CHECK(want.flat_get(0x3C00) == (dt == DType::f16 ? 1.0 : 0.0078125));
  }
}

TEST_CASE("cuda f32 to 16-bit rounds to nearest even like the CPU in every rounding case", "[cuda]") {
  MT_REQUIRE_GPU();
  for (DType dt : k16) {
    const Tensor src = from_floats(rounding_cases(dt));
    const Tensor want = src.to(dt);
    INFO(src.numel() << " values");
    require_bit_identical(on_gpu(src).to(dt), want, std::string("f32 -> ") + dtype_name(dt));
    Tensor dst = strided_copy(zeros({src.numel()}, dt, gpu()));
    dst.copy_(on_gpu(src));
    require_bit_identical(dst, want, std::string("f32 -> ") + dtype_name(dt) + " into a strided view");
    // The rounding cases do exercise ties: 1 + half an ulp rounds to 1 (even), 1 + 1.5 ulp up.
    const float ulp = dt == DType::f16 ? 0x1p-10f : 0x1p-7f;
    const Tensor ties = host_view(on_gpu(from_floats({1.0f + ulp / 2, 1.0f + 1.5f * ulp})).to(dt));
    CHECK(ties.flat_get(0) == 1.0);
    CHECK(ties.flat_get(1) == 1.0 + 2 * double(ulp));
  }
}

TEST_CASE("cuda 16-bit to 16-bit casts match the CPU on all patterns", "[cuda]") {
  MT_REQUIRE_GPU();
  for (DType from : k16) {
    const DType to = from == DType::f16 ? DType::bf16 : DType::f16;
    const Tensor cpu = from_bits16(all_patterns(), from);
    require_bit_identical(on_gpu(cpu).to(to), cpu.to(to), std::string(dtype_name(from)) + " -> " + dtype_name(to));
  }
}

TEST_CASE("cuda i64 to 16-bit and f32 rounds once", "[cuda]") {
  MT_REQUIRE_GPU();
  // Through float these would round twice: 2^30 + 2^22 + 1 becomes the tie 2^30 + 2^22 in f32,
  // then 2^30 in bf16, where the nearest bf16 is 2^30 + 2^23.
  std::vector<int64_t> v = {0,
                            1,
                            -1,
                            2049,
                            65504,
                            65519,
                            65520,
                            -65520,
                            1 << 24,
                            (1 << 24) + 1,
                            (1 << 24) + 3,
                            (int64_t(1) << 30) + (1 << 22) + 1,
                            (int64_t(1) << 30) + (1 << 22),
                            (int64_t(1) << 30) + (1 << 22) - 1,
                            -((int64_t(1) << 30) + (1 << 22) + 1),
                            (int64_t(1) << 53) + 1,
                            std::numeric_limits<int64_t>::max(),
                            std::numeric_limits<int64_t>::min(),
                            (int64_t(1) << 40) + (int64_t(1) << 32) + 1};
  std::mt19937_64 rng(11);
  for (int i = 0; i < 5000; ++i) v.push_back(int64_t(rng()) >> (rng() % 63));
  const Tensor src = from_vector(v, {int64_t(v.size())});
  for (DType dt : {DType::f16, DType::bf16, DType::f32}) {
    const Tensor got = on_gpu(src).to(dt);
    require_bit_identical(got, src.to(dt), std::string("i64 -> ") + dtype_name(dt));
  }
  CHECK(host_view(on_gpu(src).to(DType::bf16)).flat_get(11) == std::ldexp(1.0, 30) + std::ldexp(1.0, 23));
}

TEST_CASE("cuda copy_cast matches the CPU for every dtype pair and layout", "[cuda]") {
  MT_REQUIRE_GPU();
  const DType types[] = {DType::f32, DType::f16, DType::bf16, DType::i64};
  const std::vector<Shape> shapes = {{1}, {7}, {33}, {257}, {3, 5, 67}, {2, 1, 9, 4}};
  uint64_t seed = 100;
  for (DType from : types)
    for (DType to : types)
      for (const Shape& shape : shapes) {
        const Tensor src = random_of(shape, from, ++seed);
        const std::string what = std::string(dtype_name(from)) + " -> " + dtype_name(to) + " " + shape_str(shape);
        const Tensor want = src.to(to);
        require_bit_identical(on_gpu(src).to(to), want, what + " contiguous");
        require_bit_identical(strided_copy(on_gpu(src)).to(to), want, what + " strided source");
        Tensor dst = strided_copy(zeros(shape, to, gpu()));
        dst.copy_(strided_copy(on_gpu(src)));
        require_bit_identical(dst, want, what + " strided source and destination");
        // Broadcast source: the last dim expanded from size 1.
        Shape one = shape;
        one.back() = 1;
        const Tensor small = random_of(one, from, ++seed);
        Tensor bdst = zeros(shape, to, gpu());
        bdst.copy_(on_gpu(small).expand(shape));
        Tensor bwant = zeros(shape, to);
        bwant.copy_(small.expand(shape));
        require_bit_identical(bdst, bwant, what + " broadcast source");
      }
}

TEST_CASE("cuda float to i64 truncates toward zero like the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  // In-range values only: NaN and out-of-range are undefined behaviour in C++ (cuda/copy.cu).
  std::vector<float> v = {0.0f,  -0.0f, 0.5f,  -0.5f,  1.99f,     -1.99f,   2.5f,
                          -2.5f, 7.0f,  -7.0f, 1e-30f, 1234.567f, -60000.0f};
  for (DType from : {DType::f16, DType::bf16, DType::f32}) {
    if (from == DType::f32)
      for (float big : {1e9f, -1e9f, 9.2e18f, -9.2e18f, 123456.789f}) v.push_back(big);
    const Tensor src = from_floats(v).to(from);
    const Tensor want = src.to(DType::i64);
    require_bit_identical(on_gpu(src).to(DType::i64), want, std::string(dtype_name(from)) + " -> i64");
    CHECK(want.flat_get(4) == 1.0);
    CHECK(want.flat_get(5) == -1.0);
  }
}

TEST_CASE("cuda stochastic rounding draws the CPU's stream", "[cuda]") {
  MT_REQUIRE_GPU();
  // Inexact values (random mantissas), exact ones, specials, and values near the top of fp16.
  std::vector<float> v;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  for (int i = 0; i < 4000; ++i) v.push_back(u(rng));
  for (float s : {0.0f, -0.0f, 1.0f, 65504.0f, 65510.0f, 65535.0f, 70000.0f, 1e-7f, 3e-8f, 1e-9f,
                  std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()})
    v.push_back(s);
  const Tensor values = from_floats(v);
  // Offsets straddling 2^32 exercise the high word of the Philox counter; the last one's block
  // numbers (offset / 4) straddle it too, starting mid-block.
  for (uint64_t offset : {uint64_t(0), uint64_t(12345), (uint64_t(1) << 32) - 1000, (uint64_t(1) << 34) - 1001})
    for (DType dt : k16)
      for (DType from : {DType::f32, DType::f16, DType::bf16, DType::i64}) {
        if (from == dt) continue;
        const Tensor src = from == DType::i64 ? random_of({4012}, DType::i64, 3) : values.to(from);
        const uint64_t seed = 0x1234567887654321ull + offset;
        Generator gcpu(seed), ggpu(seed);
        gcpu.set_state(seed, offset);
        ggpu.set_state(seed, offset);
        const Tensor want = src.to(dt, Rounding::stochastic, &gcpu);
        const std::string what =
            std::string(dtype_name(from)) + " -> " + dtype_name(dt) + " stochastic, offset " + std::to_string(offset);
        require_bit_identical(on_gpu(src).to(dt, Rounding::stochastic, &ggpu), want, what);
        CHECK(ggpu.offset() == gcpu.offset());
        // The row-major index picks the word: a strided source gives the same result.
        ggpu.set_state(seed, offset);
        require_bit_identical(strided_copy(on_gpu(src)).to(dt, Rounding::stochastic, &ggpu), want, what + " strided");
        if (from == DType::f32) {
          // Not a disguised round-to-nearest: many inexact values round the other way.
          const std::vector<uint64_t> sr = element_bits(want), rn = element_bits(src.to(dt));
          size_t differ = 0;
          for (size_t i = 0; i < sr.size(); ++i) differ += sr[i] != rn[i];
          CHECK(differ > sr.size() / 10);
        }
      }
}

TEST_CASE("cuda fill rounds the value once like the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  const double values[] = {0.0,
                           -0.0,
                           1.0,
                           0.1,
                           1.0 / 3.0,
                           -2.5,
                           65504.0,
                           65519.99,
                           65520.0,
                           1e-8,
                           3e-8,
                           1e40,
                           1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40),
                           -7.0,
                           std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::quiet_NaN()};
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::i64})
    for (double value : values) {
      if (dt == DType::i64 && !(std::fabs(value) < 1e18)) continue;  // out of range: undefined
      for (const Shape& shape : std::vector<Shape>{{1}, {33}, {5, 67}, {0}}) {
        INFO(dtype_name(dt) << " fill " << value << " " << shape_str(shape));
        require_bit_identical(full(shape, value, dt, gpu()), full(shape, value, dt), "fill");
      }
    }
  // One rounding from double: 1 + 2^-11 + 2^-40 is nearer 1 + 2^-10 than 1 in fp16.
  CHECK(host_view(full({3}, 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40), DType::f16, gpu())).flat_get(2) ==
        1.0 + std::ldexp(1.0, -10));
}

TEST_CASE("cuda increment_ counts on the device like the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  const Tensor start =
      from_vector(std::vector<int64_t>{0, 5, -3, 7, std::numeric_limits<int64_t>::max(), 1 << 20}, {2, 3});
  for (bool strided : {false, true})
    for (int64_t by : {int64_t(1), int64_t(-4), int64_t(1) << 40}) {
      Tensor c_cpu = start.clone();
      Tensor c_gpu = start.to(gpu());
      Tensor v_cpu = strided ? c_cpu.t() : c_cpu;  // through a strided view
      Tensor v_gpu = strided ? c_gpu.t() : c_gpu;
      for (int k = 0; k < 3; ++k) {
        increment_(v_cpu, by);
        increment_(v_gpu, by);
      }
      require_bit_identical(c_gpu.to(Device::cpu()), c_cpu,
                            std::string("increment_ by ") + std::to_string(by) + (strided ? " strided" : ""));
    }
  // A BatchNorm on the GPU counts its training batches there.
  nn::BatchNorm2d bn(3);
  bn.to(gpu());
  bn.train();
  for (int k = 0; k < 4; ++k) bn.forward(Variable(ones({2, 3, 4, 4}, DType::f32, gpu())));
  CHECK(bn.num_batches_tracked().device() == gpu());
  CHECK(bn.num_batches_tracked().item() == 4.0);
}

TEST_CASE("cuda concat matches the CPU in every dim with non-contiguous parts", "[cuda]") {
  MT_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::i64}) {
    uint64_t seed = 40;
    for (int64_t dim : {0, 1, 2, -1}) {
      const Shape base = {3, 4, 5};
      std::vector<Tensor> cpu, gpu_parts;
      for (int64_t len : {2, 0, 1, 7}) {
        Shape s = base;
        s[size_t(dim < 0 ? dim + 3 : dim)] = len;
        const Tensor part = random_of(s, dt, ++seed);
        cpu.push_back(part);
        // Alternate layouts: contiguous, strided, broadcast-free transposed copies.
        gpu_parts.push_back(len % 2 ? strided_copy(on_gpu(part)) : on_gpu(part));
      }
      const std::string what = std::string("concat ") + dtype_name(dt) + " dim " + std::to_string(dim);
      require_bit_identical(concat(gpu_parts, dim), concat(cpu, dim), what);
    }
    // Many small pieces, one of them an expanded (stride 0) view.
    const Tensor a = random_of({1, 9}, dt, 90), b = random_of({4, 9}, dt, 91);
    require_bit_identical(concat({on_gpu(a).expand({3, 9}), on_gpu(b), strided_copy(on_gpu(b))}, 0),
                          concat({a.expand({3, 9}), b, b}, 0), "concat with a broadcast part");
  }
}
