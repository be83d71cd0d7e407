#include "tandem/objectives/dflash_anchors.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <vector>

#include "tandem/core/hash.h"

namespace tandem {

namespace {

// SplitMix64 (Steele, Lea, Flood): a small, fully specified generator, so anchor draws are the
// same on every platform and library version.
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// `count` of `candidates` drawn without replacement (partial Fisher-Yates), ascending.
std::vector<int64_t> draw_sorted(std::vector<int64_t> candidates, int64_t count, uint64_t seed) {
  const int64_t total = static_cast<int64_t>(candidates.size());
  if (count < total) {
    uint64_t state = seed;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t j =
          i + static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(total - i));
      std::swap(candidates[i], candidates[j]);
    }
    candidates.resize(count);
  }
  std::sort(candidates.begin(), candidates.end());
  return candidates;
}

}  // namespace

DFlashAnchors sample_dflash_anchors(const PackedBatch& batch, int64_t block_size,
                                    int64_t max_anchors, uint64_t seed, AnchorRule rule) {
  const at::Tensor loss_mask = batch.on_host().loss_mask.to(at::kByte).contiguous();
  const auto trained = loss_mask.accessor<uint8_t, 2>();
  const int64_t rows = batch.rows();
  std::vector<std::vector<int64_t>> candidates(static_cast<size_t>(rows));
  std::vector<Hasher> row_seeds(static_cast<size_t>(rows), Hasher(seed));
  DFlashAnchors out;
  for (const PackedDocument& document : batch.documents) {
    // The document's identity (its dataset index, or input index, and where this chunk starts)
    // and the epoch it was drawn in: every pass over the data draws fresh anchors.
    row_seeds[document.row]
        .update_u64(static_cast<uint64_t>(document.dataset_index >= 0 ? document.dataset_index
                                                                      : document.source_index))
        .update_u64(static_cast<uint64_t>(document.source_begin))
        .update_u64(static_cast<uint64_t>(document.epoch));
    const int64_t end = document.begin + document.length;  // one past its last column
    std::vector<int64_t>& row = candidates[document.row];
    if (rule == AnchorRule::NextTrained) {
      for (int64_t a = document.begin; a + 1 < end; ++a)
        if (trained[document.row][a] && trained[document.row][a + 1]) row.push_back(a);
      continue;
    }
    int64_t loss_tokens = 0;
    for (int64_t t = document.begin; t < end; ++t) loss_tokens += trained[document.row][t];
    if (loss_tokens < 2 * block_size) {
      ++out.skipped_documents;
      continue;
    }
    // The whole block inside the document: a + bs - 1 <= its last column.
    for (int64_t a = document.begin; a <= end - block_size; ++a)
      if (trained[document.row][a]) row.push_back(a);
  }
  std::vector<std::vector<int64_t>> chosen;
  int64_t width = 1;
  for (int64_t b = 0; b < rows; ++b) {
    chosen.push_back(draw_sorted(std::move(candidates[b]), max_anchors, row_seeds[b].digest()));
    width = std::max<int64_t>(width, static_cast<int64_t>(chosen.back().size()));
  }
  at::Tensor anchors = at::zeros({rows, width}, at::kLong);
  at::Tensor valid = at::zeros({rows, width}, at::kBool);
  for (int64_t b = 0; b < rows; ++b)
    for (size_t i = 0; i < chosen[b].size(); ++i) {
      anchors[b][static_cast<int64_t>(i)] = chosen[b][i];
      valid[b][static_cast<int64_t>(i)] = true;
    }
  out.blocks = {block_size, anchors, valid};
  return out;
}

DFlashTargets dflash_targets(const PackedBatch& batch, const DFlashBlocks& blocks) {
  const int64_t rows = batch.rows(), length = batch.seq_len(), count = blocks.num_anchors();
  const at::Tensor slots = at::arange(blocks.block_size, blocks.anchors.options()).view({1, 1, -1});
  const at::Tensor columns = blocks.anchors.unsqueeze(2) + slots;  // (B, A, bs): a + k
  const at::Tensor inside = columns < length;
  const at::Tensor gather_index =
      columns.clamp_max(length - 1).view({rows, count * blocks.block_size});
  const auto at_label = [&](const at::Tensor& x) {  // x[b, a + k] as (B, A, bs)
    return x.gather(1, gather_index).view({rows, count, blocks.block_size});
  };
  const at::Tensor anchor_document = batch.document_ids.gather(1, blocks.anchors).unsqueeze(2);
  const at::Tensor anchor_valid = blocks.anchor_valid.unsqueeze(2);
  DFlashTargets targets;
  targets.valid = (slots >= 1)
                      .logical_and(inside)
                      .logical_and(anchor_valid)
                      .logical_and(at_label(batch.document_ids) == anchor_document)
                      .logical_and(at_label(batch.padding_mask).to(at::kBool))
                      .logical_and(at_label(batch.loss_mask).to(at::kBool));
  targets.labels = at::where(inside.logical_and(anchor_valid), at_label(batch.input_ids),
                             at::zeros_like(columns));
  return targets;
}

}  // namespace tandem
