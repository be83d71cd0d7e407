#pragma once
// What the block drafts (DFlash: objectives/dflash.h, DSpark: objectives/dspark.h) share on top
// of every draft's base (draft_objective.h): the mask token and the embedding the blocks read,
// the draft backbone (models/dflash.h) built for the target and initialised, and one backbone
// pass over all blocks of a micro-batch. Each block draft writes only its anchors, what its slots
// predict, its loss and its export.
#include <ATen/core/Tensor.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tandem/core/run_context.h"
#include "tandem/data/mask_token.h"
#include "tandem/models/dflash.h"
#include "tandem/objectives/draft_objective.h"
#include "tandem/objectives/fused_vocab_loss.h"

namespace tandem {

class Config;
struct DFlashExportInfo;

/// The options both block drafts read (the `target`, `draft` and shared `loss` keys).
struct BlockDraftOptions {
  std::string target_path;
  c10::ScalarType target_dtype = c10::ScalarType::Float;
  c10::ScalarType draft_dtype = c10::ScalarType::Float;
  DFlashDims dims;                        // draft.num_layers, sizes (0: the target's)
  std::vector<int64_t> target_layer_ids;  // empty: DFlashConfig::default_target_layers
  int64_t block_size = 16;
  std::optional<int64_t> mask_token_id;  // unset: resolved from the tokenizer (docs/dflash.md)
  std::string tokenizer_dir;             // data.tokenizer; "" = the target dir's, if it has one
  std::optional<double> rope_theta;      // set: unscaled RoPE with this theta; else the target's
  double init_std = 0.02;
  uint64_t seed = 0;
  double gamma = 0;  // the i-th predicted token of a block weighs exp(-(i - 1) / gamma)
  int64_t max_anchors = 512;
  FusedLossOptions loss;
  std::string capture_dir;  // offline mode when set
  RunContext run;           // device (and rank-0 loading, sharding on load)
};

/// Reads those keys; block_size and gamma default to `default_block_size` and
/// `default_gamma(block_size)`, the seed is `run.seed` (training.seed).
BlockDraftOptions read_block_draft_options(const Config& config, const RunContext& run,
                                           int64_t default_block_size,
                                           double (*default_gamma)(int64_t block_size));

/// Model FLOPs of one draft forward on `batch` (host tensors) with `blocks` (host), Q = valid
/// anchors * block_size block queries: fc 2 * tokens * k H_t H; per layer the context keys and
/// values 2 * tokens * H * 2 kv widths, the blocks 2 * Q * (H (q + 2 kv) + q H + 3 H I), and
/// attention over the VISIBLE keys only (the context before each anchor in its document, plus
/// the block): 4 * q width * (visible context + Q) * block_size. Masked work is not counted.
double dflash_draft_forward_flops(const DFlashConfig& config, const PackedBatch& batch,
                                  const DFlashBlocks& blocks);

/// StepTotals of a micro-batch whose supervised block slots are `valid` (B, A, bs) bool on the
/// host: unroll_tokens[k] = supervised slots k, loss_tokens their sum.
StepTotals block_step_totals(const PackedBatch& batch, const at::Tensor& valid);

/// W = sum_k slot_weights[k] * totals.unroll_tokens[k]: what every micro-batch's weighted loss
/// is divided by (an error naming `tag` and `why_none` when the step has no supervised slot).
double step_slot_weight(const at::Tensor& slot_weights, const StepTotals& totals,
                        const std::string& tag, const std::string& why_none);

/// Per-slot accuracy counts: correct[k] = hits at slot k (bs) int64 on hits' device, and the
/// supervised slots k counted on the host. slots (N,) on the device, slots_on_host the same.
struct SlotHits {
  at::Tensor correct;
  std::vector<int64_t> counts;
};
SlotHits slot_hits(const at::Tensor& hits, const at::Tensor& slots, const at::Tensor& slots_on_host,
                   int64_t block_size);

/// `blocks` with their tensors on the CPU (as drawn; a copy when a caller moved them).
DFlashBlocks blocks_on_host(const DFlashBlocks& blocks);

class BlockDraftObjective : public DraftObjective {
 public:
  torch::nn::Module& trainable() override { return *draft_; }
  /// Offline: checks the capture was made from this data at this seq_len.
  void attach_data(const DataContext& data) override;

  /// The target's layer outputs cat(target_layer_ids) as `aux` (B, S, k * H_t) and, when the
  /// loss reads the target's distribution, its last layer's output as `last` (B, S, H_t); no
  /// autograd (whatever the grad mode); from the target (online) or the capture (offline).
  TargetFeatures features(const PackedBatch& batch) const;

  DFlashDraft& draft() { return draft_; }
  const FrozenModel& target() const { return *target_; }  // online only
  const MaskTokenChoice& mask_token() const { return mask_token_; }
  /// The (V, H) (or (V + 1, H) when the mask token was grown) embedding the blocks read.
  const at::Tensor& input_embedding() const { return input_embedding_; }

 protected:
  using DraftFactory =
      std::function<DFlashDraft(const DFlashConfig& config, const at::TensorOptions& options)>;

  explicit BlockDraftObjective(const BlockDraftOptions& options);
  /// Resolves the mask token, grows the embedding when it must, builds the draft with
  /// `make_draft` for the target and initialises it. Called by the derived constructor (errors
  /// name the objective). `needs_last`: the loss reads the target's last layer.
  /// `no_grown_mask`: empty when a grown mask row is allowed, else the error when one would be.
  void set_up_draft(const DraftFactory& make_draft, bool needs_last,
                    const std::string& no_grown_mask);

  /// The draft's normed output on every block of `batch`: (B, A * bs, H), zeros on invalid
  /// blocks. `host_blocks` on the CPU; the features in any dtype.
  at::Tensor block_hidden(const PackedBatch& batch, const TargetFeatures& features,
                          const DFlashBlocks& host_blocks) const;
  /// The target's (online) and the draft's model FLOPs of one step on `host` (on the host) with
  /// those blocks: the target's forward, the draft's forward and backward.
  double target_and_draft_flops(const PackedBatch& host, const DFlashBlocks& blocks) const;
  /// What the z-lab export (and the formats built on it) says about the mask token and target.
  DFlashExportInfo export_info() const;

  BlockDraftOptions block_options_;
  MaskTokenChoice mask_token_;
  at::Tensor input_embedding_;  // the target's embed_tokens, shared; a grown copy if rule Grown
  at::Tensor mask_embedding_;   // (H,) the grown mask row, kept whole for the export
  DFlashDraft draft_{nullptr};

 private:
  bool needs_last_ = false;
};

}  // namespace tandem
