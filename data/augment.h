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

}  // namespace mixtape::data
