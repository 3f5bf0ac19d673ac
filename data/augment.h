// Data augmentation: batch transforms for DataLoader (LoaderOptions::transform).
//
// Note [Reproducible augmentation]: every random choice is a Philox word whose counter is the
// (dataset row, epoch) pair and whose key is the run's seed mixed with a constant of the
// transform. A row's choice in an epoch therefore does not depend on the batch it lands in, the
// thread that assembles it, the ranks of a data-parallel run (each rank assembles the global batch)
// or how many epochs ran before, so a resumed run sees exactly the images it would have seen.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "data/loader.h"

namespace mixtape::data {

// Mirrors each image of batch field `field` ([N, ..., W], on the host, contiguous) left to right
// with probability 1/2, chosen per dataset row and epoch (Note [Reproducible augmentation]).
// The usual augmentation for images without a preferred side (clothing, natural scenes); not for
// digits or text.
struct RandomHorizontalFlip {
  uint64_t seed = 0;
  size_t field = 0;
  void operator()(Batch& batch) const;
  // Whether dataset row `row` is mirrored in epoch `epoch`.
  bool flips(int64_t row, int64_t epoch) const;
};

// Shifts each image of batch field `field` ([N, ..., H, W], on the host, contiguous, floating) by
// (dy, dx), each uniform in [-padding, padding] and chosen per dataset row and epoch: PyTorch's
// RandomCrop(size = (H, W), padding) on the image padded with `fill` on every side (`fill`: the
// value of a blank pixel, e.g. a normalized 0 byte). The usual augmentation for small centred
// images, such as Fashion-MNIST's, which it moves by a few pixels.
struct RandomCrop {
  uint64_t seed = 0;
  int64_t padding = 2;
  double fill = 0.0;
  size_t field = 0;
  void operator()(Batch& batch) const;
  // The (dy, dx) of dataset row `row` in epoch `epoch`, each in [-padding, padding].
  std::pair<int64_t, int64_t> shift(int64_t row, int64_t epoch) const;
};

// Applies each transform in turn.
BatchTransform compose(std::vector<BatchTransform> transforms);

}  // namespace mixtape::data
