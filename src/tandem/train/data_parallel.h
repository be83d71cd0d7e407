#pragma once
// Data-parallel training (docs/distributed.md; distributed.mode: ddp, and the data side of shard
// and hybrid, whose parameter side is train/sharded_model.h) on a c10d process group: what the
// trainer does differently with more than one rank. The plan keeps a W-rank run equal to the
// one-process run of the same config (same global batch, same losses, same weights):
//  - every rank draws the same micro-batches (the sampler and the packing are replicated: host
//    work only, the token ids come from the shared cache), so step totals, docs_per_step and
//    the document/token counters are global without any communication;
//  - micro-batch i of a step is computed by rank i % W (training.micro_batches must be a
//    multiple of W; with docs_per_step a step draws at least W micro-batches);
//  - after the local backward passes, one all-reduce sums the fp32 gradients of all ranks
//    (MixedPrecisionAdamW::reduce_gradients), so the clipping norm is the global one and every
//    rank applies the identical update; a second, small all-reduce sums the metrics and carries
//    the stop flag (a SIGTERM on any rank stops all after a saved checkpoint);
//  - rank 0 alone opens weight files (RankZeroLoading), reads a resumed checkpoint and sends
//    its state, writes checkpoints, metrics and exports.
#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tandem/core/config.h"
#include "tandem/dist/process_group.h"
#include "tandem/io/hf_checkpoint.h"

namespace tandem {

/// What `distributed:` says (defaults and ranges: core/config_schema.cpp).
struct DistributedOptions {
  std::string mode;          // ddp | shard | hybrid
  int64_t dp_replicate = 0;  // hybrid: replicas x shards = ranks
  int64_t dp_shard = 0;
  std::string where;               // "FILE: distributed.mode", for errors
  std::string backend;             // auto: nccl when training on CUDA, else gloo
  std::chrono::seconds timeout{};  // any collective, and joining the job
  // After loading, every rank checksums the full values of its frozen weights and the job stops
  // if any rank's differ from rank 0's (one gather of each sharded weight; off by default).
  bool check_frozen_weights = false;
};

/// Reads `distributed.*` (mode, backend, timeout_s, check_frozen_weights).
DistributedOptions read_distributed(const Config& config);

/// The groups a step communicates in. ddp: every rank a replica (shard groups of one); shard:
/// one shard group of all ranks; hybrid: dp_replicate groups of dp_shard consecutive ranks,
/// and replica groups across them (the same shard index in every shard group).
struct ParallelGroups {
  std::shared_ptr<dist::ProcessGroup> world;      // metrics, stop flag, checkpoint barriers
  std::shared_ptr<dist::ProcessGroup> shard;      // parameters split across it (shard, hybrid)
  std::shared_ptr<dist::ProcessGroup> replicate;  // gradients all-reduced across it
  bool sharded = false;                           // mode shard or hybrid
};

/// (replicas, shards) of `options.mode` on `ranks` ranks; for hybrid, checks dp_replicate x
/// dp_shard = ranks (an Error naming the config otherwise).
std::pair<int64_t, int64_t> replicas_and_shards(const DistributedOptions& options, int64_t ranks);

/// Forms the groups of `options.mode` from the joined `world`.
ParallelGroups parallel_groups(std::shared_ptr<dist::ProcessGroup> world,
                               const DistributedOptions& options);

/// Joins the job the launcher started (dist/launch.h): a connected group when WORLD_SIZE (or
/// SLURM_NTASKS) > 1, else a group of one. Backend auto = NCCL when `device` is CUDA (Gloo
/// beside it for host tensors), else Gloo. Logs the rank, world size and backend on rank 0.
std::shared_ptr<dist::ProcessGroup> join_job(const DistributedOptions& options,
                                             const c10::Device& device);

/// Rank-0 loading over `group`: HF checkpoints opened with it (RunContext::rank_zero) are read
/// by rank 0 only and their headers and tensors sent to the other ranks (io/hf_checkpoint.h).
/// Each rank logs what it opened or received to stderr.
class RankZeroLoading : public CheckpointBroadcast {
 public:
  /// `device`: where the tensors travel (a CUDA device: over NCCL, arriving on that GPU).
  RankZeroLoading(std::shared_ptr<dist::ProcessGroup> group, c10::Device device);
  RankZeroLoading(const RankZeroLoading&) = delete;
  RankZeroLoading& operator=(const RankZeroLoading&) = delete;
  bool reads_files() const override { return group_->rank() == 0; }
  void broadcast_text(std::string& text) override { group_->broadcast_text(text, 0); }
  void broadcast_tensor(at::Tensor& tensor) override;
  void log(const std::string& line) override;

 private:
  std::shared_ptr<dist::ProcessGroup> group_;
  c10::Device device_;
};

/// Whether micro-batch `index` of a step runs on this rank.
inline bool owns_micro_batch(const dist::ProcessGroup& group, int64_t index) {
  return index % group.size() == group.rank();
}

/// Every rank's `tensors` become rank 0's, in place, in order (contiguous tensors; rank 0's
/// dtypes and shapes are checked against each rank's first, through a text broadcast).
void broadcast_tensors_from_rank0(dist::ProcessGroup& group, std::vector<at::Tensor>& tensors,
                                  const std::string& what);

}  // namespace tandem
