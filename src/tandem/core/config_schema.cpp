// The declarations of core/config_schema.h: each key once, with its default, range and one line
// of doc. A group's keys are listed (help, docs) in the order declared here.
#include "tandem/core/config_schema.h"

#include "tandem/core/device.h"
#include "tandem/core/dtype.h"
#include "tandem/data/datasets.h"
#include "tandem/data/jsonl.h"
#include "tandem/data/packing.h"
#include "tandem/models/attention_options.h"
#include "tandem/models/dspark.h"
#include "tandem/objectives/dflash.h"
#include "tandem/objectives/distill_loss.h"
#include "tandem/objectives/policy_loss.h"

namespace tandem {

namespace {

constexpr int64_t kMaxTokens = int64_t{1} << 24;  // a vocabulary, a chunk: far above any model's
constexpr int64_t kMaxLayers = 1024;              // as DecoderConfig bounds a config.json

const DtypeKey::Choices kDtypes = {
    {"fp32", c10::ScalarType::Float},        {"bf16", c10::ScalarType::BFloat16},
    {"fp16", c10::ScalarType::Half},         {"float32", c10::ScalarType::Float},
    {"bfloat16", c10::ScalarType::BFloat16}, {"float16", c10::ScalarType::Half},
};
const char* const kFrozenDtype = "bf16 on a GPU, fp32 on the CPU";
const char* const kTrainedDtype =
    "bf16 on a GPU, fp32 on the CPU (name it to resume a run on the other kind of device)";

}  // namespace

namespace keys {

namespace training {
KeyGroup group{"training", "the run"};
const StringKey objective{group, "objective", "sft",
                          "what is trained against what: one of the objectives (below)"};
const StringKey run_dir{group, "run_dir", Required{}, "checkpoints, metrics and exports go here"};
const IntKey steps{group, "steps", Unset{"required unless `epochs` is set"}, IntRange::at_least(1),
                   "optimizer steps"};
const IntKey epochs{group, "epochs", Unset{"`steps` decides"}, IntRange::between(1, 100000),
                    "passes over the data instead of `steps`: the steps are planned from the data "
                    "after splitting, truncation and packing (`tandem train --dry-run` prints "
                    "them); the last step may take a few records of the next pass"};
const IntKey seed{group, "seed", 0, IntRange::at_least(0),
                  "sampler order, fresh-model initialisation, DFlash anchors"};
const NumberKey lr{group, "lr", Required{}, NumberRange::at_least(0),
                   "peak learning rate (the schedule refuses 0)"};
const ChoiceKey schedule{group,
                         "schedule",
                         "cosine",
                         {"constant", "cosine"},
                         "`cosine`: warmup, then cosine decay to `lr × min_lr_ratio` at `steps`; "
                         "`constant`: warmup, then `lr`"};
const IntKey warmup_steps{group, "warmup_steps", -1, IntRange::at_least(-1),
                          "explicit warmup length; −1: use `warmup_ratio`"};
const NumberKey warmup_ratio{group, "warmup_ratio", 0.0, NumberRange::closed(0, 1),
                             "warmup = ⌈ratio × steps⌉ steps, ramping linearly from lr/warmup "
                             "to lr"};
const NumberKey min_lr_ratio{group, "min_lr_ratio", 0.0, NumberRange::closed(0, 1),
                             "where `cosine` ends, as a fraction of `lr`"};
const IntKey micro_batches{group, "micro_batches", 1, IntRange::at_least(1),
                           "micro-batches per optimizer step (gradient accumulation); a multiple "
                           "of the ranks"};
const IntKey docs_per_step{group, "docs_per_step", 0, IntRange::at_least(0),
                           "> 0: draw micro-batches until the step holds this many documents (or "
                           "pairs, or completions) instead of a fixed count"};
const IntKey save_every{group, "save_every", 0, IntRange::at_least(0),
                        "checkpoint every N steps; 0: only at the end and on SIGTERM/SIGINT"};
const IntKey keep_last{group, "keep_last", 3, IntRange::at_least(0), "checkpoints kept (0: all)"};
const IntKey log_every{group, "log_every", 10, IntRange::at_least(1),
                       "console lines every N steps (metrics.jsonl gets every step)"};
const BoolKey export_at_end{group, "export", true,
                            "export the trained model into `RUN_DIR/export` at the end"};
const StringKey device{group, "device", "auto",
                       "`auto` (a GPU when one is visible, else the CPU), `cpu`, `cuda`, "
                       "`cuda:N`; under torchrun `cuda` is `cuda:LOCAL_RANK`"};
const BoolKey deterministic{group, "deterministic", false,
                            "deterministic kernels, for bit-exact resume on a GPU"};
const BoolKey tf32{group, "tf32", false,
                   "fp32 matmuls on NVIDIA GPUs through TF32 tensor cores (10 mantissa bits, "
                   "several times faster); off: PyTorch's defaults (fp32 matmuls in full fp32). "
                   "bf16 models are unaffected"};
const ChoiceKey mfu{group,
                    "mfu",
                    "auto",
                    {"auto", "true", "false"},
                    "measure the device's matmul peak at start and log `mfu` (`auto`: on GPUs)"};
const ChoiceKey on_nonfinite{group,
                             "on_nonfinite",
                             "stop",
                             {"stop", "skip_step"},
                             "a step whose loss or gradient norm is NaN or infinite: stop without "
                             "saving (exit 3), or drop its update"};
const IntKey max_consecutive_skips{group, "max_consecutive_skips", 10, IntRange::at_least(1),
                                   "`skip_step`: stop after this many skipped steps in a row"};
const IntKey eval_every{group, "eval_every", 0, IntRange::at_least(0),
                        "with `data.validation`: validate every N steps and at the last step (0: "
                        "at the last step only)"};
const StringKey best_metric{group, "best_metric", "val/loss",
                            "with `data.validation`: the validation metric that picks the best "
                            "checkpoint (`RUN_DIR/best`, never pruned by `keep_last`): "
                            "`val/loss`, `val/sim_accept_length`, `val/acc_0`, "
                            "`val/rewards/accuracy`, ..."};
const ChoiceKey best_mode{group,
                          "best_mode",
                          "auto",
                          {"auto", "min", "max"},
                          "whether the best `best_metric` is the smallest or the largest; "
                          "`auto`: the largest for accuracies and acceptance lengths (names "
                          "holding `acc` or `accept`), else the smallest"};
}  // namespace training

namespace optimizer {
KeyGroup group{"optimizer", "AdamW"};
const NumberKey beta1{group, "beta1", 0.9, NumberRange::closed_open(0, 1), "first-moment decay"};
const NumberKey beta2{group, "beta2", 0.95, NumberRange::closed_open(0, 1), "second-moment decay"};
const NumberKey eps{group, "eps", 1e-8, NumberRange::above(0), "added to the denominator"};
const NumberKey weight_decay{group, "weight_decay", 0.0, NumberRange::at_least(0),
                             "decoupled; tensors of 2 or more dimensions only, never norms or "
                             "biases"};
const NumberKey max_grad_norm{group, "max_grad_norm", 1.0, NumberRange::at_least(0),
                              "clip by the global gradient norm (over all ranks and slices); 0 "
                              "disables"};
}  // namespace optimizer

namespace metrics {
KeyGroup group{"metrics", "the metric sinks"};
const BoolKey mlflow{group, "mlflow", false,
                     "also write the metrics into an MLflow file store (`mlflow ui "
                     "--backend-store-uri DIR`); metrics.jsonl and TensorBoard are always written"};
const StringKey mlflow_dir{group, "mlflow_dir", "",
                           "the store (an `mlruns/` directory, shared by runs or not); empty: "
                           "`RUN_DIR/mlruns`"};
const StringKey mlflow_experiment{group, "mlflow_experiment", "tandem",
                                  "the MLflow experiment (found by name, or made)"};
const StringKey mlflow_run_name{group, "mlflow_run_name", "",
                                "the MLflow run's name; empty: the run directory's name"};
}  // namespace metrics

namespace data {
KeyGroup group{"data", "the data"};
const PathListKey path{group, "path", Required{},
                       "the data: a file (JSONL, a JSON array or Parquet), a glob "
                       "(`data/*.parquet`), or a list of them, each a path or `{path, weight}`: "
                       "weight w draws each of the file's records w times per epoch (a fraction: "
                       "a fixed subset), default 1"};
const EnumKey<DataFormat> format{group,
                                 "format",
                                 DataFormat::conversations,
                                 {{"conversations", DataFormat::conversations},
                                  {"text", DataFormat::text},
                                  {"pretokenized", DataFormat::pretokenized},
                                  {"preference", DataFormat::preference},
                                  {"rollout", DataFormat::rollout}},
                                 "what each line holds"};
const StringKey tokenizer{group, "tokenizer", "",
                          "directory with `tokenizer.json`; needed by `conversations`, `text`, "
                          "`preference`; its tokenizer files are copied into exports"};
const StringKey chat_template{group, "chat_template", "auto",
                              "how conversations are rendered: `auto` (the tokenizer directory's "
                              "own Jinja template, `llama3` when it has none), a path to a "
                              "`.jinja` file, or a built-in layout: `llama3`, `chatml` (Qwen2.5's, "
                              "with its default system prompt), `qwen2`, `chatml-plain`"};
const StringKey template_kwargs{group, "template_kwargs", "",
                                "extra variables for a Jinja chat template, as a JSON object, e.g. "
                                "`'{\"enable_thinking\": false}'`"};
const IntKey seq_len{group, "seq_len", Required{}, IntRange::between(1, int64_t{1} << 20),
                     "tokens per row"};
const IntKey micro_batch_rows{group, "micro_batch_rows", 1, IntRange::between(1, int64_t{1} << 16),
                              "rows per micro-batch (rows × seq_len at most 16,777,216)"};
const EnumKey<PackingMode> packing{
    group,
    "packing",
    PackingMode::Packed,
    {{"packed", PackingMode::Packed},
     {"best_fit", PackingMode::BestFit},
     {"padded", PackingMode::Padded}},
    "`packed`: several documents per row, first fit in sampler order; `best_fit`: several per "
    "row, each micro-batch chosen from a pool of records drawn ahead so rows fill up; `padded`: "
    "one per row, padded to the micro-batch's longest"};
const IntKey packing_lookahead{group, "packing_lookahead", 8, IntRange::between(1, 1024),
                               "`best_fit`: the pool a micro-batch is chosen from holds this "
                               "many micro-batches' worth of tokens (never past the epoch's "
                               "end); more fills rows better and reorders records more"};
const EnumKey<OverlongPolicy> overlong{
    group,
    "overlong",
    Computed{"`split`; `truncate` for preference and rollout"},
    {{"split", OverlongPolicy::Split},
     {"truncate", OverlongPolicy::Truncate},
     {"error", OverlongPolicy::Error}},
    "a record longer than a micro-batch; `split` is refused for preference and rollout"};
const IntKey max_length{group, "max_length", 0, IntRange::at_least(0),
                        "longer documents are bad lines (0: no limit)"};
const BoolKey last_turn_only{group, "last_turn_only", false,
                             "conversations: train the last assistant turn only"};
const BoolKey train_reasoning{group, "train_reasoning", true,
                              "conversations: the loss covers each assistant turn's reasoning "
                              "(`reasoning_content`) as the template writes it; false skips it"};
const EnumKey<UnknownRoles> unknown_roles{
    group,
    "unknown_roles",
    UnknownRoles::error,
    {{"error", UnknownRoles::error},
     {"skip_turn", UnknownRoles::skip_turn},
     {"skip_conversation", UnknownRoles::skip_conversation}},
    "a message whose role is none of system, user, assistant, tool or their aliases: the record "
    "is bad (`error`, then `on_error` decides), the message is left out (`skip_turn`), or the "
    "record is skipped and counted (`skip_conversation`)"};
const EnumKey<OnError> on_error{group,
                                "on_error",
                                OnError::fail,
                                {{"fail", OnError::fail}, {"skip", OnError::skip}},
                                "bad lines, and records that fit no micro-batch: an error naming "
                                "`file:line`, or skipped (counted)"};
const IntKey vocab_size{group, "vocab_size", 0, IntRange::between(0, kMaxTokens),
                        "ids must lie in [0, N); 0: the tokenizer's size"};
const StringKey cache_dir{group, "cache_dir", "",
                          "the token cache; empty: `$TANDEM_CACHE/data` (else "
                          "`~/.cache/tandem/data`)"};
const StringMapKey columns{group, "columns",
                           "fields read from differently named keys or Parquet columns, "
                           "`{field: column}`: `{messages: conversation}` reads a conversation "
                           "from `conversation`; a field of data.format (conversations: "
                           "`conversations`, `messages`, `tools`; preference: `prompt`, `chosen`, "
                           "`rejected`, `tools`; ...)"};
const NumberKey heldout_fraction{
    group, "heldout_fraction", 0.0, NumberRange::closed_open(0, 1),
    "leave this fraction of records out of training, chosen by a hash "
    "of each record and `heldout_seed` (the records `tandem data split "
    "--heldout-fraction F --seed S` writes to its held-out file); 0: none"};
const IntKey heldout_seed{group, "heldout_seed", 0, IntRange::at_least(0),
                          "the seed of the held-out hash"};
const StringKey validation{group, "validation", "",
                           "held-out data validated during training (`training.eval_every`): a "
                           "file or glob of `format`, or `heldout`: the records "
                           "`heldout_fraction` leaves out; empty: no validation"};
const BoolKey scale_rewards_by_std{group, "scale_rewards_by_std", true,
                                   "rollout only: divide group advantages by the group's std"};
}  // namespace data

namespace distributed {
KeyGroup group{"distributed", "data parallelism"};
const ChoiceKey mode{group,
                     "mode",
                     "ddp",
                     {"ddp", "shard", "hybrid"},
                     "`shard`: FSDP/ZeRO-3; `hybrid`: shard groups of `dp_shard` ranks, "
                     "replicated `dp_replicate` times"};
const IntKey dp_replicate{group, "dp_replicate", 0, IntRange::at_least(0),
                          "hybrid only (product with `dp_shard` = ranks)"};
const IntKey dp_shard{group, "dp_shard", 0, IntRange::at_least(0),
                      "hybrid only (product with `dp_replicate` = ranks)"};
const ChoiceKey backend{group,
                        "backend",
                        "auto",
                        {"auto", "gloo", "nccl"},
                        "`auto`: NCCL on GPUs (with Gloo beside it for host tensors), Gloo on "
                        "the CPU"};
const IntKey timeout_s{group, "timeout_s", 300, IntRange::at_least(1),
                       "seconds any collective, and joining the job, may take"};
const BoolKey check_frozen_weights{group, "check_frozen_weights", false,
                                   "after loading, each rank checksums its frozen weights and "
                                   "the job stops if any rank's differ from rank 0's"};
}  // namespace distributed

namespace attention {
KeyGroup group{"attention", "the attention kernels"};
const EnumKey<AttentionKernel> kernel{
    group,
    "kernel",
    AttentionKernel::Fused,
    {{"fused", AttentionKernel::Fused},
     {"blockwise", AttentionKernel::Blockwise},
     {"dense", AttentionKernel::Dense}},
    "`fused`: ATen's fused attention where it applies (EAGLE-3's test-time training and "
    "DFlash's blocks: fused kernels merged by log-sum-exp), `blockwise` elsewhere; `blockwise`: "
    "the hand-written "
    "kernel everywhere, memory linear in the sequence length; `dense`: the earlier (T, T) "
    "kernels, for comparison"};
const IntKey query_chunk{group, "query_chunk", 512, IntRange::between(1, int64_t{1} << 20),
                         "queries per tile of the blockwise kernel and per fused DFlash call "
                         "(whole DFlash blocks)"};
const IntKey key_chunk{group, "key_chunk", 1024, IntRange::between(1, int64_t{1} << 20),
                       "keys per tile of the blockwise kernel"};
const IntKey linear_chunk{group, "linear_chunk", 64, IntRange::between(1, 4096),
                          "tokens per chunk of the chunked gated delta rule (the Gated DeltaNet "
                          "layers of Qwen3.5/3.6 and Qwen3-Next targets)"};
}  // namespace attention

const std::vector<const KeyGroup*>& common_groups() {
  static const std::vector<const KeyGroup*> groups = {&training::group,    &optimizer::group,
                                                      &metrics::group,     &data::group,
                                                      &distributed::group, &attention::group};
  return groups;
}

namespace model {
KeyGroup group{"model", "the trained model"};
const StringKey path{group, "path", "", "an HF checkpoint to start from"};
const StringKey config{group, "config", "",
                       "a `config.json` for a fresh model (set exactly one of `path`, `config`)"};
const DtypeKey dtype{group, "dtype", Computed{kTrainedDtype}, kDtypes,
                     "parameter dtype (fp32 masters and AdamW moments either way)"};
const NumberKey init_std{group, "init_std", 0.02, NumberRange::at_least(0),
                         "normal init of a fresh model"};
const StringKey init_from{group, "init_from", "",
                          "warm start: the weights of an earlier run's checkpoint (`RUN_DIR` or "
                          "`RUN_DIR/step-N`) or an HF export, over those `path` or `config` "
                          "made; optimizer, data position and step count start fresh (unlike "
                          "resume)"};
}  // namespace model

namespace chunked_loss {
KeyGroup group{"loss", "the chunked vocabulary loss"};
const IntKey chunk_tokens{group, "chunk_tokens", 1024, IntRange::between(0, kMaxTokens),
                          "tokens per chunk of the fused vocabulary loss; 0: the plain path "
                          "with full logits"};
}  // namespace chunked_loss

namespace lm_head {
KeyGroup group{"loss", "the LM head"};
const BoolKey fp32_lm_head{group, "fp32_lm_head", false, "the LM-head projection in fp32"};
}  // namespace lm_head

namespace router_loss {
KeyGroup group{"loss", "a mixture-of-experts model"};
const NumberKey router_aux_loss_coef{group, "router_aux_loss_coef", 0.0,
                                     NumberRange::closed(0, 1000),
                                     "weight of the router's load-balancing loss in the "
                                     "objective (logged as `router_aux_loss` either way)"};
}  // namespace router_loss

namespace target {
KeyGroup group{"target", "the frozen target"};
const StringKey path{group, "path", Required{}, "the target's HF checkpoint"};
const DtypeKey dtype{group, "dtype", Computed{kFrozenDtype}, kDtypes, "the target's dtype"};
}  // namespace target

namespace verifier {
KeyGroup group{"target", "the target as a draft's exports name it"};
const StringKey name{group, "name", "",
                     "the target's hub id (e.g. `Qwen/Qwen3-8B`): the verifier the speculators "
                     "export names, so that an engine on another machine finds it; empty: "
                     "target.path as given"};
}  // namespace verifier

namespace capture {
KeyGroup group{"data", "a draft's offline training"};
const StringKey capture{group, "capture", "",
                        "features from `tandem capture` (offline training); empty: the target "
                        "runs on every batch"};
}  // namespace capture

namespace draft {
KeyGroup group{"draft", "every draft"};
const DtypeKey dtype{group, "dtype", Computed{kTrainedDtype}, kDtypes,
                     "parameter dtype (fp32 masters and AdamW moments either way)"};
const IntKey intermediate_size{
    group, "intermediate_size", 0, IntRange::between(0, 1 << 20),
    "MLP width; 0: the target's (a target whose every layer has experts, "
    "such as Qwen3.5-MoE, has none: set it)"};
const IntKey num_attention_heads{group, "num_attention_heads", 0, IntRange::between(0, kMaxLayers),
                                 "0: the target's"};
const IntKey num_key_value_heads{
    group, "num_key_value_heads", 0, IntRange::between(0, kMaxLayers),
    "0: the target's (a latent attention target's: one per query head)"};
const IntKey head_dim{group, "head_dim", 0, IntRange::between(0, 4096),
                      "0: the target's (a latent attention target's: its v_head_dim)"};
const NumberKey rope_theta{group, "rope_theta", Unset{"the target's RoPE"}, NumberRange::above(0),
                           "an unscaled RoPE of this base"};
const NumberKey init_std{group, "init_std", 0.02, NumberRange::at_least(0),
                         "normal init of the draft's matrices"};
const StringKey init_from{group, "init_from", "",
                          "warm start: the weights of an earlier run's checkpoint (`RUN_DIR` or "
                          "`RUN_DIR/step-N`) or of its draft export (the format `tandem eval` "
                          "loads); optimizer, data position and step count start fresh (unlike "
                          "resume)"};
}  // namespace draft

namespace eagle3_draft {
KeyGroup group{"draft", "the EAGLE-3 draft"};
const IntListKey aux_layer_ids{
    group, "aux_layer_ids", Unset{"`[1, N/2−1, N−4]` of the target's N layers"},
    IntRange::between(0, kMaxLayers - 1), "three target decoder layers (0-based outputs)"};
const IntKey ttt_length{group, "ttt_length", 7, IntRange::between(1, 64),
                        "unrolled training-time-test steps"};
const BoolKey fc_norm{group, "fc_norm", false,
                      "EAGLE-3.1: an RMSNorm on each captured hidden state before `fc`"};
const BoolKey norm_output{group, "norm_output", false,
                          "EAGLE-3.1: each step's output is normed before the next step reads "
                          "it"};
const NumberKey decay{group, "decay", 0.8, NumberRange::above(0), "step i's loss weight decay^i"};
const IntKey draft_vocab_size{group, "draft_vocab_size", 32000, IntRange::between(1, kMaxTokens),
                              "the draft's vocabulary, capped at the target's"};
const BoolKey train_lm_head{group, "train_lm_head", true,
                            "train the draft's LM head (initialised from the target's rows)"};
}  // namespace eagle3_draft

namespace dflash_draft {
KeyGroup group{"draft", "the block draft (DFlash, DSpark)"};
const IntKey num_layers{group, "num_layers", 5, IntRange::between(1, kMaxLayers), "draft layers"};
const IntListKey target_layer_ids{group, "target_layer_ids",
                                  Unset{"evenly spaced 1 … N−3 of the target's N layers (one "
                                        "draft layer: N/2)"},
                                  IntRange::between(0, kMaxLayers - 1), "target layers read"};
const IntKey block_size{group, "block_size", Computed{"16 for dflash, 7 for dspark"},
                        IntRange::between(2, 1024), "an anchor and the mask tokens after it"};
const IntKey mask_token_id{group, "mask_token_id", Unset{"resolved from the tokenizer"},
                           IntRange::between(0, kMaxTokens),
                           "the mask token (docs/dflash.md, \"The mask token\")"};
}  // namespace dflash_draft

namespace block_loss {
KeyGroup group{"loss", "the block draft's anchors and weights"};
const NumberKey gamma{group, "gamma",
                      Computed{"dflash: block_size / 2 up to 10, else 5 + (block_size − 10) / 3 "
                               "(7 for 16); dspark: 4"},
                      NumberRange::above(0),
                      "the i-th predicted token of a block weighs exp(−(i−1)/γ)"};
const IntKey max_anchors{group, "max_anchors", 512, IntRange::between(1, int64_t{1} << 20),
                         "blocks per row"};
}  // namespace block_loss

namespace dflash_loss {
KeyGroup group{"loss", "the DFlash loss"};
const EnumKey<DFlashTeacher> teacher{
    group,
    "teacher",
    DFlashTeacher::Labels,
    {{"labels", DFlashTeacher::Labels}, {"target", DFlashTeacher::Target}},
    "`labels`: the data's next tokens; `target`: the target's distribution (then the "
    "distillation keys apply)"};
}  // namespace dflash_loss

namespace dspark_draft {
KeyGroup group{"draft", "the DSpark heads"};
const IntKey markov_rank{group, "markov_rank", 256, IntRange::between(1, 1 << 16),
                         "rank r of the Markov head's previous-token bias"};
const BoolKey confidence_head{group, "confidence_head", true,
                              "train the head that predicts each slot's acceptance"};
const EnumKey<DSparkHeadInit> head_init{
    group,
    "head_init",
    DSparkHeadInit::FanIn,
    {{"fan_in", DSparkHeadInit::FanIn}, {"normal", DSparkHeadInit::Normal}},
    "how the heads start: fan_in (markov_w1 N(0, 0.01), the rest U(±1/√fan_in), as speculators "
    "does) | normal (N(0, draft.init_std), as DeepSpec's reference)"};
}  // namespace dspark_draft

namespace dspark_loss {
KeyGroup group{"loss", "the DSpark loss"};
const NumberKey ce_weight{group, "ce_weight", 0.1, NumberRange::at_least(0),
                          "weight of the cross-entropy on the data's tokens"};
const NumberKey l1_weight{group, "l1_weight", 0.9, NumberRange::at_least(0),
                          "weight of ‖p_draft − p_target‖₁ against the target's distribution"};
const NumberKey confidence_weight{group, "confidence_weight", 1.0, NumberRange::at_least(0),
                                  "weight of the confidence head's loss"};
}  // namespace dspark_loss

c10::ScalarType default_dtype(const c10::Device& device) {
  return parse_compute_dtype(device_dtype_default(device), "device_dtype_default");
}

namespace teacher {
KeyGroup group{"teacher", "the frozen teacher"};
const StringKey path{group, "path", Required{}, "the teacher's HF checkpoint"};
const DtypeKey dtype{group, "dtype", Computed{kFrozenDtype}, kDtypes, "the teacher's dtype"};
}  // namespace teacher

namespace distill_loss {
KeyGroup group{"loss", "distillation"};
const EnumKey<Divergence> divergence{group,
                                     "divergence",
                                     Divergence::ForwardKL,
                                     {{"forward_kl", Divergence::ForwardKL},
                                      {"reverse_kl", Divergence::ReverseKL},
                                      {"jsd", Divergence::JSD}},
                                     "between the teacher's distribution and the model's"};
const NumberKey beta{group, "beta", 0.5, NumberRange::closed(0, 1),
                     "JSD's β (0: forward KL, 1: reverse KL)"};
const NumberKey temperature{group, "temperature", 1.0, NumberRange::above(0),
                            "divides the teacher's logits"};
const NumberKey hard_label_weight{group, "hard_label_weight", 0.0, NumberRange::closed(0, 1),
                                  "α: `(1−α)·D + α·CE` on the data's next tokens"};
}  // namespace distill_loss

namespace reference {
KeyGroup group{"reference", "the frozen reference"};
const StringKey path{group, "path", "",
                     "the reference's HF checkpoint; empty: `model.path` (the initial policy)"};
const DtypeKey dtype{group, "dtype", Computed{kFrozenDtype}, kDtypes, "the reference's dtype"};
const StringKey logprobs{group, "logprobs", "",
                         "a cache from `tandem reference-logprobs`: then no reference is loaded"};
}  // namespace reference

namespace dpo_loss {
KeyGroup group{"loss", "DPO"};
const EnumKey<DpoLossType> type{
    group,
    "type",
    DpoLossType::Sigmoid,
    {{"sigmoid", DpoLossType::Sigmoid}, {"hinge", DpoLossType::Hinge}, {"ipo", DpoLossType::Ipo}},
    "the preference loss"};
const NumberKey beta{group, "beta", 0.1, NumberRange::above(0), "DPO's β"};
}  // namespace dpo_loss

namespace grpo_loss {
KeyGroup group{"loss", "GRPO"};
const NumberKey epsilon_low{group, "epsilon_low", 0.2, NumberRange::closed_open(0, 1),
                            "the clip range's lower side: ratios below 1 − ε"};
const NumberKey epsilon_high{group, "epsilon_high", 0.2, NumberRange::at_least(0),
                             "the clip range's upper side: ratios above 1 + ε"};
}  // namespace grpo_loss

namespace gspo_loss {
KeyGroup group{"loss", "GSPO"};
const NumberKey epsilon_low{group, "epsilon_low", 3e-4, NumberRange::closed_open(0, 1),
                            "the clip range's lower side (the GSPO paper's)"};
const NumberKey epsilon_high{group, "epsilon_high", 4e-4, NumberRange::at_least(0),
                             "the clip range's upper side (the GSPO paper's)"};
}  // namespace gspo_loss

}  // namespace keys

}  // namespace tandem
