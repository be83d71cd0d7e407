#include "tandem/objectives/policy_loss.h"

#include <ATen/ATen.h>

#include "tandem/core/error.h"

namespace tandem {

DpoLossType parse_dpo_loss_type(const std::string& name) {
  if (name == "sigmoid") return DpoLossType::Sigmoid;
  if (name == "hinge") return DpoLossType::Hinge;
  if (name == "ipo") return DpoLossType::Ipo;
  throw Error("[dpo] unknown loss type '", name, "' (sigmoid, hinge, ipo)");
}

DpoPairLosses dpo_pair_losses(const DpoPairLogprobs& pairs, DpoLossType type, double beta) {
  check(beta > 0, "[dpo] beta must be positive, got ", beta);
  const at::Tensor chosen_ratio = pairs.policy_chosen - pairs.reference_chosen;        // (P,)
  const at::Tensor rejected_ratio = pairs.policy_rejected - pairs.reference_rejected;  // (P,)
  DpoPairLosses out;
  if (type == DpoLossType::Ipo) {
    // Each side's log-ratio divided by its own completion length (TRL's IPO), then the square.
    const at::Tensor delta =
        chosen_ratio / pairs.chosen_tokens.clamp_min(1).to(chosen_ratio.dtype()) -
        rejected_ratio / pairs.rejected_tokens.clamp_min(1).to(chosen_ratio.dtype());
    out.losses = (delta - 1.0 / (2.0 * beta)).pow(2);
  } else {
    const at::Tensor scaled = beta * (chosen_ratio - rejected_ratio);
    out.losses = type == DpoLossType::Sigmoid ? -at::log_sigmoid(scaled) : at::relu(1.0 - scaled);
  }
  out.rewards_chosen = beta * chosen_ratio.detach();
  out.rewards_rejected = beta * rejected_ratio.detach();
  return out;
}

namespace {

// -min(r A, clip(r) A) and which tokens sit on the flat clipped branch.
PolicyLosses clipped_surrogate(const at::Tensor& ratio, const at::Tensor& advantages,
                               const ClipRange& clip) {
  check(clip.low >= 0 && clip.low < 1 && clip.high >= 0,
        "[policy] clip range needs 0 <= "
        "epsilon_low < 1 and epsilon_high >= 0, got ",
        clip.low, " and ", clip.high);
  const at::Tensor clamped = ratio.clamp(1.0 - clip.low, 1.0 + clip.high);
  PolicyLosses out;
  out.losses = -at::minimum(ratio * advantages, clamped * advantages);
  const at::Tensor r = ratio.detach();
  out.clipped =
      ((r > 1.0 + clip.high) & (advantages > 0)) | ((r < 1.0 - clip.low) & (advantages < 0));
  out.ratio = r;
  return out;
}

}  // namespace

PolicyLosses grpo_token_losses(const at::Tensor& logprobs, const at::Tensor& old_logprobs,
                               const at::Tensor& advantages, const ClipRange& clip) {
  check(logprobs.sizes() == old_logprobs.sizes() && logprobs.sizes() == advantages.sizes(),
        "[grpo] logprobs ", logprobs.sizes(), ", old logprobs ", old_logprobs.sizes(),
        " and advantages ", advantages.sizes(), " must be the same (N,)");
  return clipped_surrogate(at::exp(logprobs - old_logprobs), advantages.to(logprobs.dtype()), clip);
}

PolicyLosses gspo_document_losses(const at::Tensor& logprobs, const at::Tensor& old_logprobs,
                                  const at::Tensor& document, const at::Tensor& advantages,
                                  const ClipRange& clip) {
  check(logprobs.sizes() == old_logprobs.sizes() && logprobs.sizes() == document.sizes(),
        "[gspo] logprobs ", logprobs.sizes(), ", old logprobs ", old_logprobs.sizes(),
        " and document ids ", document.sizes(), " must be the same (N,)");
  const int64_t documents = advantages.size(0);
  const at::Tensor log_ratio_sum =
      at::zeros({documents}, logprobs.options()).index_add(0, document, logprobs - old_logprobs);
  const at::Tensor tokens =
      at::zeros({documents}, logprobs.options()).index_add(0, document, at::ones_like(logprobs));
  if (tokens
          .is_cpu())  // (on a GPU the objective guarantees it: checking would wait for the device)
    check((tokens > 0).all().item<bool>(), "[gspo] every document needs a labelled token");
  return clipped_surrogate(at::exp(log_ratio_sum / tokens), advantages.to(logprobs.dtype()), clip);
}

at::Tensor kl_k3(const at::Tensor& logprobs, const at::Tensor& old_logprobs) {
  const at::Tensor diff = (old_logprobs - logprobs).detach();
  return diff.exp() - diff - 1.0;
}

}  // namespace tandem
