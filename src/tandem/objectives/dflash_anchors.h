#pragma once
// Where DFlash trains its blocks and what each block slot predicts (the objective: dflash.h).
//
// Anchors: per row, up to max_anchors positions a, drawn without replacement among the loss-masked
// positions whose whole block fits in their document (a + bs - 1 <= the document's last column),
// then sorted; documents with fewer than 2 * bs loss tokens give none (counted as skipped). The
// draw is seeded by the training seed, the identities of the row's documents (dataset index,
// first token) and the sampler epoch each was drawn in, so count() and compute() pick the same
// anchors for a micro-batch, a resumed run picks the same ones again, a row's anchors do not
// depend on the rows batched with it, and each epoch sees other anchors of the same document.
//
// Labels (same-position prediction, as at inference): block slot k >= 1 of anchor a predicts
// input_ids[a + k], counted iff a + k is in a's document, real and loss-masked. Slot 0 (the anchor
// itself) has no loss. Its weight in the loss: objectives/dflash.h.
#include <ATen/core/Tensor.h>

#include <cstdint>

#include "tandem/data/packing.h"
#include "tandem/models/dflash.h"

namespace tandem {

/// The anchors of one micro-batch and the documents that gave none.
struct DFlashAnchors {
  DFlashBlocks blocks;  // A = the most anchors of any row (at least 1); rows pad with invalid slots
  int64_t skipped_documents = 0;  // fewer than 2 * block_size loss tokens
};

/// Which positions may anchor a block.
enum class AnchorRule {
  WholeBlock,   // DFlash (above): loss-masked, the whole block inside the document, documents of
                // fewer than 2 * bs loss tokens skipped
  NextTrained,  // DSpark (objectives/dspark_targets.h): loss-masked with the next token in the
                // same document and loss-masked (DeepSpec's loss_mask[a] & loss_mask[a + 1]);
                // no document is skipped
};

/// Draws the anchors of `batch` (see the top of this file), on the host (the blocks are CPU
/// tensors, read from the batch's host copy). Deterministic in its arguments and the identities
/// of each row's documents.
DFlashAnchors sample_dflash_anchors(const PackedBatch& batch, int64_t block_size,
                                    int64_t max_anchors, uint64_t seed,
                                    AnchorRule rule = AnchorRule::WholeBlock);

/// What each block slot predicts.
struct DFlashTargets {
  at::Tensor labels;  // (B, A, bs) int64: input_ids[a + k]; 0 where a + k >= S or a is invalid
  at::Tensor valid;   // (B, A, bs) bool: the label counts (k >= 1, same document, real, trained)
};
DFlashTargets dflash_targets(const PackedBatch& batch, const DFlashBlocks& blocks);

}  // namespace tandem
