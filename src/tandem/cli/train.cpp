// tandem train CONFIG.yaml [section.key=value ...]: run (or resume) a training job; with
// --dry-run, validate it and print what would run (train/dry_run.h).
#include <iostream>

#include "tandem/cli/commands.h"
#include "tandem/core/config.h"
#include "tandem/objectives/description.h"
#include "tandem/train/dry_run.h"
#include "tandem/train/trainer.h"

namespace tandem::cli {

Runner add_train_command(CLI::App& root) {
  auto config_path = std::make_shared<std::string>();
  auto overrides = std::make_shared<std::vector<std::string>>();
  auto dry = std::make_shared<bool>(false);
  auto start_over = std::make_shared<bool>(false);
  CLI::App* command = root.add_subcommand(
      "train",
      "train from a YAML config; resumes from the newest valid checkpoint in training.run_dir. "
      "SIGTERM/SIGINT: finish the step, save, exit 75. A non-finite loss, gradient norm or "
      "trained state: exit 3, nothing non-finite saved (training.on_nonfinite)");
  command->add_option("config", *config_path, "YAML run config (see configs/)")->required();
  command->add_option("overrides", *overrides, "dotted overrides, e.g. training.lr=3e-4");
  command->add_flag("--dry-run", *dry,
                    "validate the config against the checkpoints on disk (headers only) and the "
                    "data, and print what would run: models, dtypes, parameter counts, memory "
                    "per rank, data statistics; trains nothing");
  command->add_flag("--start-over", *start_over,
                    "when training.run_dir holds checkpoints and none can be used (all corrupt "
                    "or unreadable), move them to run_dir/unusable-<time>/ and train from step 0 "
                    "(without it, that is an error and nothing is touched)");
  // The objectives' part of the help comes from their descriptions (objectives/description.h).
  std::string objectives;
  for (const ObjectiveDescription& objective : objective_descriptions())
    objectives +=
        "\n  " + objective.name + ": " + objective.summary + ". Keys: " + objective.keys + ".";
  command->footer(
      "Config sections of every objective: data (path, format: conversations | text | "
      "pretokenized | preference | rollout, tokenizer, chat_template, seq_len, "
      "micro_batch_rows, packing, overlong, max_length, last_turn_only, on_error, vocab_size, "
      "cache_dir, scale_rewards_by_std), training (objective, run_dir, steps, seed, lr, "
      "schedule, warmup_steps | warmup_ratio, min_lr_ratio, micro_batches | docs_per_step, "
      "save_every, keep_last, log_every, export, on_nonfinite: stop | skip_step (a NaN or "
      "infinite loss or gradient norm: stop without saving and exit 3, or drop that step's "
      "update), max_consecutive_skips (skip_step stops after this many in a row; default 10), "
      "device: auto | cpu | cuda | cuda:N (auto: a GPU "
      "when one is visible; under torchrun each rank takes cuda:LOCAL_RANK), deterministic "
      "(deterministic kernels, for exact resume on a GPU), mfu: auto | true | false (measure "
      "the device's matmul peak at start and log model FLOP utilisation; auto: on GPUs)), "
      "optimizer (beta1, beta2, eps, weight_decay, max_grad_norm), distributed (mode: ddp | "
      "shard | hybrid, dp_replicate and dp_shard (hybrid: their product = ranks), backend: "
      "auto | gloo | nccl (auto: nccl on GPUs, with gloo beside it for host tensors; gloo on "
      "the CPU), timeout_s, check_frozen_weights (after loading, every rank checksums its "
      "frozen weights and the job stops if any differs from rank 0's)), attention (kernel: "
      "blockwise | dense (blockwise: memory linear in "
      "the sequence length, the default; dense: the earlier (T, T) kernels, for comparison), "
      "query_chunk (default 512), key_chunk (default 1024): tile sizes of the blockwise "
      "kernel); launch with torchrun --nproc-per-node=N --no-python tandem train "
      "... or srun (SLURM_PROCID, SLURM_NTASKS with MASTER_ADDR, MASTER_PORT); "
      "training.micro_batches must be a multiple of the ranks. Frozen models' dtype defaults "
      "to bf16 on a GPU, fp32 on the CPU; trained models' to fp32. Unknown keys are errors.\n"
      "Objectives (training.objective):" +
      objectives);
  return [config_path, overrides, dry, start_over]() {
    const Config config = Config::load(*config_path, *overrides);
    if (*dry) {
      dry_run(config, std::cout);
      return 0;
    }
    install_preemption_handlers();
    TrainResult result;
    try {
      result = train(config, *start_over);
    } catch (const NonFiniteStop& stop) {
      std::cerr << "error: " << stop.what() << "\n";
      return kExitNonFinite;
    }
    if (result.preempted) return kExitPreempted;
    std::cout << "[train] finished at step " << result.final_step << " in " << result.run_dir;
    if (!result.export_dir.empty()) std::cout << "; exported " << result.export_dir;
    std::cout << "\n";
    return 0;
  };
}

}  // namespace tandem::cli
