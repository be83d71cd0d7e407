#pragma once
// Cross-entropy through the LM head without ever holding (tokens, vocab) logits for the whole
// batch: tokens are processed in chunks, each chunk's logits are formed, reduced and dropped, and
// the backward pass recomputes them chunk by chunk (the fused linear-loss idea of Liger).
#include <ATen/core/Tensor.h>

namespace tandem {

struct FusedLossOptions {
  int64_t chunk_tokens = 1024;  // tokens per chunk: peak extra memory ~ chunk_tokens * vocab * 4 B
  bool fp32_head = false;  // project with hidden and weight upcast to fp32 (vLLM's fp32 last layer)
};

/// sum_t weight[t] * CE(hidden[t] @ lm_head^T, target[t]).
/// hidden (N, H), lm_head (V, H), targets (N,) int64, weights (N,) float (0 drops a token; use
/// 1/num_tokens_of_step to normalise). Differentiable w.r.t. hidden and lm_head (when they
/// require grad); gradients come back in their own dtypes. Returns a 0-dim fp32 tensor.
at::Tensor fused_linear_cross_entropy(const at::Tensor& hidden, const at::Tensor& lm_head,
                                      const at::Tensor& targets, const at::Tensor& weights,
                                      const FusedLossOptions& options = {});

/// The same quantity computed the plain way (full logits): the reference for tests and the
/// "unfused" side of the memory benchmark.
at::Tensor unfused_linear_cross_entropy(const at::Tensor& hidden, const at::Tensor& lm_head,
                                        const at::Tensor& targets, const at::Tensor& weights,
                                        bool fp32_head = false);

}  // namespace tandem
