#include "tandem/objectives/router_loss.h"

#include <ATen/ATen.h>

#include <cmath>

#include "tandem/core/error.h"

namespace tandem {

TrainedForward trained_forward(const CausalLM& model, const PackedBatch& batch) {
  TrainedForward out;
  if (model->config().moe.enabled()) {
    out.router.emplace();
    out.router->token_weights = batch.padding_mask.reshape(-1).to(at::kFloat);  // (B*T,)
  }
  out.hidden = model->forward_hidden(batch.input_ids, batch.layout(), {}, nullptr,
                                     out.router ? &*out.router : nullptr);
  return out;
}

double micro_batch_share(const Objective& objective, const PackedBatch& batch,
                         const StepTotals& totals) {
  const StepTotals mine = objective.count(batch.on_host());
  if (objective.normalization() == Normalization::Documents)
    return totals.documents > 0 ? static_cast<double>(mine.documents) / totals.documents : 0.0;
  return totals.loss_tokens > 0 ? static_cast<double>(mine.loss_tokens) / totals.loss_tokens : 0.0;
}

void add_router_loss(ObjectiveOutput& output, const std::optional<RouterLoad>& router, double coef,
                     const Objective& objective, const PackedBatch& batch,
                     const StepTotals& totals) {
  if (!router) return;  // a dense model: no recount of the micro-batch on the step's path
  const at::Tensor aux = router->loss() * micro_batch_share(objective, batch, totals);  // 0-dim
  if (coef > 0) output.loss = output.loss + (aux * coef).to(output.loss.scalar_type());
  output.add_metric("router_aux_loss", aux.detach());
}

}  // namespace tandem
