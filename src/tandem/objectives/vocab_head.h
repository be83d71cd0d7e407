#pragma once
// Small pieces every loss through an LM head shares (fused_vocab_loss, distill_loss, dspark_loss).
#include <ATen/ATen.h>

#include <vector>

namespace tandem {

/// backward() of a loss whose forward saved the gradients of its first saved.size() arguments
/// (formed in closed form in the same pass): each times `grad_total` (the upstream 0-dim
/// gradient), then undefined ones up to `arguments`, the forward's argument count.
inline std::vector<at::Tensor> scaled_saved_gradients(const std::vector<at::Tensor>& saved,
                                                      const at::Tensor& grad_total,
                                                      size_t arguments) {
  std::vector<at::Tensor> grads(arguments);
  for (size_t i = 0; i < saved.size(); ++i)
    if (saved[i].defined()) grads[i] = saved[i] * grad_total;
  return grads;
}

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
