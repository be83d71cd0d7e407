#pragma once
// Block speculative decoding with a DFlash draft (eval/speculative.h is the loop), with the anchor
// convention of training (models/dflash.h):
//   the target has run on ids[0..n-1] (their layer outputs are the context) and chose the next
//   token b = ids[n] (the bonus token, not yet run through the target). b is the ANCHOR: block =
//   [b, MASK x (bs - 1)] at positions n .. n + bs - 1, seeing the context of positions < n only
//   (strictly before the anchor). One draft forward predicts slot k = token n + k, k = 1..bs-1;
//   the first `draft_tokens` of them are proposed. One target forward over ids + b + proposal
//   verifies them: the longest prefix equal to the target's greedy choices is accepted, plus
//   the target's own next token as the new bonus. Output equals plain greedy decoding.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "tandem/eval/draft_proposer.h"
#include "tandem/eval/speculative.h"
#include "tandem/models/dflash.h"
#include "tandem/models/frozen.h"

namespace tandem {

/// The DFlash draft's side of speculative decoding: it keeps its context c of every verified
/// position (position-wise, so it grows by the new ones) and proposes with one block forward.
class DFlashProposer : public DraftProposer {
 public:
  /// Proposes `draft_tokens` (1..block_size - 1) tokens per step. `mask_embedding` (H,): the
  /// grown mask row when the mask id is the target's vocab_size (load_dflash_export returns it);
  /// undefined otherwise (the target's row of the mask id).
  DFlashProposer(const FrozenModel& target, const DFlashDraftImpl& draft,
                 const at::Tensor& mask_embedding, int64_t draft_tokens);

  const std::vector<int64_t>& target_layers() const override;
  int64_t draft_tokens() const override { return draft_tokens_; }
  void reset() override { context_ = at::Tensor(); }
  void extend(const std::vector<int64_t>& ids, const at::Tensor& features, int64_t next) override;
  /// One block forward with `next` as the anchor at position n (n: the positions seen).
  std::vector<int64_t> propose(int64_t next) override;

 protected:
  /// For drafts built on this backbone whose slots predict from `first_slot` on (DSpark: 0,
  /// every slot); draft_tokens may be 1..block_size - first_slot.
  DFlashProposer(const FrozenModel& target, const DFlashDraftImpl& draft,
                 const at::Tensor& mask_embedding, int64_t draft_tokens, int64_t first_slot);
  /// The draft's normed output on the block [bonus, MASK x (bs - 1)] at positions n ..
  /// n + bs - 1, seeing the context of positions < n: (bs, H).
  at::Tensor block_hidden(int64_t bonus) const;

  const DFlashDraftImpl& draft_;
  int64_t draft_tokens_;
  c10::ScalarType dtype_;
  at::Tensor embed_tokens_, lm_head_, masks_, block_offsets_, anchor_valid_;
  at::Tensor context_;  // (1, n, H): draft.context of the target features of positions 0..n-1
};

/// speculative_decode with a DFlashProposer.
SpeculativeOutput dflash_decode(const FrozenModel& target, const DFlashDraftImpl& draft,
                                const at::Tensor& mask_embedding,
                                const std::vector<int64_t>& prompt, int64_t draft_tokens,
                                const DecodeOptions& options);

}  // namespace tandem
