#pragma once
// Names of compute dtypes on the command line and in configs ("fp32", "bf16", "fp16").
#include <c10/core/ScalarType.h>

#include <string>

namespace tandem {

/// Parses "fp32"/"float32", "bf16"/"bfloat16", "fp16"/"float16"; `what` names the setting in
/// errors.
c10::ScalarType parse_compute_dtype(const std::string& name, const std::string& what);

/// The short name ("fp32", "bf16", "fp16") of a floating compute dtype.
std::string compute_dtype_name(c10::ScalarType dtype);

/// The name a config.json's `torch_dtype` gives it: "bfloat16", "float16", else "float32".
std::string hf_dtype_name(c10::ScalarType dtype);

}  // namespace tandem
