#include "data/augment.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "tensor/core/rng.h"

namespace mixtape::data {

namespace {

// Mixed into the seed so that each transform's stream differs from the others' and from the epoch
// permutation's (which uses the seed as its key with the counter (i, epoch)).
constexpr uint64_t kFlipStream = 0x68666c6970000001ull, kCropStream = 0x63726f7000000002ull;

PhiloxBlock row_words(uint64_t seed, uint64_t stream, int64_t row, int64_t epoch) {
  const uint64_t k = seed ^ stream, r = uint64_t(row), e = uint64_t(epoch);
  return philox4x32_10({uint32_t(r), uint32_t(r >> 32), uint32_t(e), uint32_t(e >> 32)},
                       {uint32_t(k), uint32_t(k >> 32)});
}

// The batch field a transform changes, checked: a contiguous host tensor [N, ..., d] with at
// least `dims` dims after N.
Tensor& image_field(Batch& batch, size_t field, int64_t dims, const char* who, const char* layout) {
  MT_CHECK(field < batch.tensors.size(), who, ": field ", field, " is not in a batch of ", batch.tensors.size(),
           " fields");
  Tensor& t = batch.tensors[field];
  MT_CHECK(t.dim() >= dims + 1 && t.size(0) == batch.size(), who, ": field ", field, " is ", t.meta(), "; it needs ",
           layout, " with N = ", batch.size(), " rows");
  MT_CHECK(t.device().is_cpu() && t.is_contiguous(), who, ": field ", field, " is ", t.meta(),
           "; it changes contiguous host tensors (before they move to a device)");
  return t;
}

}  // namespace

bool RandomHorizontalFlip::flips(int64_t row, int64_t epoch) const {
  return (row_words(seed, kFlipStream, row, epoch)[0] >> 31) != 0;
}

void RandomHorizontalFlip::operator()(Batch& batch) const {
  Tensor& t = image_field(batch, field, 1, "RandomHorizontalFlip", "[N, ..., W]");
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

std::pair<int64_t, int64_t> RandomCrop::shift(int64_t row, int64_t epoch) const {
  const PhiloxBlock w = row_words(seed, kCropStream, row, epoch);
  const auto choices = uint64_t(2 * padding + 1);  // multiply-shift: uniform up to 2^-32 bias
  return {int64_t((uint64_t(w[0]) * choices) >> 32) - padding, int64_t((uint64_t(w[1]) * choices) >> 32) - padding};
}

void RandomCrop::operator()(Batch& batch) const {
  MT_CHECK(padding >= 0, "RandomCrop: padding must be >= 0, got ", padding);
  Tensor& t = image_field(batch, field, 2, "RandomCrop", "[N, ..., H, W]");
  if (t.numel() == 0 || padding == 0) return;
  const int64_t H = t.size(t.dim() - 2), W = t.size(t.dim() - 1);
  const int64_t planes = t.numel() / std::max<int64_t>(batch.size(), 1) / (H * W);
  dispatch_floating(t.dtype(), "RandomCrop", [&]<class T>() {
    const T blank = store<T>(compute_t<T>(fill));  // the one rounding of the fill value
    std::vector<T> plane(size_t(H * W));
    T* data = t.data<T>();
    for (int64_t i = 0; i < batch.size(); ++i) {
      const auto [dy, dx] = shift(batch.indices[size_t(i)], batch.epoch);
      if (dy == 0 && dx == 0) continue;
      for (int64_t c = 0; c < planes; ++c) {
        T* p = data + (i * planes + c) * H * W;
        std::copy(p, p + H * W, plane.begin());
        // out(h, w) = in(h + dy, w + dx), blank outside: a window of the padded image.
        for (int64_t h = 0; h < H; ++h)
          for (int64_t w = 0; w < W; ++w) {
            const int64_t sh = h + dy, sw = w + dx;
            p[h * W + w] = sh >= 0 && sh < H && sw >= 0 && sw < W ? plane[size_t(sh * W + sw)] : blank;
          }
      }
    }
  });
}

BatchTransform compose(std::vector<BatchTransform> transforms) {
  return [transforms = std::move(transforms)](Batch& batch) {
    for (const BatchTransform& f : transforms)
      if (f) f(batch);
  };
}

}  // namespace mixtape::data
