#pragma once
// The attention of EAGLE-3's test-time-training unroll (docs/eagle3.md). At unroll step i, the
// query at position t sees
//   - the step-0 keys at positions t' <= t of its own document (the context the target produced),
//   - and, for each later step j = 1..i, the one key step j computed at the same position t
//     (the draft tokens it proposed itself at inference).
// One softmax runs over all of them. The fused kernel (models/fused_ttt_attention.h, the default
// where choose_ttt_kernel allows it) runs ATen's flash attention per document and merges the
// step keys by log-sum-exp. The blockwise kernel (models/banded_attention.h) takes the
// context as a band per query and the i step keys as local keys: memory linear in T, scores
// recomputed in backward. The dense kernel (AttentionKernel::Dense) builds the (Tq, Tk) block
// and is kept as the reference.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <vector>

#include "tandem/models/attention_options.h"
#include "tandem/models/key_bands.h"

namespace tandem {

/// Whether the fused kernel (models/fused_ttt_attention.h) runs on `device` for this dtype and
/// head dim and equals the dense kernel there: a tiny random case (two documents in a row,
/// grouped-query attention, two steps' keys), the output and every input gradient, tried once per
/// kind and remembered. False when it throws or differs, so a GPU where the kernel misbehaves
/// keeps the blockwise kernel.
bool fused_ttt_attention_verified(const c10::Device& device, c10::ScalarType dtype,
                                  int64_t head_dim);

/// q (B, heads, Tq, d); context_k/context_v (B, kv_heads, Tk, d), query t seeing
/// context_bands[b, t] of them; step_k/step_v: for each later step, (B, kv_heads, Tq, d) aligned
/// with the queries. heads must be a multiple of kv_heads (grouped-query attention). Returns
/// (B, heads, Tq, d). Softmax in fp32, scale 1/sqrt(d).
at::Tensor ttt_attention(const at::Tensor& q, const at::Tensor& context_k,
                         const at::Tensor& context_v, const KeyBands& context_bands,
                         const std::vector<at::Tensor>& step_k,
                         const std::vector<at::Tensor>& step_v, const AttentionOptions& options);

}  // namespace tandem
