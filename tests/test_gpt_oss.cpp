// gpt-oss's parts (models/attention_sinks.h, the clamped SwiGLU and top-k softmax of models/moe.h,
// MXFP4 of io/mxfp4.h, its config.json) against hand-computed cases and an explicit reference:
// the sink appended to each query's scores as one more logit, softmax, the sink's weight dropped.
// Logits, every layer and generation against transformers are in test_decoder_parity.cpp and
// test_generation.cpp (the gpt_oss fixture of tools/make_model_fixtures.py); the MXFP4 checkpoint
// (tools/make_mxfp4_fixtures.py) is read here.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "config_test_util.h"
#include "fixture_tensors.h"
#include "gradients.h"
#include "tandem/core/run_context.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/io/mxfp4.h"
#include "tandem/models/attention_sinks.h"
#include "tandem/models/causal_attention.h"
#include "tandem/models/decoder.h"
#include "tandem/models/key_bands.h"
#include "tandem/models/load.h"
#include "tandem/models/moe.h"

namespace {

using nlohmann::json;
using tandem::DecoderConfig;
using tandem::testing::error_of;
using tandem::testing::expect_config_error;
using tandem::testing::fixture_tensors;
using tandem::testing::model_fixture;
using tandem::testing::parse_config;
using tandem::testing::ScratchDir;

// transformers' in-memory layout of gpt-oss's experts -> tandem's: gate_up (E, H, 2I) with gate
// and up columns alternating -> (E, 2I, H), gate rows then up rows; down (E, I, H) -> (E, H, I).
at::Tensor gate_up_as_tandem(const at::Tensor& hf) {
  const at::Tensor rows = hf.transpose(1, 2);  // (E, 2I, H), rows g0 u0 g1 u1 ...
  const int64_t width = rows.size(1);
  return at::cat({rows.index_select(1, at::arange(0, width, 2)),
                  rows.index_select(1, at::arange(1, width, 2))},
                 1);
}

// The definition, in fp64: scores (B, heads, Tq, Tk) with the hidden keys at -inf, the sink of
// each head appended as one more column, softmax, that column dropped, times the values.
at::Tensor reference_sink_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const at::Tensor& mask, const at::Tensor& sinks) {
  const int64_t groups = q.size(1) / k.size(1);
  const at::Tensor keys = k.to(at::kDouble).repeat_interleave(groups, 1);
  const at::Tensor values = v.to(at::kDouble).repeat_interleave(groups, 1);
  at::Tensor scores = at::matmul(q.to(at::kDouble), keys.transpose(-1, -2)) /
                      std::sqrt(static_cast<double>(q.size(3)));
  scores = scores.masked_fill(mask.logical_not(), -INFINITY);
  const at::Tensor sink_column =
      sinks.to(at::kDouble).view({1, -1, 1, 1}).expand({q.size(0), q.size(1), q.size(2), 1});
  const at::Tensor weights = at::softmax(at::cat({scores, sink_column}, -1), -1);
  return at::matmul(weights.narrow(-1, 0, k.size(2)), values);
}

// One query, one key: the output is v e^z / (e^z + e^s), z the scaled score.
TEST(AttentionSinks, OneKeyByHand) {
  const at::Tensor q = at::full({1, 1, 1, 4}, 1.0, at::kDouble);
  const at::Tensor k = at::full({1, 1, 1, 4}, 0.5, at::kDouble);  // z = 4 * 0.5 / 2 = 1
  const at::Tensor v = at::arange(1, 5, at::kDouble).view({1, 1, 1, 4});
  const at::Tensor mask = at::ones({1, 1, 1, 1}, at::kBool);
  const at::Tensor sinks = at::full({1}, std::log(3.0), at::kDouble);  // e^s = 3
  const double share = std::exp(1.0) / (std::exp(1.0) + 3.0);
  const at::Tensor out = tandem::masked_attention_with_sinks(q, k, v, mask, sinks);
  EXPECT_TRUE(at::allclose(out, v * share, 1e-12, 1e-14)) << out;
  // A sink far below every score changes nothing; far above, the head attends to nothing.
  EXPECT_TRUE(at::allclose(
      tandem::masked_attention_with_sinks(q, k, v, mask, at::full({1}, -1e4, at::kDouble)), v));
  EXPECT_LT(tandem::masked_attention_with_sinks(q, k, v, mask, at::full({1}, 50.0, at::kDouble))
                .abs()
                .max()
                .item<double>(),
            1e-20);
}

// Row 0: documents [0, 13), [13, 30), [30, 37); row 1 one document. (2, 37)
tandem::AttentionLayout packed_layout() {
  at::Tensor documents = at::zeros({2, 37}, at::kLong);
  documents[0].narrow(0, 13, 17).fill_(1);
  documents[0].narrow(0, 30, 7).fill_(2);
  return {at::zeros({2, 37}, at::kLong), documents, documents};
}

// The decoders' attention with sinks, as causal_attention runs it (blockwise at two chunkings,
// dense), equals the definition: packed documents, grouped-query attention, with and without a
// window, output and the gradients of q, k, v (the blockwise kernel's hand-written backward).
TEST(AttentionSinks, EveryKernelEqualsTheDefinition) {
  const tandem::AttentionLayout layout = packed_layout();
  at::manual_seed(3);
  const at::Tensor q = at::randn({2, 4, 37, 8}), k = at::randn({2, 2, 37, 8}),
                   v = at::randn({2, 2, 37, 8});
  const at::Tensor sinks = at::randn({4}) * 2;
  const at::Tensor probe = at::randn({2, 4, 37, 8});
  for (const int64_t window : {0, 5}) {
    const at::Tensor mask = tandem::attention_mask(layout, window).expand({2, 1, 37, 37});
    const auto reference = tandem::test::output_and_gradients(
        [&](const std::vector<at::Tensor>& x) {
          return reference_sink_attention(x[0], x[1], x[2], mask, sinks).to(at::kFloat);
        },
        {q, k, v}, probe);
    for (const tandem::AttentionOptions options :
         {tandem::AttentionOptions{tandem::AttentionKernel::Blockwise, 8, 12},
          tandem::AttentionOptions{tandem::AttentionKernel::Fused, 512, 1024},
          tandem::AttentionOptions{tandem::AttentionKernel::Dense, 512, 1024}}) {
      const tandem::CausalAttentionPlan plan =
          tandem::plan_causal_attention(layout, window, options, /*sinks=*/true);
      const auto ours = tandem::test::output_and_gradients(
          [&](const std::vector<at::Tensor>& x) {
            return tandem::causal_attention({x[0], x[1], x[2], at::Tensor(), sinks}, plan);
          },
          {q, k, v}, probe);
      const std::string where = "window " + std::to_string(window) + ", kernel " +
                                std::to_string(static_cast<int>(options.kernel));
      EXPECT_LE(tandem::test::relative_error(ours.out, reference.out), 1e-5) << where;
      for (size_t i = 0; i < 3; ++i)
        EXPECT_LE(tandem::test::relative_error(ours.grads[i], reference.grads[i]), 1e-5)
            << where << ": gradient " << i;
    }
  }
}

// The cached forward's path: any mask (a padding slot hidden in the middle of a row), queries
// taken a few at a time or all at once, bf16 inputs computed in fp32.
TEST(AttentionSinks, MaskedAttentionTakesAnyMaskAndChunk) {
  at::manual_seed(5);
  const at::Tensor q = at::randn({2, 6, 5, 16}), k = at::randn({2, 3, 11, 16}),
                   v = at::randn({2, 3, 11, 16});
  const at::Tensor sinks = at::randn({6});
  at::Tensor mask = at::rand({2, 1, 5, 11}) > 0.3;
  mask.select(3, 10).fill_(true);  // every query sees at least one key
  const at::Tensor reference = reference_sink_attention(q, k, v, mask, sinks);
  for (const int64_t chunk : {2, 256})
    EXPECT_LE(tandem::test::relative_error(
                  tandem::masked_attention_with_sinks(q, k, v, mask, sinks, chunk), reference),
              1e-6)
        << chunk;
  const at::Tensor half = tandem::masked_attention_with_sinks(
      q.to(at::kBFloat16), k.to(at::kBFloat16), v.to(at::kBFloat16), mask, sinks);
  EXPECT_EQ(half.scalar_type(), at::kBFloat16);
  EXPECT_LE(tandem::test::relative_error(half, reference), 2e-2);
  const std::string error =
      error_of([&] { tandem::masked_attention_with_sinks(q, k, v, mask, at::randn({5}), 256); });
  EXPECT_NE(error.find("sinks must be (heads,)"), std::string::npos) << error;
}

// gpt-oss's experts: min(g, 7), clamp(u, -7, 7), (u + 1) g sigmoid(1.702 g), by hand.
TEST(GptOssExperts, ClampedSwigluByHand) {
  const tandem::ClampedSwiglu clamped{7.0, 1.702};
  // gate_up rows: gate values then up values.
  const at::Tensor gate_up = at::tensor({0.5, 9.0, -2.0, 1.0, -8.0, 8.0}, at::kDouble).view({1, 6});
  const auto expected = [](double g, double u) {
    g = std::min(g, 7.0);
    u = std::max(-7.0, std::min(u, 7.0));
    return (u + 1) * g / (1 + std::exp(-1.702 * g));
  };
  const at::Tensor out = tandem::expert_activation(gate_up, clamped);
  ASSERT_EQ(out.sizes(), at::IntArrayRef({1, 3}));
  EXPECT_NEAR(out[0][0].item<double>(), expected(0.5, 1.0), 1e-12);
  EXPECT_NEAR(out[0][1].item<double>(), expected(9.0, -8.0), 1e-12);  // both clamped
  EXPECT_NEAR(out[0][2].item<double>(), expected(-2.0, 8.0), 1e-12);  // up clamped
  // Disabled: the plain SwiGLU silu(g) * u.
  EXPECT_NEAR(tandem::expert_activation(gate_up, {})[0][1].item<double>(),
              9.0 / (1 + std::exp(-9.0)) * -8.0, 1e-9);
}

// gpt-oss's router: the top-k logits (with the router's bias already in them), softmax over
// those k alone.
TEST(GptOssExperts, SoftmaxOverTheTopK) {
  tandem::MoeConfig moe;
  moe.num_experts = 4;
  moe.experts_per_token = 2;
  moe.scoring = tandem::RouterScoring::SoftmaxOfTopK;
  const at::Tensor logits = at::tensor({0.1, 2.0, -1.0, 1.0}, at::kDouble).view({1, 4});
  const auto [indices, weights] = tandem::route_tokens(logits, {}, moe);
  EXPECT_EQ(indices[0][0].item<int64_t>(), 1);
  EXPECT_EQ(indices[0][1].item<int64_t>(), 3);
  const double first = 1.0 / (1.0 + std::exp(-1.0));  // e^2 / (e^2 + e^1)
  EXPECT_NEAR(weights[0][0].item<double>(), first, 1e-12);
  EXPECT_NEAR(weights[0][1].item<double>(), 1 - first, 1e-12);
  EXPECT_EQ(weights.scalar_type(), at::kDouble);  // in the logits' dtype
}

// Every FP4 code, the nibble order and the E8M0 scale, by hand; the errors.
TEST(Mxfp4, DequantizesByHand) {
  const std::vector<double> codes = {0,  0.5,  1,  1.5,  2,  3,  4,  6,
                                     -0, -0.5, -1, -1.5, -2, -3, -4, -6};
  // One block of 32: byte j holds code 2j mod 16 (low) and 2j + 1 mod 16 (high).
  at::Tensor blocks = at::empty({1, 1, 16}, at::kByte);
  for (int64_t j = 0; j < 16; ++j)
    blocks[0][0][j] = static_cast<uint8_t>(((2 * j + 1) % 16) << 4 | (2 * j) % 16);
  for (const int64_t scale : {127, 130, 120, 0, 254}) {
    const at::Tensor scales = at::full({1, 1}, scale, at::kByte);
    const at::Tensor out = tandem::dequantize_mxfp4(blocks, scales, "t");
    ASSERT_EQ(out.sizes(), at::IntArrayRef({1, 32}));
    ASSERT_EQ(out.scalar_type(), at::kFloat);
    for (int64_t i = 0; i < 32; ++i)
      EXPECT_EQ(out[0][i].item<float>(),
                static_cast<float>(std::ldexp(codes[i % 16], static_cast<int>(scale) - 127)))
          << "element " << i << ", scale " << scale;
  }
  EXPECT_TRUE(std::signbit(
      tandem::dequantize_mxfp4(blocks, at::full({1, 1}, 127, at::kByte), "t")[0][8].item<float>()));
  const auto error = [&](const at::Tensor& b, const at::Tensor& s) {
    return error_of([&] { tandem::dequantize_mxfp4(b, s, "layer 3's experts"); });
  };
  EXPECT_NE(error(blocks, at::full({1, 1}, 255, at::kByte)).find("255"), std::string::npos);
  EXPECT_NE(error(blocks, at::full({1, 2}, 127, at::kByte)).find("do not pair up"),
            std::string::npos);
  EXPECT_NE(error(blocks.to(at::kInt), at::full({1, 1}, 127, at::kByte)).find("must be U8"),
            std::string::npos);
  EXPECT_EQ(tandem::mxfp4_blocks_shape({4, 64, 96}, "w"), (std::vector<int64_t>{4, 64, 3, 16}));
  EXPECT_EQ(tandem::mxfp4_scales_shape({4, 64, 96}, "w"), (std::vector<int64_t>{4, 64, 3}));
  EXPECT_NE(error_of([] {
              tandem::mxfp4_blocks_shape({4, 64, 40}, "w");
            }).find("blocks of 32"),
            std::string::npos);
}

// The published gpt-oss-20b config.json (its fields and values; 24 layers, 32 experts).
json published_config() {
  json types = json::array();
  for (int i = 0; i < 24; ++i) types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
  return {{"architectures", {"GptOssForCausalLM"}},
          {"attention_bias", true},
          {"attention_dropout", 0.0},
          {"eos_token_id", 200002},
          {"experts_per_token", 4},
          {"head_dim", 64},
          {"hidden_act", "silu"},
          {"hidden_size", 2880},
          {"initial_context_length", 4096},
          {"initializer_range", 0.02},
          {"intermediate_size", 2880},
          {"layer_types", types},
          {"max_position_embeddings", 131072},
          {"model_type", "gpt_oss"},
          {"num_attention_heads", 64},
          {"num_experts_per_tok", 4},
          {"num_hidden_layers", 24},
          {"num_key_value_heads", 8},
          {"num_local_experts", 32},
          {"output_router_logits", false},
          {"pad_token_id", 199999},
          {"quantization_config",
           {{"modules_to_not_convert",
             {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
              "lm_head"}},
            {"quant_method", "mxfp4"}}},
          {"rms_norm_eps", 1e-05},
          {"rope_scaling",
           {{"beta_fast", 32.0},
            {"beta_slow", 1.0},
            {"factor", 32.0},
            {"original_max_position_embeddings", 4096},
            {"rope_type", "yarn"},
            {"truncate", false}}},
          {"rope_theta", 150000},
          {"router_aux_loss_coef", 0.9},
          {"sliding_window", 128},
          {"swiglu_limit", 7.0},
          {"tie_word_embeddings", false},
          {"transformers_version", "4.55.0.dev0"},
          {"use_cache", true},
          {"vocab_size", 201088}};
}

void expect_gpt_oss_20b(const DecoderConfig& c) {
  EXPECT_EQ(c.family, tandem::DecoderFamily::GptOss);
  EXPECT_TRUE(c.attention_sinks);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.o_bias);
  std::vector<int64_t> windows;
  for (int i = 0; i < 24; ++i) windows.push_back(i % 2 == 0 ? 128 : 0);
  EXPECT_EQ(c.sliding_window, windows);
  EXPECT_EQ(c.moe.num_experts, 32);
  EXPECT_EQ(c.moe.experts_per_token, 4);
  EXPECT_EQ(c.moe.expert_intermediate_size, 2880);
  EXPECT_EQ(c.moe.scoring, tandem::RouterScoring::SoftmaxOfTopK);
  EXPECT_EQ(c.moe.gpt_oss_experts.limit, 7.0);
  EXPECT_EQ(c.moe.gpt_oss_experts.alpha, 1.702);
  EXPECT_EQ(c.rope_theta, 150000.0);
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_FALSE(c.rope_scaling.truncate);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
}

TEST(GptOssConfig, ReadsThePublishedConfigAndTransformersDefaults) {
  expect_gpt_oss_20b(parse_config(published_config()));
  // What GptOssConfig fills in when config.json leaves it out: the alternating layers (a sliding
  // one first), attention biases, window 128, the clamp, rope_theta and its YaRN.
  json bare = published_config();
  for (const char* key : {"layer_types", "attention_bias", "sliding_window", "swiglu_limit",
                          "rope_scaling", "rope_theta", "head_dim", "rms_norm_eps"})
    bare.erase(key);
  bare["hidden_size"] = 4096;  // head_dim's default is 64, not hidden / heads
  const DecoderConfig defaults = parse_config(bare);
  expect_gpt_oss_20b(defaults);
  EXPECT_EQ(defaults.head_dim, 64);
  // transformers 5's rope_parameters replaces the default YaRN.
  bare["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}};
  EXPECT_EQ(parse_config(bare).rope_scaling.type, "default");

  json wrong = published_config();
  wrong["experts_per_token"] = 2;
  expect_config_error(wrong, "experts_per_token (2) and num_experts_per_tok (4) disagree");
  wrong = published_config();
  wrong["swiglu_limit"] = -1.0;
  expect_config_error(wrong, "swiglu_limit must be a finite number > 0");
  wrong = published_config();
  wrong["quantization_config"]["quant_method"] = "gptq";
  expect_config_error(wrong, "quant_method 'gptq'");
  // MXFP4 is gpt-oss's experts' format only.
  json llama = tandem::testing::fixture_config("llama3");
  llama["quantization_config"] = {{"quant_method", "mxfp4"}};
  expect_config_error(llama, "mxfp4, which tandem reads for gpt-oss's experts only");
}

// Read as a frozen model only: never written, never a draft's layers.
TEST(GptOssConfig, IsNeverWrittenAndDraftsLoseItsParts) {
  const DecoderConfig c = parse_config(published_config());
  const std::string error = error_of([&] { c.to_json(); });
  EXPECT_NE(error.find("tandem does not write gpt_oss models"), std::string::npos) << error;
  const DecoderConfig draft = c.draft_layers(tandem::DecoderFamily::Llama, 1);
  EXPECT_FALSE(draft.attention_sinks);
  EXPECT_FALSE(draft.moe.enabled());
  EXPECT_EQ(draft.sliding_window, std::vector<int64_t>({0}));
}

// The published MXFP4 layout (tools/make_mxfp4_fixtures.py): every expert weight tandem loads is
// the generator's own dequantization (checked there against transformers' bit for bit) in
// tandem's layout, and the model gives the logits of transformers holding those weights.
TEST(Mxfp4, CheckpointLoadsAsTheGeneratorDequantizesIt) {
  const std::string dir = model_fixture("gpt_oss_mxfp4");
  const auto reference =
      fixture_tensors("tests/fixtures/models/gpt_oss_mxfp4/reference.safetensors");
  tandem::RunContext run;
  const tandem::CausalLM model = tandem::load_causal_lm(dir, at::kFloat, run);
  std::map<std::string, at::Tensor> loaded;
  for (const auto& [name, value] : tandem::checkpoint_tensors(*model)) loaded[name] = value;
  int checked = 0;
  for (int64_t layer = 0; layer < model->config().num_hidden_layers; ++layer) {
    const std::string experts = "model.layers." + std::to_string(layer) + ".mlp.experts.";
    EXPECT_TRUE(
        at::equal(loaded.at(experts + "gate_up_proj"),
                  gate_up_as_tandem(reference.at("dequantized." + experts + "gate_up_proj"))))
        << layer;
    EXPECT_TRUE(at::equal(loaded.at(experts + "down_proj"),
                          reference.at("dequantized." + experts + "down_proj").transpose(1, 2)))
        << layer;
    checked += 2;
  }
  EXPECT_EQ(checked, 8);
  const at::Tensor ids = reference.at("input_ids");
  at::NoGradGuard no_grad;
  const at::Tensor logits = model->logits(model->forward_hidden(
      ids, tandem::AttentionLayout::causal(ids.size(0), ids.size(1), at::kCPU)));
  const double diff = (logits - reference.at("logits")).abs().max().item<double>();
  std::printf("[mxfp4] gpt_oss_mxfp4 fp32: logits max|diff| %.3g vs transformers\n", diff);
  EXPECT_LE(diff, 1e-4);
}

// A broken MXFP4 checkpoint names the tensor, from the headers alone (a dry run finds it too):
// scales of the wrong shape, blocks stored as another dtype, a missing scale.
TEST(Mxfp4, BrokenCheckpointsNameTheTensor) {
  const std::string dir = model_fixture("gpt_oss_mxfp4");
  const json config = tandem::testing::fixture_config("gpt_oss_mxfp4");
  const auto tensors = fixture_tensors("tests/fixtures/models/gpt_oss_mxfp4/model.safetensors");
  const std::string scales = "model.layers.2.mlp.experts.gate_up_proj_scales";
  const std::string blocks = "model.layers.2.mlp.experts.gate_up_proj_blocks";
  const auto error_loading = [&](const std::map<std::string, at::Tensor>& t, bool dry_run) {
    ScratchDir scratch;
    std::filesystem::create_directories(scratch.path());
    std::ofstream(scratch / "config.json") << config.dump();
    tandem::write_hf_weights(scratch.path(), {t.begin(), t.end()});
    return error_of([&] {
      tandem::RunContext run;
      run.dry_run = dry_run;
      tandem::load_causal_lm(scratch.path(), at::kFloat, run);
    });
  };
  auto misshapen = tensors;
  misshapen[scales] = at::full({8, 64, 3}, 127, at::kByte);
  for (const bool dry_run : {false, true}) {
    const std::string error = error_loading(misshapen, dry_run);
    EXPECT_NE(error.find("MXFP4 tensor '" + scales +
                         "' is U8 [8, 64, 3] but the config implies U8 "
                         "[8, 64, 2]"),
              std::string::npos)
        << error;
  }
  auto wrong_dtype = tensors;
  wrong_dtype[blocks] = wrong_dtype[blocks].to(at::kFloat);
  std::string error = error_loading(wrong_dtype, true);
  EXPECT_NE(error.find("MXFP4 tensor '" + blocks + "' is F32"), std::string::npos) << error;
  auto missing = tensors;
  missing.erase(scales);
  error = error_loading(missing, true);
  EXPECT_NE(error.find("missing tensors " + scales), std::string::npos) << error;
  // config.json says mxfp4 and neither form is stored: the blocks and scales are what is missing.
  missing.erase(blocks);
  error = error_loading(missing, true);
  EXPECT_NE(error.find("missing tensors " + blocks + ", " + scales), std::string::npos) << error;
  // A NaN scale (E8M0 255) is found when the values are read, naming both tensors.
  auto nan_scale = tensors;
  nan_scale[scales] = nan_scale[scales].clone();
  nan_scale[scales].view(-1)[5] = 255;
  error = error_loading(nan_scale, false);
  EXPECT_NE(error.find("tensor '" + blocks + "' with its scales '" + scales + "'"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("255"), std::string::npos) << error;
}

}  // namespace
