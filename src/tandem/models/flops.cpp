#include "tandem/models/flops.h"

namespace tandem {

double decoder_forward_flops(const DecoderConfig& c, double tokens, double attention_pairs,
                             bool with_lm_head) {
  const double attention_width = static_cast<double>(c.num_attention_heads) * c.head_dim;
  const double kv_width = static_cast<double>(c.num_key_value_heads) * c.head_dim;
  const double per_layer_params = c.hidden_size * (2 * attention_width + 2 * kv_width) +
                                  3.0 * c.hidden_size * c.intermediate_size;
  const double layers = static_cast<double>(c.num_hidden_layers);
  const double body = 2.0 * layers * per_layer_params * tokens +
                      layers * 2.0 * attention_pairs * attention_width;
  return body + (with_lm_head ? lm_head_flops(c, tokens) : 0.0);
}

double lm_head_flops(const DecoderConfig& c, double rows) {
  return 2.0 * rows * static_cast<double>(c.vocab_size) * c.hidden_size;
}

}  // namespace tandem
