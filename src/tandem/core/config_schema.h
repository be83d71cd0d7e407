#pragma once
// Every key of a run config, declared once (core/config_schema.cpp): type, default, range and
// meaning. One namespace per group of keys that one component reads from one section; the keys
// of training, optimizer, data, distributed and attention are every objective's, and each
// objective lists the other groups it reads (ObjectiveDescription::keys). Components read
// through these declarations, e.g. `keys::training::steps.read(config)`; `tandem train --help`,
// `tandem config-keys` and docs/training.md's tables print them (cli/config_reference.h).
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <string>
#include <vector>

#include "tandem/core/config_key.h"

namespace tandem {

// The enums some keys stand for (defined beside their users; config_schema.cpp maps the names).
enum class AttentionKernel;  // models/attention_options.h
enum class DataFormat;       // data/datasets.h
enum class PackingMode;      // data/packing.h
enum class OverlongPolicy;   // data/packing.h
enum class OnError;          // data/jsonl.h
enum class UnknownRoles;     // data/datasets.h
enum class Divergence;       // objectives/distill_loss.h
enum class DpoLossType;      // objectives/policy_loss.h
enum class DFlashTeacher;    // objectives/dflash.h
enum class DSparkHeadInit;   // models/dspark.h

using DtypeKey = EnumKey<c10::ScalarType>;

namespace keys {

// ---- Every objective ----

namespace training {  // how long, how fast, how often to save, where the run computes
extern KeyGroup group;
extern const StringKey objective;
extern const StringKey run_dir;
extern const IntKey steps;   // or epochs
extern const IntKey epochs;  // planned into steps (train/epoch_plan.h)
extern const IntKey seed;    // read once, into RunContext::seed
extern const NumberKey lr;
extern const ChoiceKey schedule;
extern const IntKey warmup_steps;
extern const NumberKey warmup_ratio;
extern const NumberKey min_lr_ratio;
extern const IntKey micro_batches;
extern const IntKey docs_per_step;
extern const IntKey save_every;
extern const IntKey keep_last;
extern const IntKey log_every;
extern const BoolKey export_at_end;  // training.export
extern const StringKey device;
extern const BoolKey deterministic;
extern const BoolKey tf32;
extern const ChoiceKey mfu;
extern const ChoiceKey on_nonfinite;
extern const IntKey max_consecutive_skips;
extern const IntKey eval_every;  // validation (train/validation.h)
extern const StringKey best_metric;
extern const ChoiceKey best_mode;
}  // namespace training

namespace optimizer {  // AdamW
extern KeyGroup group;
extern const NumberKey beta1;
extern const NumberKey beta2;
extern const NumberKey eps;
extern const NumberKey weight_decay;
extern const NumberKey max_grad_norm;
}  // namespace optimizer

namespace metrics {  // where metrics go besides metrics.jsonl and TensorBoard
extern KeyGroup group;
extern const BoolKey mlflow;
extern const StringKey mlflow_dir;
extern const StringKey mlflow_experiment;
extern const StringKey mlflow_run_name;
}  // namespace metrics

namespace data {  // the dataset, its tokenizer, how it is packed
extern KeyGroup group;
extern const PathListKey path;
extern const EnumKey<DataFormat> format;
extern const StringKey tokenizer;
extern const StringKey chat_template;
extern const StringKey template_kwargs;
extern const IntKey seq_len;
extern const IntKey micro_batch_rows;
extern const EnumKey<PackingMode> packing;
extern const IntKey packing_lookahead;
extern const EnumKey<OverlongPolicy> overlong;
extern const IntKey max_length;
extern const BoolKey last_turn_only;
extern const BoolKey train_reasoning;
extern const EnumKey<UnknownRoles> unknown_roles;
extern const EnumKey<OnError> on_error;
extern const IntKey vocab_size;
extern const StringKey cache_dir;
extern const StringMapKey columns;
extern const NumberKey heldout_fraction;
extern const IntKey heldout_seed;
extern const StringKey validation;
extern const BoolKey scale_rewards_by_std;
}  // namespace data

namespace distributed {
extern KeyGroup group;
extern const ChoiceKey mode;
extern const IntKey dp_replicate;
extern const IntKey dp_shard;
extern const ChoiceKey backend;
extern const IntKey timeout_s;
extern const BoolKey check_frozen_weights;
}  // namespace distributed

namespace attention {
extern KeyGroup group;
extern const EnumKey<AttentionKernel> kernel;
extern const IntKey query_chunk;
extern const IntKey key_chunk;
extern const IntKey linear_chunk;
}  // namespace attention

/// The groups above, which every objective reads.
const std::vector<const KeyGroup*>& common_groups();

// ---- Groups the objectives list ----

namespace model {  // the trained causal LM of sft, distill, dpo, grpo, gspo
extern KeyGroup group;
extern const StringKey path;
extern const StringKey config;
extern const DtypeKey dtype;
extern const NumberKey init_std;
extern const StringKey init_from;  // train/warm_start.h
}  // namespace model

namespace chunked_loss {  // every loss through a vocabulary head
extern KeyGroup group;
extern const IntKey chunk_tokens;
}  // namespace chunked_loss

namespace lm_head {  // losses through an LM head of the model dtype
extern KeyGroup group;
extern const BoolKey fp32_lm_head;
}  // namespace lm_head

namespace router_loss {  // a trained mixture-of-experts model
extern KeyGroup group;
extern const NumberKey router_aux_loss_coef;
}  // namespace router_loss

namespace target {  // the frozen target of a draft
extern KeyGroup group;
extern const StringKey path;
extern const DtypeKey dtype;
}  // namespace target

namespace verifier {  // the target's name in exports (drafts whose exports name a verifier)
extern KeyGroup group;
extern const StringKey name;
}  // namespace verifier

namespace capture {  // offline features of a draft's target
extern KeyGroup group;
extern const StringKey capture;  // data.capture
}  // namespace capture

namespace draft {  // what every draft shares
extern KeyGroup group;
extern const DtypeKey dtype;
extern const IntKey intermediate_size;
extern const IntKey num_attention_heads;
extern const IntKey num_key_value_heads;
extern const IntKey head_dim;
extern const NumberKey rope_theta;
extern const NumberKey init_std;
extern const StringKey init_from;  // train/warm_start.h
}  // namespace draft

namespace eagle3_draft {
extern KeyGroup group;
extern const IntListKey aux_layer_ids;
extern const IntKey ttt_length;
extern const BoolKey fc_norm;
extern const BoolKey norm_output;
extern const NumberKey decay;
extern const IntKey draft_vocab_size;
extern const BoolKey train_lm_head;
}  // namespace eagle3_draft

namespace dflash_draft {  // the block drafts' backbone (dflash, dspark)
extern KeyGroup group;
extern const IntKey num_layers;
extern const IntListKey target_layer_ids;
extern const IntKey block_size;
extern const IntKey mask_token_id;
}  // namespace dflash_draft

namespace block_loss {  // the block drafts' anchors and slot weights (dflash, dspark)
extern KeyGroup group;
extern const NumberKey gamma;
extern const IntKey max_anchors;
}  // namespace block_loss

namespace dflash_loss {
extern KeyGroup group;
extern const EnumKey<DFlashTeacher> teacher;
}  // namespace dflash_loss

namespace dspark_draft {
extern KeyGroup group;
extern const IntKey markov_rank;
extern const BoolKey confidence_head;
extern const EnumKey<DSparkHeadInit> head_init;
}  // namespace dspark_draft

namespace dspark_loss {
extern KeyGroup group;
extern const NumberKey ce_weight;
extern const NumberKey l1_weight;
extern const NumberKey confidence_weight;
}  // namespace dspark_loss

/// The computed default of every model's dtype key (target, teacher, reference, model, draft) on
/// `device`: bf16 on a GPU, fp32 on the CPU (core/device.h device_dtype_default).
c10::ScalarType default_dtype(const c10::Device& device);

namespace teacher {  // distill's frozen teacher
extern KeyGroup group;
extern const StringKey path;
extern const DtypeKey dtype;
}  // namespace teacher

namespace distill_loss {  // distill, and dflash with loss.teacher: target
extern KeyGroup group;
extern const EnumKey<Divergence> divergence;
extern const NumberKey beta;
extern const NumberKey temperature;
extern const NumberKey hard_label_weight;
}  // namespace distill_loss

namespace reference {  // dpo's frozen reference
extern KeyGroup group;
extern const StringKey path;
extern const DtypeKey dtype;
extern const StringKey logprobs;
}  // namespace reference

namespace dpo_loss {
extern KeyGroup group;
extern const EnumKey<DpoLossType> type;
extern const NumberKey beta;
}  // namespace dpo_loss

namespace grpo_loss {
extern KeyGroup group;
extern const NumberKey epsilon_low;
extern const NumberKey epsilon_high;
}  // namespace grpo_loss

namespace gspo_loss {
extern KeyGroup group;
extern const NumberKey epsilon_low;
extern const NumberKey epsilon_high;
}  // namespace gspo_loss

}  // namespace keys

}  // namespace tandem
