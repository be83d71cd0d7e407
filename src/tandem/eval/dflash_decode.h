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
// Like EAGLE-3 eval, each step recomputes the target over the whole prefix (no KV cache).
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

}  // namespace tandem
