// Splitting a CPU kernel's work over the OpenMP threads (tensor/threads.h).
//
// Note [Deterministic threads]
// A kernel's result must not depend on how many threads computed it: a run with --threads 1 and
// one with --threads 2 give the same weights, bit for bit (tests/tensor/test_threads.cpp). So
// work is split only where the pieces are independent: each output element, or each channel's
// whole reduction, is computed by one thread in the same order as the serial loop. A reduction
// is never split across threads, and no thread adds into another's result, so the static
// partition below changes who computes a value, never how.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace mixtape::cpu {

// Calls f(begin, end) over [0, n) in contiguous pieces of at least `grain` indices, on the
// OpenMP threads; on the calling thread alone when the work is too small to share (or when
// already inside a parallel region).
template <class F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  const int64_t max_pieces = std::max<int64_t>(1, n / std::max<int64_t>(1, grain));
  const int threads = int(std::min<int64_t>(omp_get_max_threads(), max_pieces));
  if (threads <= 1 || omp_in_parallel()) {
    f(int64_t(0), n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t begin = n * t / nt, end = n * (t + 1) / nt;
    if (begin < end) f(begin, end);
  }
}

// Two passes over the same pieces in one parallel region: first(begin, end) over the pieces of
// parallel_for, then between() on one thread once every piece is done, then second(begin, end)
// over the same pieces (a per-tensor quantization: the amax of every piece, the scale, then the
// codes). One fork and one barrier instead of two regions; each piece is computed as parallel_for
// would compute it.
template <class F1, class B, class F2>
void parallel_two_passes(int64_t n, int64_t grain, F1&& first, B&& between, F2&& second) {
  const int64_t max_pieces = std::max<int64_t>(1, n / std::max<int64_t>(1, grain));
  const int threads = int(std::min<int64_t>(omp_get_max_threads(), max_pieces));
  if (n <= 0 || threads <= 1 || omp_in_parallel()) {
    if (n > 0) first(int64_t(0), n);
    between();
    if (n > 0) second(int64_t(0), n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t begin = n * t / nt, end = n * (t + 1) / nt;
    if (begin < end) first(begin, end);
#pragma omp barrier
#pragma omp single
    between();  // (the end of single waits for it)
    if (begin < end) second(begin, end);
  }
}

// Two loops in one parallel region: first(begin, end) over [0, n1), a barrier, then
// second(begin, end) over [0, n2) (a pass that reads what the first wrote, anywhere), each split
// into contiguous pieces as parallel_for splits it. One fork instead of two.
template <class F1, class F2>
void parallel_then(int64_t n1, int64_t grain1, F1&& first, int64_t n2, int64_t grain2, F2&& second) {
  const auto pieces = [](int64_t n, int64_t grain) { return std::max<int64_t>(1, n / std::max<int64_t>(1, grain)); };
  const int threads = int(std::min<int64_t>(omp_get_max_threads(), std::max(pieces(n1, grain1), pieces(n2, grain2))));
  if (threads <= 1 || omp_in_parallel()) {
    if (n1 > 0) first(int64_t(0), n1);
    if (n2 > 0) second(int64_t(0), n2);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    if (n1 * t / nt < n1 * (t + 1) / nt) first(n1 * t / nt, n1 * (t + 1) / nt);
#pragma omp barrier
    if (n2 * t / nt < n2 * (t + 1) / nt) second(n2 * t / nt, n2 * (t + 1) / nt);
  }
}

// Waiting threads: GNU OpenMP spins for a while at the end of each parallel region before it
// sleeps, which is the fastest choice on a quiet machine and the slowest on a busy one (a spinning
// thread takes the core from the one it waits for). The tests run two processes at a time on two
// cores, so the test presets set OMP_WAIT_POLICY=passive (CMakePresets.json): the smoke runs took
// 3 min 48 s spinning and 32 s sleeping. Set it too when training beside other work.

// Elements per thread below which a kernel stays on one thread: forking costs a few
// microseconds, about what one thread needs for this many simple elements.
inline constexpr int64_t kGrainElements = 32768;

// The grain, in items, for items that cost about `work` simple elements each.
inline int64_t grain_for(int64_t work) { return std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, work)); }

// piece(begin, end) for fixed pieces of [0, n) (at most 64 of at least kGrainElements; their
// bounds depend on n alone), on the threads; the results in piece order, for a caller to fold in
// that order. For reductions whose result does not depend on the split (a maximum, a flag).
template <class R, class F>
std::vector<R> piece_results(int64_t n, F&& piece) {
  const int64_t pieces = std::clamp<int64_t>(n / kGrainElements, 1, 64);
  std::vector<R> out(static_cast<size_t>(pieces));
  parallel_for(pieces, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) out[size_t(p)] = piece(n * p / pieces, n * (p + 1) / pieces);
  });
  return out;
}

}  // namespace mixtape::cpu
