#pragma once
// The attention of the DFlash draft (docs/dflash.md). A micro-batch carries A blocks per row, each
// of block_size (bs) slots laid side by side (Q = A * bs queries). A query of block i sees
//   - the context keys j its block may see (context_mask[b, i, j]: same document, real token,
//     strictly before the anchor; see models/dflash.h),
//   - and the bs keys of its own block, in both directions;
// never another block. The blockwise kernel (models/banded_attention.h) takes the context as one
// band per block ([start of the anchor's document, anchor - 1]) and the block's own keys as local
// keys: each block visits only the context tiles before its anchor, the scores are recomputed in
// backward, and memory does not grow with blocks x context length. The dense kernel
// (AttentionKernel::Dense, the reference) scores every block query against all S context keys.
//
// An invalid block (a padded anchor slot) sees nothing: its output is 0, never NaN. Its own-block
// scores keep every softmax row finite; the probabilities are then zeroed.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "tandem/models/attention_options.h"
#include "tandem/models/key_bands.h"

namespace tandem {

/// q (B, heads, Q, d) block queries; context_k/context_v (B, kv_heads, S, d); block_k/block_v
/// (B, kv_heads, Q, d), slot k of block i at column i * bs + k; context_bands (B, Q): the
/// context keys each query sees (dflash_key_bands, models/dflash.h); block_valid (B, A) bool.
/// heads must be a multiple of kv_heads and Q of A. Returns (B, heads, Q, d) in q's dtype.
/// Softmax in fp32 (fp64 for fp64 inputs), scale 1/sqrt(d).
at::Tensor dflash_attention(const at::Tensor& q, const at::Tensor& context_k,
                            const at::Tensor& context_v, const at::Tensor& block_k,
                            const at::Tensor& block_v, const KeyBands& context_bands,
                            const at::Tensor& block_valid, const AttentionOptions& options);

/// Whether the fused kernel (models/fused_dflash_attention.h) runs on `device` for this dtype and
/// head dim and equals the dense kernel there: a tiny random case (grouped-query, three blocks,
/// one without context, one invalid), the output and every input gradient, tried once per kind
/// and remembered. False when it throws or differs, so a GPU where the kernel misbehaves keeps
/// the blockwise kernel.
bool fused_dflash_attention_verified(const c10::Device& device, c10::ScalarType dtype,
                                     int64_t head_dim);

/// The same visibility as one dense boolean mask over [context | all blocks]:
/// (B, A * bs, S + A * bs), query slot k of block i at row i * bs + k, key slot k' of block i' at
/// column S + i' * bs + k'. For tests and inspection; the attention never builds it.
at::Tensor dflash_dense_mask(const at::Tensor& context_mask, const at::Tensor& block_valid,
                             int64_t block_size);

}  // namespace tandem
