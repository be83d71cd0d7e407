#pragma once
// The attention of EAGLE-3's test-time-training unroll (SPEC §6). At unroll step i, the query at
// position t sees
//   - the step-0 keys at positions t' <= t of its own document (the context the target produced),
//   - and, for each later step j = 1..i, the one key step j computed at the same position t
//     (the draft tokens it proposed itself at inference).
// So the scores are one causal (Tq, Tk) block plus i diagonal columns: never a dense
// (T, T * steps) score or mask tensor. One softmax runs over all of them.
#include <ATen/core/Tensor.h>

#include <vector>

namespace tandem {

/// q (B, heads, Tq, d); context_k/context_v (B, kv_heads, Tk, d) with `context_mask`
/// (B or 1, 1, Tq, Tk) bool (true = may attend); step_k/step_v: for each later step, (B, kv_heads,
/// Tq, d) aligned with the queries. heads must be a multiple of kv_heads (grouped-query
/// attention). Returns (B, heads, Tq, d). Softmax in fp32, scale 1/sqrt(d).
at::Tensor ttt_attention(const at::Tensor& q, const at::Tensor& context_k,
                         const at::Tensor& context_v, const at::Tensor& context_mask,
                         const std::vector<at::Tensor>& step_k,
                         const std::vector<at::Tensor>& step_v);

}  // namespace tandem
