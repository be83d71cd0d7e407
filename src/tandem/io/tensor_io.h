#pragma once
// Bridges the torch-free safetensors layer and at::Tensor: read one tensor (copied, converted to
// a compute dtype) and write a list of named tensors atomically.
#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tandem/io/safetensors.h"

namespace tandem {

/// The at:: dtype of a safetensors dtype; errors for types libtorch lacks.
c10::ScalarType to_scalar_type(safetensors::Dtype dtype, const std::string& where);
/// The safetensors dtype of an at:: dtype.
safetensors::Dtype to_safetensors_dtype(c10::ScalarType dtype);

/// Copies tensor `info` out of `file` into a new CPU tensor in its stored dtype.
at::Tensor read_tensor(const safetensors::File& file, const safetensors::TensorInfo& info);

/// Writes `tensors` (any device, contiguous or not) to `path` atomically, in the given order.
void write_tensors(const std::string& path,
                   const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                   const std::map<std::string, std::string>& metadata = {});

}  // namespace tandem
