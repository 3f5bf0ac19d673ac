#include "data/loader.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace mixtape::data {

// ---- TensorDataset ---------------------------------------------------------------------------

TensorDataset::TensorDataset(std::vector<Tensor> tensors) {
  MT_CHECK(!tensors.empty(), "TensorDataset: needs at least one tensor");
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    MT_CHECK(t.defined(), "TensorDataset: tensor ", i, " is undefined");
    MT_CHECK(t.dim() >= 1, "TensorDataset: tensor ", i, " is ", t.meta(), "; rows need a dim 0");
    MT_CHECK(t.device().is_cpu(), "TensorDataset: tensor ", i, " is ", t.meta(),
             "; datasets live on the host (move batches to the device after loading)");
    MT_CHECK(t.size(0) == tensors[0].size(0), "TensorDataset: tensor ", i, " is ", t.meta(), " but tensor 0 is ",
             tensors[0].meta(), "; all tensors must share dim 0");
    tensors_.push_back(t.contiguous());
  }
  size_ = tensors_[0].size(0);
}

std::vector<Tensor> TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  for (int64_t i : indices) MT_CHECK(i >= 0 && i < size_, "TensorDataset: row ", i, " is outside [0, ", size_, ")");
  const auto k = int64_t(indices.size());
  std::vector<Tensor> out;
  out.reserve(tensors_.size());
  for (const Tensor& t : tensors_) {
    Shape shape = t.shape();
    shape[0] = k;
    Tensor b = empty(shape, t.dtype());
    const size_t row_bytes = size_t(t.numel() / std::max<int64_t>(size_, 1)) * dtype_size(t.dtype());
    const auto* src = static_cast<const unsigned char*>(t.raw_data());
    auto* dst = static_cast<unsigned char*>(b.raw_data());
    for (int64_t r = 0; r < k; ++r)
      std::memcpy(dst + size_t(r) * row_bytes, src + size_t(indices[size_t(r)]) * row_bytes, row_bytes);
    out.push_back(std::move(b));
  }
  return out;
}

// ---- permutations ----------------------------------------------------------------------------

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  MT_CHECK(n >= 0, "epoch_permutation: negative size ", n);
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t(0));
  const auto e = uint64_t(epoch);
  const std::array<uint32_t, 2> key = {uint32_t(seed), uint32_t(seed >> 32)};
  // Fisher-Yates, high to low: swap p[i] with p[j], j uniform in [0, i].
  for (int64_t i = n - 1; i > 0; --i) {
    const auto u = uint64_t(i);
    const PhiloxBlock w = philox4x32_10({uint32_t(u), uint32_t(u >> 32), uint32_t(e), uint32_t(e >> 32)}, key);
    const uint64_t r = uint64_t(w[0]) << 32 | w[1];
    const auto j = int64_t((unsigned __int128)r * (u + 1) >> 64);  // multiply-shift; bias < (i+1) / 2^64
    std::swap(p[size_t(i)], p[size_t(j)]);
  }
  return p;
}

// ---- DataLoader ------------------------------------------------------------------------------

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, LoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  MT_CHECK(dataset_, "DataLoader: null dataset");
  MT_CHECK(options_.batch_size > 0, "DataLoader: batch_size must be positive, got ", options_.batch_size);
  MT_CHECK(options_.prefetch >= 0, "DataLoader: prefetch must be >= 0, got ", options_.prefetch);
}

DataLoader::DataLoader(TensorDataset dataset, LoaderOptions options)
    : DataLoader(std::make_shared<const TensorDataset>(std::move(dataset)), options) {}

DataLoader::~DataLoader() { stop_worker(); }

int64_t DataLoader::batches_per_epoch() const {
  const int64_t n = dataset_->size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

std::vector<int64_t> DataLoader::order(int64_t epoch) const {
  if (options_.shuffle) return epoch_permutation(dataset_->size(), options_.seed, epoch);
  std::vector<int64_t> p(static_cast<size_t>(dataset_->size()));
  std::iota(p.begin(), p.end(), int64_t(0));
  return p;
}

Batch DataLoader::assemble(int64_t b) const {
  const int64_t n = int64_t(order_.size()), bs = options_.batch_size;
  const int64_t lo = b * bs, hi = std::min(n, lo + bs);
  Batch batch;
  batch.index = b;
  batch.epoch = epoch_;
  batch.indices.assign(order_.begin() + lo, order_.begin() + hi);
  batch.tensors = dataset_->get_batch(batch.indices);
  for (size_t i = 0; i < batch.tensors.size(); ++i)
    MT_CHECK(batch.tensors[i].defined() && batch.tensors[i].dim() >= 1 && batch.tensors[i].size(0) == batch.size(),
             "DataLoader: the dataset returned field ", i, " as ",
             batch.tensors[i].defined() ? batch.tensors[i].meta() : std::string("undefined"), " for a batch of ",
             batch.size(), " rows");
  if (options_.transform) options_.transform(batch);
  return batch;
}

void DataLoader::worker_main(int64_t first_batch) {
  for (int64_t b = first_batch; b < num_batches_; ++b) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || int64_t(queue_.size()) < options_.prefetch; });
      if (stop_) return;
    }
    Item item;
    try {
      item.batch = assemble(b);
    } catch (...) { item.error = std::current_exception(); }
    const bool failed = item.error != nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      queue_.push_back(std::move(item));
    }
    cv_.notify_all();
    if (failed) return;
  }
}

void DataLoader::stop_worker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  std::lock_guard<std::mutex> lock(mu_);
  queue_.clear();
  stop_ = false;
}

void DataLoader::start_epoch(int64_t epoch, int64_t first_batch) {
  stop_worker();
  num_batches_ = batches_per_epoch();
  MT_CHECK(first_batch >= 0 && first_batch <= num_batches_, "DataLoader::start_epoch: batch ", first_batch,
           " is outside the epoch's ", num_batches_, " batches");
  order_ = order(epoch);
  epoch_ = epoch;
  next_out_ = first_batch;
  failed_ = false;
  started_ = true;
  if (options_.prefetch > 0 && next_out_ < num_batches_)
    worker_ = std::thread([this, first_batch] { worker_main(first_batch); });
}

std::optional<Batch> DataLoader::next() {
  MT_CHECK(started_, "DataLoader::next: no epoch in progress; call start_epoch(e) first");
  if (failed_ || next_out_ >= num_batches_) return std::nullopt;
  if (options_.prefetch == 0) {
    const int64_t b = next_out_++;
    try {
      return assemble(b);
    } catch (...) {
      failed_ = true;
      throw;
    }
  }
  Item item;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !queue_.empty(); });
    item = std::move(queue_.front());
    queue_.pop_front();
  }
  cv_.notify_all();
  ++next_out_;
  if (item.error) {
    failed_ = true;
    std::rethrow_exception(item.error);
  }
  return std::move(item.batch);
}

}  // namespace mixtape::data
