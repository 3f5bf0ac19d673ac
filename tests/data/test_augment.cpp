// Augmentation (data/augment.h): RandomHorizontalFlip mirrors exactly the rows it chooses and
// RandomCrop shifts them by exactly its chosen offsets; their choices depend only on (seed, row,
// epoch) (Note [Reproducible augmentation]) and are spread as they should be; bad fields are
// refused.
#include "support/catch.h"

#include <cstdint>
#include <vector>

#include "data/augment.h"
#include "data/loader.h"
#include "support/test_util.h"

using namespace mixtape;
using namespace mixtape::data;
using Catch::Contains;
using mixtape::test::error_of;

namespace {

constexpr int64_t kRows = 40, kC = 2, kH = 3, kW = 5;

// Image i: pixel (c, h, w) = i * 1000 + c * 100 + h * 10 + w (f32 [n, 2, 3, 5]).
Tensor image_tensor() {
  Tensor t = empty({kRows, kC, kH, kW}, DType::f32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < kRows; ++i)
    for (int64_t c = 0; c < kC; ++c)
      for (int64_t h = 0; h < kH; ++h)
        for (int64_t w = 0; w < kW; ++w) *p++ = float(i * 1000 + c * 100 + h * 10 + w);
  return t;
}

}  // namespace

TEST_CASE("RandomHorizontalFlip mirrors the chosen rows and leaves the others", "[data][augment]") {
  const RandomHorizontalFlip flip{.seed = 7};
  DataLoader loader(TensorDataset({image_tensor(), arange(0.0, double(kRows), 1.0, DType::i64)}),
                    {.batch_size = 8, .shuffle = true, .seed = 3, .transform = flip});
  int64_t flipped = 0;
  for (int64_t epoch : {0, 1}) {
    for (Batch& b : loader.epoch(epoch)) {
      REQUIRE(b.epoch == epoch);
      const float* p = b[0].data<float>();
      const int64_t* label = b[1].data<int64_t>();
      for (int64_t r = 0; r < b.size(); ++r) {
        const int64_t row = b.indices[size_t(r)];
        REQUIRE(label[r] == row);  // the other field is untouched
        const bool f = flip.flips(row, epoch);
        flipped += f;
        for (int64_t c = 0; c < kC; ++c)
          for (int64_t h = 0; h < kH; ++h)
            for (int64_t w = 0; w < kW; ++w) {
              const int64_t src = f ? kW - 1 - w : w;
              REQUIRE(p[((r * kC + c) * kH + h) * kW + w] == float(row * 1000 + c * 100 + h * 10 + src));
            }
      }
    }
  }
  // 80 fair coin flips: far from 0 or 80 (P(outside [20, 60]) < 1e-5).
  CHECK(flipped >= 20);
  CHECK(flipped <= 60);
}

TEST_CASE("RandomHorizontalFlip's choices depend on seed, row and epoch only", "[data][augment]") {
  const RandomHorizontalFlip a{.seed = 11}, b{.seed = 12};
  int64_t same_across_epochs = 0, same_across_seeds = 0;
  for (int64_t row = 0; row < 1000; ++row) {
    REQUIRE(a.flips(row, 3) == RandomHorizontalFlip{.seed = 11}.flips(row, 3));
    same_across_epochs += a.flips(row, 3) == a.flips(row, 4);
    same_across_seeds += a.flips(row, 3) == b.flips(row, 3);
  }
  // Independent streams agree about half the time.
  CHECK(same_across_epochs > 400);
  CHECK(same_across_epochs < 600);
  CHECK(same_across_seeds > 400);
  CHECK(same_across_seeds < 600);

  // The same rows come out the same whatever the batch size, the prefetch, or a resumed epoch.
  const auto collect = [&](int64_t batch_size, int prefetch, int64_t first_batch) {
    DataLoader loader(TensorDataset({image_tensor(), arange(0.0, double(kRows), 1.0, DType::i64)}),
                      {.batch_size = batch_size, .seed = 5, .prefetch = prefetch, .transform = a});
    std::vector<float> out;
    for (Batch& batch : loader.epoch(2, first_batch)) {
      const float* p = batch[0].data<float>();
      out.insert(out.end(), p, p + batch[0].numel());
    }
    return out;
  };
  const std::vector<float> whole = collect(8, 2, 0);
  CHECK(collect(8, 0, 0) == whole);
  const std::vector<float> tail = collect(8, 2, 3);
  REQUIRE(tail.size() == size_t(2 * 8 * kC * kH * kW));
  CHECK(std::vector<float>(whole.end() - std::ptrdiff_t(tail.size()), whole.end()) == tail);
}

TEST_CASE("RandomHorizontalFlip refuses a field it cannot mirror", "[data][augment]") {
  Batch b;
  b.indices = {0, 1};
  b.tensors = {zeros({2}, DType::f32), zeros({2, 3, 4}, DType::f32).transpose(1, 2)};
  CHECK_THAT(error_of([&] { RandomHorizontalFlip{.field = 2}(b); }), Contains("field 2 is not in a batch of 2"));
  CHECK_THAT(error_of([&] { RandomHorizontalFlip{.field = 0}(b); }), Contains("needs [N, ..., W]"));
  CHECK_THAT(error_of([&] { RandomHorizontalFlip{.field = 1}(b); }), Contains("it changes contiguous host tensors"));
}

TEST_CASE("RandomCrop shifts each image by its own offset, blank outside", "[data][augment]") {
  const RandomCrop crop{.seed = 9, .padding = 2, .fill = -0.5};
  const RandomHorizontalFlip flip{.seed = 9};
  // compose applies the crop, then the flip.
  DataLoader loader(TensorDataset({image_tensor(), arange(0.0, double(kRows), 1.0, DType::i64)}),
                    {.batch_size = 16, .seed = 4, .transform = compose({crop, flip})});
  std::vector<int> seen(25, 0);
  for (int64_t epoch : {0, 1, 2}) {
    for (Batch& b : loader.epoch(epoch)) {
      const float* p = b[0].data<float>();
      for (int64_t r = 0; r < b.size(); ++r) {
        const int64_t row = b.indices[size_t(r)];
        const auto [dy, dx] = crop.shift(row, epoch);
        REQUIRE(dy >= -2);
        REQUIRE(dy <= 2);
        REQUIRE(dx >= -2);
        REQUIRE(dx <= 2);
        ++seen[size_t((dy + 2) * 5 + dx + 2)];
        const bool f = flip.flips(row, epoch);
        for (int64_t c = 0; c < kC; ++c)
          for (int64_t h = 0; h < kH; ++h)
            for (int64_t w = 0; w < kW; ++w) {
              const int64_t cw = f ? kW - 1 - w : w;  // the column before the flip
              const int64_t sh = h + dy, sw = cw + dx;
              const float want =
                  sh >= 0 && sh < kH && sw >= 0 && sw < kW ? float(row * 1000 + c * 100 + sh * 10 + sw) : -0.5f;
              REQUIRE(p[((r * kC + c) * kH + h) * kW + w] == want);
            }
      }
    }
  }
  // 120 draws over 25 offsets: most offsets appear (all 25 missing fewer than 6 is certain enough:
  // the expected number of unseen offsets is 25 (24/25)^120 < 0.2).
  int64_t unseen = 0;
  for (int n : seen) unseen += n == 0;
  CHECK(unseen < 6);

  // 16-bit images: the fill is rounded once; padding 0 leaves the images alone.
  Batch b;
  b.indices = {0, 1, 2, 3};
  b.tensors = {full({4, 1, 3, 3}, 1.0, DType::bf16)};
  RandomCrop{.seed = 1, .padding = 1, .fill = 0.1}(b);
  for (double v : b[0].to_vector()) CHECK((v == 1.0 || v == full({}, 0.1, DType::bf16).item()));
  Batch same = b;
  same.tensors = {b[0].clone()};
  RandomCrop{.seed = 1, .padding = 0}(same);
  CHECK(same[0].to_vector() == b[0].to_vector());
  CHECK_THAT(error_of([&] { RandomCrop{.padding = -1}(same); }), Contains("RandomCrop: padding must be >= 0, got -1"));
  Batch flat;
  flat.indices = {0};
  flat.tensors = {zeros({1, 5})};
  CHECK_THAT(error_of([&] { RandomCrop{}(flat); }),
             Contains("RandomCrop: field 0 is f32[1, 5]; it needs [N, ..., H, W]"));
}
