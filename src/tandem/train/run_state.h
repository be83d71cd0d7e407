#pragma once
// What a checkpoint holds besides the model's own tensors, and moving a run's whole state in and
// out of checkpoints (model, optimizer, random generators of the CPU and the GPU, counters,
// data position: sampler and best-fit pool), in one process or across data-parallel ranks.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <map>
#include <string>

#include "tandem/core/config.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/data_cursor.h"
#include "tandem/train/data_parallel.h"
#include "tandem/train/optimizer.h"
#include "tandem/train/sharded_model.h"
#include "tandem/train/training_options.h"

namespace torch::nn {
class Module;
}

namespace tandem {

/// How far a run has got.
struct Counters {
  int64_t step = 0;            // optimizer steps done
  int64_t documents_seen = 0;  // cumulative documents trained on
  int64_t tokens_seen = 0;     // cumulative real tokens
  int64_t skipped_steps = 0;   // training.on_nonfinite: skip_step: steps whose update was dropped
  int64_t consecutive_skips = 0;  // ... of them, in a row up to now
  // Validation (train/validation.h): the step whose checkpoint is the best so far (-1: none),
  // and its training.best_metric.
  int64_t best_step = -1;
  double best_value = 0;
};

/// The random generators' states by name: "cpu_generator", and "cuda_generator" on a GPU.
std::vector<std::pair<std::string, at::Tensor>> generator_states(const at::Device& device);
/// Restores what `states` holds (generator_states' names); a state for a generator this device
/// lacks is ignored.
void restore_generators(const std::map<std::string, at::Tensor>& states, const at::Device& device);

/// Writes step `counters.step` to the run directory. Every rank calls it: rank 0 stages and
/// commits; with a sharded model the ranks of the first replica write their shard files into
/// rank 0's staging directory first.
void save_checkpoint(const TrainingOptions& options, const Config& config,
                     const MixedPrecisionAdamW& optimizer, const torch::nn::Module& model_module,
                     const ShardedModel* sharded, const ParallelGroups& groups,
                     const Counters& counters, const DataCursor& cursor, const at::Device& device);

/// Everything a training checkpoint holds, read into host memory (either layout,
/// sharded_model.h) and checked for what can be checked without the model: the files exist,
/// parse, and hold their parts.
struct RunCheckpoint {
  std::string dir;
  std::map<std::string, at::Tensor> model, optimizer;  // full shapes
  std::map<std::string, at::Tensor> rng;               // "cpu_generator" (+ "cuda_generator")
  Counters counters;
  SamplerState sampler;
  std::vector<PendingRecord> pending;  // best_fit's pool (trainer_state.json "pending")
};

/// Reads `reader`'s checkpoint; throws Error naming the file and what is wrong. A checkpoint
/// that fails here is skipped on resume like a corrupt one (find_latest_valid's `load`).
RunCheckpoint read_run_checkpoint(const CheckpointReader& reader);

/// The random generators, counters and data position of a checkpoint.
Counters restore_trainer_state(const RunCheckpoint& checkpoint, DataCursor& cursor,
                               const at::Device& device);

/// Restores everything a checkpoint holds into an unsharded model; returns the counters it was
/// saved with. A tensor that does not match the model (the config changed) is an error.
Counters restore_checkpoint(const RunCheckpoint& checkpoint, MixedPrecisionAdamW& optimizer,
                            const torch::nn::Module& model_module, DataCursor& cursor,
                            const at::Device& device);

/// Data-parallel resume: rank 0 restored the checkpoint; every other rank takes its weights,
/// optimizer state, random generators, counters and data position.
Counters share_resumed_state(dist::ProcessGroup& group, MixedPrecisionAdamW& optimizer,
                             const torch::nn::Module& model_module, const Counters& counters,
                             DataCursor& cursor, const at::Device& device);

/// Every rank takes rank 0's random generators, counters and data position.
Counters share_trainer_state(dist::ProcessGroup& group, const Counters& counters,
                             DataCursor& cursor, const at::Device& device);

}  // namespace tandem
