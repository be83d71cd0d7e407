#pragma once
// Learning-rate schedules: constant, and linear warmup followed by cosine decay.
#include <cstdint>
#include <string>

namespace tandem {

struct ScheduleOptions {
  std::string kind = "cosine";  // "constant" | "cosine" (linear warmup + cosine decay)
  double lr = 1e-4;             // peak learning rate
  double min_lr_ratio = 0.0;    // cosine decays to lr * min_lr_ratio
  int64_t warmup_steps = -1;    // explicit warmup steps, or -1 to use warmup_ratio
  double warmup_ratio = 0.0;    // fraction of total_steps spent warming up
  int64_t total_steps = 0;      // length of the run in optimizer steps
};

/// Learning rate for optimizer step `step` (0-based): warmup ramps linearly from lr/warmup to lr
/// over the warmup steps, then cosine decay reaches lr * min_lr_ratio at total_steps.
double learning_rate(const ScheduleOptions& options, int64_t step);

/// The warmup length in steps that `options` implies.
int64_t warmup_steps(const ScheduleOptions& options);

/// Checks the options; `where` names the config in errors.
void validate(const ScheduleOptions& options, const std::string& where);

}  // namespace tandem
