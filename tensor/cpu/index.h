// Indexing CPU kernels, forward and backward side by side: gather (index_select is a gather
// whose index is expanded along the other dims, tensor/ops/index.cpp), its scatter-add
// backward, the first out-of-range index, and where (masked_fill is a where with a broadcast
// scalar). Indices are i64; the front-end has checked them (first_bad_index) before a gather.
#pragma once

#include <cstdint>

#include "tensor/core/strided.h"

namespace mixtape::cpu {

// first_bad (i64 [2]) = {p, index[p]} for the first row-major position p of `index` whose value
// lies outside [0, size), or {index.numel(), 0} when every value is in range.
void first_bad_index(const Strided& index, int64_t size, const Strided& first_bad);

// out[p] = x[p with p[dim] replaced by index[p]] for every position p of index (out's shape);
// index.size(d) <= x.size(d) for d != dim.
void gather(const Strided& x, int64_t dim, const Strided& index, const Strided& out);

// Note [Gather backward]
// dx = 0, then dx[p with p[dim] replaced by index[p]] += dy[p] for every position p of index: a
// scatter-add, where repeated indices accumulate. The positions p that differ only in p[dim]
// (a line) write only their own line of dx, so lines are independent: each is summed by one
// thread, in increasing p[dim], into an f64 accumulator, and every element of dx is rounded once.
// The result is the same for any thread count and on both devices (cuda/index.cu does the same).
// dx is contiguous; an index outside [0, x.size(dim)) is skipped (the forward rejected it).
void gather_backward(const Strided& dy, int64_t dim, const Strided& index, const Strided& dx);

// out = cond != 0 ? a : b, elementwise; cond is i64 or floating (a NaN condition is true, as
// bool(nan) is in PyTorch); every operand has out's shape (broadcast operands as stride-0 views).
void where(const Strided& cond, const Strided& a, const Strided& b, const Strided& out);

}  // namespace mixtape::cpu
