#pragma once
// DSpark draft training (docs/dspark.md) against a frozen target: the DFlash block backbone with
// a Markov head and a confidence head (models/dspark.h), on the target's layer features online
// or from a capture (objectives/block_draft.h).
//
// Anchors and what each slot predicts: objectives/dspark_targets.h (slot k of anchor a predicts
// the token at a + k + 1; a block is supervised on its contiguous valid prefix). A supervised
// slot k weighs w_k = exp(-k / gamma) (gamma 4). With, per slot, z the draft's Markov-corrected
// logits (prev = the true token before the label), u the target's logits at a + k,
// p = softmax(z), q = softmax(u), c the confidence logit:
//   CE_k   = -log p[label]
//   L1_k   = ||p - q||_1
//   conf_k = BCEWithLogits(c, c*),  c* = clamp(1 - L1_k / 2, 0, 1) = sum_v min(p_v, q_v),
//            detached: the probability that speculative sampling accepts the slot's token
//   loss   = sum_k w_k (ce_weight CE_k + l1_weight L1_k + confidence_weight conf_k) / W
// with W = sum over the STEP's supervised slots of w_k (every micro-batch is divided by step
// totals, docs/training.md). DeepSpec divides each micro-batch by its own sum(w) + 1e-6; for one
// micro-batch the two agree (a step without a supervised slot is refused instead).
// Vocabulary losses are chunked (objectives/dspark_loss.h).
// Metrics: loss, loss_ce, loss_l1, loss_confidence (each term's share of the loss before its
// weight), acc_k for every slot k = 0..bs-1 (argmax of the corrected logits == label), anchors,
// and from the draft base sim_accept_length.
//
// Export: the speculators `dspark` format (objectives/dspark_export.h).
#include <memory>
#include <string>
#include <vector>

#include "tandem/models/dspark.h"
#include "tandem/objectives/block_draft.h"
#include "tandem/objectives/description.h"
#include "tandem/objectives/dflash_anchors.h"
#include "tandem/objectives/dspark_loss.h"
#include "tandem/objectives/dspark_targets.h"
#include "tandem/objectives/verifier.h"

namespace tandem {

struct DSparkOptions : BlockDraftOptions {
  DSparkHeads heads;               // draft.markov_rank, draft.confidence_head, draft.head_init
  DSparkLossWeights loss_weights;  // loss.ce_weight, loss.l1_weight
  double confidence_weight = 1.0;  // loss.confidence_weight
  std::string target_name;         // target.name: the verifier in the export
  DSparkOptions() {
    block_size = 7;
    gamma = 4.0;
  }
};

/// Reads `target.*`, `draft.*`, `loss.*`, `data.tokenizer` and `data.capture`; the seed is
/// `run.seed` (training.seed).
DSparkOptions dspark_options(const Config& config, const RunContext& run = {});

/// One micro-batch's forward (tensors kept for tests). Over the supervised slots, N of them, in
/// (row, anchor, slot) order.
struct DSparkResult {
  at::Tensor loss;    // 0-dim: this micro-batch's share of the step loss
  at::Tensor hidden;  // (B, A * bs, H) the draft's normed output, zeros on invalid blocks
  DSparkTargets targets;
  at::Tensor corrected_argmax;   // (N,) argmax of the corrected logits
  at::Tensor confidence_logits;  // (N,) undefined without the confidence head
  at::Tensor confidence_target;  // (N,) c*
  // Sums over this micro-batch, each divided by the step's W (summed over micro-batches they
  // are the step's weighted means): the three terms before their weights.
  at::Tensor ce_share, l1_share, confidence_share;  // 0-dim fp32
  at::Tensor correct;                               // (bs) int64: argmax == label at slot k
  std::vector<int64_t> counts;                      // (bs) supervised slots k (counted on the host)
};

class DSparkObjective : public BlockDraftObjective {
 public:
  explicit DSparkObjective(const DSparkOptions& options);
  std::string name() const override { return "dspark"; }
  StepTotals count(const PackedBatch& batch) const override;
  ObjectiveOutput compute(const PackedBatch& batch, const StepTotals& totals) override;
  void export_model(const std::string& dir) const override;
  double model_flops(const PackedBatch& batch) const override;

  /// The anchors of `batch` under this objective's seed, block size and max_anchors.
  DFlashAnchors anchors(const PackedBatch& batch) const;
  /// StepTotals of `batch` with the given blocks: unroll_tokens[k] = supervised slots k.
  StepTotals totals(const PackedBatch& batch, const DFlashBlocks& blocks) const;
  /// The draft and its loss on given features and blocks; `totals` are the step's.
  DSparkResult run(const PackedBatch& batch, const TargetFeatures& features,
                   const DFlashBlocks& blocks, const StepTotals& totals) const;

  const DSparkDraftImpl& dspark() const { return *dspark_; }
  const DSparkOptions& options() const { return options_; }

 private:
  std::vector<std::string> acceptance_metrics() const override;  // acc_0 .. acc_{bs-1}

  DSparkOptions options_;
  std::shared_ptr<DSparkDraftImpl> dspark_;  // draft_'s module, with its heads
  VerifierInfo verifier_;                    // read once, when built
};

/// training.objective: dspark (objectives/description.h).
ObjectiveDescription dspark_description();

}  // namespace tandem
