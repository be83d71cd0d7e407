#pragma once
// Attention sinks (gpt-oss): each head h has a learned logit s_h that joins every query's softmax
// as one more key, whose value is 0. With scores z_j of the keys a query sees,
//   p_j = exp(z_j) / (exp(s_h) + sum_i exp(z_i)),   out = sum_j p_j v_j,
// so the weights sum to less than 1 and a head can attend to nothing. Equivalently
// out = softmax(z) @ v x sigmoid(lse(z) - s_h).
//
// Where each attention path takes them: the uncached decoders through the blockwise kernel,
// whose running softmax starts with the sink (models/banded_attention.h, planned by
// plan_causal_attention for every layer of a model with sinks); the cached forward and the dense
// reference kernel through masked_attention_with_sinks below.
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace tandem {

/// q (B, heads, Tq, d), k/v (B, kv_heads, Tk, d) (grouped-query attention: heads a multiple of
/// kv_heads), mask (B or 1, 1, Tq, Tk) bool (true: may attend), sinks (heads,) on q's device:
/// attention with one sink per head, scores scaled by d^-0.5, softmax in fp32 (fp64 for fp64
/// inputs). Queries are taken at most `query_chunk` at a time, fewer where B x heads x Tk is
/// large, so the scores of one chunk stay within 2^26 values (256 MiB in fp32), never
/// (Tq, Tk). Returns (B, heads, Tq, d) in q's dtype. A query that sees no key outputs 0.
at::Tensor masked_attention_with_sinks(const at::Tensor& q, const at::Tensor& k,
                                       const at::Tensor& v, const at::Tensor& mask,
                                       const at::Tensor& sinks, int64_t query_chunk = 256);

}  // namespace tandem
