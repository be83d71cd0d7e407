#pragma once
// The DPO loss through the policy's LM head, fused per pair (docs/dpo.md). A pair's loss needs both
// documents' summed log-probabilities before any token's gradient coefficient is known, so a
// token-chunked log-prob op must compute the logits twice (once for the sums, once in backward).
// Here the chunk is the pair: its logits are formed once, reduced to the two sums, the pair's loss
// and its coefficients dL/dsum follow, and the same logits are turned in place into the gradient of
// hidden and head. Backward only scales those stored gradients. A pair longer than `chunk_tokens`
// falls back to two passes over sub-chunks (sums, then recomputed gradients), so memory stays
// bounded by chunk_tokens x vocab.
#include <ATen/core/Tensor.h>

#include "tandem/objectives/fused_vocab_loss.h"
#include "tandem/objectives/policy_loss.h"

namespace tandem {

/// What the fused loss reads: the policy's labelled positions and the pair table. The pair
/// table and the document of each position are read on the host (they come from the packed
/// batch's host copy), so the loss never waits for the device: each pair's sums, loss and
/// coefficients stay device tensors.
struct DpoHeadInputs {
  at::Tensor hidden;     // (N, H) policy final hidden state at each labelled position
  at::Tensor lm_head;    // (V, H)
  at::Tensor labels;     // (N,) int64: the next token each position predicts
  at::Tensor document;   // (N,) int64 in [0, D), ON THE HOST: each position's document
  at::Tensor chosen;     // (P,) int64, ON THE HOST: the chosen side's document of each pair
  at::Tensor rejected;   // (P,) int64, ON THE HOST
  at::Tensor reference;  // (D,) fp32: the reference's summed log-probs per document
  at::Tensor counts;     // (D,) int64: labelled positions per document (IPO's lengths)
};

/// scale * sum over pairs of the DPO loss; differentiable w.r.t. hidden and lm_head (gradients
/// in their own dtypes, the head's summed in fp32 and rounded once). `pairs_out`, if given,
/// receives the per-pair losses and rewards (detached) for metrics. Returns a 0-dim fp32 tensor.
at::Tensor fused_dpo_loss(const DpoHeadInputs& inputs, DpoLossType type, double beta, double scale,
                          const FusedLossOptions& options, DpoPairLosses* pairs_out = nullptr);

}  // namespace tandem
