#pragma once
// The Llama-style model shape the benchmarks build, its command-line options, and its model
// FLOPs: 2 x (matmul parameters, lm_head included) per token plus causal attention
// 2 * T^2 * heads * head_dim per layer (QK^T and PV, half the square for causality).
#include <CLI/CLI.hpp>

#include "tandem/models/decoder_config.h"
#include "tandem/models/flops.h"

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

/// Model FLOPs of one forward over `rows` sequences of `tokens_per_row` tokens, lm_head included
/// (models/flops.h; a config with vocab_size 0 counts the layers only).
inline double forward_flops(const DecoderConfig& c, int64_t tokens_per_row, int64_t rows = 1) {
  const double t = static_cast<double>(tokens_per_row), r = static_cast<double>(rows);
  return decoder_forward_flops(c, r * t, r * t * t, /*with_lm_head=*/true);
}

}  // namespace tandem::bench
