#pragma once
// Hyperparameters of a Llama-family decoder (Llama 2/3/3.x, Mistral, Qwen2, Qwen3), read from an
// HF config.json. Both transformers 4 (`rope_theta`, `rope_scaling`, `torch_dtype`) and
// transformers 5 (`rope_parameters`, `dtype`, `layer_types`) spellings are understood; any field
// that would change the model and is not implemented is an error naming it.
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem {

enum class DecoderFamily { Llama, Mistral, Qwen2, Qwen3 };

/// "llama", "mistral", "qwen2" or "qwen3".
const char* family_name(DecoderFamily family);

/// RoPE frequency scaling; `llama3` is the only scaled type implemented.
struct RopeScaling {
  std::string type = "default";  // "default" | "llama3"
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;
};

struct DecoderConfig {
  DecoderFamily family = DecoderFamily::Llama;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // hidden_size / num_attention_heads unless the config says otherwise
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // bias on q/k/v projections (Qwen2 always; others via attention_bias)
  bool o_bias = false;    // bias on o_proj (attention_bias in Llama/Mistral/Qwen3)
  bool mlp_bias = false;  // bias on gate/up/down (Llama's mlp_bias)
  bool qk_norm = false;   // per-head RMSNorm on q and k before RoPE (Qwen3)
  // Per decoder layer: the sliding attention window in tokens, or 0 for full causal attention.
  std::vector<int64_t> sliding_window;
  std::string torch_dtype;  // dtype the checkpoint declares ("bfloat16", ...), may be empty
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> pad_token_id;

  /// Parses and validates a config.json object; `path` names the file in errors.
  static DecoderConfig from_json(const nlohmann::json& json, const std::string& path);
  /// Reads `dir/config.json`.
  static DecoderConfig from_dir(const std::string& dir);
  /// The config.json that transformers reads back as this model (transformers 4 spelling,
  /// which transformers 5 also reads).
  nlohmann::json to_json() const;
  /// Checks internal consistency (positive sizes, heads divide, ...); `where` names the source.
  void validate(const std::string& where) const;
  /// The sizes alone (vocab, widths, layers, heads) within their stated bounds; validate()
  /// includes it. Parsing calls it before the layer count sizes anything.
  void validate_sizes(const std::string& where) const;
};

}  // namespace tandem
