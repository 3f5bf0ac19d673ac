// Counter-based random numbers: Philox4x32-10 (Salmon et al., SC'11, "Parallel random numbers:
// as easy as 1, 2, 3"). Element i of a draw uses counter (offset + i), so a tensor's values
// depend only on (seed, offset, i): reproducible, and independent of thread count or device.
#pragma once

#include <array>
#include <cstdint>

namespace mixtape {

using PhiloxBlock = std::array<uint32_t, 4>;

// One Philox4x32-10 block: 10 rounds on the 128-bit counter with the 64-bit key.
constexpr PhiloxBlock philox4x32_10(PhiloxBlock ctr, std::array<uint32_t, 2> key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(kM0) * ctr[0];
    const uint64_t p1 = uint64_t(kM1) * ctr[2];
    ctr = {uint32_t(p1 >> 32) ^ ctr[1] ^ key[0], uint32_t(p1), uint32_t(p0 >> 32) ^ ctr[3] ^ key[1], uint32_t(p0)};
    key[0] += kW0;
    key[1] += kW1;
  }
  return ctr;
}

// Four random words for counter `index` of stream (seed, offset).
constexpr PhiloxBlock philox_words(uint64_t seed, uint64_t index) {
  return philox4x32_10({uint32_t(index), uint32_t(index >> 32), 0u, 0u}, {uint32_t(seed), uint32_t(seed >> 32)});
}

// Note [Rounding words]
// Stochastic rounding takes one random 32-bit word per element (Note [Stochastic rounding] in
// half.h), and a Philox block has four. Word j of a stream is word j mod 4 of the block with
// counter {j / 4, 1}: one block serves four consecutive elements, a quarter of the work of a
// block per element. The 1 in the counter's third word keeps these blocks apart from those of
// philox_words (third word 0), so a generator that serves both kinds of draw (casts, dropout,
// initialisation) never hands out the same bits twice. A stochastic draw of n elements at
// offset o takes words o .. o + n - 1, element i word o + i, on every path, thread count and
// device.
constexpr PhiloxBlock rounding_block(uint64_t seed, uint64_t block) {  // words 4 block .. 4 block + 3
  return philox4x32_10({uint32_t(block), uint32_t(block >> 32), 1u, 0u}, {uint32_t(seed), uint32_t(seed >> 32)});
}
constexpr uint32_t rounding_word(uint64_t seed, uint64_t j) { return rounding_block(seed, j >> 2)[j & 3]; }

// Uniform in [0, 1) from 24 random bits (exact in float), or 53 bits for f64.
inline float uniform01(uint32_t w) { return float(w >> 8) * (1.0f / 16777216.0f); }
inline double uniform01_f64(uint32_t hi, uint32_t lo) {
  return double((uint64_t(hi) << 21) | (lo >> 11)) * (1.0 / 9007199254740992.0);
}

// A seed plus a running offset. Each draw of n elements consumes positions [offset, offset + n)
// (counters of philox_words, or words of rounding_word for a stochastic rounding) and advances the
// offset, so successive draws never reuse numbers.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) {
    seed_ = seed;
    offset_ = offset;
  }
  // Reserve n counters; returns the first.
  uint64_t advance(uint64_t n) {
    const uint64_t o = offset_;
    offset_ += n;
    return o;
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

}  // namespace mixtape
