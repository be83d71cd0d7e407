// Block-wise FP8 checkpoints (io/block_fp8.h): the fixture tests/fixtures/models/minimax_m2_fp8
// was quantized by tools/make_fp8_fixtures.py, which also wrote its own dequantization of every
// quantized weight and transformers' logits for the model loaded with its FP8 support
// (dequantize=True). tandem's loader must give those weights bit for bit, and those logits.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "fixture_tensors.h"
#include "tandem/core/json_file.h"
#include "tandem/io/block_fp8.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/io/safetensors.h"
#include "tandem/io/tensor_io.h"
#include "tandem/models/load.h"
#include "test_util.h"

namespace {

using nlohmann::json;
using tandem::testing::error_of;
using tandem::testing::fixture_tensors;
using tandem::testing::model_fixture;
using tandem::testing::ScratchDir;

json fixture_config() {
  return tandem::read_json_file(model_fixture("minimax_m2_fp8") + "/config.json", "test");
}

TEST(BlockFp8, QuantizationConfigIsReadOrRefusedByName) {
  const tandem::BlockFp8 block =
      tandem::read_quantization_config(fixture_config(), "config.json").fp8;
  EXPECT_EQ(block.block_rows, 32);
  EXPECT_EQ(block.block_cols, 32);
  EXPECT_FALSE(tandem::read_quantization_config(json{{"model_type", "llama"}}, "c").quantized());
  EXPECT_FALSE(
      tandem::read_quantization_config(json{{"quantization_config", nullptr}}, "c").quantized());
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"quant_method", "gptq"}}, "quantized with quant_method 'gptq'"},
      {{{"quant_method", "mxfp4"}, {"group_size", 4}},
       "unsupported quantization_config field 'group_size' for mxfp4"},
      {{{"quant_method", "compressed-tensors"}}, "dequantize it to bf16 first"},
      {{{"quant_method", "fp8"}}, "per-tensor FP8 is not supported"},
      {{{"quant_method", "fp8"}, {"weight_block_size", {128, 0}}},
       "weight_block_size entries must be integers in 1.."},
      {{{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}, {"fmt", "e5m2"}},
       "unsupported quantization_config.fmt \"e5m2\""},
      {{{"quant_method", "fp8"},
        {"weight_block_size", {128, 128}},
        {"activation_scheme", "static"}},
       "unsupported quantization_config.activation_scheme \"static\""},
      {{{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}, {"group_size", 4}},
       "unsupported quantization_config field 'group_size'"},
  };
  for (const auto& [quant, phrase] : cases) {
    const std::string error = error_of([&] {
      tandem::read_quantization_config(json{{"quantization_config", quant}}, "x.json");
    });
    EXPECT_NE(error.find(phrase), std::string::npos) << "wanted '" << phrase << "' in: " << error;
    EXPECT_NE(error.find("x.json"), std::string::npos) << error;
  }
  // config.json itself: the published DeepSeek-V3 form reads; another method is refused there.
  json config = fixture_config();
  EXPECT_NO_THROW(tandem::DecoderConfig::from_json(config, "config.json"));
  config["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4}};
  EXPECT_NE(error_of([&] {
              tandem::DecoderConfig::from_json(config, "config.json");
            }).find("quant_method 'awq'"),
            std::string::npos);
}

// Edge blocks: a (40, 72) weight in blocks of 32 (the last block row 8 tall, the last block
// column 8 wide), against the generator's dequantization.
TEST(BlockFp8, PartialEdgeBlocksDequantizeAsTheGenerator) {
  const auto odd = fixture_tensors("tests/fixtures/models/minimax_m2_fp8/odd_blocks.safetensors");
  ASSERT_EQ(odd.at("odd.weight").scalar_type(), at::kFloat8_e4m3fn);
  const at::Tensor ours = tandem::dequantize_block_fp8(
      odd.at("odd.weight"), odd.at("odd.weight_scale_inv"), {32, 32}, "odd.weight");
  EXPECT_TRUE(at::equal(ours, odd.at("odd.dequantized")));
  // And close to the weight before quantization: within half an e4m3 step (2^-4 relative) of
  // each block's scale x 448.
  EXPECT_LE((ours - odd.at("odd.original")).abs().max().item<double>(),
            odd.at("odd.original").abs().max().item<double>() / 16);
  const std::string error = error_of([&] {
    tandem::dequantize_block_fp8(odd.at("odd.weight"), odd.at("odd.weight_scale_inv"), {16, 32},
                                 "odd.weight");
  });
  EXPECT_NE(error.find("odd.weight: its scale has shape [2, 3] but a [40, 72] weight in blocks "
                       "of [16, 32] needs [3, 3]"),
            std::string::npos)
      << error;
}

// The checkpoint as tandem loads it: every quantized weight is the generator's dequantization bit
// for bit, the scales are accounted for, and the model gives transformers' logits.
TEST(BlockFp8, CheckpointLoadsAsTransformersDequantizesIt) {
  const std::string dir = model_fixture("minimax_m2_fp8");
  const auto checkpoint = tandem::HfCheckpoint::open(dir);
  const auto expected =
      fixture_tensors("tests/fixtures/models/minimax_m2_fp8/dequantized.safetensors");
  ASSERT_FALSE(expected.empty());
  for (const auto& [name, value] : expected) {
    EXPECT_EQ(checkpoint.info(name).dtype, tandem::safetensors::Dtype::F8_E4M3) << name;
    EXPECT_TRUE(checkpoint.contains(tandem::fp8_scale_name(name))) << name;
    EXPECT_TRUE(at::equal(checkpoint.read_weight(name), value)) << name;
  }
  const auto reference =
      fixture_tensors("tests/fixtures/models/minimax_m2_fp8/reference.safetensors");
  tandem::RunContext run;
  const tandem::CausalLM model = tandem::load_causal_lm(dir, at::kFloat, run);
  const at::Tensor ids = reference.at("input_ids");
  at::NoGradGuard no_grad;
  const at::Tensor logits = model->logits(model->forward_hidden(
      ids, tandem::AttentionLayout::causal(ids.size(0), ids.size(1), at::kCPU)));
  const double diff = (logits - reference.at("logits")).abs().max().item<double>();
  std::printf("[fp8] minimax_m2_fp8 fp32: logits max|diff| %.3g vs transformers\n", diff);
  EXPECT_LE(diff, 1e-4);
  // In bf16 each weight is the fp32 dequantization rounded once.
  const tandem::CausalLM bf16 = tandem::load_causal_lm(dir, at::kBFloat16, run);
  for (const auto& [name, value] : tandem::checkpoint_tensors(*bf16))
    if (name == "model.layers.0.self_attn.q_proj.weight")
      EXPECT_TRUE(at::equal(value, expected.at(name).to(at::kBFloat16))) << name;
}

// A broken FP8 checkpoint names the tensor: a weight without its scale, a scale of the wrong
// shape, FP8 weights under a config.json that declares no quantization.
TEST(BlockFp8, BrokenCheckpointsNameTheTensor) {
  const std::string dir = model_fixture("minimax_m2_fp8");
  auto tensors = fixture_tensors("tests/fixtures/models/minimax_m2_fp8/model.safetensors");
  const std::string weight = "model.layers.1.self_attn.k_proj.weight";
  const auto write = [&](const ScratchDir& scratch, const std::map<std::string, at::Tensor>& t,
                         const json& config) {
    std::filesystem::create_directories(scratch.path());
    std::ofstream(scratch / "config.json") << config.dump();
    tandem::write_hf_weights(scratch.path(), {t.begin(), t.end()});
    return scratch.path();
  };
  const auto load = [](const std::string& path) {
    tandem::RunContext run;
    tandem::load_causal_lm(path, at::kFloat, run);
  };
  auto without_scale = tensors;
  without_scale.erase(tandem::fp8_scale_name(weight));
  ScratchDir a;
  std::string error = error_of([&] { load(write(a, without_scale, fixture_config())); });
  EXPECT_NE(error.find("tensor '" + weight + "' is stored as F8_E4M3 without its scale '" + weight +
                       "_scale_inv'"),
            std::string::npos)
      << error;

  auto misshapen = tensors;
  misshapen[tandem::fp8_scale_name(weight)] = at::ones({1, 2});
  ScratchDir b;
  error = error_of([&] { load(write(b, misshapen, fixture_config())); });
  EXPECT_NE(error.find("tensor '" + weight + "': its scale has shape [1, 2]"), std::string::npos)
      << error;
  // From the headers alone: a dry run finds it too.
  error = error_of([&] {
    tandem::RunContext run;
    run.dry_run = true;
    tandem::load_causal_lm(b.path(), at::kFloat, run);
  });
  EXPECT_NE(error.find("tensor '" + weight + "': its scale has shape [1, 2]"), std::string::npos)
      << error;

  json plain = fixture_config();
  plain.erase("quantization_config");
  ScratchDir c;
  error = error_of([&] { load(write(c, tensors, plain)); });
  EXPECT_NE(error.find("is stored as F8_E4M3 but config.json has no block-wise FP8 "
                       "quantization_config"),
            std::string::npos)
      << error;
}

}  // namespace
