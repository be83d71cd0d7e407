#pragma once
// The overfit gates' shared training loop: train a draft on one fixed batch until every per-slot
// accuracy metric (`acc_*`) is 1.0, then keep going so the margins are not razor thin.
#include <algorithm>
#include <string>

#include "tandem/data/packing.h"
#include "tandem/objectives/objective.h"
#include "tandem/train/optimizer.h"

namespace tandem::testing {

struct OverfitSchedule {
  int max_steps = 600;
  int hold_steps = 50;   // steps at full accuracy before stopping
  int warm_steps = 200;  // lr 5e-3 for these, then 1e-3
};

struct OverfitResult {
  int steps = 0;
  double accuracy = 0;  // the lowest acc_* of the last step
};

/// `Objective`: Eagle3Objective or DFlashObjective (anything with draft(), count(), compute()).
template <typename Objective>
OverfitResult overfit_one_batch(Objective& objective, const PackedBatch& batch,
                                const OverfitSchedule& schedule) {
  AdamWOptions adamw;
  adamw.beta2 = 0.99;
  adamw.max_grad_norm = 1.0;
  MixedPrecisionAdamW optimizer(trainable_parameters(*objective.draft()), adamw);
  const StepTotals totals = objective.count(batch);
  OverfitResult result;
  int steps_at_full_accuracy = 0;
  for (; result.steps < schedule.max_steps && steps_at_full_accuracy < schedule.hold_steps;
       ++result.steps) {
    steps_at_full_accuracy = result.accuracy == 1.0 ? steps_at_full_accuracy + 1 : 0;
    ObjectiveOutput output = objective.compute(batch, totals);
    output.loss.backward();
    optimizer.step(result.steps < schedule.warm_steps ? 5e-3 : 1e-3);
    optimizer.zero_grad();
    result.accuracy = 1.0;
    for (const auto& [name, value] : output.metric_values())
      if (name.rfind("acc_", 0) == 0) result.accuracy = std::min(result.accuracy, value);
  }
  return result;
}

}  // namespace tandem::testing
