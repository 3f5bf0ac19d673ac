// Batching: datasets of rows, per-epoch shuffling, and a DataLoader that assembles the next
// batches on a background thread while the training step runs.
//
// Note [Epoch permutations]: the order of epoch e is a Fisher-Yates shuffle whose random words
// come from Philox with key = seed and counter = (step, e). It depends only on (seed, e), not on
// how many epochs ran before, so a resumed run replays exactly the order it would have seen.
//
// Note [Prefetch thread]: start_epoch launches one worker thread for the epoch. It gathers
// batches in order into a bounded queue (`prefetch` deep) and waits when the queue is full.
// next() pops in order. An exception thrown while assembling a batch is stored in the queue and
// rethrown by the next() that reaches it; the epoch then ends. Starting another epoch or
// destroying the loader stops the worker: it finishes at most the batch it is assembling, and
// the queued batches are freed. prefetch = 0 assembles batches synchronously inside next().
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "tensor/tensor.h"

namespace mixtape::data {

// Rows addressed by index; get_batch may be called from the loader's worker thread, so it must
// not modify shared state without its own locking.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // One tensor per field (e.g. {images, labels}), each with dim 0 = indices.size().
  virtual std::vector<Tensor> get_batch(const std::vector<int64_t>& indices) const = 0;
};

// A list of CPU tensors sharing dim 0 (e.g. images [N, 1, 28, 28] and labels [N]). Non-contiguous
// inputs are copied once; batches are fresh contiguous tensors gathered row by row.
class TensorDataset : public Dataset {
 public:
  explicit TensorDataset(std::vector<Tensor> tensors);
  int64_t size() const override { return size_; }
  std::vector<Tensor> get_batch(const std::vector<int64_t>& indices) const override;
  const std::vector<Tensor>& tensors() const { return tensors_; }

 private:
  std::vector<Tensor> tensors_;
  int64_t size_ = 0;
};

// The permutation of [0, n) for epoch `epoch` (Note [Epoch permutations]).
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

struct Batch;

// Changes an assembled batch in place (augmentation, data/augment.h). It runs on the loader's
// worker thread, so it may read only the batch and its own immutable state; to be reproducible
// (and resumable), its random choices must depend only on the batch's rows and epoch.
using BatchTransform = std::function<void(Batch&)>;

struct LoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = true;     // false: rows in index order every epoch
  bool drop_last = false;  // drop a final batch smaller than batch_size
  uint64_t seed = 0;
  int prefetch = 2;          // batches assembled ahead; 0: synchronous
  BatchTransform transform;  // applied to every batch after assembly; empty: none
};

struct Batch {
  std::vector<Tensor> tensors;   // one per dataset field
  std::vector<int64_t> indices;  // the dataset rows, in batch order
  int64_t index = 0;             // batch number within the epoch
  int64_t epoch = 0;             // the epoch it belongs to

  Tensor& operator[](size_t i) { return tensors.at(i); }
  const Tensor& operator[](size_t i) const { return tensors.at(i); }
  int64_t size() const { return int64_t(indices.size()); }
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, LoaderOptions options);
  DataLoader(TensorDataset dataset, LoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  const Dataset& dataset() const { return *dataset_; }
  const LoaderOptions& options() const { return options_; }
  int64_t batches_per_epoch() const;
  // The row order of an epoch (identity when shuffle is off).
  std::vector<int64_t> order(int64_t epoch) const;

  // Begins epoch e at batch `first_batch` (a resumed run's position; the batches before it are
  // not assembled), abandoning any epoch in progress.
  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  // The next batch of the current epoch, or nullopt when it is over. Rethrows a worker error.
  std::optional<Batch> next();

  // for (Batch& b : loader.epoch(e)) { ... }: start_epoch(e) on begin(), next() on ++;
  // loader.epoch(e, k) starts at batch k.
  class Iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    Iterator() = default;
    explicit Iterator(DataLoader* loader) : loader_(loader) { advance(); }
    Batch& operator*() { return *current_; }
    Batch* operator->() { return &*current_; }
    Iterator& operator++() {
      advance();
      return *this;
    }
    bool operator==(std::default_sentinel_t) const { return !current_.has_value(); }

   private:
    void advance() { current_ = loader_->next(); }
    DataLoader* loader_ = nullptr;
    std::optional<Batch> current_;
  };
  class EpochRange {
   public:
    EpochRange(DataLoader* loader, int64_t epoch, int64_t first_batch)
        : loader_(loader), epoch_(epoch), first_batch_(first_batch) {}
    Iterator begin() {
      loader_->start_epoch(epoch_, first_batch_);
      return Iterator(loader_);
    }
    std::default_sentinel_t end() const { return {}; }

   private:
    DataLoader* loader_;
    int64_t epoch_, first_batch_;
  };
  EpochRange epoch(int64_t e, int64_t first_batch = 0) { return EpochRange(this, e, first_batch); }

 private:
  struct Item {
    std::optional<Batch> batch;
    std::exception_ptr error;
  };
  Batch assemble(int64_t b) const;
  void worker_main(int64_t first_batch);
  void stop_worker();

  std::shared_ptr<const Dataset> dataset_;
  LoaderOptions options_;

  // The epoch in progress.
  bool started_ = false;
  int64_t epoch_ = 0;
  std::vector<int64_t> order_;
  int64_t num_batches_ = 0;
  int64_t next_out_ = 0;  // batches handed out by next()

  // Worker state, guarded by mu_ (Note [Prefetch thread]).
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stop_ = false;
  bool failed_ = false;  // an error ended the epoch
  std::thread worker_;
};

}  // namespace mixtape::data
