#include "tandem/train/training_options.h"

#include <cmath>
#include <utility>

#include "tandem/core/device.h"
#include "tandem/core/error.h"

namespace tandem {

AttentionOptions read_attention_options(const Config& attention) {
  AttentionOptions options;
  options.kernel = attention.get_choice("kernel", {"blockwise", "dense"}, "blockwise") == "dense"
                       ? AttentionKernel::Dense
                       : AttentionKernel::Blockwise;
  options.query_chunk = attention.get_int("query_chunk", options.query_chunk);
  options.key_chunk = attention.get_int("key_chunk", options.key_chunk);
  for (const auto& [key, value] :
       {std::pair<const char*, int64_t>{"query_chunk", options.query_chunk},
        {"key_chunk", options.key_chunk}})
    check(value >= 1 && value <= (int64_t{1} << 20), "[attention] ", attention.where(key),
          ": must be in 1..1048576, got ", value);
  return options;
}

RunContext read_run_context(const Config& config, const dist::LaunchEnv& launch, bool dry_run) {
  const Config training = config.section("training");
  RunContext run;
  run.dry_run = dry_run;
  const std::string device = training.get_string("device", "auto");
  try {
    run.device = resolve_device(device, launch.local_rank, training.where("device"));
  } catch (const Error&) {
    if (!dry_run || device == "cpu" || device == "auto") throw;
    // A dry run on a machine without the run's GPUs (a login node) plans for them anyway.
    run.device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(launch.local_rank));
  }
  if (!dry_run) make_current(run.device);  // once per rank: cuda:LOCAL_RANK under torchrun
  run.deterministic = training.get_bool("deterministic", false);
  if (!dry_run) use_deterministic_algorithms(run.deterministic);
  run.attention = read_attention_options(config.section("attention"));
  return run;
}

TrainingOptions read_training(const Config& config) {
  const Config training = config.section("training");
  TrainingOptions options;
  options.run_dir = training.get_string("run_dir");
  options.steps = training.get_int("steps");
  check(options.steps > 0, "[train] ", training.where("steps"), ": must be positive");
  options.seed = static_cast<uint64_t>(training.get_int("seed", 0));
  options.micro_batches = training.get_int("micro_batches", 1);
  options.docs_per_step = training.get_int("docs_per_step", 0);
  check(options.micro_batches > 0, "[train] ", training.where("micro_batches"),
        ": must be positive");
  check(options.docs_per_step >= 0, "[train] ", training.where("docs_per_step"),
        ": must be >= 0 (0: use micro_batches)");
  options.schedule.kind = training.get_choice("schedule", {"constant", "cosine"}, "cosine");
  options.schedule.lr = training.get_double("lr");
  options.schedule.min_lr_ratio = training.get_double("min_lr_ratio", 0.0);
  options.schedule.warmup_steps = training.get_int("warmup_steps", -1);
  options.schedule.warmup_ratio = training.get_double("warmup_ratio", 0.0);
  options.schedule.total_steps = options.steps;
  validate(options.schedule, training.where("schedule"));
  check(std::isfinite(options.schedule.lr) && options.schedule.lr >= 0, "[train] ",
        training.where("lr"), ": must be a finite number >= 0, got ", options.schedule.lr);
  const Config optimizer = config.section("optimizer");
  options.adamw.beta1 = optimizer.get_double("beta1", 0.9);
  options.adamw.beta2 = optimizer.get_double("beta2", 0.95);
  options.adamw.eps = optimizer.get_double("eps", 1e-8);
  options.adamw.weight_decay = optimizer.get_double("weight_decay", 0.0);
  options.adamw.max_grad_norm = optimizer.get_double("max_grad_norm", 1.0);
  // Out of these ranges AdamW divides by zero or grows without bound: refused before any work.
  for (const auto& [key, value] :
       {std::pair{"beta1", options.adamw.beta1}, std::pair{"beta2", options.adamw.beta2}})
    check(value >= 0 && value < 1, "[train] ", optimizer.where(key), ": must be in [0, 1), got ",
          value);
  check(std::isfinite(options.adamw.eps) && options.adamw.eps > 0, "[train] ",
        optimizer.where("eps"), ": must be a finite number > 0, got ", options.adamw.eps);
  check(std::isfinite(options.adamw.weight_decay) && options.adamw.weight_decay >= 0, "[train] ",
        optimizer.where("weight_decay"), ": must be a finite number >= 0, got ",
        options.adamw.weight_decay);
  check(std::isfinite(options.adamw.max_grad_norm) && options.adamw.max_grad_norm >= 0, "[train] ",
        optimizer.where("max_grad_norm"), ": must be a finite number >= 0 (0: no ",
        "clipping), got ", options.adamw.max_grad_norm);
  options.save_every = training.get_int("save_every", 0);
  options.keep_last = training.get_int("keep_last", 3);
  options.log_every = training.get_int("log_every", 10);
  check(options.save_every >= 0, "[train] ", training.where("save_every"),
        ": must be >= 0 (0: only at the end), got ", options.save_every);
  check(options.keep_last >= 0, "[train] ", training.where("keep_last"),
        ": must be >= 0 (0: keep every checkpoint), got ", options.keep_last);
  check(options.log_every > 0, "[train] ", training.where("log_every"), ": must be positive, got ",
        options.log_every);
  options.export_at_end = training.get_bool("export", true);
  options.mfu = training.get_choice("mfu", {"auto", "true", "false"}, "auto");
  options.on_nonfinite = training.get_choice("on_nonfinite", {"stop", "skip_step"}, "stop");
  options.max_consecutive_skips = training.get_int("max_consecutive_skips", 10);
  check(options.max_consecutive_skips > 0, "[train] ", training.where("max_consecutive_skips"),
        ": must be positive, got ", options.max_consecutive_skips);
  return options;
}

}  // namespace tandem
