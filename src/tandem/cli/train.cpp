// tandem train CONFIG.yaml [section.key=value ...]: run (or resume) a training job.
#include <iostream>

#include "tandem/cli/commands.h"
#include "tandem/core/config.h"
#include "tandem/train/trainer.h"

namespace tandem::cli {

Runner add_train_command(CLI::App& root) {
  auto config_path = std::make_shared<std::string>();
  auto overrides = std::make_shared<std::vector<std::string>>();
  CLI::App* command = root.add_subcommand(
      "train",
      "train from a YAML config; resumes from the newest valid checkpoint in training.run_dir. "
      "SIGTERM/SIGINT: finish the step, save, exit 75");
  command->add_option("config", *config_path, "YAML run config (see configs/)")->required();
  command->add_option("overrides", *overrides, "dotted overrides, e.g. training.lr=3e-4");
  command->footer(
      "Config sections: model (path | config, dtype, init_std), loss (chunk_tokens (0: no "
      "chunking), fp32_lm_head), data (path, format: conversations | text | pretokenized | "
      "preference | rollout, tokenizer, chat_template, seq_len, micro_batch_rows, packing, "
      "overlong, max_length, last_turn_only, on_error, vocab_size, cache_dir, "
      "scale_rewards_by_std), training (objective: sft | eagle3 | dflash | distill | dpo | grpo | "
      "gspo, run_dir, steps, seed, lr, schedule, warmup_steps | warmup_ratio, "
      "min_lr_ratio, micro_batches | docs_per_step, save_every, keep_last, log_every, export, "
      "device: auto | cpu | cuda | cuda:N (auto: a GPU when one is visible; under torchrun "
      "each rank takes cuda:LOCAL_RANK), deterministic (deterministic kernels, for exact "
      "resume on a GPU), mfu: auto | true | false (measure the device's matmul peak at start "
      "and log model FLOP utilisation; auto: on GPUs)), "
      "optimizer (beta1, beta2, eps, weight_decay, max_grad_norm). EAGLE-3: target (path, dtype), "
      "draft (aux_layer_ids, ttt_length, decay, draft_vocab_size, intermediate_size, "
      "train_lm_head, dtype, init_std), data.capture (offline features from `tandem capture`). "
      "DFlash: target (path, dtype), draft (num_layers, target_layer_ids, block_size, "
      "mask_token_id, intermediate_size, num_attention_heads, num_key_value_heads, head_dim, "
      "rope_theta, dtype, init_std), loss (gamma, max_anchors, chunk_tokens, fp32_lm_head, "
      "teacher: labels | target; with target: divergence, beta, temperature, "
      "hard_label_weight), "
      "data.capture. "
      "Frozen models' dtype defaults to bf16 on a GPU, fp32 on the CPU; trained models' to fp32. "
      "Distillation: teacher (path, dtype), loss (divergence, beta, temperature, "
      "hard_label_weight). DPO: reference (path, dtype, logprobs from `tandem "
      "reference-logprobs`), loss (type: sigmoid | hinge | ipo, beta). GRPO/GSPO: loss "
      "(epsilon_low, epsilon_high); rollouts from `tandem rollout` or any engine. "
      "Distributed: distributed (mode: ddp | shard | hybrid, "
      "dp_replicate and dp_shard (hybrid: their product = ranks), backend: auto | gloo | nccl "
      "(auto: nccl on GPUs, with gloo beside it for host tensors; gloo on the CPU), "
      "timeout_s); launch with torchrun --nproc-per-node=N --no-python tandem "
      "train ... or srun (SLURM_PROCID, SLURM_NTASKS with MASTER_ADDR, MASTER_PORT); "
      "training.micro_batches must be a multiple of the ranks. "
      "Unknown keys are errors.");
  return [config_path, overrides]() {
    const Config config = Config::load(*config_path, *overrides);
    install_preemption_handlers();
    const TrainResult result = train(config);
    if (result.preempted) return kExitPreempted;
    std::cout << "[train] finished at step " << result.final_step << " in " << result.run_dir;
    if (!result.export_dir.empty()) std::cout << "; exported " << result.export_dir;
    std::cout << "\n";
    return 0;
  };
}

}  // namespace tandem::cli
