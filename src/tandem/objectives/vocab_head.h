#pragma once
// Small pieces every loss through an LM head shares (fused_vocab_loss, distill_loss).
#include <ATen/ATen.h>

namespace tandem {

/// Softmax and sums run in fp32 (fp64 for fp64 inputs, which the gradient checks use).
inline at::ScalarType reduction_dtype(const at::Tensor& hidden) {
  return hidden.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

/// Targets that carry no weight may be anything (e.g. -100 padding); point them at class 0.
inline at::Tensor safe_targets(const at::Tensor& targets, const at::Tensor& weights) {
  return at::where(weights != 0, targets, at::zeros_like(targets));
}

}  // namespace tandem
