// Reused scratch memory for the CPU kernels' large temporaries.
//
// Note [Workspaces]
// A kernel's large temporaries (im2col columns, a GEMM's f32 output, split-K partial sums) are
// reused across calls instead of allocated for each: a training step asks for the same sizes
// every step, and fresh memory from the allocator costs a page fault per 4 KiB the first time it
// is touched. With a new buffer per call, the cnn's step spent about a sixth of its time in the
// kernel faulting pages in. Each thread has one buffer per use below, grown to the largest size
// asked of it and never shrunk; a kernel holds several at once only under different names, and
// the contents are garbage on arrival (every kernel writes before it reads).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace mixtape::cpu {

enum class Workspace : int {
  conv_columns,   // conv: the im2col column matrix
  conv_rows,      // conv: the GEMM's output, or the gathered output gradient
  conv_images,    // conv: images in the compute type (col2im's sums)
  conv_input,     // conv: f16 images widened to f32 for im2col
  padded_images,  // im2col: 8-bit codes with their padding around them (Note [Padded codes])
  matmul_output,  // matmul: a 16-bit GEMM's f32 output before it is rounded
  gemm_partials,  // gemm_blocked: the partial sums of split-K blocks
  norm_values,    // batch norm: a 16-bit channel's x in the compute type (Note [Batch norm copies])
  norm_grads,     // batch norm backward: the same for dy
  count
};

// At least `need` bytes of the calling thread's buffer for `use`.
inline std::byte* workspace_bytes(Workspace use, size_t need) {
  struct Buffer {
    std::unique_ptr<std::byte[]> bytes;
    size_t size = 0;
  };
  thread_local Buffer buffers[int(Workspace::count)];
  Buffer& b = buffers[int(use)];
  if (b.size < need) {
    b.bytes = std::make_unique_for_overwrite<std::byte[]>(need);
    b.size = need;
  }
  return b.bytes.get();
}

// Room for n elements of E.
template <class E>
E* workspace(Workspace use, int64_t n) {
  return reinterpret_cast<E*>(workspace_bytes(use, size_t(n > 0 ? n : 1) * sizeof(E)));
}

}  // namespace mixtape::cpu
