#include "data/augment.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "tensor/core/rng.h"

namespace mixtape::data {

namespace {
// Mixed into the seed so the flip stream is not the epoch permutation's (which uses the seed as
// its key with the counter (i, epoch)).
constexpr uint64_t kFlipStream = 0x68666c6970000001ull;
}  // namespace

bool RandomHorizontalFlip::flips(int64_t row, int64_t epoch) const {
  const uint64_t k = seed ^ kFlipStream, r = uint64_t(row), e = uint64_t(epoch);
  const PhiloxBlock w =
      philox4x32_10({uint32_t(r), uint32_t(r >> 32), uint32_t(e), uint32_t(e >> 32)}, {uint32_t(k), uint32_t(k >> 32)});
  return (w[0] >> 31) != 0;
}

void RandomHorizontalFlip::operator()(Batch& batch) const {
  MT_CHECK(field < batch.tensors.size(), "RandomHorizontalFlip: field ", field, " is not in a batch of ",
           batch.tensors.size(), " fields");
  Tensor& t = batch.tensors[field];
  MT_CHECK(t.dim() >= 2 && t.size(0) == batch.size(), "RandomHorizontalFlip: field ", field, " is ", t.meta(),
           "; it needs [N, ..., W] with N = ", batch.size(), " rows");
  MT_CHECK(t.device().is_cpu() && t.is_contiguous(), "RandomHorizontalFlip: field ", field, " is ", t.meta(),
           "; it flips contiguous host tensors (before they move to a device)");
  if (t.numel() == 0) return;
  const int64_t width = t.size(t.dim() - 1), lines_per_row = t.numel() / std::max<int64_t>(batch.size(), 1) / width;
  const size_t elem = dtype_size(t.dtype());
  auto* data = static_cast<unsigned char*>(t.raw_data());
  std::array<unsigned char, 8> tmp{};
  for (int64_t i = 0; i < batch.size(); ++i) {
    if (!flips(batch.indices[size_t(i)], batch.epoch)) continue;
    for (int64_t line = 0; line < lines_per_row; ++line) {
      unsigned char* p = data + size_t((i * lines_per_row + line) * width) * elem;
      for (int64_t a = 0, b = width - 1; a < b; ++a, --b) {  // a swap moves bytes: no rounding
        std::memcpy(tmp.data(), p + size_t(a) * elem, elem);
        std::memcpy(p + size_t(a) * elem, p + size_t(b) * elem, elem);
        std::memcpy(p + size_t(b) * elem, tmp.data(), elem);
      }
    }
  }
}

}  // namespace mixtape::data
