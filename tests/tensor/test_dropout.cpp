// Dropout on plain tensors: statistics of the mask, reproducibility from the seed, eval mode,
// backward.
#include "support/catch.h"

#include <cmath>
#include <string>

#include "mixtape.h"
#include "support/test_util.h"

using namespace mixtape;
using Catch::Contains;

using mixtape::test::error_of;

TEST_CASE("dropout keeps 1 - p of the elements, scaled by 1 / (1 - p)", "[dropout]") {
  const double p = 0.3;
  const int64_t n = 100000;
  Generator gen(42);
  Tensor y = dropout(ones({n}), p, true, gen);
  CHECK(gen.offset() == uint64_t(n));
  const float kept_value = float(1.0f * float(1.0 / (1.0 - p)));
  int64_t kept = 0, other = 0;
  for (double v : y.to_vector()) {
    if (v == double(kept_value)) ++kept;
    else if (v != 0.0) ++other;
  }
  CHECK(other == 0);
  // Binomial std: sqrt(p (1 - p) / n) = 0.00145; allow ~5 sigma.
  CHECK(std::abs(double(kept) / double(n) - (1.0 - p)) < 0.0075);
}

TEST_CASE("dropout is reproducible from the seed and differs between seeds and draws", "[dropout]") {
  Generator src(5);
  Tensor x = uniform({1000}, 1, 2, src);
  Generator a(7), b(7), c(8);
  const std::vector<double> ya = dropout(x, 0.5, true, a).to_vector();
  CHECK(ya == dropout(x, 0.5, true, b).to_vector());
  CHECK(ya != dropout(x, 0.5, true, c).to_vector());
  CHECK(ya != dropout(x, 0.5, true, a).to_vector());  // next draw from the same generator

  // The mask is bernoulli(1 - p) from the same generator state, whatever the layout of x.
  Generator d(9);
  Tensor xt = uniform({20, 30}, 1, 2, d).t();  // non-contiguous [30, 20]
  Generator f(11), g(11);
  Tensor y = dropout(xt, 0.25, true, f);
  Tensor mask = bernoulli(xt.shape(), 0.75, g);
  for (int64_t i = 0; i < y.numel(); ++i)
    CHECK(y.flat_get(i) == (mask.flat_get(i) > 0 ? double(float(xt.flat_get(i)) * float(1.0 / 0.75)) : 0.0));
}

TEST_CASE("dropout is the identity in eval mode or with p = 0, and validates p", "[dropout]") {
  Generator gen(1);
  Tensor x = ones({10});
  CHECK(dropout(x, 0.5, false, gen).same_storage(x));
  CHECK(dropout(x, 0.0, true, gen).same_storage(x));
  CHECK(gen.offset() == 0);
  CHECK_THAT(error_of([&] { dropout(x, 1.0, true, gen); }), Contains("[0, 1)"));
  CHECK_THAT(error_of([&] { dropout(x, -0.1, true, gen); }), Contains("[0, 1)"));
}

TEST_CASE("dropout backward applies the forward mask", "[dropout]") {
  Generator gen(3);
  Variable x(ones({200}), true);
  Tape tape;
  Variable y = dropout(x, 0.4, true, gen);
  tape.backward(y);  // seed ones: dx = mask / (1 - p) = y for x = 1
  CHECK(x.grad()->g.to_vector() == y.data().to_vector());
}
