#pragma once
// A checksum of model weights' exact bits, computed where they live (no host copy), for checking
// that every rank of a job loaded the same frozen weights (`distributed.check_frozen_weights`).
// Sharded weights are gathered one at a time, so each rank checks the full values it will use.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace tandem {

/// A 64-bit digest of the bits of `weights`, in order: any changed bit, element order, shape or
/// dtype changes it (with overwhelming probability). Gathers sharded tensors
/// (dist/sharding.h FullParameters), one at a time.
uint64_t weights_checksum(const std::vector<at::Tensor>& weights);

}  // namespace tandem
