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
  int64_t steps = 0;          // 0 until planned when `epochs` is given (set_planned_steps)
  int64_t epochs = 0;         // 0: `steps` was given
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
  // Validation (train/validation.h), when data.validation names data.
  int64_t eval_every = 0;  // 0: at the last step only
  std::string best_metric;
  std::string best_mode;       // auto | min | max
  std::string schedule_where;  // training.schedule's location, for the planned steps' check
  // metrics.*: an MLflow file store beside metrics.jsonl and TensorBoard (train/mlflow_sink.h).
  bool mlflow = false;
  std::string mlflow_dir;  // "" = RUN_DIR/mlruns
  std::string mlflow_experiment;
  std::string mlflow_run_name;
};

/// Reads `training.*` (but `objective`, `seed`, `device` and `deterministic`), `optimizer.*` and
/// `metrics.*`.
/// Exactly one of `steps` and `epochs` must be set; with `epochs`, `steps` stays 0 until
/// set_planned_steps.
TrainingOptions read_training(const Config& config);

/// Sets the steps planned from `epochs` (train/epoch_plan.h) and checks the schedule against
/// them.
void set_planned_steps(TrainingOptions& options, int64_t steps);

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
