#pragma once
// EAGLE-3 draft training (docs/eagle3.md) against a frozen target.
//
// Shifts: at position t the draft reads the target feature h_t and the embedding of x_{t+1},
// and learns the target's distribution for x_{t+2} (the target's logits at t+1). Unroll step i
// reads its own previous output and x_{t+1+i}, and learns the target's logits at t+1+i.
// Teacher: softmax of the target logits restricted to the draft vocab (t2d), positions whose
// full-vocab target argmax is outside the draft vocab masked out. Loss: soft cross-entropy per
// step, divided by that step's target positions in the whole optimizer step; total
// sum_i decay^i * loss_i.
//
// Online: the frozen target runs on every batch (no autograd). Offline: features come from a
// `tandem capture` directory (data.capture) and only the target's embedding, final norm and
// lm_head are loaded.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/core/run_context.h"
#include "tandem/data/capture.h"
#include "tandem/data/vocab_map.h"
#include "tandem/models/eagle3.h"
#include "tandem/models/frozen.h"
#include "tandem/objectives/description.h"
#include "tandem/objectives/draft_objective.h"
#include "tandem/objectives/eagle3_export.h"
#include "tandem/objectives/objective.h"

namespace tandem {

struct Eagle3Options {
  std::string target_path;
  std::string target_name;  // target.name: the verifier's hub id in exports ("" = target_path)
  c10::ScalarType target_dtype = c10::ScalarType::Float;
  c10::ScalarType draft_dtype = c10::ScalarType::Float;
  std::vector<int64_t> aux_layer_ids;  // empty: the default for the target's depth
  int64_t ttt_length = 7;
  bool fc_norm = false;      // EAGLE-3.1's per-aux-state norms before fc (models/eagle3.h)
  bool norm_output = false;  // EAGLE-3.1's normed output carried between steps
  double decay = 0.8;
  int64_t draft_vocab_size = 32000;
  int64_t intermediate_size = 0;     // 0: the target's
  DraftHeads heads;                  // 0s: the target's (DecoderConfig::draft_layers)
  std::optional<double> rope_theta;  // set: unscaled RoPE with this theta; else the target's
  bool train_lm_head = true;         // SpecForge trains it; speculators freezes it
  double init_std = 0.02;
  uint64_t seed = 0;
  std::string capture_dir;  // offline mode when set
  RunContext run;           // device (and rank-0 loading, sharding on load)
  int64_t teacher_chunk_tokens = 1024;
};

/// Reads `target.*`, `draft.*`, `loss.chunk_tokens` and `data.capture` of the config; the seed
/// is `run.seed` (training.seed).
Eagle3Options eagle3_options(const Config& config, const RunContext& run = {});

/// (B, T) bool: position t has a target at unroll step i, i.e. token t+2+i exists in t's
/// document, is real and is loss-masked.
at::Tensor eagle3_step_targets(const PackedBatch& batch, int64_t step);

/// Model FLOPs of one draft forward over `tokens` tokens (attention spanning `attention_pairs`,
/// sum of len^2) unrolled `steps` TTT steps: per step 2 * tokens * (2H (q + 2 kv widths)
/// + q width * H + 3 H I + H D) + 2 * pairs * q width, plus fc once: 2 * tokens * 3 H_t * H.
double eagle3_draft_forward_flops(const Eagle3Config& config, double tokens, double attention_pairs,
                                  int64_t steps);

/// The target's side of the loss, formed once per micro-batch from the target's last hidden
/// state (one GEMM through its lm_head in its own dtype, fp32 from the logits on): its
/// distribution over the draft vocab as log-probabilities, which every unroll step reads
/// shifted, so the teacher is never recomputed inside the unroll. (B * T, D) fp32 lives across
/// the unroll: 262 MB for 2,048 tokens and a 32,000-id draft vocab.
struct Teacher {
  at::Tensor log_probs;  // (B * T, D) fp32: log-softmax of the target logits over the draft vocab
  at::Tensor entropy;    // (B, T) fp32: entropy of that distribution (soft CE = KL + entropy)
  at::Tensor argmax;     // (B, T) int64: full-vocab argmax of the target logits
  at::Tensor in_vocab;   // (B, T) bool: that argmax is in the draft vocab
};

/// What one micro-batch's unroll produced (tensors kept for tests).
struct Eagle3Result {
  at::Tensor loss;                       // 0-dim: sum_i decay^i * loss_i
  std::vector<at::Tensor> step_losses;   // loss_i, 0-dim, already normalised
  std::vector<at::Tensor> step_outputs;  // (B, T, H) per step: the layer output (logits of
                                         // step i: draft->logits(step_outputs[i]))
  // Counts per step i as 0-dim int64 tensors on the batch's device (read once per step):
  std::vector<at::Tensor> correct;         // positions with a target whose mapped draft argmax
                                           // = the target's argmax
  std::vector<at::Tensor> loss_positions;  // positions with a target in loss_i (the target's
                                           // argmax is in the draft vocab)
};

class Eagle3Objective : public DraftObjective {
 public:
  explicit Eagle3Objective(const Eagle3Options& options);
  std::string name() const override { return "eagle3"; }
  torch::nn::Module& trainable() override { return *draft_; }
  StepTotals count(const PackedBatch& batch) const override;
  ObjectiveOutput compute(const PackedBatch& batch, const StepTotals& totals) override;
  /// Writes `dir`/sglang (LlamaForCausalLMEagle3) and `dir`/speculators (Eagle3DraftModel).
  void export_model(const std::string& dir) const override;
  void attach_data(const DataContext& data) override;
  double model_flops(const PackedBatch& batch) const override;

  /// Installs the draft vocabulary and re-initialises lm_head from the target's rows for it.
  void set_vocab_map(const VocabMap& map);
  /// Target features for `batch`: from the target (online) or the capture (offline).
  TargetFeatures features(const PackedBatch& batch) const;
  Teacher teacher(const at::Tensor& last_hidden) const;
  /// The unroll on one micro-batch with given features.
  Eagle3Result unroll(const PackedBatch& batch, const TargetFeatures& features,
                      const StepTotals& totals) const;

  Eagle3Draft& draft() { return draft_; }
  const Eagle3Options& options() const { return options_; }

 private:
  std::vector<std::string> acceptance_metrics() const override;  // acc_0 .. acc_{ttt_length-1}

  Eagle3Options options_;
  Eagle3Draft draft_{nullptr};
  VerifierInfo verifier_;  // what the speculators export names as its target, read at start-up
};

/// training.objective: eagle3 (objectives/description.h): capture and eval included.
ObjectiveDescription eagle3_description();

}  // namespace tandem
