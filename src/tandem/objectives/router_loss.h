#pragma once
// The load-balancing loss of a trained mixture-of-experts model (SFT, distillation, DPO, GRPO /
// GSPO policies): the routers' choices of a forward (models/moe.h RouterLoad) turned into
// transformers' auxiliary loss, added to the objective's loss with weight
// `loss.router_aux_loss_coef` (default 0: fine-tuning usually leaves the routers' balance alone)
// and always reported as the metric `router_aux_loss`.
#include <optional>

#include "tandem/models/decoder.h"
#include "tandem/objectives/objective.h"

namespace tandem {

/// The trained model's forward on `batch`, with its routers' load when it has experts.
struct TrainedForward {
  at::Tensor hidden;                 // (B, T, H) final-normed hidden states
  std::optional<RouterLoad> router;  // set for a mixture-of-experts model (padding weighs 0)
};
TrainedForward trained_forward(const CausalLM& model, const PackedBatch& batch);

/// This micro-batch's share of the step, in the objective's normalisation unit (loss tokens or
/// documents, counted on the batch's host copy): the shares of a step's micro-batches on every
/// rank sum to 1, so the step's router loss is their weighted mean.
double micro_batch_share(const Objective& objective, const PackedBatch& batch,
                         const StepTotals& totals);

/// Adds coef * share * aux to `output.loss` and share * aux as `router_aux_loss`, share being
/// `batch`'s micro_batch_share for `objective`; nothing at all (the share is not counted) when
/// the model has no experts.
void add_router_loss(ObjectiveOutput& output, const std::optional<RouterLoad>& router, double coef,
                     const Objective& objective, const PackedBatch& batch,
                     const StepTotals& totals);

}  // namespace tandem
