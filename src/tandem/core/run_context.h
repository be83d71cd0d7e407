#pragma once
// What every part of a run needs to know about where and how it runs, built once from the
// config (train/run_setup.h) or a subcommand's flags and passed down explicitly: nothing here is
// process-wide state. Models, frozen models, objectives and the optimizer place their tensors on
// `device`; loaders read HF checkpoints through `rank_zero` (only rank 0 opens weight files) and
// split each weight as it arrives when `shard_on_load` is set (sharded training).
#include <c10/core/Device.h>

#include <cstdint>

#include "tandem/models/attention_options.h"

namespace tandem {

class CheckpointBroadcast;  // io/hf_checkpoint.h
class ParameterShards;      // dist/sharding.h

struct RunContext {
  c10::Device device{c10::kCPU};  // where the run computes (and what dtype defaults follow)
  bool deterministic = false;     // training.deterministic: deterministic kernels (core/device.h)
  uint64_t seed = 0;  // training.seed: sampler order, fresh-model initialisation, DFlash anchors
  // `tandem train --dry-run`: models are built on the meta device (shapes and dtypes, no memory)
  // and checked against the checkpoints' headers; no weight is read.
  bool dry_run = false;
  CheckpointBroadcast* rank_zero = nullptr;  // multi-process: rank 0 reads, others receive
  ParameterShards* shard_on_load = nullptr;  // shard/hybrid: loaded weights split on arrival
  AttentionOptions attention;                // config section `attention`: kernel and chunk sizes

  RunContext() = default;
  // A context on `device` with nothing else set: single-process tools and tests.
  RunContext(c10::Device device) : device(device) {}  // NOLINT(google-explicit-constructor)
  RunContext(c10::DeviceType type) : device(type) {}  // NOLINT(google-explicit-constructor)

  /// Where tensors go: `device`, or the meta device in a dry run.
  c10::Device placement() const { return dry_run ? c10::Device(c10::kMeta) : device; }
};

}  // namespace tandem
