#pragma once
// The training loop, algorithm-agnostic: data -> packed micro-batches -> objective -> backward
// -> mixed-precision AdamW, with step-global loss normalisation, metrics, atomic checkpoints,
// exact resume and preemption handling.
#include <cstdint>
#include <memory>
#include <string>

#include "tandem/core/config.h"

namespace tandem {

/// Exit code of a run stopped by SIGTERM/SIGINT after saving its checkpoint: rerun to resume.
constexpr int kExitPreempted = 75;

struct TrainResult {
  int64_t final_step = 0;
  bool preempted = false;  // stopped by a signal (checkpoint saved)
  std::string run_dir;
  std::string export_dir;  // "" when not exported
};

/// Runs the job described by `config` (see configs/*.yaml), resuming from the newest valid
/// checkpoint in its run directory if there is one.
TrainResult train(const Config& config);

/// Installs SIGTERM/SIGINT handlers that ask the running loop to finish its step, save and stop.
void install_preemption_handlers();

}  // namespace tandem
