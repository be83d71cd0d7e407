#pragma once
// The training loop, algorithm-agnostic: data -> packed micro-batches -> objective -> backward
// -> mixed-precision AdamW, with step-global loss normalisation, metrics, atomic checkpoints,
// exact resume and preemption handling.
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "tandem/core/config.h"

namespace tandem {

/// Exit code of a run stopped by SIGTERM/SIGINT after saving its checkpoint: rerun to resume.
constexpr int kExitPreempted = 75;
/// Exit code of a run stopped because a step's loss, gradient norm or the trained state became
/// NaN or infinite (training.on_nonfinite): nothing non-finite was saved.
constexpr int kExitNonFinite = 3;

/// Thrown on every rank when a run stops for a non-finite quantity; what() names the step and
/// the quantity.
class NonFiniteStop : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TrainResult {
  int64_t final_step = 0;
  bool preempted = false;  // stopped by a signal (checkpoint saved)
  std::string run_dir;
  std::string export_dir;  // "" when not exported
};

/// Runs the job described by `config` (see configs/*.yaml), resuming from the newest usable
/// checkpoint in its run directory if there is one. When the run directory holds checkpoints
/// and none is usable, it throws, unless `start_over`: then they are moved to
/// run_dir/unusable-<time>/ and the run starts from step 0.
TrainResult train(const Config& config, bool start_over = false);

/// Installs SIGTERM/SIGINT handlers that ask the running loop to finish its step, save and stop.
void install_preemption_handlers();

}  // namespace tandem
