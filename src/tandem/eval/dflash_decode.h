#pragma once
// Block speculative decoding with a DFlash draft and its frozen target (SPEC §6, acceptance
// length), with the anchor convention of training (models/dflash.h):
//   the target has run on ids[0..n-1] (their layer outputs are the context) and chose the next
//   token b = ids[n] (the bonus token, not yet run through the target). b is the ANCHOR: block =
//   [b, MASK x (bs - 1)] at positions n .. n + bs - 1, seeing the context of positions < n only
//   (strictly before the anchor). One draft forward predicts slot k = token n + k, k = 1..bs-1;
//   the first `draft_tokens` of them are proposed. One target forward over ids + b + proposal
//   verifies them: the longest prefix equal to the target's greedy choices is accepted, plus
//   the target's own next token as the new bonus. Output equals plain greedy decoding.
// The target keeps a KV cache (rolled back past the accepted tokens after each verification) and
// the draft its context c of every verified position, so each step projects only the new ones.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "tandem/eval/speculative.h"
#include "tandem/models/dflash.h"
#include "tandem/models/frozen.h"

namespace tandem {

/// Speculative decoding of `prompt`, proposing `draft_tokens` (1..block_size - 1) tokens per
/// step. `mask_embedding` (H,): the grown mask row when the mask id is the target's vocab_size
/// (load_dflash_export returns it); undefined otherwise (the target's row of the mask id).
SpeculativeOutput dflash_decode(const FrozenModel& target, const DFlashDraftImpl& draft,
                                const at::Tensor& mask_embedding,
                                const std::vector<int64_t>& prompt, int64_t draft_tokens,
                                const DecodeOptions& options);

/// One block forward of the draft, shared by the cached and the uncached decoder.
class DFlashProposer {
 public:
  DFlashProposer(const FrozenModel& target, const DFlashDraftImpl& draft,
                 const at::Tensor& mask_embedding, int64_t draft_tokens);
  /// context (1, n, H): draft.context of the target features of positions 0..n-1; the anchor
  /// `bonus` sits at position n. Returns the first draft_tokens predicted tokens.
  std::vector<int64_t> propose(const at::Tensor& context, int64_t bonus) const;
  c10::ScalarType dtype() const { return dtype_; }

 private:
  const DFlashDraftImpl& draft_;
  int64_t draft_tokens_;
  c10::ScalarType dtype_;
  at::Tensor embed_tokens_, lm_head_, masks_, block_offsets_, anchor_valid_;
};

}  // namespace tandem
