// config.json parsing: real-world spellings of each family, and errors for what is not built.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <tuple>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/models/decoder_config.h"

using nlohmann::json;
using tandem::DecoderConfig;
using tandem::DecoderFamily;

namespace {

// Llama 3.1 8B's config.json as published (transformers 4 spelling).
json llama31_config() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
    "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})");
}

std::string error_of(const json& config) {
  try {
    DecoderConfig::from_json(config, "/ckpt/config.json");
  } catch (const tandem::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(DecoderConfig, Llama31) {
  const auto c = DecoderConfig::from_json(llama31_config(), "config.json");
  EXPECT_EQ(c.family, DecoderFamily::Llama);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.sliding_window, std::vector<int64_t>(32, 0));
}

TEST(DecoderConfig, Transformers5RopeParameters) {
  json config = llama31_config();
  config.erase("rope_scaling");
  config.erase("rope_theta");
  config["rope_parameters"] = {
      {"rope_type", "llama3"},   {"rope_theta", 500000.0},
      {"factor", 8.0},           {"low_freq_factor", 1.0},
      {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  config["dtype"] = config["torch_dtype"];
  config.erase("torch_dtype");
  const auto c = DecoderConfig::from_json(config, "config.json");
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
}

TEST(DecoderConfig, Qwen2HasQkvBiasOnly) {
  const auto c = DecoderConfig::from_json(json::parse(R"({
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896,
    "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
    "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "sliding_window": 32768, "use_sliding_window": false, "max_window_layers": 21,
    "tie_word_embeddings": true, "vocab_size": 151936, "max_position_embeddings": 32768,
    "hidden_act": "silu", "bos_token_id": 151643, "eos_token_id": 151643})"),
                                          "config.json");
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.sliding_window, std::vector<int64_t>(24, 0));  // use_sliding_window false
}

TEST(DecoderConfig, Qwen3ExplicitHeadDimAndQkNorm) {
  const auto c = DecoderConfig::from_json(json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024,
    "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16,
    "num_key_value_heads": 8, "head_dim": 128, "rms_norm_eps": 1e-06, "rope_theta": 1000000,
    "attention_bias": false, "tie_word_embeddings": true, "vocab_size": 151936,
    "max_position_embeddings": 40960, "sliding_window": null, "use_sliding_window": false,
    "max_window_layers": 28})"),
                                          "config.json");
  EXPECT_EQ(c.head_dim, 128);  // != 1024 / 16
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
}

TEST(DecoderConfig, MistralSlidingWindow) {
  const auto c = DecoderConfig::from_json(json::parse(R"({
    "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
    "sliding_window": 4096, "vocab_size": 32000, "max_position_embeddings": 32768})"),
                                          "config.json");
  EXPECT_EQ(c.sliding_window, std::vector<int64_t>(32, 4096));
}

TEST(DecoderConfig, RoundTripThroughToJson) {
  const auto c = DecoderConfig::from_json(llama31_config(), "config.json");
  const auto again = DecoderConfig::from_json(c.to_json(), "to_json");
  EXPECT_EQ(again.to_json(), c.to_json());
  EXPECT_EQ(again.head_dim, c.head_dim);
  EXPECT_EQ(again.rope_scaling.factor, c.rope_scaling.factor);
}

TEST(DecoderConfig, ErrorsNameTheFieldAndFile) {
  auto expect_error = [](json config, const std::string& phrase) {
    const std::string message = error_of(config);
    EXPECT_NE(message.find("/ckpt/config.json"), std::string::npos) << message;
    EXPECT_NE(message.find(phrase), std::string::npos)
        << "wanted '" << phrase << "' in: " << message;
  };
  json config = llama31_config();
  config["quantization_config"] = {{"quant_method", "gptq"}};
  expect_error(config, "the checkpoint is quantized with quant_method 'gptq'");

  config = llama31_config();
  config["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 4.0}};
  expect_error(config, "unsupported RoPE scaling type 'dynamic'");

  config = llama31_config();
  config["hidden_act"] = "gelu";
  expect_error(config, "unsupported hidden_act 'gelu'");

  config = llama31_config();
  config["model_type"] = "gpt2";
  expect_error(config, "unsupported model_type 'gpt2'");

  config = llama31_config();
  config["architectures"] = {"LlamaForSequenceClassification"};
  expect_error(config, "unsupported architecture");

  config = llama31_config();
  config["num_key_value_heads"] = 7;
  expect_error(config, "not a multiple of num_key_value_heads");

  config = llama31_config();
  config.erase("hidden_size");
  expect_error(config, "missing required field 'hidden_size'");

  config = llama31_config();
  config["vocab_size"] = "big";
  expect_error(config, "'vocab_size' must be an integer");

  config = llama31_config();
  config["attention_dropout"] = 0.1;
  expect_error(config, "attention_dropout");

  config = llama31_config();
  config["pretraining_tp"] = 2;
  expect_error(config, "pretraining_tp");

  // Sizes are bounded before anything is allocated or looped over (issue 19).
  for (const auto& [field, value, phrase] : std::vector<std::tuple<std::string, json, std::string>>{
           {"hidden_size", 1000000000, "hidden_size must be in 1..65536, got 1000000000"},
           {"vocab_size", int64_t{1000000000000}, "vocab_size must be in 1..16777216"},
           {"intermediate_size", int64_t{1000000000000}, "intermediate_size must be in 1..1048576"},
           {"head_dim", 1000000000, "head_dim must be in 1..4096"},
           {"num_hidden_layers", 100000, "num_hidden_layers must be in 1..1024, got 100000"},
           // Found by fuzz_model_config: a negative layer count sized a vector before the check.
           {"num_hidden_layers", -4, "num_hidden_layers must be in 1..1024, got -4"},
           {"max_position_embeddings", -1, "max_position_embeddings must be in 0..1073741824"},
           {"bos_token_id", int64_t{1000000000000000}, "bos_token_id 1000000000000000 is outside"},
           {"pad_token_id", 128256, "pad_token_id 128256 is outside the vocabulary [0, 128256)"}}) {
    config = llama31_config();
    config[field] = value;
    expect_error(config, phrase);
  }
  config = llama31_config();
  config["pad_token_id"] = -1;  // the spelling of "no pad token" in some published configs
  EXPECT_FALSE(DecoderConfig::from_json(config, "/ckpt/config.json").pad_token_id.has_value());
}
