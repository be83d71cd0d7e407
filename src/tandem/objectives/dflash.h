#pragma once
// DFlash block-diffusion draft training (docs/dflash.md) against a frozen target. Online, the
// target runs on every micro-batch (no autograd) and its layer outputs become the draft's context;
// offline (data.capture), they are read from a `tandem capture` directory and only the target's
// embedding and lm_head are loaded.
//
// Anchors and labels (where blocks sit, what each slot predicts): objectives/dflash_anchors.h.
// A counted slot k weighs w_k = exp(-(k - 1) / gamma). What it is trained towards (loss.teacher):
//   labels (default; z-lab, SpecForge): the token input_ids[a + k]. Per-slot loss
//     CE(target_lm_head(draft hidden), label), chunked through the frozen lm_head
//     (fused_vocab_loss.h).
//   target (Model Optimizer's recipe): the target's own next-token distribution at a + k - 1,
//     softmax(lm_head(final_norm(last target layer)) / temperature), through the same lm_head;
//     per-slot loss = the divergence of loss.divergence (forward_kl default, reverse_kl, jsd with
//     loss.beta), mixed (1 - alpha) D + alpha CE(label) by loss.hard_label_weight = alpha
//     (distill_loss.h). This teaches the draft what verification accepts: the target's argmax.
// Loss: sum over counted slots of w_k * per-slot loss, divided by the STEP's total weight
// sum_k w_k * count_k (every micro-batch loss is divided by step totals, docs/training.md;
// StepTotals.unroll_tokens[k] = count_k). For a one-micro-batch step this is SpecForge's
// sum(w * CE) / sum(w).
// Metrics per slot k >= 1: acc_k (argmax through the target lm_head == label; with teacher
// target, == the target's argmax at a + k - 1, what greedy verification accepts), loss_k (mean CE;
// labels only), each over the step's count_k; skipped_documents, anchors; sim_accept_length =
// sum_k prod_{i<=k} acc_i (expected accepted draft tokens per block, the bonus token not included).
//
// Export: the z-lab DFlashDraftModel format (objectives/dflash_export.h), at every checkpoint;
// speculative decoding with it: eval/dflash_decode.h.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/core/run_context.h"
#include "tandem/data/capture.h"
#include "tandem/data/mask_token.h"
#include "tandem/models/dflash.h"
#include "tandem/models/frozen.h"
#include "tandem/objectives/block_draft.h"
#include "tandem/objectives/description.h"
#include "tandem/objectives/dflash_anchors.h"
#include "tandem/objectives/distill_loss.h"
#include "tandem/objectives/draft_objective.h"
#include "tandem/objectives/fused_vocab_loss.h"
#include "tandem/objectives/objective.h"

namespace tandem {

/// What block slots are trained towards (see the top of this file).
enum class DFlashTeacher { Labels, Target };

struct DFlashOptions : BlockDraftOptions {
  DFlashTeacher teacher = DFlashTeacher::Labels;
  DistillLossOptions distill;  // teacher Target: divergence, beta, temperature, hard_label_weight
};

/// Reads `target.*`, `draft.*`, `loss.*`, `data.tokenizer` and `data.capture` (block_draft.h);
/// the seed is `run.seed` (training.seed).
/// The distillation keys (loss.divergence, beta, temperature, hard_label_weight) are errors
/// unless loss.teacher is target.
DFlashOptions dflash_options(const Config& config, const RunContext& run = {});

/// SpecForge's suggested decay, piecewise linear through (8, 4), (10, 5), (16, 7) and extended
/// along the nearest segment: bs / 2 up to 10, 5 + (bs - 10) / 3 above (4 -> 2, 32 -> 12.33).
double dflash_default_gamma(int64_t block_size);

/// (bs,) fp32: w_0 = 0 (the anchor slot), w_k = exp(-(k - 1) / gamma).
at::Tensor dflash_slot_weights(int64_t block_size, double gamma);

/// One micro-batch's forward (tensors kept for tests).
struct DFlashResult {
  at::Tensor loss;    // 0-dim: this micro-batch's share of the step loss
  at::Tensor hidden;  // (B, A * bs, H) the draft's normed output, zeros on invalid blocks
  DFlashTargets targets;
  // Per slot k, on the batch's device (read once per step by the trainer):
  at::Tensor loss_sums;         // (bs) fp64 sum of CE over this micro-batch's labels at slot k
                                // (teacher labels only; zeros with teacher target)
  at::Tensor correct;           // (bs) int64 of those, target-lm_head argmax == label (teacher
                                // target: == the target's argmax at a + k - 1)
  std::vector<int64_t> counts;  // (bs) labels at slot k (counted on the host)
};

class DFlashObjective : public BlockDraftObjective {
 public:
  explicit DFlashObjective(const DFlashOptions& options);
  std::string name() const override { return "dflash"; }
  StepTotals count(const PackedBatch& batch) const override;
  ObjectiveOutput compute(const PackedBatch& batch, const StepTotals& totals) override;
  /// Writes the z-lab DFlashDraftModel export into `dir` (objectives/dflash_export.h), with the
  /// grown mask row beside it when the mask token was grown.
  void export_model(const std::string& dir) const override;
  double model_flops(const PackedBatch& batch) const override;

  /// The anchors of `batch` under this objective's seed, block size and max_anchors.
  DFlashAnchors anchors(const PackedBatch& batch) const;
  /// StepTotals of `batch` with the given blocks: unroll_tokens[k] = labels at slot k.
  StepTotals totals(const PackedBatch& batch, const DFlashBlocks& blocks) const;
  /// The draft and its loss on given features and blocks; `totals` are the step's.
  DFlashResult run(const PackedBatch& batch, const TargetFeatures& features,
                   const DFlashBlocks& blocks, const StepTotals& totals) const;

  const DFlashOptions& options() const { return options_; }
  double gamma() const { return gamma_; }

 private:
  std::vector<std::string> acceptance_metrics() const override;  // acc_1 .. acc_{bs-1}

  DFlashOptions options_;
  double gamma_ = 0;
};

/// training.objective: dflash (objectives/description.h): capture and eval included.
ObjectiveDescription dflash_description();

}  // namespace tandem
