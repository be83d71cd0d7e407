#include "tandem/models/flops.h"

namespace tandem {

double decoder_forward_flops(const DecoderConfig& c, double tokens, double attention_pairs,
                             bool with_lm_head) {
  const double hidden = static_cast<double>(c.hidden_size);
  const double attention_width = static_cast<double>(c.num_attention_heads) * c.head_dim;
  const double kv_width = static_cast<double>(c.num_key_value_heads) * c.head_dim;
  const double attention_params = hidden * (2 * attention_width + 2 * kv_width);
  // A sparse layer's active MLP: the router (E x H) and k experts of 3 x H x I each.
  const double dense_mlp = 3.0 * hidden * static_cast<double>(c.intermediate_size);
  const double sparse_mlp = hidden * static_cast<double>(c.moe.num_experts) +
                            static_cast<double>(c.moe.experts_per_token) * 3.0 * hidden *
                                static_cast<double>(c.moe.expert_intermediate_size);
  double body = 0;
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const bool sparse = c.moe.enabled() && c.moe.sparse_layers.at(static_cast<size_t>(layer));
    body += 2.0 * (attention_params + (sparse ? sparse_mlp : dense_mlp)) * tokens +
            2.0 * attention_pairs * attention_width;
  }
  return body + (with_lm_head ? lm_head_flops(c, tokens) : 0.0);
}

double lm_head_flops(const DecoderConfig& c, double rows) {
  return 2.0 * rows * static_cast<double>(c.vocab_size) * c.hidden_size;
}

}  // namespace tandem
