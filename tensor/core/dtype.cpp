#include "tensor/core/dtype.h"

#include <string>

namespace mixtape {

DType dtype_from_name(const std::string& name) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::e4m3, DType::e5m2, DType::e3m2,
                  DType::e2m3, DType::e2m1})
    if (name == dtype_name(t)) return t;
  if (name == "float32") return DType::f32;
  if (name == "float64") return DType::f64;
  if (name == "float16" || name == "fp16") return DType::f16;
  if (name == "bfloat16") return DType::bf16;
  throw Error("unknown dtype '" + name + "' (expected f32, f64, f16, bf16, i64, e4m3, e5m2, e3m2, e2m3 or e2m1)");
}

}  // namespace mixtape
