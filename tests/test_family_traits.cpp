// The family table (models/family_traits.h): every family's config.json reads and writes as its
// entry says, the fields an entry refuses are named, and values that make no sense fail naming
// the file and the field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/models/decoder_config.h"
#include "tandem/models/family_traits.h"
#include "test_util.h"

using nlohmann::json;
using tandem::DecoderConfig;
using tandem::DecoderFamily;
using tandem::FamilyTraits;
using tandem::FieldRule;
using tandem::QkNorm;
using tandem::WindowReading;
using tandem::WindowSpelling;
using tandem::testing::error_of;

namespace {

constexpr const char* kPath = "/ckpt/config.json";

// A small config.json of `family`: 4 layers, 4 heads of 16 dims, and what its entry requires
// (the experts of an MoE family, the rotary dims of a partial-RoPE one, a hybrid's Gated
// DeltaNet sizes). A wrapped family's decoder is written alone (its text model_type).
json small_config(const FamilyTraits& family) {
  const bool text_alone = family.hybrid.text_model_type != nullptr;
  json config = {
      {"architectures", {text_alone ? family.hybrid.text_architecture : family.architecture}},
      {"model_type", text_alone ? family.hybrid.text_model_type : family.model_type},
      {"vocab_size", 64},
      {"hidden_size", 32},
      {"intermediate_size", 48},
      {"num_hidden_layers", 4},
      {"num_attention_heads", 4},
      {"num_key_value_heads", 2},
      {"head_dim", 16},
      {"rms_norm_eps", 1e-6},
      {"rope_theta", 10000.0},
      {"max_position_embeddings", 256},
      {"bos_token_id", 1},
      {"eos_token_id", 2}};
  if (family.moe.enabled) {
    config["num_local_experts"] = 4;
    config["num_experts_per_tok"] = 2;
    if (family.moe.own_expert_width) config["moe_intermediate_size"] = 24;
    if (family.moe.shared_expert) config["shared_expert_intermediate_size"] = 20;
    if (family.moe.deepseek_layout) {  // 2 groups of 2 experts, no shared expert, no dense layer
      config["n_group"] = 2;
      config["topk_group"] = 1;
      config["routed_scaling_factor"] = 1.0;
      config["n_shared_experts"] = 0;
      config["first_k_dense_replace"] = 0;
    }
  }
  if (family.hybrid.enabled) {
    config["linear_num_key_heads"] = 2;
    config["linear_num_value_heads"] = 4;
    config["linear_key_head_dim"] = 8;
    config["linear_value_head_dim"] = 8;
    config["linear_conv_kernel_dim"] = 4;
  }
  if (family.latent_attention) {  // heads of [8 | 8] query/key dims, values of 8, one per head
    config["num_key_value_heads"] = 4;
    config.erase("head_dim");
    config["q_lora_rank"] = 12;
    config["kv_lora_rank"] = 8;
    config["qk_nope_head_dim"] = 8;
    config["qk_rope_head_dim"] = 8;
    config["v_head_dim"] = 8;
  }
  // Gemma 3: every layer (the pattern is 6); gpt-oss: layers 0 and 2 (the pattern is 2)
  if (family.windows == WindowReading::LayerTypesOrPattern) config["sliding_window"] = 8;
  if (family.partial_rope && family.rule("rotary_dim"))
    config["rotary_dim"] = 8;
  else if (family.partial_rope)  // hybrids' and GLM's configs have no rotary_dim
    config["partial_rotary_factor"] = 0.5;
  return config;
}

json small_config(DecoderFamily family) { return small_config(tandem::family_traits(family)); }

DecoderConfig parse(const json& config) { return DecoderConfig::from_json(config, kPath); }

std::string error_of_config(const json& config) {
  return error_of([&] { parse(config); });
}

// Expects the error of `config` to name the file and contain `phrase`.
void expect_error(const json& config, const std::string& phrase) {
  const std::string message = error_of_config(config);
  EXPECT_NE(message.find(kPath), std::string::npos) << message;
  EXPECT_NE(message.find(phrase), std::string::npos) << "wanted '" << phrase << "' in: " << message;
}

// A value of the same kind as `value` that differs from it.
json other_than(const json& value) {
  if (value.is_boolean()) return !value.get<bool>();
  if (value.is_string()) return value.get<std::string>() + "_other";
  if (value.is_number()) return value.get<double>() + 1;
  return "other";
}

const std::vector<DecoderFamily> kFamilies = {
    DecoderFamily::Llama,     DecoderFamily::Mistral,  DecoderFamily::Qwen2,
    DecoderFamily::Qwen3,     DecoderFamily::Qwen3Moe, DecoderFamily::Mixtral,
    DecoderFamily::MiniMaxM2, DecoderFamily::Qwen3_5,  DecoderFamily::Qwen3_5Moe,
    DecoderFamily::Qwen3Next, DecoderFamily::Glm4Moe,  DecoderFamily::DeepseekV3,
    DecoderFamily::Gemma3,    DecoderFamily::GptOss};

}  // namespace

TEST(FamilyTraits, EveryFamilyHasOneEntry) {
  EXPECT_EQ(tandem::family_table().size(), kFamilies.size());
  std::set<std::string> types, architectures;
  for (DecoderFamily family : kFamilies) {
    const FamilyTraits& traits = tandem::family_traits(family);
    EXPECT_EQ(traits.family, family);
    EXPECT_STREQ(tandem::family_name(family), traits.model_type);
    EXPECT_EQ(tandem::find_family(traits.model_type), &traits);
    if (traits.hybrid.text_model_type)
      EXPECT_EQ(tandem::find_family(traits.hybrid.text_model_type), &traits);
    types.insert(traits.model_type);
    architectures.insert(traits.architecture);
  }
  EXPECT_EQ(types.size(), kFamilies.size());
  EXPECT_EQ(architectures.size(), kFamilies.size());
  EXPECT_EQ(tandem::find_family("gpt2"), nullptr);
  EXPECT_EQ(tandem::family_names(),
            "llama, mistral, qwen2, qwen3, qwen3_moe, mixtral, minimax_m2, qwen3_5, qwen3_5_moe, "
            "qwen3_next, glm4_moe, deepseek_v3, gemma3_text or gpt_oss");
  // Kimi-K2's checkpoints are DeepSeek-V3's architecture under their own model_type.
  EXPECT_EQ(tandem::find_family("kimi_k2"), &tandem::family_traits(DecoderFamily::DeepseekV3));
}

TEST(FamilyTraits, EveryFamilyReadsAndWritesAsItsEntrySays) {
  for (const FamilyTraits& family : tandem::family_table()) {
    SCOPED_TRACE(family.model_type);
    const DecoderConfig c = parse(small_config(family));
    EXPECT_EQ(c.family, family.family);
    // The layers the entry implies (gpt-oss: biased unless attention_bias says otherwise).
    const bool default_bias =
        family.defaults.is_object() && family.defaults.value("attention_bias", false);
    EXPECT_EQ(c.qkv_bias, family.qkv_bias_always || default_bias);
    EXPECT_EQ(c.o_bias, default_bias);
    EXPECT_EQ(c.attention_sinks, family.attention_sinks);
    EXPECT_FALSE(c.mlp_bias);
    // (GLM-4.5's norms only when config.json says use_qk_norm: not here)
    EXPECT_EQ(c.qk_norm,
              family.qk_norm != QkNorm::None && family.qk_norm != QkNorm::PerHeadWhenUseQkNorm);
    EXPECT_EQ(c.qk_norm_across_heads, family.qk_norm == QkNorm::AcrossHeads);
    EXPECT_EQ(c.rotated_dims(), family.partial_rope || family.latent_attention ? 8 : 16);
    EXPECT_EQ(c.latent_attention.enabled(), family.latent_attention);
    std::vector<int64_t> windows(4, 0);
    for (int64_t i = 0; i < 4; ++i)
      if (family.windows == WindowReading::LayerTypesOrPattern && (i + 1) % family.window_pattern)
        windows[i] = 8;
    EXPECT_EQ(c.sliding_window, windows);
    EXPECT_EQ(c.moe.enabled(), family.moe.enabled);
    if (family.moe.enabled) {
      EXPECT_EQ(c.moe.num_experts, 4);
      EXPECT_EQ(c.moe.scoring, family.moe.scoring);
      EXPECT_EQ(c.moe.expert_intermediate_size, family.moe.own_expert_width ? 24 : 48);
      // norm_topk_prob is absent: transformers' default where it is read (false, true in
      // DeepSeek-V3's layout), always normalised elsewhere.
      EXPECT_EQ(c.moe.normalize_top_k,
                !family.moe.reads_norm_topk_prob || family.moe.deepseek_layout);
      EXPECT_EQ(c.moe.weights_in_model_dtype, family.moe.weights_in_model_dtype);
      EXPECT_EQ(c.moe.sparse_layers, std::vector<bool>(4, true));
      EXPECT_EQ(c.moe.shared_expert_intermediate_size, family.moe.shared_expert ? 20 : 0);
    }
    EXPECT_EQ(c.hybrid(), family.hybrid.enabled);
    EXPECT_EQ(c.gated_attention, family.hybrid.enabled);
    EXPECT_EQ(c.zero_centered_norms, family.hybrid.enabled || family.gemma_layers);
    EXPECT_EQ(c.gemma.sandwich_norms, family.gemma_layers);
    if (family.hybrid.enabled) {
      // No layer_types: every 4th layer attends (transformers' full_attention_interval 4).
      EXPECT_EQ(c.linear_attention.layers, std::vector<bool>({true, true, true, false}));
      EXPECT_EQ(c.linear_attention.fused_projections, family.hybrid.fused_projections);
      EXPECT_EQ(c.linear_attention.value_heads, 4);
    }
    if (family.hybrid.enabled || family.moe.deepseek_layout || family.gemma_layers ||
        family.attention_sinks) {
      // Read, never written: tandem does not train these families.
      EXPECT_NE(error_of([&] { c.to_json(); }).find("read as frozen targets only"),
                std::string::npos);
      continue;
    }

    // The export's spelling.
    const json written = c.to_json();
    EXPECT_EQ(written["architectures"], json::array({family.architecture}));
    EXPECT_EQ(written["model_type"], family.model_type);
    EXPECT_EQ(written.contains("attention_bias"), family.spelling.attention_bias);
    EXPECT_EQ(written.contains("mlp_bias"), family.spelling.mlp_bias);
    EXPECT_EQ(written.contains("router_jitter_noise"), family.spelling.router_jitter_noise);
    EXPECT_EQ(written.contains("rotary_dim"), family.partial_rope);
    EXPECT_EQ(written.contains("num_local_experts"), family.moe.enabled);
    EXPECT_EQ(written.contains("moe_intermediate_size"), family.moe.own_expert_width);
    EXPECT_EQ(written.contains("norm_topk_prob"), family.moe.reads_norm_topk_prob);
    EXPECT_EQ(written.contains("mlp_only_layers"), family.moe.dense_layers_listed);
    EXPECT_EQ(written.contains("sliding_window"),
              family.spelling.windows == WindowSpelling::SlidingWindow ||
                  family.spelling.windows == WindowSpelling::UseSlidingWindow);

    // What is written reads back as the same model.
    const DecoderConfig again = parse(written);
    EXPECT_EQ(again.to_json(), written);
    EXPECT_EQ(again.family, c.family);
    EXPECT_EQ(again.qkv_bias, c.qkv_bias);
    EXPECT_EQ(again.qk_norm, c.qk_norm);
    EXPECT_EQ(again.qk_norm_across_heads, c.qk_norm_across_heads);
    EXPECT_EQ(again.rotated_dims(), c.rotated_dims());
    EXPECT_EQ(again.moe.expert_intermediate_size, c.moe.expert_intermediate_size);
    EXPECT_EQ(again.moe.normalize_top_k, c.moe.normalize_top_k);
  }
}

TEST(FamilyTraits, SlidingWindowsReadAsTheFamilySpellsThem) {
  for (const FamilyTraits& family : tandem::family_table()) {
    SCOPED_TRACE(family.model_type);
    // No windows: HybridLayers below; by layer type or pattern: test_gemma3.cpp, test_gpt_oss.cpp.
    if (family.hybrid.enabled || family.windows == WindowReading::LayerTypesOrPattern) continue;
    json config = small_config(family);
    config["sliding_window"] = 8;
    config["use_sliding_window"] = true;
    config["max_window_layers"] = 1;
    std::vector<int64_t> expected(4, 8);
    if (family.windows == WindowReading::Ignored) expected = {0, 0, 0, 0};
    if (family.windows == WindowReading::MaxWindowLayers) expected = {0, 8, 8, 8};
    const DecoderConfig c = parse(config);
    EXPECT_EQ(c.sliding_window, expected);
    if (family.spelling.windows != WindowSpelling::None) {
      EXPECT_EQ(parse(c.to_json()).sliding_window, expected);
    }

    // 0, null or absent: no window.
    for (const json& none : {json(0), json(nullptr)}) {
      json no_window = small_config(family);
      no_window["sliding_window"] = none;
      EXPECT_EQ(parse(no_window).sliding_window, std::vector<int64_t>(4, 0));
    }
  }
}

TEST(FamilyTraits, NegativeSlidingWindowIsRefused) {
  for (const FamilyTraits& family : tandem::family_table()) {
    SCOPED_TRACE(family.model_type);
    json config = small_config(family);
    config["sliding_window"] = -3;
    expect_error(config, "sliding_window must be in 0..1073741824 (0 or null: no window), got -3");
    // use_sliding_window: only false (HybridLayers), not a Gemma 3 field
    if (family.hybrid.enabled || family.gemma_layers) continue;
    config["use_sliding_window"] = true;
    expect_error(config, "sliding_window must be in 0..1073741824");
  }
  json config = small_config(DecoderFamily::Qwen2);
  config["use_sliding_window"] = true;
  expect_error(config, "use_sliding_window is true but sliding_window is 0");
}

TEST(FamilyTraits, UnknownModelTypeNamesTheSupportedOnes) {
  json config = small_config(DecoderFamily::Llama);
  config["model_type"] = "gpt2";
  expect_error(config, "unsupported model_type 'gpt2'");
  config.erase("model_type");
  expect_error(config, "missing 'model_type'");
  for (const json& type : {json("gpt2"), json(nullptr)}) {
    if (type.is_null())
      config.erase("model_type");
    else
      config["model_type"] = type;
    const std::string message = error_of_config(config);
    for (const FamilyTraits& family : tandem::family_table())
      EXPECT_NE(message.find(family.model_type), std::string::npos)
          << family.model_type << " not named in: " << message;
  }
}

TEST(FamilyTraits, FieldsAFamilyRefusesAreNamed) {
  int refused = 0;
  for (const FamilyTraits& family : tandem::family_table()) {
    SCOPED_TRACE(family.model_type);
    const std::string name = family.model_type;
    for (const FieldRule& rule : family.fields) {
      SCOPED_TRACE(rule.key);
      json config = small_config(family);
      switch (rule.kind) {
        case FieldRule::Kind::Accepted:
          break;
        case FieldRule::Kind::Refused:
          ++refused;
          config[rule.key] = json::array({1});
          expect_error(config, "unsupported field '" + rule.key + "' for " + name + " (" +
                                   rule.reason + ")");
          config[rule.key] = nullptr;  // null reads as absent
          EXPECT_NO_THROW(parse(config));
          break;
        case FieldRule::Kind::OnlyValue:
          ++refused;
          config[rule.key] = other_than(rule.value);
          expect_error(config, "unsupported " + rule.key + " ");
          expect_error(config, rule.reason);
          config[rule.key] = rule.value;
          EXPECT_NO_THROW(parse(config));
          break;
        case FieldRule::Kind::OnlyEntries:
          ++refused;
          config[rule.key] = json::array({rule.value, other_than(rule.value)});
          expect_error(config, "unsupported " + rule.key + " entry " +
                                   other_than(rule.value).dump() + " for " + name);
          config[rule.key] = json::array({rule.value, rule.value});
          EXPECT_NO_THROW(parse(config));
          break;
      }
    }
    // Neither common nor the family's: refused, naming it and the family.
    json config = small_config(family);
    config["tandem_unheard_of"] = 1;
    expect_error(config, "unsupported field 'tandem_unheard_of' for model_type '" + name + "'");
  }
  EXPECT_GT(refused, 0);

  // A dense family has none of the experts' fields; Mixtral's projections have no biases.
  json config = small_config(DecoderFamily::Llama);
  config["num_local_experts"] = 8;
  expect_error(config, "unsupported field 'num_local_experts' for model_type 'llama'");
  config = small_config(DecoderFamily::Mixtral);
  config["attention_bias"] = true;
  expect_error(config, "unsupported attention_bias true for mixtral");
  config = small_config(DecoderFamily::Mixtral);
  config["mlp_only_layers"] = {1};
  expect_error(config, "unsupported field 'mlp_only_layers' for mixtral");
}

TEST(FamilyTraits, NonsenseValuesNameTheField) {
  const json llama3 = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 64}};
  for (const auto& [family, field, value, phrase] :
       std::vector<std::tuple<DecoderFamily, std::string, json, std::string>>{
           {DecoderFamily::Llama, "rms_norm_eps", 0.0, "rms_norm_eps must be a finite number > 0"},
           {DecoderFamily::Llama, "rms_norm_eps", -1e-6,
            "rms_norm_eps must be a finite number > 0"},
           {DecoderFamily::Llama, "rope_theta", 0.0, "rope_theta must be a finite number > 0"},
           {DecoderFamily::Qwen3, "rope_theta", -1e6, "rope_theta must be a finite number > 0"},
           {DecoderFamily::Llama, "num_attention_heads", 0, "num_attention_heads must be positive"},
           {DecoderFamily::Llama, "num_key_value_heads", 3,
            "not a multiple of num_key_value_heads"},
           {DecoderFamily::Llama, "num_key_value_heads", 0, "num_key_value_heads must be in 1.."},
           {DecoderFamily::Llama, "head_dim", 15, "head_dim must be even"},
           {DecoderFamily::Llama, "head_dim", -16, "head_dim must be in 1..4096"},
           {DecoderFamily::Llama, "intermediate_size", 0,
            "intermediate_size is missing or 0 but layer 0 has a dense MLP"},
           {DecoderFamily::Llama, "intermediate_size", -1, "intermediate_size must be in 1.."},
           {DecoderFamily::Llama, "max_position_embeddings", -1, "max_position_embeddings must be"},
           {DecoderFamily::Llama, "pad_token_id", -2, "pad_token_id must be a token id or -1"},
           {DecoderFamily::Llama, "eos_token_id", 64, "eos_token_id 64 is outside the vocabulary"},
           {DecoderFamily::Llama, "rope_scaling",
            [&] {
              json r = llama3;
              r["low_freq_factor"] = 0.0;
              return r;
            }(),
            "invalid llama3 rope scaling parameters"},
           {DecoderFamily::Llama, "rope_scaling",
            [&] {
              json r = llama3;
              r["original_max_position_embeddings"] = -64;
              return r;
            }(),
            "invalid llama3 rope scaling parameters"},
           {DecoderFamily::Llama,
            "rope_parameters",
            {{"rope_type", "default"}, {"partial_rotary_factor", 0.5}},
            "partial_rotary_factor is implemented for minimax_m2, qwen3_5, qwen3_5_moe, "
            "qwen3_next or glm4_moe only"},
           {DecoderFamily::Mixtral, "router_aux_loss_coef", -0.1,
            "router_aux_loss_coef must be a finite number >= 0"},
           {DecoderFamily::Mixtral, "num_experts_per_tok", 5,
            "num_experts_per_tok must be in 1..num_local_experts (4), got 5"},
           {DecoderFamily::Qwen3Moe, "moe_intermediate_size", 0,
            "moe_intermediate_size must be in 1.."},
           {DecoderFamily::Qwen3Moe, "decoder_sparse_step", 0, "decoder_sparse_step must be >= 1"},
           {DecoderFamily::MiniMaxM2, "partial_rotary_factor", 1.5,
            "partial_rotary_factor must be in (0, 1]"},
           {DecoderFamily::MiniMaxM2, "rotary_dim", 7, "rotary_dim must be even"},
       }) {
    SCOPED_TRACE(field);
    json config = small_config(family);
    if (family == DecoderFamily::MiniMaxM2 && field == "partial_rotary_factor")
      config.erase("rotary_dim");
    config[field] = value;
    expect_error(config, phrase);
  }

  // max_window_layers: where the window starts, never before layer 0.
  json config = small_config(DecoderFamily::Qwen2);
  config["use_sliding_window"] = true;
  config["sliding_window"] = 8;
  config["max_window_layers"] = -1;
  expect_error(config, "max_window_layers (the first layer with a window) must be >= 0, got -1");
}

TEST(FamilyTraits, HybridLayers) {
  json config = small_config(DecoderFamily::Qwen3Next);
  config["layer_types"] = {"linear_attention", "full_attention", "linear_attention",
                           "full_attention"};
  DecoderConfig c = parse(config);
  EXPECT_EQ(c.linear_attention.layers, std::vector<bool>({true, false, true, false}));
  EXPECT_EQ(c.rotated_dims(), 8);
  config.erase("layer_types");
  config["full_attention_interval"] = 2;
  EXPECT_EQ(parse(config).linear_attention.layers, std::vector<bool>({true, false, true, false}));

  // No partial_rotary_factor: transformers' default for the hybrids, 0.25 (4 of 16 dims).
  config = small_config(DecoderFamily::Qwen3_5);
  config.erase("partial_rotary_factor");
  EXPECT_EQ(parse(config).rotated_dims(), 4);

  config = small_config(DecoderFamily::Qwen3Next);
  config["layer_types"] = {"linear_attention", "sliding_attention", "linear_attention",
                           "full_attention"};
  expect_error(config, "unsupported layer type \"sliding_attention\" at layer 1");
  config["layer_types"] = {"linear_attention"};
  expect_error(config, "'layer_types' must list one type per layer (4)");
  config = small_config(DecoderFamily::Qwen3Next);
  config["full_attention_interval"] = 0;
  expect_error(config, "full_attention_interval must be in 1..num_hidden_layers (4), got 0");
  config = small_config(DecoderFamily::Qwen3Next);
  config["linear_num_value_heads"] = 3;
  expect_error(config, "linear_num_value_heads (3) is not a multiple of linear_num_key_heads (2)");
  config = small_config(DecoderFamily::Qwen3_5);
  config.erase("linear_conv_kernel_dim");
  expect_error(config, "missing required field 'linear_conv_kernel_dim'");
  config = small_config(DecoderFamily::Qwen3_5);
  config["use_sliding_window"] = true;
  expect_error(config, "unsupported use_sliding_window true for qwen3_5");

  // Qwen3.5-MoE: every layer has experts, so the dense width may be absent; Qwen3-Next lists
  // dense layers, which need it.
  config = small_config(DecoderFamily::Qwen3_5Moe);
  config.erase("intermediate_size");
  EXPECT_EQ(parse(config).intermediate_size, 0);
  config = small_config(DecoderFamily::Qwen3Next);
  config.erase("intermediate_size");
  expect_error(config, "missing required field 'intermediate_size'");
  config = small_config(DecoderFamily::Qwen3Next);
  config.erase("shared_expert_intermediate_size");
  expect_error(config, "missing required field 'shared_expert_intermediate_size'");
}

TEST(FamilyTraits, VisionLanguageWrapperIsReadForItsDecoder) {
  json text = small_config(DecoderFamily::Qwen3_5Moe);
  text.erase("architectures");
  text["tie_word_embeddings"] = false;
  const json wrapper = {{"architectures", {"Qwen3_5MoeForConditionalGeneration"}},
                        {"model_type", "qwen3_5_moe"},
                        {"text_config", text},
                        {"vision_config", {{"depth", 1}, {"model_type", "qwen3_5_moe_vision"}}},
                        {"image_token_id", 60},
                        {"video_token_id", 61},
                        {"vision_start_token_id", 62},
                        {"vision_end_token_id", 63},
                        {"tie_word_embeddings", true},
                        {"transformers_version", "5.23.0"}};
  const DecoderConfig c = parse(wrapper);
  EXPECT_EQ(c.family, DecoderFamily::Qwen3_5Moe);
  EXPECT_TRUE(c.language_model_wrapped);
  EXPECT_TRUE(c.tie_word_embeddings);  // the wrapper's word, as transformers ties
  EXPECT_EQ(c.moe.num_experts, 4);
  EXPECT_FALSE(parse(text).language_model_wrapped);

  json bad = wrapper;
  bad["text_config"]["num_hidden_layers"] = 0;  // errors inside name the text_config
  expect_error(bad, "text_config: num_hidden_layers must be in 1..1024");
  bad = wrapper;
  bad["text_config"]["model_type"] = "qwen3_5_text";
  expect_error(bad, "text_config.model_type must be 'qwen3_5_moe_text'");
  bad = wrapper;
  bad.erase("text_config");
  expect_error(bad, "its decoder must be the object 'text_config'");
  bad = wrapper;
  bad["audio_config"] = json::object();
  expect_error(bad, "unsupported field 'audio_config' for qwen3_5_moe");
  bad = wrapper;
  bad["architectures"] = {"Qwen3_5MoeForCausalLM"};
  expect_error(bad, "expected Qwen3_5MoeForConditionalGeneration");
}
