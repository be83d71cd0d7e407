#include "tandem/train/training_options.h"

#include <optional>

#include "tandem/core/config_schema.h"
#include "tandem/core/device.h"
#include "tandem/core/error.h"

namespace tandem {

AttentionOptions read_attention_options(const Config& attention) {
  AttentionOptions options;
  options.kernel = keys::attention::kernel.read(attention);
  options.query_chunk = keys::attention::query_chunk.read(attention);
  options.key_chunk = keys::attention::key_chunk.read(attention);
  options.linear_chunk = keys::attention::linear_chunk.read(attention);
  return options;
}

RunContext read_run_context(const Config& config, const dist::LaunchEnv& launch, bool dry_run) {
  RunContext run;
  run.dry_run = dry_run;
  const std::string device = keys::training::device.read(config);
  try {
    run.device = resolve_device(device, launch.local_rank, keys::training::device.where(config));
  } catch (const Error&) {
    if (!dry_run || device == "cpu" || device == "auto") throw;
    // A dry run on a machine without the run's GPUs (a login node) plans for them anyway.
    run.device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(launch.local_rank));
  }
  if (!dry_run) make_current(run.device);  // once per rank: cuda:LOCAL_RANK under torchrun
  run.deterministic = keys::training::deterministic.read(config);
  if (!dry_run) use_deterministic_algorithms(run.deterministic);
  if (!dry_run && keys::training::tf32.read(config)) use_tf32(true);  // off: torch's default
  run.seed = static_cast<uint64_t>(keys::training::seed.read(config));
  run.attention = read_attention_options(config);
  return run;
}

TrainingOptions read_training(const Config& config) {
  namespace training = keys::training;
  namespace optimizer = keys::optimizer;
  TrainingOptions options;
  options.run_dir = training::run_dir.read(config);
  const std::optional<int64_t> steps = training::steps.find(config);
  const std::optional<int64_t> epochs = training::epochs.find(config);
  check(steps.has_value() != epochs.has_value(), "[train] ",
        steps ? "set either " + training::steps.where(config) + " or " +
                    training::epochs.where(config) + ", not both"
              : "set " + training::steps.where(config) + " (optimizer steps) or " +
                    training::epochs.where(config) + " (passes over the data)");
  options.steps = steps.value_or(0);
  options.epochs = epochs.value_or(0);
  options.micro_batches = training::micro_batches.read(config);
  options.docs_per_step = training::docs_per_step.read(config);
  options.schedule.kind = training::schedule.read(config);
  options.schedule.lr = training::lr.read(config);
  options.schedule.min_lr_ratio = training::min_lr_ratio.read(config);
  options.schedule.warmup_steps = training::warmup_steps.read(config);
  options.schedule.warmup_ratio = training::warmup_ratio.read(config);
  options.schedule.total_steps = options.steps;
  options.schedule_where = training::schedule.where(config);
  if (options.epochs == 0) validate(options.schedule, options.schedule_where);
  // Out of their ranges AdamW divides by zero or grows without bound: refused before any work.
  options.adamw.beta1 = optimizer::beta1.read(config);
  options.adamw.beta2 = optimizer::beta2.read(config);
  options.adamw.eps = optimizer::eps.read(config);
  options.adamw.weight_decay = optimizer::weight_decay.read(config);
  options.adamw.max_grad_norm = optimizer::max_grad_norm.read(config);
  options.save_every = training::save_every.read(config);
  options.keep_last = training::keep_last.read(config);
  options.log_every = training::log_every.read(config);
  options.export_at_end = training::export_at_end.read(config);
  options.mfu = training::mfu.read(config);
  options.on_nonfinite = training::on_nonfinite.read(config);
  options.max_consecutive_skips = training::max_consecutive_skips.read(config);
  options.eval_every = training::eval_every.read(config);
  options.best_metric = training::best_metric.read(config);
  options.best_mode = training::best_mode.read(config);
  options.mlflow = keys::metrics::mlflow.read(config);
  options.mlflow_dir = keys::metrics::mlflow_dir.read(config);
  options.mlflow_experiment = keys::metrics::mlflow_experiment.read(config);
  options.mlflow_run_name = keys::metrics::mlflow_run_name.read(config);
  return options;
}

void set_planned_steps(TrainingOptions& options, int64_t steps) {
  check(steps >= 1, "[train] training.epochs = ", options.epochs, " plans no step");
  options.steps = steps;
  options.schedule.total_steps = steps;
  validate(options.schedule, options.schedule_where + " (" + std::to_string(options.epochs) +
                                 " epochs = " + std::to_string(steps) + " steps)");
}

}  // namespace tandem
