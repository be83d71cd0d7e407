#pragma once
// Losses through the LM head without ever holding (tokens, vocab) logits for the whole batch:
// tokens are processed in chunks, each chunk's logits are formed, reduced and dropped, and the
// backward pass recomputes them chunk by chunk (the fused linear-loss idea of Liger).
//
// The one primitive is the per-token log-probability of a label, log softmax(h W^T)[y]; the
// cross-entropy of SFT is its weighted negative sum, and the policy objectives (DPO, GRPO/GSPO)
// sum or exponentiate it per document.
#include <ATen/core/Tensor.h>

namespace tandem {

struct FusedLossOptions {
  int64_t chunk_tokens = 1024;  // tokens per chunk: peak extra memory ~ chunk_tokens * vocab * 4 B;
                                // 0: no chunking (full logits, autograd; faster, far more memory)
  bool fp32_head = false;  // project with hidden and weight upcast to fp32 (vLLM's fp32 last layer)
};

/// log softmax(hidden[t] @ lm_head^T)[labels[t]] for every token, reduced in fp32 (fp64 for fp64
/// inputs). hidden (N, H), lm_head (V, H), labels (N,) int64 in [0, V). Differentiable w.r.t.
/// hidden and lm_head (when they require grad): the backward recomputes each chunk's logits and
/// returns gradients in the inputs' own dtypes, the head's accumulated over chunks in fp32 and
/// cast once. If `entropy` is given it receives each token's entropy -sum_v p log p (N,), no
/// gradient. Returns (N,) fp32.
at::Tensor fused_token_logprobs(const at::Tensor& hidden, const at::Tensor& lm_head,
                                const at::Tensor& labels, const FusedLossOptions& options = {},
                                at::Tensor* entropy = nullptr);

/// The same with full logits and plain autograd: the reference for tests and the "unfused" side
/// of the benchmarks.
at::Tensor unfused_token_logprobs(const at::Tensor& hidden, const at::Tensor& lm_head,
                                  const at::Tensor& labels, bool fp32_head = false);

/// sum_t weight[t] * CE(hidden[t] @ lm_head^T, target[t]) = -sum_t weight[t] * logprob[t].
/// targets (N,) int64, weights (N,) float (0 drops a token, whatever its target; use
/// 1/num_tokens_of_step to normalise). Returns a 0-dim fp32 tensor.
at::Tensor fused_linear_cross_entropy(const at::Tensor& hidden, const at::Tensor& lm_head,
                                      const at::Tensor& targets, const at::Tensor& weights,
                                      const FusedLossOptions& options = {});

/// The same quantity computed the plain way (full logits).
at::Tensor unfused_linear_cross_entropy(const at::Tensor& hidden, const at::Tensor& lm_head,
                                        const at::Tensor& targets, const at::Tensor& weights,
                                        bool fp32_head = false);

}  // namespace tandem
