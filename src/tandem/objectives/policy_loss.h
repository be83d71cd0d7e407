#pragma once
// The losses of learning from preferences and rollouts (docs/dpo.md, docs/grpo-gspo.md), on
// per-token log-probabilities (objectives/fused_vocab_loss.h gives them without full logits).
// Pure tensor functions: the objectives (dpo.h, policy.h) gather their inputs from a packed
// batch and divide by the step's totals.
//
// DPO, per pair i (sums over the completion tokens of each sequence):
//   Delta_i = (log pi - log pi_ref)(chosen_i) - (log pi - log pi_ref)(rejected_i)
//   sigmoid  -log sigma(beta Delta)        hinge  relu(1 - beta Delta)
//   ipo      (Delta_len - 1/(2 beta))^2, Delta_len dividing each side by its own completion length
//   rewards  beta (log pi - log pi_ref) of each side (the metrics use the summed form always)
// GRPO, per labelled token: r = exp(log pi - log pi_old), -min(r A, clip(r) A),
//   clip(r) = clamp(r, 1 - eps_low, 1 + eps_high).
// GSPO, per document s: R_s = exp(mean_{t in s}(log pi - log pi_old)), -min(R_s A_s, clip(R_s)
// A_s).
#include <ATen/core/Tensor.h>

#include <string>

namespace tandem {

enum class DpoLossType { Sigmoid, Hinge, Ipo };
/// "sigmoid" | "hinge" | "ipo"; throws naming the accepted values.
DpoLossType parse_dpo_loss_type(const std::string& name);

/// Summed completion log-probabilities of P pairs, each (P,) fp32.
struct DpoPairLogprobs {
  at::Tensor policy_chosen, policy_rejected;        // differentiable
  at::Tensor reference_chosen, reference_rejected;  // constants
  at::Tensor chosen_tokens, rejected_tokens;        // completion lengths (P,) (used by IPO)
};

struct DpoPairLosses {
  at::Tensor losses;            // (P,) differentiable
  at::Tensor rewards_chosen;    // (P,) beta (log pi - log pi_ref)(chosen), detached
  at::Tensor rewards_rejected;  // (P,)
};

DpoPairLosses dpo_pair_losses(const DpoPairLogprobs& pairs, DpoLossType type, double beta);

struct ClipRange {
  double low = 0.2;    // epsilon_low
  double high = 0.28;  // epsilon_high (DAPO's clip-higher)
};

/// The pieces of a GRPO/GSPO loss and its metrics, all over the labelled tokens (or documents)
/// given; the caller divides `losses` by the step's total.
struct PolicyLosses {
  at::Tensor losses;   // (N,) per token (GRPO) or (D,) per document (GSPO), differentiable
  at::Tensor ratio;    // same shape, detached: r_t or R_s
  at::Tensor clipped;  // same shape, bool: the flat clipped branch is taken (zero gradient)
};

/// GRPO: logprobs, old_logprobs, advantages (N,) over the labelled tokens.
PolicyLosses grpo_token_losses(const at::Tensor& logprobs, const at::Tensor& old_logprobs,
                               const at::Tensor& advantages, const ClipRange& clip);

/// GSPO: logprobs, old_logprobs (N,) over labelled tokens, `document` (N,) int64 in [0, D) (each
/// of the D documents must own at least one token), advantages (D,).
PolicyLosses gspo_document_losses(const at::Tensor& logprobs, const at::Tensor& old_logprobs,
                                  const at::Tensor& document, const at::Tensor& advantages,
                                  const ClipRange& clip);

/// k3 estimate of KL(new || old) per token, exp(old - new) - (old - new) - 1, detached. (N,)
at::Tensor kl_k3(const at::Tensor& logprobs, const at::Tensor& old_logprobs);

}  // namespace tandem
