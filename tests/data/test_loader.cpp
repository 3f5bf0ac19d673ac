// DataLoader (data/loader.h): coverage and order of epochs, batch contents, drop_last, the
// prefetch thread's bound, prompt shutdown mid-epoch, and worker errors.
#include "support/catch.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "data/loader.h"
#include "support/test_util.h"

using namespace mixtape;
using namespace mixtape::data;
using Catch::Contains;
using Clock = std::chrono::steady_clock;

using mixtape::test::error_of;
using mixtape::test::TempDir;

namespace {

// x[i] = {3i, 3i + 1, 3i + 2} (f32 [n, 3]), y[i] = i (i64 [n]).
TensorDataset rows(int64_t n) {
  return TensorDataset({arange(0.0, double(3 * n)).view({n, 3}), arange(0.0, double(n), 1.0, DType::i64)});
}

// Counts get_batch calls; optionally sleeps in each, or throws on a given row.
class ProbeDataset : public Dataset {
 public:
  ProbeDataset(int64_t n, int sleep_ms = 0, int64_t throw_on = -1)
      : base_(rows(n)), sleep_ms_(sleep_ms), throw_on_(throw_on) {}
  int64_t size() const override { return base_.size(); }
  std::vector<Tensor> get_batch(const std::vector<int64_t>& idx) const override {
    ++calls;
    if (sleep_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    for (int64_t i : idx) MT_CHECK(i != throw_on_, "probe: boom at row ", i);
    return base_.get_batch(idx);
  }
  mutable std::atomic<int> calls{0};

 private:
  TensorDataset base_;
  int sleep_ms_;
  int64_t throw_on_;
};

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

TEST_CASE("DataLoader: every row once per epoch, contents match the rows", "[data]") {
  for (int prefetch : {2, 0}) {
    LoaderOptions o;
    o.batch_size = 4;
    o.seed = 7;
    o.prefetch = prefetch;
    DataLoader loader(rows(10), o);
    CHECK(loader.batches_per_epoch() == 3);
    std::vector<int64_t> seen, sizes;
    int64_t expect_index = 0;
    for (Batch& b : loader.epoch(0)) {
      CHECK(b.index == expect_index++);
      sizes.push_back(b.size());
      REQUIRE(b[0].shape() == Shape{b.size(), 3});
      REQUIRE(b[1].shape() == Shape{b.size()});
      CHECK(b[0].is_contiguous());
      const std::vector<double> x = b[0].to_vector();
      const std::vector<int64_t> y = b[1].values<int64_t>();
      for (int64_t r = 0; r < b.size(); ++r) {
        const int64_t i = b.indices[size_t(r)];
        CHECK(y[size_t(r)] == i);
        for (int k = 0; k < 3; ++k) CHECK(x[size_t(3 * r + k)] == double(3 * i + k));
      }
      seen.insert(seen.end(), b.indices.begin(), b.indices.end());
    }
    CHECK(sizes == std::vector<int64_t>{4, 4, 2});
    CHECK(seen == loader.order(0));
    std::sort(seen.begin(), seen.end());
    std::vector<int64_t> all(10);
    std::iota(all.begin(), all.end(), int64_t(0));
    CHECK(seen == all);
  }
}

TEST_CASE("DataLoader: order depends only on (seed, epoch)", "[data]") {
  LoaderOptions o;
  o.batch_size = 16;
  o.seed = 123;
  DataLoader a(rows(100), o), b(rows(100), o);
  // Epoch 5 of a fresh loader equals epoch 5 reached after other epochs.
  b.start_epoch(0);
  while (b.next()) {}
  b.start_epoch(3);
  b.next();
  std::vector<int64_t> got_a, got_b;
  for (Batch& x : a.epoch(5)) got_a.insert(got_a.end(), x.indices.begin(), x.indices.end());
  b.start_epoch(5);
  while (auto x = b.next()) got_b.insert(got_b.end(), x->indices.begin(), x->indices.end());
  CHECK(got_a == got_b);
  CHECK(got_a == epoch_permutation(100, 123, 5));
  CHECK(a.order(5) != a.order(6));
  CHECK(epoch_permutation(100, 123, 5) != epoch_permutation(100, 124, 5));
  std::vector<int64_t> identity(100);
  std::iota(identity.begin(), identity.end(), int64_t(0));
  CHECK(a.order(0) != identity);

  o.shuffle = false;
  DataLoader plain(rows(100), o);
  CHECK(plain.order(0) == identity);
  CHECK(plain.order(9) == identity);
}

TEST_CASE("epoch_permutation is uniform over permutations", "[data]") {
  // 6000 epochs of n = 3: each of the 6 orders ~ Binomial(6000, 1/6): mean 1000, sd 28.9.
  std::map<std::vector<int64_t>, int> counts;
  for (int64_t e = 0; e < 6000; ++e) ++counts[epoch_permutation(3, 99, e)];
  REQUIRE(counts.size() == 6);
  double chi2 = 0.0;
  for (const auto& [perm, c] : counts) chi2 += (c - 1000.0) * (c - 1000.0) / 1000.0;
  CHECK(chi2 < 20.5);  // chi-square, 5 degrees of freedom: P(> 20.5) ~ 0.001
  // Every position of a larger permutation is equally likely to hold element 0.
  std::vector<int> first(8, 0);
  for (int64_t e = 0; e < 8000; ++e) {
    const std::vector<int64_t> p = epoch_permutation(8, 5, e);
    ++first[size_t(std::find(p.begin(), p.end(), 0) - p.begin())];
  }
  for (int c : first) CHECK(std::abs(c - 1000) < 120);  // sd 29.6: 4 sigma
}

TEST_CASE("DataLoader drop_last", "[data]") {
  LoaderOptions o;
  o.batch_size = 4;
  o.drop_last = true;
  DataLoader loader(rows(10), o);
  CHECK(loader.batches_per_epoch() == 2);
  int64_t n = 0, total = 0;
  for (Batch& b : loader.epoch(1)) {
    CHECK(b.size() == 4);
    ++n;
    total += b.size();
  }
  CHECK(n == 2);
  CHECK(total == 8);
  // Exactly divisible: nothing to drop.
  DataLoader even(rows(8), o);
  CHECK(even.batches_per_epoch() == 2);
}

TEST_CASE("DataLoader prefetches a bounded number of batches ahead", "[data]") {
  auto ds = std::make_shared<ProbeDataset>(40);
  LoaderOptions o;
  o.batch_size = 4;
  o.prefetch = 2;
  DataLoader loader(ds, o);
  loader.start_epoch(0);
  const auto t0 = Clock::now();
  while (ds->calls < 2 && seconds_since(t0) < 5.0) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(ds->calls == 2);  // the queue is full: the worker waits
  REQUIRE(loader.next());
  const auto t1 = Clock::now();
  while (ds->calls < 3 && seconds_since(t1) < 5.0) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(ds->calls == 3);
}

TEST_CASE("DataLoader shuts down promptly mid-epoch", "[data]") {
  auto ds = std::make_shared<ProbeDataset>(400, /*sleep_ms=*/20);
  LoaderOptions o;
  o.batch_size = 4;  // 100 batches of 20 ms: 2 s for a whole epoch
  {
    const auto t0 = Clock::now();
    {
      DataLoader loader(ds, o);
      loader.start_epoch(0);
      REQUIRE(loader.next());
      REQUIRE(loader.next());
    }
    CHECK(seconds_since(t0) < 0.5);  // waits for at most the batch being assembled
  }
  {
    const auto t0 = Clock::now();
    {
      DataLoader loader(ds, o);
      loader.start_epoch(0);
    }  // destroyed before any next()
    CHECK(seconds_since(t0) < 0.3);
  }
  {
    // Restarting mid-epoch abandons the old epoch and serves the new one from its start.
    DataLoader loader(rows(10), LoaderOptions{.batch_size = 3, .seed = 1});
    loader.start_epoch(0);
    loader.next();
    loader.start_epoch(1);
    std::vector<int64_t> got;
    while (auto b = loader.next()) got.insert(got.end(), b->indices.begin(), b->indices.end());
    CHECK(got == loader.order(1));
    CHECK_FALSE(loader.next());  // stays over
  }
}

TEST_CASE("DataLoader rethrows worker errors in order, then ends the epoch", "[data]") {
  for (int prefetch : {2, 0}) {
    auto ds = std::make_shared<ProbeDataset>(10, 0, /*throw_on=*/5);
    LoaderOptions o;
    o.batch_size = 2;
    o.shuffle = false;
    o.prefetch = prefetch;
    DataLoader loader(ds, o);
    for (int64_t epoch : {0, 1}) {  // a failed epoch does not poison the next
      loader.start_epoch(epoch);
      auto b0 = loader.next();
      auto b1 = loader.next();
      REQUIRE(b0);
      REQUIRE(b1);
      CHECK(b1->indices == std::vector<int64_t>{2, 3});
      CHECK_THAT(error_of([&] { loader.next(); }), Contains("boom at row 5"));
      CHECK_FALSE(loader.next());
    }
  }
  DataLoader unstarted(rows(4), LoaderOptions{});
  CHECK_THAT(error_of([&] { unstarted.next(); }), Contains("start_epoch"));
}

TEST_CASE("TensorDataset validates its tensors and rows", "[data]") {
  CHECK_THAT(error_of([] {
               TensorDataset({zeros({4, 2}), zeros({5})});
             }),
             Contains("share dim 0") && Contains("f32[5]"));
  CHECK_THAT(error_of([] { TensorDataset({scalar_tensor(1.0)}); }), Contains("dim 0"));
  CHECK_THAT(error_of([] { TensorDataset(std::vector<Tensor>{}); }), Contains("at least one"));
  const TensorDataset ds = rows(3);
  CHECK_THAT(error_of([&] { ds.get_batch({0, 3}); }), Contains("row 3"));
  // A non-contiguous source is gathered correctly: the transpose of [3, 2] rows.
  const Tensor t = arange(0.0, 6.0).view({2, 3}).t();  // [3, 2]: row i = {i, i + 3}
  const TensorDataset tds({t});
  CHECK(tds.get_batch({2, 0})[0].to_vector() == std::vector<double>{2, 5, 0, 3});
  CHECK_THAT(error_of([] {
               LoaderOptions o;
               o.batch_size = 0;
               DataLoader(rows(3), o);
             }),
             Contains("batch_size"));
}

TEST_CASE("DataLoader: an epoch started at batch k gives batches k.. of the whole epoch", "[data]") {
  for (int prefetch : {0, 2}) {
    INFO("prefetch " << prefetch);
    DataLoader loader(rows(20), {.batch_size = 3, .shuffle = true, .drop_last = true, .seed = 5, .prefetch = prefetch});
    std::vector<std::vector<int64_t>> whole;
    for (Batch& b : loader.epoch(4)) whole.push_back(b.indices);
    REQUIRE(whole.size() == 6);
    std::vector<std::vector<int64_t>> tail;
    std::vector<int64_t> index;
    for (Batch& b : loader.epoch(4, 4)) {
      tail.push_back(b.indices);
      index.push_back(b.index);
    }
    CHECK(tail == std::vector<std::vector<int64_t>>(whole.begin() + 4, whole.end()));
    CHECK(index == std::vector<int64_t>{4, 5});
    int64_t n = 0;
    for (Batch& b : loader.epoch(4, 6)) n += b.size();  // the end of the epoch: nothing left
    CHECK(n == 0);
    CHECK_THROWS_WITH(loader.start_epoch(4, 7), Contains("batch 7 is outside the epoch's 6 batches"));
  }
}
