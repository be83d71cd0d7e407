#pragma once
// The parameter side of distributed.mode shard and hybrid (docs/distributed.md, ZeRO-3): the
// trainable model and every frozen model split across a shard group (dist/sharding.h), the
// optimizer built on the slices, and the sharded checkpoint files.
//
// A sharded checkpoint holds, besides the trainer's usual files written by rank 0:
//   model.shard-<s>-of-<S>.safetensors      shard s's slice of every parameter (flat, unpadded)
//   optimizer.shard-<s>-of-<S>.safetensors  its slice of the masters and moments
//   shards.json                             S, and each tensor's full shape
// Shard s's files are written by shard rank s of the first replica, into rank 0's staging
// directory; rank 0 lists them in the manifest and commits the whole checkpoint, so it exists
// completely or not at all. Buffers and the optimizer's step count are stored whole in shard 0.
// read_full_checkpoint_tensors() reassembles either layout, so any run (one process, ddp, shard
// or hybrid on any number of ranks) resumes from any checkpoint: it is resharded on load.
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tandem/dist/sharding.h"

namespace tandem {

class CheckpointReader;
class CheckpointWriter;
class MixedPrecisionAdamW;

namespace dist {
class ProcessGroup;
}

/// Every tensor of checkpoint file `kind` ("model" or "optimizer") at full shape, from
/// `kind`.safetensors or, in a sharded checkpoint, from its shard files.
std::map<std::string, at::Tensor> read_full_checkpoint_tensors(const CheckpointReader& reader,
                                                               const std::string& kind);

class ShardedModel {
 public:
  using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;
  /// Splits every parameter of `trainable` (those requiring grad become the optimizer's; the
  /// ones split while loading are taken over) across `shard_group`, and with `frozen` every live
  /// frozen weight not already split while loading (dist/sharding.h: ShardWhileLoading).
  ShardedModel(torch::nn::Module& trainable, std::shared_ptr<dist::ProcessGroup> shard_group,
               ParameterShards& frozen);

  /// The slices of the trainable parameters, by parameter name, and whether each gets weight
  /// decay (from its full shape).
  const NamedTensors& optimizer_parameters() const { return optimizer_parameters_; }
  const std::vector<bool>& decays() const { return decays_; }
  /// The trainable model's full tensors (for a FullParameters scope around an export).
  std::vector<at::Tensor> full_parameters() const;

  /// Writes this shard's files into `staging_dir` (ranks of the first replica call it).
  void write_shard(const std::string& staging_dir, const MixedPrecisionAdamW& optimizer) const;
  /// Rank 0 (with the writer): lists the shard files and writes shards.json.
  void finish_checkpoint(CheckpointWriter& writer, const MixedPrecisionAdamW& optimizer) const;
  /// Every rank of `world`: rank 0 passes the checkpoint's full tensors (the others empty maps);
  /// each rank keeps its slices of the model and of the optimizer state.
  void restore(dist::ProcessGroup& world, const std::map<std::string, at::Tensor>& model,
               const std::map<std::string, at::Tensor>& optimizer_state,
               MixedPrecisionAdamW& optimizer) const;

 private:
  torch::nn::Module& module_;
  std::shared_ptr<dist::ProcessGroup> group_;
  ParameterShards trainable_;  // every parameter of the trainable model
  NamedTensors state_;         // model_state(module_): the sharded parameters, then buffers
  std::map<std::string, at::Tensor> state_by_name_;
  NamedTensors optimizer_parameters_;
  std::vector<bool> decays_;
};

}  // namespace tandem
