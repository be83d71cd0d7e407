#pragma once
// The Llama-style model shape the benchmarks build, its command-line options, and its model
// FLOPs: 2 x (matmul parameters, lm_head included) per token plus causal attention
// 2 * T^2 * heads * head_dim per layer (QK^T and PV, half the square for causality).
#include <CLI/CLI.hpp>

#include "tandem/models/decoder_config.h"

namespace tandem::bench {

struct ModelShape {
  int64_t hidden = 1024, layers = 8, heads = 16, kv_heads = 8, intermediate = 2816, vocab = 32000;
};

/// The demo target's shape (configs/demo-target-model.json).
inline ModelShape demo_target_shape() {
  ModelShape demo;
  demo.hidden = 256, demo.layers = 8, demo.heads = 8, demo.kv_heads = 4, demo.intermediate = 768,
  demo.vocab = 4096;
  return demo;
}

/// Registers --hidden, --layers, --heads, --kv-heads, --intermediate, --vocab.
inline void add_shape_options(CLI::App& app, ModelShape& shape) {
  app.add_option("--hidden", shape.hidden)->capture_default_str();
  app.add_option("--layers", shape.layers)->capture_default_str();
  app.add_option("--heads", shape.heads)->capture_default_str();
  app.add_option("--kv-heads", shape.kv_heads)->capture_default_str();
  app.add_option("--intermediate", shape.intermediate)->capture_default_str();
  app.add_option("--vocab", shape.vocab)->capture_default_str();
}

/// A Llama config of `shape` (head_dim = hidden / heads, full causal attention).
inline DecoderConfig llama_config(const ModelShape& shape) {
  DecoderConfig config;
  config.family = DecoderFamily::Llama;
  config.vocab_size = shape.vocab;
  config.hidden_size = shape.hidden;
  config.intermediate_size = shape.intermediate;
  config.num_hidden_layers = shape.layers;
  config.num_attention_heads = shape.heads;
  config.num_key_value_heads = shape.kv_heads;
  config.head_dim = shape.hidden / shape.heads;
  config.rope_theta = 500000.0;
  config.sliding_window.assign(shape.layers, 0);
  return config;
}

/// Model FLOPs of one forward over `rows` sequences of `tokens_per_row` tokens.
inline double forward_flops(const DecoderConfig& c, int64_t tokens_per_row, int64_t rows = 1) {
  const double attention_width = static_cast<double>(c.num_attention_heads) * c.head_dim;
  const double kv_width = static_cast<double>(c.num_key_value_heads) * c.head_dim;
  const double per_layer_params = c.hidden_size * (2 * attention_width + 2 * kv_width) +
                                  3.0 * c.hidden_size * c.intermediate_size;
  const double matmul_params = c.num_hidden_layers * per_layer_params +
                               static_cast<double>(c.vocab_size) * c.hidden_size;
  const double t = static_cast<double>(tokens_per_row);
  const double attention = c.num_hidden_layers * 2.0 * t * t * attention_width;
  return rows * (2.0 * matmul_params * t + attention);
}

}  // namespace tandem::bench
