// Gemma 3's config.json (models/decoder_config.h GemmaLayers): the fixtures' transformers 5
// spelling and the hub's transformers 4 one read as the same model, the window pattern, the two
// RoPE bases, the defaults transformers takes, what is refused; the embedding scale rounded to
// the model's dtype. Logits, every layer and greedy generation against transformers are in
// test_decoder_parity.cpp and test_generation.cpp (the gemma3_text and gemma3 fixtures of
// tools/make_model_fixtures.py).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "config_test_util.h"
#include "tandem/models/decoder.h"
#include "tandem/models/layers.h"

namespace {

using nlohmann::json;
using tandem::DecoderConfig;
using tandem::testing::expect_config_error;
using tandem::testing::fixture_config;
using tandem::testing::model_fixture;
using tandem::testing::parse_config;

void expect_fixture_model(const DecoderConfig& c) {
  EXPECT_EQ(c.family, tandem::DecoderFamily::Gemma3);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.sliding_window, std::vector<int64_t>({6, 6, 0, 6, 6, 0}));
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_scaling.type, "linear");
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.gemma.local_rope_theta, 1e4);
  EXPECT_EQ(c.gemma.query_pre_attn_scalar, 24.0);
  EXPECT_TRUE(c.gemma.sandwich_norms);
  EXPECT_TRUE(c.gemma.scaled_embeddings);
  EXPECT_TRUE(c.zero_centered_norms);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.mlp_activation, tandem::MlpActivation::GeluTanh);
}

TEST(Gemma3Config, ReadsTheFixturesAndTheHubSpelling) {
  expect_fixture_model(parse_config(fixture_config("gemma3_text")));
  const DecoderConfig wrapped = parse_config(fixture_config("gemma3"));
  expect_fixture_model(wrapped);
  EXPECT_TRUE(wrapped.language_model_wrapped);

  // The hub's transformers 4 spelling of the same model: rope_theta and rope_scaling for the
  // full layers, rope_local_base_freq for the sliding ones, the window pattern instead of
  // layer_types (every 3rd layer full here).
  json hub = fixture_config("gemma3_text");
  hub.erase("rope_parameters");
  hub.erase("layer_types");
  hub.erase("_sliding_window_pattern");
  hub["rope_theta"] = 1e6;
  hub["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  hub["rope_local_base_freq"] = 1e4;
  hub["sliding_window_pattern"] = 3;
  expect_fixture_model(parse_config(hub));
  // transformers' defaults: pattern 6, full RoPE base 1e6, sliding 1e4, query_pre_attn_scalar
  // 256, head_dim 256, tied embeddings.
  hub.erase("sliding_window_pattern");
  hub.erase("rope_theta");
  hub.erase("rope_scaling");
  hub.erase("rope_local_base_freq");
  hub.erase("query_pre_attn_scalar");
  hub.erase("head_dim");
  hub.erase("tie_word_embeddings");
  const DecoderConfig defaults = parse_config(hub);
  EXPECT_EQ(defaults.sliding_window, std::vector<int64_t>({6, 6, 6, 6, 6, 0}));
  EXPECT_EQ(defaults.rope_theta, 1e6);
  EXPECT_EQ(defaults.rope_scaling.type, "default");
  EXPECT_EQ(defaults.gemma.local_rope_theta, 1e4);
  EXPECT_EQ(defaults.gemma.query_pre_attn_scalar, 256.0);
  EXPECT_EQ(defaults.head_dim, 256);
  EXPECT_TRUE(defaults.tie_word_embeddings);

  // A draft's layers are plain: no Gemma layers, SwiGLU, one RoPE.
  const DecoderConfig draft =
      parse_config(fixture_config("gemma3_text")).draft_layers(tandem::DecoderFamily::Llama, 1);
  EXPECT_FALSE(draft.gemma.sandwich_norms);
  EXPECT_EQ(draft.gemma.local_rope_theta, 0.0);
  EXPECT_EQ(draft.mlp_activation, tandem::MlpActivation::Silu);
  EXPECT_FALSE(draft.zero_centered_norms);
  // It keeps the full layers' RoPE, and its export says so (a Llama config reads it back).
  const json written = draft.to_json();
  EXPECT_EQ(written["rope_scaling"], json({{"rope_type", "linear"}, {"factor", 8.0}}));
  EXPECT_EQ(written["rope_theta"], 1e6);
  const DecoderConfig again = parse_config(written);
  EXPECT_EQ(again.rope_scaling.type, "linear");
  EXPECT_EQ(again.rope_scaling.factor, 8.0);
}

// The published vision-language configs leave most of text_config to transformers' defaults:
// Gemma 3 27B states no vocab_size, RoPE bases, eps or pattern; 4B not even its heads.
TEST(Gemma3Config, ReadsThePublishedConfigsWithTransformersDefaults) {
  auto wrapper = [](const json& text) {
    return json{{"architectures", {"Gemma3ForConditionalGeneration"}},
                {"model_type", "gemma3"},
                {"boi_token_index", 255999},
                {"eoi_token_index", 256000},
                {"image_token_index", 262144},
                {"mm_tokens_per_image", 256},
                {"eos_token_id", {1, 106}},
                {"initializer_range", 0.02},
                {"text_config", text},
                {"torch_dtype", "bfloat16"},
                {"vision_config", {{"model_type", "siglip_vision_model"}, {"hidden_size", 1152}}}};
  };
  const json scaling = {{"factor", 8.0}, {"rope_type", "linear"}};
  const DecoderConfig big = parse_config(wrapper({{"head_dim", 128},
                                                  {"hidden_size", 5376},
                                                  {"intermediate_size", 21504},
                                                  {"model_type", "gemma3_text"},
                                                  {"num_attention_heads", 32},
                                                  {"num_hidden_layers", 62},
                                                  {"num_key_value_heads", 16},
                                                  {"query_pre_attn_scalar", 168},
                                                  {"rope_scaling", scaling},
                                                  {"sliding_window", 1024}}));
  EXPECT_EQ(big.vocab_size, 262208);
  EXPECT_EQ(big.num_attention_heads, 32);
  EXPECT_EQ(big.rope_theta, 1e6);
  EXPECT_EQ(big.gemma.local_rope_theta, 1e4);
  EXPECT_EQ(big.rope_scaling.type, "linear");
  EXPECT_EQ(big.gemma.query_pre_attn_scalar, 168.0);
  EXPECT_EQ(big.sliding_window.at(4), 1024);
  EXPECT_EQ(big.sliding_window.at(5), 0);
  EXPECT_TRUE(big.tie_word_embeddings);
  EXPECT_TRUE(big.language_model_wrapped);
  const DecoderConfig small = parse_config(wrapper({{"hidden_size", 2560},
                                                    {"intermediate_size", 10240},
                                                    {"model_type", "gemma3_text"},
                                                    {"num_hidden_layers", 34},
                                                    {"rope_scaling", scaling},
                                                    {"sliding_window", 1024}}));
  EXPECT_EQ(small.num_attention_heads, 8);
  EXPECT_EQ(small.num_key_value_heads, 4);
  EXPECT_EQ(small.head_dim, 256);
  EXPECT_EQ(small.gemma.query_pre_attn_scalar, 256.0);
  EXPECT_EQ(small.rms_norm_eps, 1e-6);
}

TEST(Gemma3Config, RefusesWhatItDoesNotRun) {
  const json base = fixture_config("gemma3_text");
  auto with = [&](const char* key, const json& value) {
    json config = base;
    config[key] = value;
    return config;
  };
  expect_config_error(with("final_logit_softcapping", 30.0),
                      "unsupported final_logit_softcapping 30.0");
  expect_config_error(with("attn_logit_softcapping", 50.0),
                      "unsupported attn_logit_softcapping 50.0");
  expect_config_error(with("hidden_activation", "gelu"), "unsupported hidden_activation 'gelu'");
  expect_config_error(with("use_bidirectional_attention", true),
                      "unsupported use_bidirectional_attention true");
  expect_config_error(with("query_pre_attn_scalar", 0),
                      "query_pre_attn_scalar must be a finite number");
  json local_yarn = base;
  local_yarn["rope_parameters"]["sliding_attention"]["rope_type"] = "yarn";
  expect_config_error(local_yarn, "unsupported RoPE type 'yarn' for the sliding-window layers");
  json third = base;
  third["rope_parameters"]["chunked_attention"] = {{"rope_type", "default"}};
  expect_config_error(third, "rope_parameters has an entry for 'chunked_attention'");
  json no_window = base;
  no_window.erase("layer_types");
  no_window["sliding_window"] = nullptr;  // absent would be transformers' 4096
  expect_config_error(no_window, "sliding_window must be set for the sliding-window layers");
  json wrapped = fixture_config("gemma3");
  wrapped["architectures"] = {"Gemma3ForCausalLM"};
  expect_config_error(wrapped, "expected Gemma3ForConditionalGeneration");
}

// transformers multiplies the embeddings by sqrt(hidden_size) cast to their dtype: in bf16,
// sqrt(40) = 6.3246 becomes 6.3125 (what 2560's 50.596 -> 50.5 is for Gemma 3 4B).
TEST(Gemma3Config, EmbeddingScaleIsRoundedToTheDtype) {
  torch::NoGradGuard no_grad;
  json config = fixture_config("gemma3_text");
  config["hidden_size"] = 40;
  config["num_hidden_layers"] = 1;
  config.erase("layer_types");
  config["sliding_window_pattern"] = 1;
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    tandem::CausalLM model(parse_config(config), at::TensorOptions().dtype(dtype));
    tandem::init_normal_(*model, 0.02, 0);
    const at::Tensor ids = at::arange(5, at::kLong).unsqueeze(0);
    const at::Tensor raw = model->model->embed_tokens->weight.index_select(0, ids[0]).unsqueeze(0);
    const double scale = dtype == at::kBFloat16 ? 6.3125 : static_cast<double>(std::sqrt(40.0f));
    EXPECT_TRUE(at::equal(model->embed(ids), raw * at::scalar_tensor(scale, dtype)))
        << c10::toString(dtype);
  }
}

}  // namespace
