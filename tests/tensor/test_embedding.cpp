// Embedding on plain tensors: gathered rows, scatter-added gradients, error messages.
#include "support/catch.h"

#include <cmath>
#include <string>

#include "mixtape.h"
#include "support/test_util.h"

using namespace mixtape;
using Catch::Contains;

using mixtape::test::error_of;

namespace {

Tensor f32(const std::vector<double>& v, const Shape& s) { return from_vector(v, s, DType::f32); }

}  // namespace

TEST_CASE("embedding gathers rows and scatter-adds gradients of repeated indices", "[embedding]") {
  Tensor w = f32({0, 1, 10, 11, 20, 21}, {3, 2});
  Tensor idx = from_vector(std::vector<int64_t>{2, 0, 2, 2}, {2, 2});
  Tensor y = embedding(idx, w);
  CHECK(y.shape() == Shape{2, 2, 2});
  CHECK(y.to_vector() == std::vector<double>{20, 21, 0, 1, 20, 21, 20, 21});
  Tensor dw = embedding_backward(idx, ones({2, 2, 2}), 3);
  CHECK(dw.to_vector() == std::vector<double>{1, 1, 0, 0, 3, 3});

  // Accumulation in double, one rounding: 1 + 16 * 2^-9 is exact in bf16, but a bf16 running sum
  // would stay at 1 (each 2^-9 is below half an ulp of 1).
  std::vector<double> g(17, std::ldexp(1.0, -9));
  g[0] = 1.0;
  Tensor dwb =
      embedding_backward(from_vector(std::vector<int64_t>(17, 0), {17}), from_vector(g, {17, 1}, DType::bf16), 1);
  CHECK(dwb.dtype() == DType::bf16);
  CHECK(dwb.item() == 1.03125);
}

TEST_CASE("embedding backward gives the padding row no gradient", "[embedding]") {
  const Tensor idx = from_vector(std::vector<int64_t>{2, 0, 2, 1, 0}, {5});
  const Tensor dy = f32({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {5, 2});
  CHECK(embedding_backward(idx, dy, 4).to_vector() == std::vector<double>{12, 14, 7, 8, 6, 8, 0, 0});
  CHECK(embedding_backward(idx, dy, 4, 2).to_vector() == std::vector<double>{12, 14, 7, 8, 0, 0, 0, 0});
  CHECK(embedding_backward(idx, dy, 4, 0).to_vector() == std::vector<double>{0, 0, 7, 8, 6, 8, 0, 0});
  CHECK(embedding_backward(idx, dy, 4, 3).to_vector() == std::vector<double>{12, 14, 7, 8, 6, 8, 0, 0});
  CHECK_THAT(error_of([&] { embedding_backward(idx, dy, 4, 4); }),
             Contains("embedding backward: padding_idx 4") && Contains("4 rows"));
  CHECK_THAT(error_of([&] { embedding_backward(idx, dy, 4, -2); }), Contains("padding_idx -2"));
  // The differentiable op: the same rows, and the padding row's gradient zero.
  Variable w(f32({0, 1, 10, 11, 20, 21, 30, 31}, {4, 2}), true);
  Tape tape;
  const Variable y = embedding(idx, w, 2);
  CHECK(y.data().to_vector() == embedding(idx, w.data()).to_vector());
  tape.backward(sum(y * Variable(dy)));
  CHECK(w.grad()->unscaled().to_vector() == std::vector<double>{12, 14, 7, 8, 0, 0, 0, 0});
  CHECK_THAT(error_of([&] { embedding(idx, w, 5); }), Contains("embedding: padding_idx 5"));
  // As torch: a negative padding_idx counts from the end, in the function as in nn::Embedding
  // (-1 is the last row, not "none"; none is nullopt).
  // The gradient of w for padding_idx `p` (nullopt: none), on a tape of its own.
  auto grad_of_w = [&](std::optional<int64_t> p) {
    w.zero_grad();
    Tape t;
    t.backward(sum(embedding(idx, w, p) * Variable(dy)));
    return w.grad()->unscaled().to_vector();
  };
  for (const int64_t p : {-1, -4, 3}) {
    CAPTURE(p);
    const size_t row = size_t(p < 0 ? p + 4 : p);
    const std::vector<double> g = grad_of_w(p);
    CHECK(g[2 * row] == 0.0);
    CHECK(g[2 * row + 1] == 0.0);
    nn::Embedding m(nn::EmbeddingOptions{.num_embeddings = 4, .embedding_dim = 2, .padding_idx = p});
    CHECK(m.padding_idx() == int64_t(row));
  }
  CHECK(grad_of_w(std::nullopt) == embedding_backward(idx, dy, 4).to_vector());
  CHECK_THAT(error_of([&] { embedding(idx, w, -5); }), Contains("padding_idx -5") && Contains("-4 to 3"));
}

TEST_CASE("embedding rejects indices out of range, naming the index and the row count", "[embedding]") {
  Tensor w = zeros({4, 3});
  CHECK_THAT(error_of([&] {
               embedding(from_vector(std::vector<int64_t>{0, 5}, {2}), w);
             }),
             Contains("index 5") && Contains("4 rows"));
  CHECK_THAT(error_of([&] { embedding(from_vector(std::vector<int64_t>{-1}, {1}), w); }),
             Contains("index -1") && Contains("4 rows"));
  CHECK_THAT(error_of([&] { embedding(zeros({2}), w); }), Contains("i64"));
}
