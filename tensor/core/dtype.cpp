#include "tensor/core/dtype.h"

#include <string>

namespace mixtape {

DType dtype_from_name(const std::string& name) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64})
    if (name == dtype_name(t)) return t;
  if (name == "float32") return DType::f32;
  if (name == "float64") return DType::f64;
  if (name == "float16" || name == "fp16") return DType::f16;
  if (name == "bfloat16") return DType::bf16;
  throw Error("unknown dtype '" + name + "' (expected f32, f64, f16, bf16 or i64)");
}

}  // namespace mixtape
