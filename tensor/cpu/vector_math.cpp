// Note [Vector exp]
// The LSTM cell evaluates three sigmoids and two tanh per element forward (Note [Float tanh]),
// each one call of the C library's expf or exp: a fifth of a char_lstm training step went to
// them. The code below computes the same functions sixteen lanes at a time and must give their
// bits, so it evaluates expf and exp exactly as glibc 2.36 does on a CPU with FMA (the variants
// its ifunc selects wherever AVX2 and FMA exist, so wherever this code can run): the
// table-driven algorithms of ARM's optimized-routines that glibc uses since 2.28,
//   expf(x) = 2^(k/32) 2^(r/32) in double: k = round(32 x / ln 2), a table of 2^(i/32), a cubic
//   exp(x)  = 2^(k/128) e^r: r = x - k ln2/128 in two parts, a table of 2^(i/128) as a double
//             and its relative tail, a degree-5 polynomial,
// with the same constants, and with a fused multiply-add exactly where that build fuses one
// (read from its machine code; each step below names the operation it mirrors). The tables are
// the nearest doubles of their definitions:
//   kExpfTable[i]     = bits(2^(i/32)) - (i << 47)
//   kExpTable[2k]     = bits((2^(k/128) - H) / H) with H = the double nearest 2^(k/128)
//   kExpTable[2k + 1] = bits(H) - (k << 45)
// Lanes those algorithms send to their special cases (|x| >= 88 for expf, |x| >= 512 for exp;
// inf and NaN) are recomputed by the scalar functions. The divisions, the conversions and the
// tanh series are IEEE operations in the scalar code's order, without contraction (Note [No
// contracted multiply-adds]). tests/tensor/test_vector_math.cpp compares the paths on millions
// of floats in every range and, by hand ("[slow]"), on all 2^32 of them: a C library that
// computes expf or exp differently fails there.
#include "tensor/cpu/vector_math.h"

#include <cstring>

#include "tensor/cpu/convert.h"
#include "tensor/cpu/target_region.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace mixtape::cpu {

namespace {

void sigmoid_scalar(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = sigmoid(x[i]);
}

void tanh_scalar(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = tanh_f32(x[i]);
}

#if defined(__x86_64__)

// clang-format off
constexpr uint64_t kExpfTable[32] = {
    0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull,
    0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull,
    0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull,
    0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull,
    0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull,
    0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull,
    0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull,
    0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull,
};
// Pairs (tail, bits(H) - (k << 45)) for k = 0, 1, ...
constexpr uint64_t kExpTable[256] = {
    0x0000000000000000ull, 0x3ff0000000000000ull, 0x3c9b3b4f1a88bf6eull, 0x3feff63da9fb3335ull,
    0xbc7160139cd8dc5dull, 0x3fefec9a3e778061ull, 0xbc905e7a108766d1ull, 0x3fefe315e86e7f85ull,
    0x3c8cd2523567f613ull, 0x3fefd9b0d3158574ull, 0xbc8bce8023f98efaull, 0x3fefd06b29ddf6deull,
    0x3c60f74e61e6c861ull, 0x3fefc74518759bc8ull, 0x3c90a3e45b33d399ull, 0x3fefbe3ecac6f383ull,
    0x3c979aa65d837b6dull, 0x3fefb5586cf9890full, 0x3c8eb51a92fdeffcull, 0x3fefac922b7247f7ull,
    0x3c3ebe3d702f9cd1ull, 0x3fefa3ec32d3d1a2ull, 0xbc6a033489906e0bull, 0x3fef9b66affed31bull,
    0xbc9556522a2fbd0eull, 0x3fef9301d0125b51ull, 0xbc5080ef8c4eea55ull, 0x3fef8abdc06c31ccull,
    0xbc91c923b9d5f416ull, 0x3fef829aaea92de0ull, 0x3c80d3e3e95c55afull, 0x3fef7a98c8a58e51ull,
    0xbc801b15eaa59348ull, 0x3fef72b83c7d517bull, 0xbc8f1ff055de323dull, 0x3fef6af9388c8deaull,
    0x3c8b898c3f1353bfull, 0x3fef635beb6fcb75ull, 0xbc96d99c7611eb26ull, 0x3fef5be084045cd4ull,
    0x3c9aecf73e3a2f60ull, 0x3fef54873168b9aaull, 0xbc8fe782cb86389dull, 0x3fef4d5022fcd91dull,
    0x3c8a6f4144a6c38dull, 0x3fef463b88628cd6ull, 0x3c807a05b0e4047dull, 0x3fef3f49917ddc96ull,
    0x3c968efde3a8a894ull, 0x3fef387a6e756238ull, 0x3c875e18f274487dull, 0x3fef31ce4fb2a63full,
    0x3c80472b981fe7f2ull, 0x3fef2b4565e27cddull, 0xbc96b87b3f71085eull, 0x3fef24dfe1f56381ull,
    0x3c82f7e16d09ab31ull, 0x3fef1e9df51fdee1ull, 0xbc3d219b1a6fbffaull, 0x3fef187fd0dad990ull,
    0x3c8b3782720c0ab4ull, 0x3fef1285a6e4030bull, 0x3c6e149289cecb8full, 0x3fef0cafa93e2f56ull,
    0x3c834d754db0abb6ull, 0x3fef06fe0a31b715ull, 0x3c864201e2ac744cull, 0x3fef0170fc4cd831ull,
    0x3c8fdd395dd3f84aull, 0x3feefc08b26416ffull, 0xbc86a3803b8e5b04ull, 0x3feef6c55f929ff1ull,
    0xbc924aedcc4b5068ull, 0x3feef1a7373aa9cbull, 0xbc9907f81b512d8eull, 0x3feeecae6d05d866ull,
    0xbc71d1e83e9436d2ull, 0x3feee7db34e59ff7ull, 0xbc991919b3ce1b15ull, 0x3feee32dc313a8e5ull,
    0x3c859f48a72a4c6dull, 0x3feedea64c123422ull, 0xbc9312607a28698aull, 0x3feeda4504ac801cull,
    0xbc58a78f4817895bull, 0x3feed60a21f72e2aull, 0xbc7c2c9b67499a1bull, 0x3feed1f5d950a897ull,
    0x3c4363ed60c2ac11ull, 0x3feece086061892dull, 0x3c9666093b0664efull, 0x3feeca41ed1d0057ull,
    0x3c6ecce1daa10379ull, 0x3feec6a2b5c13cd0ull, 0x3c93ff8e3f0f1230ull, 0x3feec32af0d7d3deull,
    0x3c7690cebb7aafb0ull, 0x3feebfdad5362a27ull, 0x3c931dbdeb54e077ull, 0x3feebcb299fddd0dull,
    0xbc8f94340071a38eull, 0x3feeb9b2769d2ca7ull, 0xbc87deccdc93a349ull, 0x3feeb6daa2cf6642ull,
    0xbc78dec6bd0f385full, 0x3feeb42b569d4f82ull, 0xbc861246ec7b5cf6ull, 0x3feeb1a4ca5d920full,
    0x3c93350518fdd78eull, 0x3feeaf4736b527daull, 0x3c7b98b72f8a9b05ull, 0x3feead12d497c7fdull,
    0x3c9063e1e21c5409ull, 0x3feeab07dd485429ull, 0x3c34c7855019c6eaull, 0x3feea9268a5946b7ull,
    0x3c9432e62b64c035ull, 0x3feea76f15ad2148ull, 0xbc8ce44a6199769full, 0x3feea5e1b976dc09ull,
    0xbc8c33c53bef4da8ull, 0x3feea47eb03a5585ull, 0xbc845378892be9aeull, 0x3feea34634ccc320ull,
    0xbc93cedd78565858ull, 0x3feea23882552225ull, 0x3c5710aa807e1964ull, 0x3feea155d44ca973ull,
    0xbc93b3efbf5e2228ull, 0x3feea09e667f3bcdull, 0xbc6a12ad8734b982ull, 0x3feea012750bdabfull,
    0xbc6367efb86da9eeull, 0x3fee9fb23c651a2full, 0xbc80dc3d54e08851ull, 0x3fee9f7df9519484ull,
    0xbc781f647e5a3ecfull, 0x3fee9f75e8ec5f74ull, 0xbc86ee4ac08b7db0ull, 0x3fee9f9a48a58174ull,
    0xbc8619321e55e68aull, 0x3fee9feb564267c9ull, 0x3c909ccb5e09d4d3ull, 0x3feea0694fde5d3full,
    0xbc7b32dcb94da51dull, 0x3feea11473eb0187ull, 0x3c94ecfd5467c06bull, 0x3feea1ed0130c132ull,
    0x3c65ebe1abd66c55ull, 0x3feea2f336cf4e62ull, 0xbc88a1c52fb3cf42ull, 0x3feea427543e1a12ull,
    0xbc9369b6f13b3734ull, 0x3feea589994cce13ull, 0xbc805e843a19ff1eull, 0x3feea71a4623c7adull,
    0xbc94d450d872576eull, 0x3feea8d99b4492edull, 0x3c90ad675b0e8a00ull, 0x3feeaac7d98a6699ull,
    0x3c8db72fc1f0eab4ull, 0x3feeace5422aa0dbull, 0xbc65b6609cc5e7ffull, 0x3feeaf3216b5448cull,
    0x3c7bf68359f35f44ull, 0x3feeb1ae99157736ull, 0xbc93091fa71e3d83ull, 0x3feeb45b0b91ffc6ull,
    0xbc5da9b88b6c1e29ull, 0x3feeb737b0cdc5e5ull, 0xbc6c23f97c90b959ull, 0x3feeba44cbc8520full,
    0xbc92434322f4f9aaull, 0x3feebd829fde4e50ull, 0xbc85ca6cd7668e4bull, 0x3feec0f170ca07baull,
    0x3c71affc2b91ce27ull, 0x3feec49182a3f090ull, 0x3c6dd235e10a73bbull, 0x3feec86319e32323ull,
    0xbc87c50422622263ull, 0x3feecc667b5de565ull, 0x3c8b1c86e3e231d5ull, 0x3feed09bec4a2d33ull,
    0xbc91bbd1d3bcbb15ull, 0x3feed503b23e255dull, 0x3c90cc319cee31d2ull, 0x3feed99e1330b358ull,
    0x3c8469846e735ab3ull, 0x3feede6b5579fdbfull, 0xbc82dfcd978e9db4ull, 0x3feee36bbfd3f37aull,
    0x3c8c1a7792cb3387ull, 0x3feee89f995ad3adull, 0xbc907b8f4ad1d9faull, 0x3feeee07298db666ull,
    0xbc55c3d956dcaebaull, 0x3feef3a2b84f15fbull, 0xbc90a40e3da6f640ull, 0x3feef9728de5593aull,
    0xbc68d6f438ad9334ull, 0x3feeff76f2fb5e47ull, 0xbc91eee26b588a35ull, 0x3fef05b030a1064aull,
    0x3c74ffd70a5fddcdull, 0x3fef0c1e904bc1d2ull, 0xbc91bdfbfa9298acull, 0x3fef12c25bd71e09ull,
    0x3c736eae30af0cb3ull, 0x3fef199bdd85529cull, 0x3c8ee3325c9ffd94ull, 0x3fef20ab5fffd07aull,
    0x3c84e08fd10959acull, 0x3fef27f12e57d14bull, 0x3c63cdaf384e1a67ull, 0x3fef2f6d9406e7b5ull,
    0x3c676b2c6c921968ull, 0x3fef3720dcef9069ull, 0xbc808a1883ccb5d2ull, 0x3fef3f0b555dc3faull,
    0xbc8fad5d3ffffa6full, 0x3fef472d4a07897cull, 0xbc900dae3875a949ull, 0x3fef4f87080d89f2ull,
    0x3c74a385a63d07a7ull, 0x3fef5818dcfba487ull, 0xbc82919e2040220full, 0x3fef60e316c98398ull,
    0x3c8e5a50d5c192acull, 0x3fef69e603db3285ull, 0x3c843a59ac016b4bull, 0x3fef7321f301b460ull,
    0xbc82d52107b43e1full, 0x3fef7c97337b9b5full, 0xbc892ab93b470dc9ull, 0x3fef864614f5a129ull,
    0x3c74b604603a88d3ull, 0x3fef902ee78b3ff6ull, 0x3c83c5ec519d7271ull, 0x3fef9a51fbc74c83ull,
    0xbc8ff7128fd391f0ull, 0x3fefa4afa2a490daull, 0xbc8dae98e223747dull, 0x3fefaf482d8e67f1ull,
    0x3c8ec3bc41aa2008ull, 0x3fefba1bee615a27ull, 0x3c842b94c3a9eb32ull, 0x3fefc52b376bba97ull,
    0x3c8a64a931d185eeull, 0x3fefd0765b6e4540ull, 0xbc8e37bae43be3edull, 0x3fefdbfdad9cbe14ull,
    0x3c77893b4d91cd9dull, 0x3fefe7c1819e90d8ull, 0x3c5305c14160cc89ull, 0x3feff3c22b8f71f1ull,
};
// clang-format on

// expf's constants: 32 / ln 2, the rounding shift 1.5 2^52, and the cubic's coefficients.
constexpr double kExpfInvLn2N = 0x1.71547652b82fep+5, kExpfShift = 0x1.8p+52;
constexpr double kExpfC0 = 0x1.c6af84b912394p-20, kExpfC1 = 0x1.ebfce50fac4f3p-13, kExpfC2 = 0x1.62e42ff0c52d6p-6;
// exp's: 128 / ln 2, -ln 2 / 128 in two parts, the shift, and the polynomial's coefficients.
constexpr double kExpInvLn2N = 0x1.71547652b82fep+7, kExpShift = 0x1.8p+52;
constexpr double kExpNegLn2HiN = -0x1.62e42fefa0000p-8, kExpNegLn2LoN = -0x1.cf79abc9e3b3ap-47;
constexpr double kExpC2 = 0x1.ffffffffffdbdp-2, kExpC3 = 0x1.555555555543cp-3, kExpC4 = 0x1.55555cf172b91p-5,
                 kExpC5 = 0x1.1111167a4d017p-7;

MT_TARGET_BEGIN("avx512f,avx512vl,avx2,fma")

__m512d set(double x) { return _mm512_set1_pd(x); }

// glibc's expf before its final rounding to float, on eight floats widened to double (xd).
__m512d expf_wide(__m512d xd) {
  const __m512d kd_shifted = _mm512_fmadd_pd(xd, set(kExpfInvLn2N), set(kExpfShift));  // fma(InvLn2N, xd, Shift)
  const __m512i ki = _mm512_castpd_si512(kd_shifted);
  const __m512d kd = _mm512_sub_pd(kd_shifted, set(kExpfShift));
  const __m512d r = _mm512_fmsub_pd(xd, set(kExpfInvLn2N), kd);  // fma(InvLn2N, xd, -kd)
  // T[ki % 32]: entries 0-15 and 16-31 through two permutes, bit 4 choosing.
  const __m512i t0 = _mm512_loadu_si512(kExpfTable), t1 = _mm512_loadu_si512(kExpfTable + 8);
  const __m512i t2 = _mm512_loadu_si512(kExpfTable + 16), t3 = _mm512_loadu_si512(kExpfTable + 24);
  const __mmask8 upper = _mm512_test_epi64_mask(ki, _mm512_set1_epi64(16));
  __m512i t =
      _mm512_mask_blend_epi64(upper, _mm512_permutex2var_epi64(t0, ki, t1), _mm512_permutex2var_epi64(t2, ki, t3));
  t = _mm512_add_epi64(t, _mm512_slli_epi64(ki, 47));                // t += ki << 47
  const __m512d z = _mm512_fmadd_pd(r, set(kExpfC0), set(kExpfC1));  // fma(C0, r, C1)
  const __m512d r2 = _mm512_mul_pd(r, r);
  __m512d y = _mm512_fmadd_pd(r, set(kExpfC2), set(1.0));  // fma(C2, r, 1)
  y = _mm512_fmadd_pd(z, r2, y);                           // fma(z, r2, y)
  return _mm512_mul_pd(y, _mm512_castsi512_pd(t));         // y * s
}

// glibc's exp on eight doubles in its main range, 2^-54 <= |x| < 512.
__m512d exp_main(__m512d x) {
  const __m512d kd_shifted = _mm512_fmadd_pd(x, set(kExpInvLn2N), set(kExpShift));  // fma(x, InvLn2N, Shift)
  const __m512i ki = _mm512_castpd_si512(kd_shifted);
  const __m512d kd = _mm512_sub_pd(kd_shifted, set(kExpShift));
  __m512d r = _mm512_fmadd_pd(kd, set(kExpNegLn2HiN), x);                                  // fma(kd, NegLn2hiN, x)
  r = _mm512_fmadd_pd(kd, set(kExpNegLn2LoN), r);                                          // fma(kd, NegLn2loN, r)
  const __m512i idx = _mm512_slli_epi64(_mm512_and_si512(ki, _mm512_set1_epi64(127)), 1);  // 2 (ki % 128)
  const __m512d tail = _mm512_i64gather_pd(idx, kExpTable, 8);
  const __m512i sbits =
      _mm512_add_epi64(_mm512_i64gather_epi64(_mm512_add_epi64(idx, _mm512_set1_epi64(1)), kExpTable, 8),
                       _mm512_slli_epi64(ki, 45));                   // T[idx + 1] + (ki << 45)
  const __m512d p23 = _mm512_fmadd_pd(r, set(kExpC3), set(kExpC2));  // fma(r, C3, C2)
  const __m512d rt = _mm512_add_pd(r, tail);
  const __m512d r2 = _mm512_mul_pd(r, r);
  const __m512d p45 = _mm512_fmadd_pd(r, set(kExpC5), set(kExpC4));  // fma(r, C5, C4)
  __m512d tmp = _mm512_fmadd_pd(p23, r2, rt);                        // fma(p23, r2, r + tail)
  tmp = _mm512_fmadd_pd(_mm512_mul_pd(r2, r2), p45, tmp);            // fma(r2 r2, p45, tmp)
  const __m512d scale = _mm512_castsi512_pd(sbits);
  return _mm512_fmadd_pd(scale, tmp, scale);  // fma(scale, tmp, scale)
}

// The float and double halves of sixteen lanes.
__m512d low_half(__m512 x) { return _mm512_cvtps_pd(_mm512_castps512_ps256(x)); }
__m512d high_half(__m512 x) {
  return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
}
__m512 join(__m256 lo, __m256 hi) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
}

// The lanes whose float exponent field (bits 30-20 of |x|, glibc's top12) is at least `top`.
__mmask16 top12_at_least(__m512 x, int top) {
  const __m512i top12 = _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(x), 20), _mm512_set1_epi32(0x7FF));
  return _mm512_cmp_epi32_mask(top12, _mm512_set1_epi32(top), _MM_CMPINT_NLT);
}

// sigmoid of sixteen lanes; `special` gets the lanes expf treats specially (|x| >= 88, inf, NaN).
__m512 sigmoid16(__m512 x, __mmask16& special) {
  const __m512 nx = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32(int(0x80000000u))));
  special = top12_at_least(nx, 0x42B);  // top12(88.0f)
  const __m512 e = join(_mm512_cvtpd_ps(expf_wide(low_half(nx))), _mm512_cvtpd_ps(expf_wide(high_half(nx))));
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, e));
}

// tanh_f32 of eight floats widened to double; `special` gets the lanes whose exp(-2|x|) leaves
// exp's main range (|x| >= 256, inf, NaN).
__m256 tanh8(__m512d d, __mmask8& special) {
  const __m512d a = _mm512_abs_pd(d);
  const __mmask8 small = _mm512_cmp_pd_mask(a, set(0x1p-10), _CMP_LT_OQ);
  // |x| < 2^-10: d (1 - d2 (1/3 - d2 (2/15)))
  const __m512d d2 = _mm512_mul_pd(d, d);
  const __m512d series = _mm512_mul_pd(
      d, _mm512_sub_pd(set(1.0), _mm512_mul_pd(d2, _mm512_sub_pd(set(1.0 / 3.0), _mm512_mul_pd(d2, set(2.0 / 15.0))))));
  // otherwise: copysign((1 - e) / (1 + e), d) with e = exp(-2|x|)
  const __m512d m2a = _mm512_mul_pd(set(-2.0), a);
  const __m512i top = _mm512_and_si512(_mm512_srli_epi64(_mm512_castpd_si512(m2a), 52), _mm512_set1_epi64(0x7FF));
  special = _mm512_mask_cmp_epi64_mask(__mmask8(~small), top, _mm512_set1_epi64(0x408), _MM_CMPINT_NLT);
  const __m512d e = exp_main(m2a);
  const __m512d q = _mm512_div_pd(_mm512_sub_pd(set(1.0), e), _mm512_add_pd(set(1.0), e));
  const __m512i sign_bit = _mm512_set1_epi64(int64_t(0x8000000000000000ull));
  const __m512d large = _mm512_castsi512_pd(_mm512_ternarylogic_epi64(
      _mm512_castpd_si512(q), _mm512_castpd_si512(d), sign_bit, 0xD8));  // copysign(q, d): d's bit where sign_bit
  return _mm512_cvtpd_ps(_mm512_mask_blend_pd(small, large, series));
}

__m512 tanh16(__m512 x, __mmask16& special) {
  __mmask8 s_lo, s_hi;
  const __m512 y = join(tanh8(low_half(x), s_lo), tanh8(high_half(x), s_hi));
  special = __mmask16(s_lo | (unsigned(s_hi) << 8));
  return y;
}

// y[0 .. n) from x sixteen lanes at a time, the special lanes and the tail by the scalar f.
template <class Vec, class Scalar>
void row_avx512(const float* x, float* y, int64_t n, Vec vec, Scalar scalar) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    __mmask16 special;
    const __m512 v = vec(_mm512_loadu_ps(x + j), special);
    if (!special) {
      _mm512_storeu_ps(y + j, v);
      continue;
    }
    alignas(64) float out[16];
    _mm512_store_ps(out, v);
    for (int l = 0; l < 16; ++l)
      if (special >> l & 1) scalar(x + j + l, out + l, 1);
    std::memcpy(y + j, out, sizeof(out));
  }
  scalar(x + j, y + j, n - j);
}

struct Sigmoid16 {
  __m512 operator()(__m512 x, __mmask16& special) const { return sigmoid16(x, special); }
};
struct Tanh16 {
  __m512 operator()(__m512 x, __mmask16& special) const { return tanh16(x, special); }
};

void sigmoid_avx512(const float* x, float* y, int64_t n) { row_avx512(x, y, n, Sigmoid16{}, sigmoid_scalar); }
void tanh_avx512(const float* x, float* y, int64_t n) { row_avx512(x, y, n, Tanh16{}, tanh_scalar); }

MT_TARGET_END

#endif  // __x86_64__

}  // namespace

void sigmoid_row(const float* x, float* y, int64_t n) {
#if defined(__x86_64__)
  if (avx512_path_active()) return sigmoid_avx512(x, y, n);
#endif
  sigmoid_scalar(x, y, n);
}

void tanh_row(const float* x, float* y, int64_t n) {
#if defined(__x86_64__)
  if (avx512_path_active()) return tanh_avx512(x, y, n);
#endif
  tanh_scalar(x, y, n);
}

}  // namespace mixtape::cpu
