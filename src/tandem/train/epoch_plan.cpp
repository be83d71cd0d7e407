#include "tandem/train/epoch_plan.h"

#include "tandem/core/error.h"
#include "tandem/train/training_data.h"

namespace tandem {

bool StepShape::complete(int64_t drawn, int64_t documents) const {
  if (docs_per_step == 0) return drawn >= micro_batches;
  // Sharded: every rank must run as many micro-batches (their layer calls pair up).
  return documents >= docs_per_step && drawn >= ranks && (!sharded || drawn % ranks == 0);
}

SamplerOptions run_sampler_options(const TrainingData& data, uint64_t seed) {
  SamplerOptions options;
  options.dataset_size = data.num_records();
  options.seed = seed;
  return options;
}

EpochPlan plan_epochs(const TrainingData& data, const SamplerOptions& options, int64_t epochs,
                      const StepShape& shape) {
  check(epochs >= 1, "[train] training.epochs must be at least 1, got ", epochs);
  DataCursor cursor(options);
  EpochPlan plan;
  const int64_t wanted = epochs * cursor.sampler.per_rank();  // the sampler's records of the passes
  while (plan.records < wanted) {
    int64_t drawn = 0, documents = 0;
    do {
      const MicroBatchSize size = next_micro_batch_size(cursor, data);
      drawn += 1;
      documents += size.documents;
      plan.records += size.records;
      plan.tokens += size.tokens;
      plan.slots += size.rows * size.length;
    } while (!shape.complete(drawn, documents));
    plan.steps += 1;
    plan.micro_batches += drawn;
  }
  return plan;
}

}  // namespace tandem
