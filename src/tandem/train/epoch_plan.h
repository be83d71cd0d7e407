#pragma once
// training.epochs: how many optimizer steps make the asked passes over the data. The steps are
// planned by drawing the run's micro-batches from the lengths alone (the sampler seeded as the
// run seeds it, records packed as the run packs them, after splitting, truncation and skips), so
// the plan is exact, not an estimate from token counts: step k of the run draws exactly the
// records step k of the plan drew. The run stops at the first step that reaches the end of the
// last pass (its last micro-batches may hold a few records of the next pass; under best_fit no
// micro-batch mixes two passes, so only a step of several micro-batches can reach past it).
#include <cstdint>

#include "tandem/data/sampler.h"

namespace tandem {

struct TrainingData;

/// How a step is made of micro-batches (training.micro_batches or training.docs_per_step).
struct StepShape {
  int64_t micro_batches = 1;  // fixed accumulation, unless docs_per_step > 0
  int64_t docs_per_step = 0;  // > 0: micro-batches until the step holds this many documents
  int64_t ranks = 1;          // ranks that share the step's micro-batches
  bool sharded = false;       // shard/hybrid: every rank runs as many micro-batches

  /// Whether a step of `drawn` micro-batches holding `documents` documents is complete (the
  /// trainer's test, after each micro-batch drawn).
  bool complete(int64_t drawn, int64_t documents) const;
};

/// The sampler a run draws `data`'s records with: every rank the same order, seeded by
/// training.seed (train/data_parallel.h).
SamplerOptions run_sampler_options(const TrainingData& data, uint64_t seed);

/// What `epochs` passes over `data` come to.
struct EpochPlan {
  int64_t steps = 0;
  int64_t micro_batches = 0;
  int64_t records = 0;  // sampler records drawn by those steps (>= epochs x records per pass)
  int64_t tokens = 0;   // real tokens in them
  int64_t slots = 0;    // rows x columns of their micro-batches: tokens / slots is the fill
};

/// Draws steps from a sampler of `sampler` options over `data` until `epochs` passes are done.
EpochPlan plan_epochs(const TrainingData& data, const SamplerOptions& sampler, int64_t epochs,
                      const StepShape& shape);

}  // namespace tandem
