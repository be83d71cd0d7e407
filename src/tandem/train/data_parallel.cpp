#include "tandem/train/data_parallel.h"

#include <ATen/ATen.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tandem/core/config_schema.h"
#include "tandem/core/error.h"

namespace tandem {

DistributedOptions read_distributed(const Config& config) {
  namespace distributed = keys::distributed;
  DistributedOptions options;
  options.mode = distributed::mode.read(config);
  options.where = distributed::mode.where(config);
  options.dp_replicate = distributed::dp_replicate.read(config);
  options.dp_shard = distributed::dp_shard.read(config);
  check(options.mode == "hybrid" || (options.dp_replicate == 0 && options.dp_shard == 0),
        "[train] ", distributed::dp_replicate.where(config),
        " and dp_shard are for mode: hybrid (mode ", options.mode, " uses all ranks for ",
        options.mode == "ddp" ? "replicas" : "shards", ")");
  if (options.mode == "hybrid")
    check(options.dp_replicate > 0 && options.dp_shard > 0, "[train] ", options.where,
          ": hybrid needs dp_replicate and dp_shard (positive, dp_replicate x dp_shard = ranks)");
  options.backend = distributed::backend.read(config);
  options.timeout = std::chrono::seconds(distributed::timeout_s.read(config));
  options.check_frozen_weights = distributed::check_frozen_weights.read(config);
  return options;
}

std::pair<int64_t, int64_t> replicas_and_shards(const DistributedOptions& options, int64_t ranks) {
  if (options.mode == "ddp") return {ranks, 1};
  if (options.mode == "shard") return {1, ranks};
  const int64_t product = options.dp_replicate * options.dp_shard;
  check(product == ranks, "[train] ", options.where, ": hybrid with dp_replicate ",
        options.dp_replicate, " x dp_shard ", options.dp_shard, " = ", product,
        " ranks, but the job has ", ranks);
  return {options.dp_replicate, options.dp_shard};
}

ParallelGroups parallel_groups(std::shared_ptr<dist::ProcessGroup> world,
                               const DistributedOptions& options) {
  ParallelGroups groups;
  const int64_t ranks = world->size(), rank = world->rank();
  const auto [replicas, shards] = replicas_and_shards(options, ranks);
  groups.sharded = options.mode != "ddp";
  // Rank = replica * shards + shard index: a shard group is `shards` consecutive ranks.
  std::vector<int64_t> shard_ranks, replica_ranks;
  for (int64_t s = 0; s < shards; ++s) shard_ranks.push_back(rank / shards * shards + s);
  for (int64_t r = 0; r < replicas; ++r) replica_ranks.push_back(r * shards + rank % shards);
  groups.shard = shards == ranks ? world : world->subgroup(shard_ranks, "shard");
  groups.replicate = replicas == ranks ? world : world->subgroup(replica_ranks, "replicate");
  groups.world = std::move(world);
  return groups;
}

std::shared_ptr<dist::ProcessGroup> join_job(const DistributedOptions& options,
                                             const c10::Device& device) {
  const dist::LaunchEnv env = dist::read_launch_env();
  // auto: NCCL when the run computes on GPUs (with a Gloo group beside it for host tensors),
  // Gloo on the CPU. NCCL cannot move CPU tensors, so it is refused for a CPU run.
  const dist::Backend backend = dist::choose_backend(options.backend, device.is_cuda());
  check(backend != dist::Backend::Nccl || device.is_cuda(), "[train] ", options.where,
        ": distributed.backend: nccl needs the run on CUDA devices, and training.device is ",
        device.str(), ": use gloo (or auto), or training.device: cuda");
  // One process: no group, unless NCCL is named, which then runs for real on this one GPU
  // (the GPU check exercises NCCL this way on a one-GPU machine).
  if (env.world_size == 1 && options.backend != "nccl") return dist::ProcessGroup::single();
  std::shared_ptr<dist::ProcessGroup> group =
      dist::ProcessGroup::connect(env, backend, options.timeout, device);
  if (group->rank() == 0)
    std::cerr << "[dist] " << group->size() << " ranks (" << env.launcher << ", "
              << dist::backend_name(backend) << ", mode " << options.mode << ", timeout "
              << options.timeout.count() << " s)\n";
  return group;
}

RankZeroLoading::RankZeroLoading(std::shared_ptr<dist::ProcessGroup> group, c10::Device device)
    : group_(std::move(group)), device_(device) {}

void RankZeroLoading::broadcast_tensor(at::Tensor& tensor) {
  // On a GPU the weights travel over NCCL (the ranks' receive buffers are allocated from the
  // header, so every rank agrees on dtype and shape before anything moves).
  if (device_.is_cuda())  // rank 0 sends what it read; the others receive into GPU memory
    tensor = group_->rank() == 0 ? tensor.to(device_)
                                 : at::empty(tensor.sizes(), tensor.options().device(device_));
  group_->broadcast(tensor, 0);
}

void RankZeroLoading::log(const std::string& line) {
  // One write per line: ranks sharing a terminal or torchrun's pipe do not interleave mid-line.
  std::cerr << ("[load] rank " + std::to_string(group_->rank()) + ": " + line + "\n");
}

void broadcast_tensors_from_rank0(dist::ProcessGroup& group, std::vector<at::Tensor>& tensors,
                                  const std::string& what) {
  if (group.size() == 1) return;
  // Dtypes and shapes first (a disagreement would otherwise deadlock or corrupt).
  nlohmann::json layout = nlohmann::json::array();
  for (const at::Tensor& tensor : tensors) {
    std::ostringstream shape;
    shape << tensor.sizes();
    layout.push_back({c10::toString(tensor.scalar_type()), shape.str()});
  }
  std::string mine = layout.dump(), rank0 = mine;
  group.broadcast_text(rank0, 0);
  check(mine == rank0, "[dist] rank ", group.rank(), ": ", what,
        " differ from rank 0's in dtype or shape (", mine.substr(0, 200), " vs ",
        rank0.substr(0, 200), "): every rank must run the same config");
  for (at::Tensor& tensor : tensors) group.broadcast(tensor, 0);
}

}  // namespace tandem
