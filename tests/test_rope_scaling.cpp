// YaRN RoPE scaling (models/rope.h) against transformers 5.23: tools/make_rope_fixtures.py stored
// transformers' inverse frequencies, attention factors and cos/sin for the published settings of
// Qwen3 (long context), DeepSeek-V3, a Kimi-like mscale, gpt-oss (truncate false) and an explicit
// attention factor, and the logits of the tiny Qwen3 fixture run with YaRN.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "tandem/core/json_file.h"
#include "tandem/io/safetensors.h"
#include "tandem/io/tensor_io.h"
#include "tandem/models/frozen.h"
#include "tandem/models/rope.h"
#include "test_util.h"

namespace {

using nlohmann::json;
using tandem::testing::ScratchDir;

struct Fixture {
  std::map<std::string, at::Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

Fixture read_fixture(const std::string& name) {
  const auto file =
      tandem::safetensors::File::open(tandem::testing::source_path("tests/fixtures/rope/" + name));
  Fixture out;
  for (const auto& info : file.header().tensors)
    out.tensors[info.name] = tandem::read_tensor(file, info);
  out.metadata = file.header().metadata;
  return out;
}

// A Qwen3 config.json carrying the case's RoPE settings, read by tandem's parser.
tandem::DecoderConfig config_for(const json& rope, int64_t rotated_dims, int64_t max_positions) {
  json config =
      tandem::read_json_file(tandem::testing::model_fixture("qwen3") + "/config.json", "test");
  config.erase("rope_parameters");
  config.erase("rope_scaling");
  config.erase("rope_theta");
  config["rope_parameters"] = rope;
  config["head_dim"] = rotated_dims;
  config["max_position_embeddings"] = max_positions;
  return tandem::DecoderConfig::from_json(config, "yarn config.json");
}

TEST(RopeScaling, YarnEqualsTransformers) {
  const Fixture fixture = read_fixture("yarn.safetensors");
  const json cases = json::parse(fixture.metadata.at("cases"));
  ASSERT_GE(cases.size(), 5u);
  const std::vector<int64_t> positions = json::parse(fixture.metadata.at("position_ids"));
  for (const json& name_json : cases) {
    const std::string name = name_json.get<std::string>();
    SCOPED_TRACE(name);
    const json meta = json::parse(fixture.metadata.at(name));
    json rope = meta.at("rope_parameters");
    rope.erase("partial_rotary_factor");
    const int64_t dims = meta.at("rotated_dims").get<int64_t>();
    const tandem::DecoderConfig config =
        config_for(rope, dims, meta.at("max_position_embeddings").get<int64_t>());
    ASSERT_EQ(config.rope_scaling.type, "yarn");
    const tandem::RopeFrequencies frequencies =
        tandem::RopeFrequencies::of(dims, config.rope_theta, config.rope_scaling);
    const at::Tensor inverse = frequencies.on(at::kCPU);
    EXPECT_TRUE(at::equal(inverse, fixture.tensors.at(name + ".inv_freq")))
        << "max |diff| " << (inverse - fixture.tensors.at(name + ".inv_freq")).abs().max();
    EXPECT_DOUBLE_EQ(frequencies.attention_scaling(), meta.at("attention_factor").get<double>());
    // cos and sin at positions up to 100000, from the frequencies (as transformers forms them).
    const at::Tensor at_positions =
        at::tensor(positions, at::kLong).view({1, static_cast<int64_t>(positions.size())});
    const tandem::RopeTables tables = tandem::rope_tables(frequencies, at_positions, at::kFloat);
    at::Tensor cos = tables.cos[0][0], sin = tables.sin[0][0];  // (positions, dims)
    const at::Tensor& expected_cos = fixture.tensors.at(name + ".cos");
    if (expected_cos.size(-1) < cos.size(-1)) {  // gpt-oss returns the half it does not repeat
      cos = cos.narrow(-1, 0, expected_cos.size(-1));
      sin = sin.narrow(-1, 0, expected_cos.size(-1));
    }
    EXPECT_LE((cos - expected_cos).abs().max().item<double>(), 1e-6);
    EXPECT_LE((sin - fixture.tensors.at(name + ".sin")).abs().max().item<double>(), 1e-6);
  }
  // Every combination of factor, mscale, mscale_all_dim and attention_factor transformers
  // resolves, including the ones it ignores (a lone mscale, mscale 0).
  const json table = json::parse(fixture.metadata.at("attention_factor_table"));
  ASSERT_FALSE(table.empty());
  for (const json& row : table) {
    json rope = row.at("rope_dict_given");
    SCOPED_TRACE(rope.dump());
    if (!rope.contains("rope_theta")) rope["rope_theta"] = 10000.0;
    const tandem::DecoderConfig config =
        config_for(rope, 64, row.at("max_position_embeddings").get<int64_t>());
    EXPECT_NEAR(tandem::rope_attention_scaling(config.rope_scaling),
                row.at("attention_factor").get<double>(), 1e-12);
  }
}

// The tiny Qwen3 fixture with YaRN (factor 4 over an original context of 8): logits and every
// layer equal transformers', where the positions past 8 move the logits by up to 11.6.
TEST(RopeScaling, YarnModelEqualsTransformers) {
  const Fixture reference = read_fixture("qwen3_yarn_reference.safetensors");
  ScratchDir dir;
  std::ofstream(dir / "config.json") << reference.metadata.at("config_json");
  std::filesystem::create_symlink(
      std::filesystem::absolute(tandem::testing::model_fixture("qwen3") + "/model.safetensors"),
      dir / "model.safetensors");
  const tandem::FrozenModel model = tandem::FrozenModel::load(dir.path(), at::kFloat, at::kCPU);
  ASSERT_EQ(model.config().rope_scaling.type, "yarn");
  const at::Tensor ids = reference.tensors.at("input_ids");
  std::vector<int64_t> layers;
  for (int64_t i = 0; i < model.config().num_hidden_layers; ++i) layers.push_back(i);
  const auto out = model.forward(
      ids, tandem::AttentionLayout::causal(ids.size(0), ids.size(1), at::kCPU), layers);
  const double diff = (out.logits - reference.tensors.at("logits")).abs().max().item<double>();
  std::printf("[rope] qwen3 with yarn: logits max|diff| %.3g vs transformers\n", diff);
  EXPECT_LE(diff, 1e-4);
  for (int64_t i : layers)
    EXPECT_LE((out.hidden.at(i) - reference.tensors.at("hidden." + std::to_string(i)))
                  .abs()
                  .max()
                  .item<double>(),
              1e-4)
        << "layer " << i;
  // What an export writes reads back as the same scaling.
  const tandem::DecoderConfig again =
      tandem::DecoderConfig::from_json(model.config().to_json(), "written config.json");
  EXPECT_EQ(again.rope_scaling.type, "yarn");
  EXPECT_EQ(again.rope_scaling.factor, 4.0);
  EXPECT_EQ(again.rope_scaling.original_max_position_embeddings, 8);
  EXPECT_DOUBLE_EQ(tandem::rope_attention_scaling(again.rope_scaling),
                   tandem::rope_attention_scaling(model.config().rope_scaling));
}

TEST(RopeScaling, BadYarnSettingsNameTheField) {
  const json base = {{"rope_type", "yarn"},
                     {"rope_theta", 10000.0},
                     {"factor", 4.0},
                     {"original_max_position_embeddings", 4096}};
  for (const auto& [key, value, phrase] : std::vector<std::tuple<std::string, json, std::string>>{
           {"factor", -2.0, "invalid yarn rope scaling parameters"},
           {"beta_fast", -1.0, "invalid yarn rope scaling parameters"},
           {"original_max_position_embeddings", -5, "invalid yarn rope scaling parameters"},
           {"low_freq_factor", 1.0, "unsupported RoPE field 'low_freq_factor' for yarn scaling"},
           {"rope_type", "longrope", "unsupported RoPE scaling type 'longrope'"}}) {
    json rope = base;
    rope[key] = value;
    const std::string error = tandem::testing::error_of([&] { config_for(rope, 64, 16384); });
    EXPECT_NE(error.find(phrase), std::string::npos) << "wanted '" << phrase << "' in: " << error;
    EXPECT_NE(error.find("yarn config.json"), std::string::npos) << error;
  }
}

}  // namespace
