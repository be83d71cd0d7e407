#pragma once
// Validation during training (data.validation, training.eval_every): the objective's own
// forward on held-out records, without gradients, its metrics summed over the whole validation
// set the way a step sums its micro-batches (one set of totals for all of them, so `val/loss`
// is the loss of the set, not a mean of batch means), then finished by the objective (a draft's
// `sim_accept_length`) and logged as "val/<name>" in the step's metrics. The random generators
// are saved before and restored after, so validating changes no training number.
//
// The best checkpoint: after each validation, training.best_metric (smallest or largest, by
// training.best_mode) is compared with the best so far; a better value saves a checkpoint at
// that step, which keep_last never prunes, and RUN_DIR/best.json names it.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tandem/objectives/objective.h"
#include "tandem/train/training_data.h"

namespace tandem {

namespace dist {
class ProcessGroup;
}

class Validation {
 public:
  /// Packs every record of `data` in file order once, to count the totals (`objective.count`).
  Validation(TrainingData data, const Objective& objective);

  /// Every rank calls it: micro-batch i runs on rank i % ranks (a rank left without one reruns
  /// the last with its metrics zeroed, so sharded ranks pair their layer calls), metrics summed
  /// over ranks. Returns "val/<name>" values (the same on every rank), then "val/records".
  std::vector<std::pair<std::string, double>> run(Objective& objective, const at::Device& device,
                                                  dist::ProcessGroup& world) const;

  int64_t records() const { return data_.num_records(); }
  int64_t micro_batches() const { return static_cast<int64_t>(starts_.size()); }
  const TrainingData& data() const { return data_; }

 private:
  PackedBatch batch(int64_t index) const;

  TrainingData data_;
  std::vector<int64_t> starts_;  // first record of each micro-batch
  StepTotals totals_;
};

/// training.best_mode: whether larger values of `metric` are better ("auto": names holding
/// "acc" or "accept").
bool larger_is_better(const std::string& metric, const std::string& mode);

/// RUN_DIR/best.json: {"checkpoint": "step-N", "step", "metric", "mode", "value"}, replaced
/// atomically.
void write_best_marker(const std::string& run_dir, int64_t step, const std::string& metric,
                       bool larger_better, double value);

/// The step RUN_DIR/best.json names; throws naming the file when it is absent or malformed.
int64_t read_best_step(const std::string& run_dir);

}  // namespace tandem
