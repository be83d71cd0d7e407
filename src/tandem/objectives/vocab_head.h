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

/// The dtype the projection runs in: the inputs', or fp32 with the fp32 head (docs/training.md).
inline at::ScalarType head_compute_dtype(const at::Tensor& hidden, bool fp32_head) {
  return fp32_head && hidden.scalar_type() != at::kDouble ? at::kFloat : hidden.scalar_type();
}

/// `tensor` (a hidden state or a head weight) in the dtype the projection runs in.
inline at::Tensor head_operand(const at::Tensor& tensor, bool fp32_head) {
  return tensor.to(head_compute_dtype(tensor, fp32_head));
}

/// Logits hidden (n, H) @ head (V, H)^T in the head's compute dtype: (n, V).
inline at::Tensor project_to_vocab(const at::Tensor& hidden, const at::Tensor& head,
                                   bool fp32_head) {
  return at::linear(head_operand(hidden, fp32_head), head_operand(head, fp32_head));
}

}  // namespace tandem
