#include "tandem/objectives/dspark_targets.h"

#include <ATen/ATen.h>

namespace tandem {

DSparkTargets dspark_targets(const PackedBatch& batch, const DFlashBlocks& blocks) {
  const int64_t rows = batch.rows(), length = batch.seq_len(), count = blocks.num_anchors();
  const int64_t block_size = blocks.block_size;
  const at::Tensor slots = at::arange(block_size, blocks.anchors.options()).view({1, 1, -1});
  const at::Tensor columns = blocks.anchors.unsqueeze(2) + slots + 1;  // (B, A, bs): a + k + 1
  const at::Tensor inside = columns < length;
  const at::Tensor label_columns = columns.clamp_max(length - 1);
  const auto at_columns = [&](const at::Tensor& x, const at::Tensor& where) {  // (B, A, bs)
    return x.gather(1, where.reshape({rows, count * block_size})).view({rows, count, block_size});
  };
  const at::Tensor anchor_valid = blocks.anchor_valid.unsqueeze(2);  // (B, A, 1)
  const at::Tensor anchor_document = batch.document_ids.gather(1, blocks.anchors).unsqueeze(2);
  const at::Tensor slot_ok =
      inside.logical_and(anchor_valid)
          .logical_and(at_columns(batch.document_ids, label_columns) == anchor_document)
          .logical_and(at_columns(batch.padding_mask, label_columns).to(at::kBool))
          .logical_and(at_columns(batch.loss_mask, label_columns).to(at::kBool));
  DSparkTargets targets;
  targets.valid = slot_ok.to(at::kLong).cumprod(2).to(at::kBool);
  const at::Tensor zero = at::zeros_like(columns);
  targets.labels = at::where(anchor_valid, at_columns(batch.input_ids, label_columns), zero);
  const at::Tensor anchor_ids =
      batch.input_ids.gather(1, blocks.anchors).unsqueeze(2);  // (B, A, 1)
  targets.prev = at::where(
      anchor_valid, at::cat({anchor_ids, targets.labels.narrow(2, 0, block_size - 1)}, 2), zero);
  targets.target_columns = at::where(anchor_valid, label_columns - 1, zero);
  return targets;
}

at::Tensor dspark_slot_weights(int64_t block_size, double gamma) {
  return at::exp(-at::arange(block_size, at::kFloat) / gamma);
}

}  // namespace tandem
