#include "tandem/core/dtype.h"

#include "tandem/core/error.h"

namespace tandem {

c10::ScalarType parse_compute_dtype(const std::string& name, const std::string& what) {
  if (name == "fp32" || name == "float32") return c10::ScalarType::Float;
  if (name == "bf16" || name == "bfloat16") return c10::ScalarType::BFloat16;
  if (name == "fp16" || name == "float16") return c10::ScalarType::Half;
  throw Error("[dtype] ", what, ": unknown dtype '", name, "' (use fp32, bf16 or fp16)");
}

std::string compute_dtype_name(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Float:
      return "fp32";
    case c10::ScalarType::BFloat16:
      return "bf16";
    case c10::ScalarType::Half:
      return "fp16";
    default:
      throw Error("[dtype] ", c10::toString(dtype), " is not a compute dtype");
  }
}

std::string hf_dtype_name(c10::ScalarType dtype) {
  return dtype == c10::ScalarType::BFloat16 ? "bfloat16"
         : dtype == c10::ScalarType::Half   ? "float16"
                                            : "float32";
}

}  // namespace tandem
