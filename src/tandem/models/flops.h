#pragma once
// Model FLOPs: what a step's matmuls must compute, the numerator of model FLOP utilisation
// (MFU = model FLOPs / time / the matmul peak measured on the same device). Counted the way the
// benchmarks have always counted them: 2 x (matmul parameters) per token, plus causal attention
// 2 * pairs * (heads * head_dim) per layer, where `pairs` sums len^2 over the sequences (QK^T
// and PV over the causal half of the square); backward = 2 x forward. Latent attention
// (DeepSeek-V3) counts its five projections and pairs * heads * (qk + v) for QK^T and PV.
// Mixture-of-experts layers count their active parameters: the router (E x H) and top-k experts (3
// x H x I each), plus a shared expert (3 x H x I_shared + its 1 x H gate) where there is one. A
// hybrid's Gated DeltaNet layer counts its projections and conv as matmul parameters and, in place
// of attention, the chunked gated delta rule as it is computed at chunks of C = 64 tokens, per
// token and value head: 4CK (the chunk's K Kᵀ and Q Kᵀ) + C(K + V) (the two triangular solves) +
// 2CV (the intra-chunk outputs) + 6KV (the state read twice and updated once), linear in T.
#include "tandem/models/decoder_config.h"

namespace tandem {

/// One forward of a decoder over `tokens` tokens whose attention spans `attention_pairs`
/// (sum of len^2 over its documents; a sliding-window layer counts only the keys its window
/// shows); `with_lm_head`: the output projection on every token.
double decoder_forward_flops(const DecoderConfig& config, double tokens, double attention_pairs,
                             bool with_lm_head);

/// 2 * rows * V * H: one output projection (V x H) applied to `rows` hidden states.
double lm_head_flops(const DecoderConfig& config, double rows);

}  // namespace tandem
