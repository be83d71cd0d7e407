#pragma once
// Reads a committed safetensors fixture into a name -> tensor map.
#include <ATen/ATen.h>

#include <map>
#include <string>

#include "tandem/io/tensor_io.h"
#include "test_util.h"

namespace tandem::testing {

inline std::map<std::string, at::Tensor> fixture_tensors(const std::string& relative) {
  const auto file = tandem::safetensors::File::open(source_path(relative));
  std::map<std::string, at::Tensor> out;
  for (const auto& info : file.header().tensors) out[info.name] = tandem::read_tensor(file, info);
  return out;
}

/// max |got - expected| / max |expected|, in fp64.
inline double max_relative_error(const at::Tensor& got, const at::Tensor& expected) {
  return (got.to(at::kDouble) - expected.to(at::kDouble)).abs().max().item<double>() /
         expected.to(at::kDouble).abs().max().item<double>();
}

}  // namespace tandem::testing
