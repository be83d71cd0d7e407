#pragma once
// What every part of a run needs to know about where and how it runs, built once from the
// config (train/run_setup.h) or a subcommand's flags and passed down explicitly: nothing here is
// process-wide state. Models, frozen models, objectives and the optimizer place their tensors on
// `device`; loaders read HF checkpoints through `rank_zero` (only rank 0 opens weight files) and
// split each weight as it arrives when `shard_on_load` is set (sharded training).
#include <c10/core/Device.h>

namespace tandem {

class CheckpointBroadcast;  // io/hf_checkpoint.h
class ParameterShards;      // dist/sharding.h

struct RunContext {
  c10::Device device{c10::kCPU};
  bool deterministic = false;  // training.deterministic: deterministic kernels (core/device.h)
  CheckpointBroadcast* rank_zero = nullptr;  // multi-process: rank 0 reads, others receive
  ParameterShards* shard_on_load = nullptr;  // shard/hybrid: loaded weights split on arrival

  RunContext() = default;
  // A context on `device` with nothing else set: single-process tools and tests.
  RunContext(c10::Device device) : device(device) {}  // NOLINT(google-explicit-constructor)
  RunContext(c10::DeviceType type) : device(type) {}  // NOLINT(google-explicit-constructor)
};

}  // namespace tandem
