#include "tandem/models/flops.h"

#include <algorithm>

namespace tandem {

namespace {

// The chunk the gated delta rule's FLOPs are counted at (flops.h).
constexpr double kGatedDeltaChunk = 64;

// 2 x the matmul parameters of one Gated DeltaNet layer (projections, conv, out_proj) and its
// gated delta rule, per token.
double gated_deltanet_flops_per_token(const DecoderConfig& c) {
  const LinearAttentionConfig& l = c.linear_attention;
  const double hidden = static_cast<double>(c.hidden_size);
  const double K = static_cast<double>(l.key_dim), V = static_cast<double>(l.value_dim);
  const double heads = static_cast<double>(l.value_heads);
  const double channels = 2.0 * static_cast<double>(l.key_heads) * K + heads * V;
  const double params = hidden * (channels + heads * V + 2.0 * heads) +  // qkv, z, b, a
                        channels * static_cast<double>(l.conv_kernel) +  // the depthwise conv
                        heads * V * hidden;                              // out_proj
  const double C = kGatedDeltaChunk;
  const double rule = heads * (4.0 * C * K + C * (K + V) + 2.0 * C * V + 6.0 * K * V);
  return 2.0 * params + rule;
}

}  // namespace

double decoder_forward_flops(const DecoderConfig& c, double tokens, double attention_pairs,
                             bool with_lm_head) {
  const double hidden = static_cast<double>(c.hidden_size);
  const double attention_width = static_cast<double>(c.num_attention_heads) * c.head_dim;
  const double kv_width = static_cast<double>(c.num_key_value_heads) * c.head_dim;
  // q (and its gate, in gated attention), o, k, v.
  double attention_params = hidden * ((c.gated_attention ? 3 : 2) * attention_width + 2 * kv_width);
  double attention_pair_width = attention_width;  // QK^T over head_dim, PV over head_dim
  if (c.latent_attention.enabled()) {
    // q (q_a_proj and q_b_proj, or q_proj), kv_a_proj_with_mqa, kv_b_proj, o_proj; QK^T over
    // qk dims and PV over v dims (the padding of the values is not model work).
    const LatentAttentionConfig& m = c.latent_attention;
    const double heads = static_cast<double>(c.num_attention_heads);
    const double qk = static_cast<double>(m.qk_head_dim()), v = static_cast<double>(m.v_head_dim);
    const double rank = static_cast<double>(m.kv_lora_rank),
                 q_rank = static_cast<double>(m.q_lora_rank);
    const double q_params =
        m.q_lora_rank > 0 ? hidden * q_rank + q_rank * heads * qk : hidden * heads * qk;
    attention_params = q_params + hidden * (rank + static_cast<double>(m.qk_rope_head_dim)) +
                       rank * heads * (static_cast<double>(m.qk_nope_head_dim) + v) +
                       heads * v * hidden;
    attention_pair_width = heads * (qk + v) / 2.0;
  }
  // A sparse layer's active MLP: the router (E x H), k experts of 3 x H x I each, the shared
  // expert (3 x H x I_shared) and its gate (1 x H) where it has one.
  const double dense_mlp = 3.0 * hidden * static_cast<double>(c.intermediate_size);
  const bool shared = c.moe.shared_expert_intermediate_size > 0;
  const double sparse_mlp =
      hidden * static_cast<double>(c.moe.num_experts) +
      static_cast<double>(c.moe.experts_per_token) * 3.0 * hidden *
          static_cast<double>(c.moe.expert_intermediate_size) +
      hidden * (3.0 * static_cast<double>(c.moe.shared_expert_intermediate_size) +
                (shared && c.moe.shared_expert_gated ? 1.0 : 0.0));
  // A sliding-window layer (w keys) sees at most w keys per query: a document of L >= w tokens
  // spans L w - w (w - 1) / 2 pairs, 2 L w - w (w - 1) in the len^2 count (exact for one document;
  // each further document of w tokens or more is over-counted by at most w (w - 1)).
  const auto layer_pairs = [&](int64_t layer) {
    const int64_t window = c.sliding_window.empty() ? 0 : c.sliding_window.at(layer);
    if (window <= 0) return attention_pairs;
    const double w = static_cast<double>(window);
    if (tokens <= w) return attention_pairs;  // no document is longer than the window
    return std::min(attention_pairs, 2.0 * w * tokens - w * (w - 1.0));
  };
  double body = 0;
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const bool sparse = c.moe.enabled() && c.moe.sparse_layers.at(static_cast<size_t>(layer));
    body += 2.0 * (sparse ? sparse_mlp : dense_mlp) * tokens;
    if (c.linear_attention.at(layer))
      body += gated_deltanet_flops_per_token(c) * tokens;
    else
      body += 2.0 * attention_params * tokens + 2.0 * layer_pairs(layer) * attention_pair_width;
  }
  return body + (with_lm_head ? lm_head_flops(c, tokens) : 0.0);
}

double lm_head_flops(const DecoderConfig& c, double rows) {
  return 2.0 * rows * static_cast<double>(c.vocab_size) * c.hidden_size;
}

}  // namespace tandem
