#pragma once
// The `training:` and `optimizer:` sections of a run config: how long, how fast, how often to
// save, and where the run computes (training.device). Read once, before any work, through the
// declarations of core/config_schema.h: every value is checked where it is read.
#include <cstdint>
#include <string>

#include "tandem/core/config.h"
#include "tandem/core/run_context.h"
#include "tandem/dist/launch.h"
#include "tandem/train/optimizer.h"
#include "tandem/train/schedule.h"

namespace tandem {

/// What `training:` and `optimizer:` say (defaults and ranges: core/config_schema.cpp).
struct TrainingOptions {
  std::string run_dir;
  int64_t steps = 0;
  int64_t micro_batches = 0;  // fixed accumulation, unless docs_per_step > 0
  int64_t docs_per_step = 0;
  ScheduleOptions schedule;
  AdamWOptions adamw;
  int64_t save_every = 0;  // 0: only at the end (and on preemption)
  int64_t keep_last = 0;
  int64_t log_every = 0;
  bool export_at_end = false;
  std::string mfu;  // auto: measure the matmul peak and report MFU on GPUs only
  // A step whose loss or gradient norm is NaN or infinite: "stop" (save nothing, exit
  // kExitNonFinite) or "skip_step" (drop its update; stop after max_consecutive_skips in a row).
  std::string on_nonfinite;
  int64_t max_consecutive_skips = 0;
};

/// Reads `training.*` (but `objective`, `seed`, `device` and `deterministic`) and `optimizer.*`.
TrainingOptions read_training(const Config& config);

/// The `attention` section: kernel (blockwise | dense), query_chunk, key_chunk
/// (docs/long-context.md).
AttentionOptions read_attention_options(const Config& attention);

/// training.device, training.deterministic and training.seed on this rank's launch (LOCAL_RANK
/// picks the GPU of a plain "cuda"), and the `attention` section; switches deterministic
/// algorithms on when asked. With `dry_run`, a device that is not visible here is not an error:
/// the context says where the run would compute.
RunContext read_run_context(const Config& config, const dist::LaunchEnv& launch,
                            bool dry_run = false);

}  // namespace tandem
