#pragma once
// What each DSpark block slot predicts and reads (the objective: dspark.h). Anchors are drawn as
// DFlash draws them, with AnchorRule::NextTrained (objectives/dflash_anchors.h).
//
// Slot k (0..bs-1) of the block of anchor a predicts the token at a + k + 1: every slot, the
// anchor's included, has a label (DeepSpec's convention; DFlash's slot k predicts a + k). The
// block is supervised on its contiguous valid prefix only: slot k counts iff, for every k' <= k,
// a + k' + 1 is inside the row, in a's document, a real token and loss-masked (DeepSpec's
// cumulative eval mask; a slot after a hole is never trained, as it is never reached when
// drafting).
#include <ATen/core/Tensor.h>

#include "tandem/data/packing.h"
#include "tandem/models/dflash.h"

namespace tandem {

struct DSparkTargets {
  at::Tensor labels;  // (B, A, bs) int64: input_ids[a + k + 1] (column clamped to S - 1); 0 on
                      // invalid anchors
  at::Tensor prev;    // (B, A, bs) int64: the token before the label, the Markov head's input:
                      // input_ids[a] for k = 0, labels[k - 1] after; 0 on invalid anchors
  at::Tensor valid;   // (B, A, bs) bool: slot k is supervised (the prefix rule above)
  at::Tensor target_columns;  // (B, A, bs) int64: the column whose target distribution predicts
                              // the label, a + k (clamped as the labels); 0 on invalid anchors
};

/// Computed from the batch and the blocks, both on the same device.
DSparkTargets dspark_targets(const PackedBatch& batch, const DFlashBlocks& blocks);

/// (bs,) fp32: w_k = exp(-k / gamma), the anchor slot's weight 1 (the i-th predicted token
/// weighs exp(-(i - 1) / gamma), as in DFlash).
at::Tensor dspark_slot_weights(int64_t block_size, double gamma);

}  // namespace tandem
