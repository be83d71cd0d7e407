// DeepSeek-V3's multi-head latent attention (models/latent_attention.h): its config.json (the
// fixtures', Kimi-K2's model_type, what it refuses), the cached forward's two ways of attending
// over the latent cache (expanded through kv_b_proj, and absorbed) against the uncached forward,
// which way each call takes, and the cache's memory per token. Logits, every layer and greedy
// generation against transformers are in test_decoder_parity.cpp and test_generation.cpp (the
// deepseek_v3 and deepseek_v3_q_proj fixtures of tools/make_model_fixtures.py).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "config_test_util.h"
#include "tandem/models/causal_attention.h"
#include "tandem/models/decoder.h"
#include "tandem/models/dflash.h"
#include "tandem/models/eagle3.h"
#include "tandem/models/load.h"
#include "tandem/objectives/eagle3.h"

namespace {

using nlohmann::json;
using tandem::DecoderConfig;
using tandem::LatentCachePath;
using tandem::testing::expect_config_error;
using tandem::testing::fixture_config;
using tandem::testing::model_fixture;
using tandem::testing::parse_config;

TEST(LatentAttentionConfig, ReadsTheFixtures) {
  const DecoderConfig yarn = parse_config(fixture_config("deepseek_v3"));
  EXPECT_EQ(yarn.family, tandem::DecoderFamily::DeepseekV3);
  const tandem::LatentAttentionConfig& m = yarn.latent_attention;
  EXPECT_EQ(m.q_lora_rank, 32);
  EXPECT_EQ(m.kv_lora_rank, 16);
  EXPECT_EQ(m.qk_nope_head_dim, 16);
  EXPECT_EQ(m.qk_rope_head_dim, 8);
  EXPECT_EQ(m.v_head_dim, 12);
  EXPECT_TRUE(m.rope_interleave);
  EXPECT_EQ(yarn.head_dim, 24);  // config.json's head_dim is 8: transformers' RoPE width
  EXPECT_EQ(yarn.rotated_dims(), 8);
  // YaRN factor 4 with mscale_all_dim 1: the softmax scale times (0.1 ln 4 + 1)^2.
  const double mscale = 0.1 * std::log(4.0) + 1.0;
  EXPECT_DOUBLE_EQ(m.softmax_scale_factor, mscale * mscale);
  // transformers' scaling for it, 24^-0.5 m^2 (tools/make_model_fixtures.py prints it).
  EXPECT_NEAR(m.softmax_scale_factor / std::sqrt(24.0), 0.2646422579642267, 1e-15);
  EXPECT_EQ(yarn.mtp_layers, 1);
  EXPECT_EQ(yarn.moe.groups, 2);
  EXPECT_EQ(yarn.moe.sparse_layers, std::vector<bool>({false, true, true, true}));

  const DecoderConfig plain = parse_config(fixture_config("deepseek_v3_q_proj"));
  EXPECT_EQ(plain.latent_attention.q_lora_rank, 0);  // null: q_proj
  EXPECT_FALSE(plain.latent_attention.rope_interleave);
  EXPECT_EQ(plain.latent_attention.softmax_scale_factor, 1.0);
  EXPECT_EQ(plain.mtp_layers, 0);

  // A draft's layers: plain heads as wide as the values, one key/value head each.
  const DecoderConfig draft = yarn.draft_layers(tandem::DecoderFamily::Llama, 1);
  EXPECT_FALSE(draft.latent_attention.enabled());
  EXPECT_EQ(draft.head_dim, 12);
  EXPECT_EQ(draft.num_key_value_heads, 4);
  EXPECT_EQ(draft.rotated_dims(), 12);
  // draft.num_attention_heads / num_key_value_heads / head_dim where a config sets them
  // (SpecForge's DeepSeek-V3 draft: 56 heads of 128, 8 key/value heads).
  const DecoderConfig set = yarn.draft_layers(tandem::DecoderFamily::Llama, 1, {2, 1, 16});
  EXPECT_EQ(set.num_attention_heads, 2);
  EXPECT_EQ(set.num_key_value_heads, 1);
  EXPECT_EQ(set.head_dim, 16);
  const tandem::Eagle3Config eagle3 = tandem::Eagle3Config::for_target(yarn, {}, 64, 0, {2, 1, 0});
  EXPECT_EQ(eagle3.layer.num_attention_heads, 2);
  EXPECT_EQ(eagle3.layer.num_key_value_heads, 1);
  EXPECT_EQ(eagle3.layer.head_dim, 12);
  // Heads set without their key/value heads: still one key/value head per query head.
  EXPECT_EQ(yarn.draft_layers(tandem::DecoderFamily::Llama, 1, {2, 0, 0}).num_key_value_heads, 2);
  // Elsewhere the target's key/value heads stay, and a count they do not divide names the keys.
  const DecoderConfig qwen3 = parse_config(fixture_config("qwen3"));
  const std::string message = tandem::testing::error_of([&] {
    qwen3.draft_layers(tandem::DecoderFamily::Llama, 1, {qwen3.num_key_value_heads + 1, 0, 0});
  });
  EXPECT_NE(message.find("draft.num_attention_heads"), std::string::npos) << message;
  EXPECT_NE(message.find("draft.num_key_value_heads"), std::string::npos) << message;
  tandem::DFlashDims dims;
  dims.num_layers = 1;
  const tandem::DFlashConfig dflash = tandem::DFlashConfig::for_target(yarn, dims, {}, 4, 511);
  EXPECT_EQ(dflash.layer.head_dim, 12);
  EXPECT_EQ(dflash.layer.num_key_value_heads, 4);
}

// The EAGLE-3 draft takes the target's YaRN unless draft.rope_theta gives it an unscaled RoPE
// of its own (SpecForge's DeepSeek-V3 draft: base 10000, no scaling).
TEST(LatentAttentionConfig, Eagle3DraftRopeIsTheTargetsOrItsOwn) {
  tandem::Eagle3Options options;
  options.target_path = model_fixture("deepseek_v3");
  options.aux_layer_ids = {0, 1, 2};
  options.draft_vocab_size = 64;
  EXPECT_EQ(tandem::Eagle3Objective(options).draft()->config().layer.rope_scaling.type, "yarn");
  options.rope_theta = 10000.0;
  tandem::Eagle3Objective objective(options);
  const auto& layer = objective.draft()->config().layer;
  EXPECT_EQ(layer.rope_scaling.type, "default");
  EXPECT_EQ(layer.rope_theta, 10000.0);
}

// Published configs carry auto_map (their trust_remote_code classes): it changes nothing here.
TEST(LatentAttentionConfig, KimiK2ReadsAsDeepSeekV3) {
  json with_auto_map = fixture_config("deepseek_v3");
  with_auto_map["auto_map"] = {{"AutoConfig", "configuration_deepseek.DeepseekV3Config"},
                               {"AutoModel", "modeling_deepseek.DeepseekV3Model"}};
  EXPECT_EQ(parse_config(with_auto_map).family, tandem::DecoderFamily::DeepseekV3);
  json config = fixture_config("deepseek_v3");
  config["model_type"] = "kimi_k2";
  EXPECT_EQ(parse_config(config).family, tandem::DecoderFamily::DeepseekV3);
  config["architectures"] = {"KimiK2ForCausalLM"};
  expect_config_error(config, "unsupported architecture \"KimiK2ForCausalLM\"");
}

TEST(LatentAttentionConfig, RefusesWhatItDoesNotRun) {
  const json base = fixture_config("deepseek_v3");
  auto with = [&](const char* key, const json& value) {
    json config = base;
    if (value.is_discarded())
      config.erase(key);
    else
      config[key] = value;
    return config;
  };
  const json erase = json(json::value_t::discarded);
  expect_config_error(with("q_lora_rank", erase), "missing required field 'q_lora_rank'");
  expect_config_error(with("kv_lora_rank", erase), "missing required field 'kv_lora_rank'");
  expect_config_error(with("num_key_value_heads", 2), "must equal num_attention_heads");
  expect_config_error(with("head_dim", 24), "head_dim 24 must equal qk_rope_head_dim (8)");
  expect_config_error(with("qk_head_dim", 25), "qk_head_dim 25 must equal");
  expect_config_error(with("v_head_dim", 40), "v_head_dim <= that head_dim");
  expect_config_error(with("kv_lora_rank", 0), "kv_lora_rank must be in 1..");
  expect_config_error(with("attention_bias", true), "unsupported attention_bias true");
  expect_config_error(with("moe_layer_freq", 2), "unsupported moe_layer_freq 2");
  expect_config_error(with("scoring_func", "softmax"), "unsupported scoring_func");
}

// Layer 0 of the fixture on 7 tokens of 2 rows: the uncached forward (the kernels' causal
// attention over padded values), against the cache filled by a prefill of 4 and 3 single steps,
// attending expanded or absorbed.
TEST(LatentAttention, CachedPathsEqualTheUncachedForward) {
  torch::NoGradGuard no_grad;
  const tandem::CausalLM model =
      tandem::load_causal_lm(model_fixture("deepseek_v3"), at::kFloat, tandem::RunContext{});
  const DecoderConfig& config = model->config();
  const auto& attention = *model->model->layers->at<tandem::DecoderLayerImpl>(0).latent_attn;
  at::manual_seed(3);
  const int64_t rows = 2, length = 7;
  const at::Tensor x = at::randn({rows, length, config.hidden_size});
  const at::Tensor positions = at::arange(length, at::kLong).unsqueeze(0).expand({rows, length});
  const auto frequencies =
      tandem::RopeFrequencies::of(config.rotated_dims(), config.rope_theta, config.rope_scaling);
  const auto rope = [&](int64_t start, int64_t n) {
    return tandem::rope_tables(frequencies, positions.narrow(1, start, n), at::kFloat);
  };
  const tandem::QueryKeyValue qkv = attention.project(x, rope(0, length));
  const at::Tensor expected = attention.output(tandem::sdpa(qkv.q, qkv.k, qkv.v, at::Tensor()));

  for (const LatentCachePath path : {LatentCachePath::Expanded, LatentCachePath::Absorbed}) {
    tandem::KvCache cache(config, rows, length, at::TensorOptions().dtype(at::kFloat));
    std::vector<at::Tensor> outputs;
    for (const auto& [start, n] :
         std::vector<std::pair<int64_t, int64_t>>{{0, 4}, {4, 1}, {5, 1}, {6, 1}}) {
      cache.begin(at::ones({rows, n}, at::kBool));
      const at::Tensor query_slot = at::arange(start, start + n, at::kLong).view({1, 1, n, 1});
      const at::Tensor key_slot = at::arange(start + n, at::kLong).view({1, 1, 1, start + n});
      const at::Tensor mask = (key_slot <= query_slot).expand({rows, 1, n, start + n});
      outputs.push_back(
          attention.forward_cached(x.narrow(1, start, n), rope(start, n), mask, cache, 0, path));
      cache.commit();
    }
    const double error = (at::cat(outputs, 1) - expected).abs().max().item<double>();
    EXPECT_LT(error, 1e-5) << (path == LatentCachePath::Absorbed ? "absorbed" : "expanded");
    std::printf("[latent] %s cache vs uncached: max |diff| %.2e\n",
                path == LatentCachePath::Absorbed ? "absorbed" : "expanded", error);
  }
}

// With DeepSeek-V3's shapes (128 heads, kv_lora_rank 512, qk 128 + 64, v 128) over 4096 cached
// slots, absorbing costs n h (4096 (2 x 512 + 64) + 256 x 512) multiply-adds and expanding
// h (4096 x 256 x 512 + n 4096 (192 + 128)): absorbing is cheaper below n = 163.84.
TEST(LatentAttention, DecodingAbsorbsAndLongPrefillsExpand) {
  tandem::LatentAttentionConfig v3;
  v3.q_lora_rank = 1536;
  v3.kv_lora_rank = 512;
  v3.qk_nope_head_dim = 128;
  v3.qk_rope_head_dim = 64;
  v3.v_head_dim = 128;
  EXPECT_TRUE(tandem::latent_attention_absorbs(v3, 128, 1, 4096));
  EXPECT_TRUE(tandem::latent_attention_absorbs(v3, 128, 163, 4096));
  EXPECT_FALSE(tandem::latent_attention_absorbs(v3, 128, 164, 4096));
  EXPECT_FALSE(tandem::latent_attention_absorbs(v3, 128, 4096, 4096));
}

// The cache keeps kv_lora_rank + qk_rope_head_dim values per token and layer: DeepSeek-V3's 61
// layers of 576 in bf16 are 70,272 bytes per slot and row (plus its validity flag), against
// 61 x 128 x (192 + 128) x 2 = 4,997,120 for full keys and values.
TEST(LatentAttention, CacheHoldsTheLatentPerToken) {
  json config = fixture_config("deepseek_v3");
  config["num_hidden_layers"] = 61;
  config["first_k_dense_replace"] = 3;
  config["kv_lora_rank"] = 512;
  config["qk_rope_head_dim"] = 64;
  config["head_dim"] = 64;
  config["qk_head_dim"] = 80;
  const DecoderConfig v3 = parse_config(config);
  const tandem::KvCache cache(v3, 1, 1, at::TensorOptions().dtype(at::kBFloat16));
  EXPECT_EQ(cache.bytes(), 61 * 576 * 2 + 1);

  const DecoderConfig fixture = parse_config(fixture_config("deepseek_v3"));
  const tandem::KvCache small(fixture, 2, 5, at::TensorOptions().dtype(at::kFloat));
  EXPECT_EQ(small.bytes(), 4 * 2 * 5 * (16 + 8) * 4 + 2 * 5);
}

}  // namespace
