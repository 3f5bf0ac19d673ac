// Getting a step's inputs onto the device without synchronizing, and its losses back.
//
// Note [Batches staged on the device]
// A host-to-device copy from pageable memory synchronizes the stream (Note [Runtime counters] in
// cuda/runtime.h), so copying each batch as its step begins would cost every step two
// synchronizations. On a GPU an epoch's batches are therefore gathered on the host as the loader
// makes them (from the epoch's first batch to run) and copied over in one transfer per field
// before its first step; each step's batch is a view of those, already on the device, so
// PrecisionTrainer::input only casts it there. On the CPU each batch is taken from the loader
// when its step comes.
//
// Note [Draws staged on the device]
// Some of a step's inputs are drawn on the host from a generator the checkpoint records
// (char_lstm's windows, dcgan's noise). On a GPU, copying them as the step begins would
// synchronize (pageable memory), so the draws of a run of steps are made together, in step
// order, and copied in one transfer per field before the first of them (as EpochBatches stages
// an epoch). The caller ends a run where a checkpoint may be saved
// (Checkpointer::steps_until_due), so the generator a checkpoint records has drawn exactly the
// steps before it; a run is at most kMaxStaged steps, to bound the memory. On the CPU each step
// draws when it comes. Either way a step gets the same values.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "data/loader.h"
#include "tensor/tensor.h"

namespace mixtape::train {

// Replaces the host tensors of a run of steps (steps[i][f]: field f of step i, the same fields
// in every step) by views of one device tensor per field: one copy per field.
void stage_on_device(std::vector<std::vector<Tensor>*>& steps, Device device);

// One epoch of a DataLoader's batches from `first_batch` on, staged on `device` when it is a GPU.
class EpochBatches {
 public:
  EpochBatches(data::DataLoader& loader, int64_t epoch, int64_t first_batch, Device device);
  // The next batch (on the device when staged there), or nullopt when the epoch is over.
  std::optional<data::Batch> next();

 private:
  data::DataLoader& loader_;
  Device staged_on_;
  std::vector<data::Batch> batches_;
  size_t next_ = 0;
};

// A step's fields drawn on the host, staged on `device` a run of steps at a time when it is a GPU.
class StagedDraws {
 public:
  static constexpr int64_t kMaxStaged = 256;
  using Draw = std::function<std::vector<Tensor>()>;  // one step's fields, on the host
  StagedDraws(Device device, Draw draw) : device_(device), draw_(std::move(draw)) {}
  // The next step's fields; on a GPU, when none are staged, those of the next `steps` steps (at
  // least this one) are drawn and copied first.
  std::vector<Tensor> next(int64_t steps);

 private:
  void stage(int64_t n);

  Device device_;
  Draw draw_;
  std::vector<std::vector<Tensor>> staged_;
  size_t next_ = 0;
};

// The training losses of the steps since the last read, kept on the device that computed them:
// each step copies its loss (or, with width w, its w one-element values) into a readout tensor
// (no synchronization, Note [Readout block] in cuda/runtime.h), and take() reads them all in the
// one synchronization of a logging step, which also brings the trainer's step report. On the CPU
// the same bookkeeping reads plain memory, so a run sums exactly the values it summed when it
// read each loss at once.
class LossLog {
 public:
  LossLog(int64_t capacity, Device device, int64_t width = 1);
  // Records a step's one-element values (width of them); returns whether the log is full (take()
  // before the next add()).
  bool add(const Tensor& loss) { return add(std::vector<Tensor>{loss}); }
  bool add(const std::vector<Tensor>& values);
  // The values recorded since the last take(), step by step (width per step), in order: one read
  // of the device, or none.
  std::vector<double> take();
  int64_t pending() const { return n_; }
  int64_t capacity() const { return buf_.numel() / width_; }
  int64_t width() const { return width_; }

 private:
  int64_t width_;
  Tensor buf_;
  int64_t n_ = 0;
};

}  // namespace mixtape::train
