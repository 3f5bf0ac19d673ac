#include "train/staging.h"

#include <algorithm>

#include "tensor/ops.h"

namespace mixtape::train {

void stage_on_device(std::vector<std::vector<Tensor>*>& steps, Device device) {
  if (steps.empty()) return;
  for (size_t f = 0; f < steps[0]->size(); ++f) {
    std::vector<Tensor> field;
    for (const std::vector<Tensor>* step : steps) field.push_back((*step)[f]);
    const Tensor all = concat(field, 0).to(device);
    int64_t row = 0;
    for (std::vector<Tensor>* step : steps) {
      const int64_t n = (*step)[f].size(0);
      (*step)[f] = all.narrow(0, row, n);
      row += n;
    }
  }
}

EpochBatches::EpochBatches(data::DataLoader& loader, int64_t epoch, int64_t first_batch, Device device)
    : loader_(loader), staged_on_(device) {
  loader_.start_epoch(epoch, first_batch);
  if (!device.is_cuda()) return;
  while (std::optional<data::Batch> b = loader_.next()) batches_.push_back(std::move(*b));
  std::vector<std::vector<Tensor>*> steps;
  for (data::Batch& b : batches_) steps.push_back(&b.tensors);
  stage_on_device(steps, device);
}

std::optional<data::Batch> EpochBatches::next() {
  if (!staged_on_.is_cuda()) return loader_.next();
  if (next_ == batches_.size()) return std::nullopt;
  return std::move(batches_[next_++]);
}

std::vector<Tensor> StagedDraws::next(int64_t steps) {
  if (!device_.is_cuda()) return draw_();
  if (next_ == staged_.size()) stage(std::clamp<int64_t>(steps, 1, kMaxStaged));
  return std::move(staged_[next_++]);
}

void StagedDraws::stage(int64_t n) {
  staged_.clear();
  next_ = 0;
  std::vector<std::vector<Tensor>*> steps;
  for (int64_t i = 0; i < n; ++i) staged_.push_back(draw_());  // in step order
  for (std::vector<Tensor>& step : staged_) steps.push_back(&step);
  stage_on_device(steps, device_);
}

LossLog::LossLog(int64_t capacity, Device device, int64_t width)
    : width_(width), buf_(readout_zeros({std::max<int64_t>(capacity, 1) * width}, DType::f32, device)) {}

bool LossLog::add(const std::vector<Tensor>& values) {
  MT_CHECK(int64_t(values.size()) == width_, "LossLog: ", values.size(), " values for a log of width ", width_);
  MT_CHECK(n_ < capacity(), "LossLog: full; take() the losses first");
  for (int64_t j = 0; j < width_; ++j) buf_.narrow(0, n_ * width_ + j, 1).copy_(values[size_t(j)].reshape({1}));
  return ++n_ == capacity();
}

std::vector<double> LossLog::take() {
  if (n_ == 0) return {};
  const std::vector<double> v = buf_.narrow(0, 0, n_ * width_).to_vector();
  n_ = 0;
  return v;
}

}  // namespace mixtape::train
