#pragma once
// DSpark's vocabulary losses (docs/dspark.md) through the frozen lm_head, chunked over tokens:
// each chunk's draft and target logits are formed, reduced and dropped, and the draft's
// gradients are formed in the same pass in closed form (as distill_loss.h does), so no
// (tokens, vocab) tensor exists for the whole batch and nothing is recomputed in backward.
//
//   z_t = lm_head h_t + markov_w2 e_t     the draft's Markov-corrected logits (e_t = markov_w1
//                                         [prev_t]; without a Markov head z_t = lm_head h_t)
//   u_t = lm_head g_t                     the target's logits (g_t its normed last hidden state)
//   p = softmax(z), q = softmax(u)
//   CE_t = -log p[y_t]                    y_t the data's token
//   L1_t = sum_v |p_v - q_v|              (= 2 TV(p, q); 1 - L1_t / 2 is the confidence target)
//   loss = sum_t w_t (ce_weight CE_t + l1_weight L1_t)
// Gradients per row: dCE/dz = p - onehot(y); dL1/dz_j = p_j (s_j - sum_v s_v p_v), s = sign(p - q)
// (0 where p = q, as autograd's |x|' at 0).
#include <ATen/core/Tensor.h>

#include "tandem/objectives/fused_vocab_loss.h"

namespace tandem {

struct DSparkLossWeights {
  double cross_entropy = 0.1;  // loss.ce_weight
  double l1 = 0.9;             // loss.l1_weight
};

/// The loss and its per-row parts.
struct DSparkVocabLoss {
  at::Tensor loss;           // 0-dim fp32: sum_t w_t (ce_weight CE_t + l1_weight L1_t)
  at::Tensor cross_entropy;  // (N,) CE_t, no gradient
  at::Tensor l1;             // (N,) L1_t, no gradient
  at::Tensor argmax;         // (N,) int64, argmax_v z_t
};

/// hidden (N, H) the draft's normed output, lm_head (V, H) (never differentiated), code (N, r)
/// and markov_w2 (V, r) (both undefined without a Markov head), teacher_hidden (N, H) the
/// target's normed last hidden states, labels (N,) int64, weights (N,) float. Differentiable
/// w.r.t. hidden, code and markov_w2; gradients in their own dtypes, formed only when grad mode
/// is on and they require grad.
DSparkVocabLoss fused_dspark_loss(const at::Tensor& hidden, const at::Tensor& lm_head,
                                  const at::Tensor& code, const at::Tensor& markov_w2,
                                  const at::Tensor& teacher_hidden, const at::Tensor& labels,
                                  const at::Tensor& weights, const DSparkLossWeights& loss_weights,
                                  const FusedLossOptions& options);

/// The same with full logits and plain autograd: the reference for tests (and what runs when
/// chunk_tokens is 0).
DSparkVocabLoss unfused_dspark_loss(const at::Tensor& hidden, const at::Tensor& lm_head,
                                    const at::Tensor& code, const at::Tensor& markov_w2,
                                    const at::Tensor& teacher_hidden, const at::Tensor& labels,
                                    const at::Tensor& weights,
                                    const DSparkLossWeights& loss_weights, bool fp32_head = false);

}  // namespace tandem
