#include "tandem/train/schedule.h"

#include <algorithm>
#include <cmath>

#include "tandem/core/error.h"

namespace tandem {

int64_t warmup_steps(const ScheduleOptions& options) {
  if (options.warmup_steps >= 0) return options.warmup_steps;
  return static_cast<int64_t>(std::ceil(options.warmup_ratio * options.total_steps));
}

void validate(const ScheduleOptions& options, const std::string& where) {
  check(options.kind == "constant" || options.kind == "cosine", "[schedule] ", where,
        ": unknown schedule '", options.kind, "' (use constant or cosine)");
  check(options.lr > 0, "[schedule] ", where, ": lr must be positive, got ", options.lr);
  check(options.warmup_ratio >= 0 && options.warmup_ratio <= 1, "[schedule] ", where,
        ": warmup_ratio must be in [0, 1], got ", options.warmup_ratio);
  check(options.min_lr_ratio >= 0 && options.min_lr_ratio <= 1, "[schedule] ", where,
        ": min_lr_ratio must be in [0, 1]");
  if (options.kind == "cosine")
    check(options.total_steps > 0, "[schedule] ", where, ": cosine needs total_steps > 0");
  check(warmup_steps(options) <= std::max<int64_t>(options.total_steps, 0) ||
            options.kind == "constant",
        "[schedule] ", where, ": warmup (", warmup_steps(options),
        " steps) is longer than the run (", options.total_steps, " steps)");
}

double learning_rate(const ScheduleOptions& options, int64_t step) {
  const int64_t warmup = warmup_steps(options);
  if (step < warmup) return options.lr * static_cast<double>(step + 1) / warmup;
  if (options.kind == "constant") return options.lr;
  const int64_t decay_steps = std::max<int64_t>(options.total_steps - warmup, 1);
  const double progress = std::min(1.0, static_cast<double>(step - warmup) / decay_steps);
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return options.lr * (options.min_lr_ratio + (1.0 - options.min_lr_ratio) * cosine);
}

}  // namespace tandem
