#pragma once
// Memory-efficient attention with a hand-written backward (flash attention's algorithm, in ATen
// operations so it runs on every device): queries are taken a chunk at a time, keys a tile at a
// time, and a running maximum and sum give the softmax without ever holding more than one
// (query chunk x key tile) block of scores. The forward saves only its inputs, the output and
// the log-sum-exp of each query; the backward recomputes the scores tile by tile. Memory is
// linear in the sequence length; tiles no query can see are skipped.
//
// What a query sees: the context keys of its band (models/key_bands.h) plus, optionally, a few
// "local" keys of its own group of queries, all under one softmax:
//   - EAGLE-3's test-time training (models/ttt_attention.h): the band is causal within the
//     document; step i adds, for each query, the i keys earlier unroll steps computed at its
//     position (groups of G = 1 query, L = i keys);
//   - a DFlash block (models/dflash_attention.h): the band ends before the block's anchor; the
//     block's own bs keys are local to its bs queries (G = L = bs).
#include <ATen/core/Tensor.h>

#include <vector>

#include "tandem/models/attention_options.h"
#include "tandem/models/key_bands.h"

namespace tandem {

/// q (B, heads, Tq, d); k, v (B, kv_heads, Tk, d), heads a multiple of kv_heads (grouped-query
/// attention); query t of row b sees keys bands.first[b, t] .. bands.last[b, t].
/// local_k, local_v (B, kv_heads, Tq / G, L, d) or undefined (no local keys): keys seen by the
/// G consecutive queries of each group; local_visible (B, Tq / G) bool or undefined (all
/// visible) hides a group's local keys. A query that sees no key at all outputs 0.
/// `sinks` (heads,) or undefined: each head's attention sink (gpt-oss), one more logit in every
/// query's softmax whose value is 0 (models/attention_sinks.h). Not differentiated.
/// Softmax in fp32 (fp64 for fp64 inputs), scale 1/sqrt(d). Returns (B, heads, Tq, d) in q's
/// dtype. Differentiable in q, k, v, local_k and local_v.
at::Tensor banded_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const KeyBands& bands, const at::Tensor& local_k,
                            const at::Tensor& local_v, const at::Tensor& local_visible,
                            const AttentionOptions& options, const at::Tensor& sinks = {});

/// The same with TTT's local keys given per unroll step: step_k/step_v, L tensors
/// (B, kv_heads, Tq, d), key j of query t being step j's at position t (G = 1), as
/// ttt_attention checks them. They are stacked only for the call, never kept stacked for
/// backward.
at::Tensor banded_attention_with_step_keys(const at::Tensor& q, const at::Tensor& k,
                                           const at::Tensor& v, const KeyBands& bands,
                                           const std::vector<at::Tensor>& step_k,
                                           const std::vector<at::Tensor>& step_v,
                                           const AttentionOptions& options);

}  // namespace tandem
