#pragma once
// Where a run is in its data (train/training_data.h draws micro-batches from it): the sampler's
// position and the records best-fit packing drew ahead. Saved in every checkpoint
// (train/run_state.h) as trainer_state.json's "sampler" and "pending".
#include <cstdint>
#include <vector>

#include "tandem/data/sampler.h"

namespace tandem {

/// A record drawn from the sampler that waits in best_fit's pool for a micro-batch with room.
struct PendingRecord {
  int64_t record = 0;  // sampler record
  int64_t epoch = 0;   // the sampler epoch it was drawn in
  bool operator==(const PendingRecord&) const = default;
};

/// Where a run is in its data: the sampler's position and, under data.packing: best_fit, the
/// records drawn ahead of it that no micro-batch has taken yet, oldest first (empty under the
/// other modes). Both are saved in every checkpoint, so a resumed run draws the same batches.
struct DataCursor {
  explicit DataCursor(const SamplerOptions& options) : sampler(options) {}
  Sampler sampler;
  std::vector<PendingRecord> pending;
};

}  // namespace tandem
