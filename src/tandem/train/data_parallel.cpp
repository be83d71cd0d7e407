#include "tandem/train/data_parallel.h"

#include <ATen/ATen.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tandem/core/error.h"

namespace tandem {

DistributedOptions read_distributed(const Config& config) {
  const Config section = config.section("distributed");
  DistributedOptions options;
  options.mode = section.get_choice("mode", {"ddp", "shard", "hybrid"}, "ddp");
  check(options.mode == "ddp", "[train] ", section.where("mode"), ": '", options.mode,
        "' is not available in this build yet (parameters, gradients and optimizer state split "
        "across ranks are still being built); use ddp");
  options.backend = section.get_choice("backend", {"auto", "gloo", "nccl"}, "auto");
  const int64_t timeout = section.get_int("timeout_s", 300);
  check(timeout > 0, "[train] ", section.where("timeout_s"), ": must be positive (seconds)");
  options.timeout = std::chrono::seconds(timeout);
  return options;
}

std::shared_ptr<dist::ProcessGroup> join_job(const DistributedOptions& options) {
  const dist::LaunchEnv env = dist::read_launch_env();
  // The trainer keeps its models and batches on the CPU today, so "auto" is Gloo, and NCCL
  // (built and linked in CUDA builds) is refused rather than handed CPU tensors it cannot use.
  const dist::Backend backend = dist::choose_backend(options.backend, /*cuda_available=*/false);
  check(backend != dist::Backend::Nccl, "[train] distributed.backend: nccl needs the model and ",
        "batches on CUDA devices, and tandem's trainer runs on the CPU: use gloo (or auto)");
  if (env.world_size == 1) return dist::ProcessGroup::single();
  std::shared_ptr<dist::ProcessGroup> group =
      dist::ProcessGroup::connect(env, backend, options.timeout);
  if (group->rank() == 0)
    std::cerr << "[dist] " << group->size() << " ranks (" << env.launcher << ", "
              << dist::backend_name(backend) << ", mode " << options.mode << ", timeout "
              << options.timeout.count() << " s)\n";
  return group;
}

RankZeroLoading::RankZeroLoading(std::shared_ptr<dist::ProcessGroup> group)
    : group_(std::move(group)) {
  set_checkpoint_broadcast(this);
}

RankZeroLoading::~RankZeroLoading() { set_checkpoint_broadcast(nullptr); }

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
