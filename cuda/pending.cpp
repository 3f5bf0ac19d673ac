// Built with CUDA: launchers marked MT_CUDA_PENDING in launchers.def have no kernel yet and
// throw a message that names them; MT_CUDA_LAUNCHER entries are defined in cuda/*.cu.
#include "cuda/backend.h"
#include "tensor/core/error.h"

namespace mixtape::cuda {

#define MT_CUDA_LAUNCHER(name, params)
#define MT_CUDA_PENDING(name, params) \
  void name params { throw Error("cuda::" #name ": this op has no CUDA kernel in this build yet"); }
#include "cuda/launchers.def"
#undef MT_CUDA_LAUNCHER
#undef MT_CUDA_PENDING

}  // namespace mixtape::cuda
