// Mixture-of-experts decoders (models/moe.h, models/stored_weights.h): their configs, the routers
// and the grouped expert compute against hand-written references, checkpoints stored per expert
// or stacked, and the load-balancing loss against transformers' value for the fixtures
// (tools/make_model_fixtures.py). Logits and hidden states against transformers are in
// test_decoder_parity.cpp, with the dense fixtures.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tandem/core/json_file.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/io/safetensors.h"
#include "tandem/io/tensor_io.h"
#include "tandem/models/load.h"
#include "tandem/models/moe.h"
#include "tandem/models/stored_weights.h"
#include "tandem/objectives/sft.h"
#include "test_util.h"

namespace {

using nlohmann::json;
using tandem::testing::error_of;
using tandem::testing::model_fixture;
using tandem::testing::ScratchDir;

json fixture_config(const std::string& name) {
  return tandem::read_json_file(model_fixture(name) + "/config.json", "test");
}

tandem::DecoderConfig parse(const json& config) {
  return tandem::DecoderConfig::from_json(config, "config.json");
}

TEST(MoeConfig, ReadsEachFamily) {
  const auto qwen = parse(fixture_config("qwen3_moe"));
  EXPECT_EQ(qwen.family, tandem::DecoderFamily::Qwen3Moe);
  EXPECT_EQ(qwen.moe.num_experts, 8);
  EXPECT_EQ(qwen.moe.experts_per_token, 2);
  EXPECT_EQ(qwen.moe.expert_intermediate_size, 32);
  EXPECT_EQ(qwen.intermediate_size, 128);  // the dense layer's
  EXPECT_EQ(qwen.moe.sparse_layers, (std::vector<bool>{true, false, true, true}));
  EXPECT_TRUE(qwen.moe.normalize_top_k);
  EXPECT_TRUE(qwen.qk_norm);
  EXPECT_FALSE(qwen.qk_norm_across_heads);

  json hub_spelling = fixture_config("qwen3_moe");  // the hub's Qwen3-MoE configs
  hub_spelling["num_experts"] = hub_spelling["num_local_experts"];
  hub_spelling.erase("num_local_experts");
  EXPECT_EQ(parse(hub_spelling).moe.num_experts, 8);

  const auto mixtral = parse(fixture_config("mixtral"));
  EXPECT_EQ(mixtral.moe.num_experts, 8);
  EXPECT_EQ(mixtral.moe.expert_intermediate_size, 32);
  EXPECT_EQ(mixtral.moe.scoring, tandem::RouterScoring::Softmax);
  EXPECT_FALSE(mixtral.qk_norm);

  // GLM-4.5: DeepSeek-V3's sparse MLP after first_k_dense_replace dense layers; q/k/v biases
  // without an o bias; per-head q/k norms (use_qk_norm); RoPE on half of each head.
  const auto glm = parse(fixture_config("glm4_moe"));
  EXPECT_EQ(glm.family, tandem::DecoderFamily::Glm4Moe);
  EXPECT_EQ(glm.moe.scoring, tandem::RouterScoring::GroupedSigmoid);
  EXPECT_EQ(glm.moe.num_experts, 8);
  EXPECT_EQ(glm.moe.groups, 2);
  EXPECT_EQ(glm.moe.top_groups, 1);
  EXPECT_DOUBLE_EQ(glm.moe.routed_scaling_factor, 2.5);
  EXPECT_TRUE(glm.moe.normalize_top_k);
  EXPECT_EQ(glm.moe.shared_expert_intermediate_size, 32);  // 1 shared expert of 32
  EXPECT_FALSE(glm.moe.shared_expert_gated);
  EXPECT_EQ(glm.moe.sparse_layers, (std::vector<bool>{false, true, true, true}));
  EXPECT_EQ(glm.intermediate_size, 128);
  EXPECT_TRUE(glm.qkv_bias);
  EXPECT_FALSE(glm.o_bias);
  EXPECT_TRUE(glm.qk_norm);
  EXPECT_FALSE(glm.qk_norm_across_heads);
  EXPECT_EQ(glm.rotated_dims(), 16);
  // transformers' default partial_rotary_factor for GLM-4.5 is 0.5 (and 0.25 for the hybrids).
  json no_factor = fixture_config("glm4_moe");
  no_factor["rope_parameters"].erase("partial_rotary_factor");
  EXPECT_EQ(parse(no_factor).rotated_dims(), 16);
  json no_norms = fixture_config("glm4_moe");
  no_norms["use_qk_norm"] = false;  // GLM-4.5-Air
  EXPECT_FALSE(parse(no_norms).qk_norm);
  EXPECT_NE(error_of([&] { glm.to_json(); }).find("read as frozen targets only"),
            std::string::npos);

  const auto minimax = parse(fixture_config("minimax_m2"));
  EXPECT_EQ(minimax.moe.scoring, tandem::RouterScoring::SigmoidWithBias);
  EXPECT_EQ(minimax.moe.experts_per_token, 3);
  EXPECT_EQ(minimax.rotary_dim, 16);
  EXPECT_EQ(minimax.rotated_dims(), 16);
  EXPECT_TRUE(minimax.qk_norm_across_heads);

  // What a config writes back reads as the same model.
  for (const auto* config : {&qwen, &mixtral, &minimax}) {
    const auto again = parse(config->to_json());
    EXPECT_EQ(again.family, config->family);
    EXPECT_EQ(again.moe.num_experts, config->moe.num_experts);
    EXPECT_EQ(again.moe.experts_per_token, config->moe.experts_per_token);
    EXPECT_EQ(again.moe.expert_intermediate_size, config->moe.expert_intermediate_size);
    EXPECT_EQ(again.moe.sparse_layers, config->moe.sparse_layers);
    EXPECT_EQ(again.moe.normalize_top_k, config->moe.normalize_top_k);
    EXPECT_EQ(again.rotated_dims(), config->rotated_dims());
    EXPECT_EQ(again.qk_norm_across_heads, config->qk_norm_across_heads);
  }
  // A draft layer derived from an MoE target is a plain dense layer, its q/k norms the draft
  // family's (per head for Qwen3, none for Llama), never MiniMax-M2's across heads.
  for (const auto family : {tandem::DecoderFamily::Qwen3, tandem::DecoderFamily::Llama}) {
    const auto base = minimax.draft_layers(family, 2);
    EXPECT_FALSE(base.moe.enabled());
    EXPECT_EQ(base.rotated_dims(), base.head_dim);
    EXPECT_FALSE(base.qk_norm_across_heads);
    EXPECT_EQ(base.qk_norm, family == tandem::DecoderFamily::Qwen3);
    EXPECT_EQ(base.num_hidden_layers, 2);
    EXPECT_EQ(base.sliding_window, (std::vector<int64_t>{0, 0}));
    EXPECT_FALSE(base.qkv_bias || base.o_bias || base.mlp_bias || base.tie_word_embeddings);
  }
}

TEST(MoeConfig, MalformedFieldsAreNamed) {
  struct Case {
    std::string fixture;
    std::function<void(json&)> change;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"qwen3_moe", [](json& c) { c["num_experts_per_tok"] = 9; },
       "num_experts_per_tok must be in 1..num_local_experts (8), got 9"},
      {"qwen3_moe", [](json& c) { c["num_local_experts"] = 0; },
       "num_local_experts must be in 1..4096, got 0"},
      {"qwen3_moe", [](json& c) { c.erase("moe_intermediate_size"); },
       "missing required field 'moe_intermediate_size'"},
      {"qwen3_moe", [](json& c) { c["mlp_only_layers"] = {7}; },
       "mlp_only_layers entry 7 is not a layer index in 0..3"},
      {"qwen3_moe", [](json& c) { c["decoder_sparse_step"] = 0; },
       "decoder_sparse_step must be >= 1"},
      {"qwen3_moe", [](json& c) { c["shared_expert_intermediate_size"] = 64; },
       "unsupported field 'shared_expert_intermediate_size' for model_type 'qwen3_moe'"},
      {"qwen3_moe", [](json& c) { c["num_experts"] = 6; },
       "num_experts (6) and num_local_experts (8) disagree"},
      {"mixtral", [](json& c) { c.erase("num_local_experts"); },
       "missing required field 'num_local_experts' (or 'num_experts')"},
      {"mixtral", [](json& c) { c["router_jitter_noise"] = 0.1; },
       "unsupported router_jitter_noise 0.1"},
      {"mixtral", [](json& c) { c["mlp_only_layers"] = json::array(); },
       "unsupported field 'mlp_only_layers' for mixtral"},
      {"mixtral", [](json& c) { c["rotary_dim"] = 8; },
       "unsupported field 'rotary_dim' for model_type 'mixtral'"},
      {"minimax_m2", [](json& c) { c["scoring_func"] = "softmax"; },
       "unsupported scoring_func \"softmax\""},
      {"minimax_m2", [](json& c) { c["rotary_dim"] = 15; }, "rotary_dim 15 disagrees"},
      {"minimax_m2",
       [](json& c) {
         c["attn_type_list"] = {1, 0, 1, 1};
       },
       "unsupported attn_type_list entry 0"},
      {"minimax_m2", [](json& c) { c["qk_norm_type"] = "per_head"; },
       "unsupported qk_norm_type \"per_head\""},
      {"minimax_m2",
       [](json& c) {
         c["quantization_config"] = {{"quant_method", "fp8"}};
       },
       "per-tensor FP8 is not supported: dequantize it to bf16 first"},
      {"glm4_moe", [](json& c) { c["n_group"] = 3; },
       "n_group (3) must divide n_routed_experts (8)"},
      {"glm4_moe", [](json& c) { c["n_group"] = 8; },
       "each of the n_group (8) groups needs at least 2 experts"},
      {"glm4_moe", [](json& c) { c["topk_group"] = 3; },
       "topk_group must be in 1..n_group (2), got 3"},
      {"glm4_moe", [](json& c) { c["num_experts_per_tok"] = 5; },
       "topk_group (1) groups of 4 experts hold fewer than num_experts_per_tok (5)"},
      {"glm4_moe", [](json& c) { c.erase("routed_scaling_factor"); },
       "missing required field 'routed_scaling_factor'"},
      {"glm4_moe", [](json& c) { c["first_k_dense_replace"] = 5; },
       "first_k_dense_replace must be in 0..num_hidden_layers (4), got 5"},
      {"glm4_moe", [](json& c) { c["topk_method"] = "greedy"; },
       "unsupported topk_method \"greedy\""},
      {"glm4_moe", [](json& c) { c["num_local_experts"] = 6; },
       "n_routed_experts (8) and num_local_experts (6) disagree"},
      {"minimax_m2", [](json& c) { c["architectures"] = {"MixtralForCausalLM"}; },
       "unsupported architecture \"MixtralForCausalLM\" for model_type 'minimax_m2'"},
  };
  for (const Case& c : cases) {
    json config = fixture_config(c.fixture);
    c.change(config);
    const std::string error = error_of([&] { parse(config); });
    EXPECT_NE(error.find(c.message), std::string::npos)
        << c.fixture << ": expected '" << c.message << "' in: " << error;
    EXPECT_NE(error.find("config.json"), std::string::npos) << error;
  }
}

// All tensors of a checkpoint directory.
std::vector<std::pair<std::string, at::Tensor>> read_all(const std::string& dir) {
  const auto checkpoint = tandem::HfCheckpoint::open(dir);
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const std::string& name : checkpoint.names()) out.emplace_back(name, checkpoint.read(name));
  return out;
}

// A checkpoint dir with `tensors` and the fixture's config.json.
std::string write_checkpoint(const ScratchDir& scratch, const std::string& fixture,
                             const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  const std::string dir = scratch / fixture;
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(model_fixture(fixture) + "/config.json", dir + "/config.json");
  tandem::write_hf_weights(dir, tensors);
  return dir;
}

at::Tensor fixture_logits(const std::string& dir, c10::ScalarType dtype = at::kFloat) {
  tandem::RunContext run;
  const tandem::CausalLM model = tandem::load_causal_lm(dir, dtype, run);
  const at::Tensor ids = at::arange(12, at::kLong).view({2, 6}) * 37 % 512;
  at::NoGradGuard no_grad;
  return model->logits(model->forward_hidden(ids, tandem::AttentionLayout::causal(2, 6, at::kCPU)));
}

TEST(MoeCheckpoint, MissingAndMisshapenExpertTensorsAreNamed) {
  ScratchDir scratch;
  auto tensors = read_all(model_fixture("minimax_m2"));
  const std::string dropped = "model.layers.2.block_sparse_moe.experts.5.w3.weight";
  auto without = tensors;
  std::erase_if(without, [&](const auto& t) { return t.first == dropped; });
  ASSERT_EQ(without.size() + 1, tensors.size());
  const std::string missing_dir = write_checkpoint(scratch, "minimax_m2", without);
  std::string error = error_of([&] { fixture_logits(missing_dir); });
  EXPECT_NE(error.find("missing tensors " + dropped), std::string::npos) << error;

  auto misshapen = tensors;
  for (auto& [name, value] : misshapen)
    if (name == "model.layers.1.block_sparse_moe.experts.0.w2.weight")
      value = value.narrow(1, 0, 16).contiguous();
  ScratchDir scratch2;
  const std::string bad_dir = write_checkpoint(scratch2, "minimax_m2", misshapen);
  error = error_of([&] { fixture_logits(bad_dir); });
  EXPECT_NE(error.find("expert tensor 'model.layers.1.block_sparse_moe.experts.0.w2.weight' has "
                       "shape [64, 16] but the config implies [64, 32]"),
            std::string::npos)
      << error;

  auto no_bias = tensors;
  std::erase_if(no_bias, [](const auto& t) {
    return t.first == "model.layers.0.block_sparse_moe.e_score_correction_bias";
  });
  ScratchDir scratch3;
  error = error_of([&] { fixture_logits(write_checkpoint(scratch3, "minimax_m2", no_bias)); });
  EXPECT_NE(error.find("missing tensors model.layers.0.block_sparse_moe.e_score_correction_bias"),
            std::string::npos)
      << error;

  auto extra = tensors;
  extra.emplace_back("model.layers.0.block_sparse_moe.experts.8.w1.weight", at::zeros({32, 64}));
  ScratchDir scratch4;
  error = error_of([&] { fixture_logits(write_checkpoint(scratch4, "minimax_m2", extra)); });
  EXPECT_NE(error.find("tensors the config does not account for: "
                       "model.layers.0.block_sparse_moe.experts.8.w1.weight"),
            std::string::npos)
      << error;
}

// The stacked form (transformers 5's in-memory names) reads as the per-expert form does, and an
// export writes the per-expert form back, the same values byte for byte.
TEST(MoeCheckpoint, StackedAndPerExpertFormsAgreeAndExportsRoundTrip) {
  for (const std::string fixture : {"qwen3_moe", "mixtral", "minimax_m2"}) {
    const std::string dir = model_fixture(fixture);
    const at::Tensor expected = fixture_logits(dir);
    tandem::RunContext run;
    const tandem::CausalLM model = tandem::load_causal_lm(dir, at::kFloat, run);
    const auto stacked = tandem::checkpoint_tensors(*model);  // the model's own (stacked) names
    ScratchDir scratch;
    const std::string stacked_dir = write_checkpoint(scratch, fixture, stacked);
    EXPECT_TRUE(at::equal(fixture_logits(stacked_dir), expected)) << fixture;

    ScratchDir exported;
    tandem::export_causal_lm(model, exported.path(), /*source_dir=*/"");
    const auto original = read_all(dir);
    const auto written = read_all(exported.path());
    std::map<std::string, at::Tensor> by_name(written.begin(), written.end());
    for (const auto& [name, value] : original) {
      if (name == "lm_head.weight" && model->config().tie_word_embeddings) continue;
      ASSERT_TRUE(by_name.count(name)) << fixture << ": the export lacks " << name;
      EXPECT_TRUE(at::equal(by_name[name].to(at::kFloat), value.to(at::kFloat)))
          << fixture << " " << name;
    }
    EXPECT_EQ(by_name.size(), original.size()) << fixture;
    EXPECT_TRUE(at::equal(fixture_logits(exported.path()), expected)) << fixture;
  }
}

// The hybrids' experts stacked as transformers 5 holds them, under the names their checkpoints
// use (Qwen3.5-MoE's wrapper prefix model.language_model.), read as the per-expert form does.
TEST(MoeCheckpoint, HybridStackedExpertsReadAsPerExpert) {
  for (const std::string fixture : {"qwen3_5_moe", "qwen3_next"}) {
    const std::string dir = model_fixture(fixture);
    const at::Tensor expected = fixture_logits(dir);
    tandem::RunContext run;
    const tandem::CausalLM model = tandem::load_causal_lm(dir, at::kFloat, run);
    std::vector<std::pair<std::string, at::Tensor>> stacked;
    for (const auto& [name, value] : tandem::checkpoint_tensors(*model))
      stacked.emplace_back(tandem::checkpoint_name(name, model->config()), value);
    EXPECT_NE(std::find_if(stacked.begin(), stacked.end(),
                           [](const auto& t) {
                             return t.first.find(".mlp.experts.gate_up_proj") != std::string::npos;
                           }),
              stacked.end());
    ScratchDir scratch;
    EXPECT_TRUE(at::equal(fixture_logits(write_checkpoint(scratch, fixture, stacked)), expected))
        << fixture;
  }
}

// GLM-4.5 as published: the MTP layer numbered after the decoder's is skipped by name and
// reported; the routing bias, stored under the router, stays fp32 in a bf16 model and is named
// when missing; the stacked experts read as the per-expert ones.
TEST(MoeCheckpoint, Glm4MoeReadsAsPublished) {
  const std::string dir = model_fixture("glm4_moe");
  const auto checkpoint = tandem::HfCheckpoint::open(dir);
  const tandem::DecoderConfig config = tandem::DecoderConfig::from_dir(dir);
  EXPECT_NE(tandem::outside_decoder_summary(checkpoint, config)
                .find("tensors of the multi-token-prediction layers"),
            std::string::npos);
  EXPECT_EQ(tandem::outside_decoder("model.layers.3.mlp.gate.weight", config), nullptr);
  EXPECT_NE(tandem::outside_decoder("model.layers.4.eh_proj.weight", config), nullptr);
  // num_nextn_predict_layers 1: layer 4 only; a layer past it is unexpected, not skipped.
  EXPECT_EQ(tandem::outside_decoder("model.layers.5.enorm.weight", config), nullptr);
  EXPECT_EQ(tandem::outside_decoder("model.layers.12.enorm.weight", config), nullptr);
  EXPECT_EQ(tandem::outside_decoder("model.layers.4x.weight", config), nullptr);
  EXPECT_EQ(tandem::outside_decoder("model.norm.weight", config), nullptr);

  tandem::RunContext run;
  const tandem::CausalLM bf16 = tandem::load_causal_lm(dir, at::kBFloat16, run);
  const std::string bias_name = "model.layers.1.mlp.gate.e_score_correction_bias";
  bool found = false;
  for (const auto& [name, value] : tandem::checkpoint_tensors(*bf16)) {
    if (name != bias_name) continue;
    found = true;
    EXPECT_EQ(value.scalar_type(), at::kFloat);
    EXPECT_TRUE(at::equal(value, checkpoint.read(bias_name).to(at::kFloat)));
  }
  EXPECT_TRUE(found) << bias_name;

  auto tensors = read_all(dir);
  std::erase_if(tensors, [&](const auto& t) { return t.first == bias_name; });
  ScratchDir scratch;
  std::string error =
      error_of([&] { fixture_logits(write_checkpoint(scratch, "glm4_moe", tensors)); });
  EXPECT_NE(error.find("missing tensors " + bias_name), std::string::npos) << error;

  const at::Tensor expected = fixture_logits(dir);
  const tandem::CausalLM model = tandem::load_causal_lm(dir, at::kFloat, run);
  ScratchDir stacked;
  EXPECT_TRUE(at::equal(
      fixture_logits(write_checkpoint(stacked, "glm4_moe", tandem::checkpoint_tensors(*model))),
      expected));
}

// The grouped compute against a per-token loop in fp64: out[n] = sum_k w[n,k] *
// expert_{i[n,k]}(x[n]), values and the gradients of x, the weights and both expert tensors; one
// expert at a time in fp64 (within 1e-12), ATen's grouped matmul in fp32 (within 1e-5).
TEST(MoeExperts, GroupedComputeEqualsThePerTokenSum) {
  at::manual_seed(3);
  // fp32 rows of 32 and 16 bytes: what the grouped kernel takes.
  const int64_t tokens = 11, hidden = 8, inter = 4, experts = 4, k = 2;
  const at::TensorOptions f64 = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor x = at::randn({tokens, hidden}, f64).requires_grad_();
  const at::Tensor gate_up = at::randn({experts, 2 * inter, hidden}, f64).requires_grad_();
  const at::Tensor down = at::randn({experts, hidden, inter}, f64).requires_grad_();
  // Expert 3 never chosen; expert 0 chosen by most tokens.
  const at::Tensor indices =
      at::tensor({0, 1, 0, 2, 1, 0, 2, 0, 0, 1, 1, 2, 0, 2, 2, 1, 0, 1, 2, 0, 1, 0}, at::kLong)
          .view({tokens, k});
  const at::Tensor weights = at::rand({tokens, k}, f64).requires_grad_();
  std::vector<at::Tensor> rows;
  for (int64_t n = 0; n < tokens; ++n) {
    at::Tensor sum = at::zeros({hidden}, f64);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = indices[n][j].item<int64_t>();
      const at::Tensor both = at::mv(gate_up[e], x[n]);
      const at::Tensor h = at::silu(both.narrow(0, 0, inter)) * both.narrow(0, inter, inter);
      sum = sum + weights[n][j] * at::mv(down[e], h);
    }
    rows.push_back(sum);
  }
  const at::Tensor reference = at::stack(rows);
  const at::Tensor upstream = at::randn({tokens, hidden}, f64);
  const auto want = torch::autograd::grad({reference}, {x, weights, gate_up, down}, {upstream});
  struct Case {
    at::ScalarType dtype;
    tandem::ExpertGemm gemm;
    double bound;
  };
  for (const Case& c : {Case{at::kDouble, tandem::ExpertGemm::PerExpert, 1e-12},
                        Case{at::kFloat, tandem::ExpertGemm::Grouped, 1e-5}}) {
    SCOPED_TRACE(c10::toString(c.dtype));
    const std::vector<at::Tensor> leaves = {
        x.detach().to(c.dtype).requires_grad_(), weights.detach().to(c.dtype).requires_grad_(),
        gate_up.detach().to(c.dtype).requires_grad_(), down.detach().to(c.dtype).requires_grad_()};
    const at::Tensor grouped =
        tandem::run_experts(leaves[0], indices, leaves[1], leaves[2], leaves[3], c.gemm);
    EXPECT_TRUE(at::allclose(grouped.to(at::kDouble), reference, c.bound, c.bound));
    const auto got = torch::autograd::grad({grouped}, leaves, {upstream.to(c.dtype)});
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(at::allclose(got[i].to(at::kDouble), want[i], c.bound, c.bound))
          << "gradient " << i;
    EXPECT_EQ(got[2][3].abs().max().item<double>(), 0.0);  // the unchosen expert learns nothing
  }
}

// Where the grouped matmul runs: rows of whole 16-byte units; the CPU in fp32/bf16/fp16; CUDA in
// bf16 where it was verified on the device; the meta device (a planned GPU run) in bf16.
TEST(MoeExperts, TheGroupedMatmulRunsWhereTheKernelTakesTheCall) {
  using tandem::choose_expert_gemm;
  using tandem::ExpertGemm;
  EXPECT_EQ(choose_expert_gemm(c10::kCPU, at::kFloat, 8, 4, false), ExpertGemm::Grouped);
  EXPECT_EQ(choose_expert_gemm(c10::kCPU, at::kBFloat16, 16, 8, false), ExpertGemm::Grouped);
  EXPECT_EQ(choose_expert_gemm(c10::kCPU, at::kBFloat16, 16, 4, false), ExpertGemm::PerExpert);
  EXPECT_EQ(choose_expert_gemm(c10::kCPU, at::kFloat, 6, 5, false), ExpertGemm::PerExpert);
  EXPECT_EQ(choose_expert_gemm(c10::kCPU, at::kDouble, 64, 32, false), ExpertGemm::PerExpert);
  EXPECT_EQ(choose_expert_gemm(c10::kCUDA, at::kBFloat16, 2048, 768, true), ExpertGemm::Grouped);
  EXPECT_EQ(choose_expert_gemm(c10::kCUDA, at::kBFloat16, 2048, 768, false), ExpertGemm::PerExpert);
  EXPECT_EQ(choose_expert_gemm(c10::kCUDA, at::kFloat, 2048, 768, true), ExpertGemm::PerExpert);
  EXPECT_EQ(choose_expert_gemm(c10::kCUDA, at::kBFloat16, 2048, 100, true), ExpertGemm::PerExpert);
  EXPECT_EQ(choose_expert_gemm(c10::kMeta, at::kBFloat16, 2048, 768, false), ExpertGemm::Grouped);
  EXPECT_EQ(choose_expert_gemm(c10::kMeta, at::kFloat, 2048, 768, false), ExpertGemm::PerExpert);
  // The self-check that guards the grouped kernel on a GPU passes here, where the kernel is right.
  EXPECT_TRUE(tandem::grouped_expert_gemm_verified(c10::kCPU, at::kFloat));
  EXPECT_TRUE(tandem::grouped_expert_gemm_verified(c10::kCPU, at::kBFloat16));
}

TEST(MoeRouter, EachFamilyRoutesAsTransformersDoes) {
  const at::Tensor logits = at::tensor({2.0f, -1.0f, 0.5f, 1.5f}).view({1, 4});
  tandem::MoeConfig softmax;
  softmax.num_experts = 4;
  softmax.experts_per_token = 2;
  softmax.normalize_top_k = true;
  auto [indices, weights] = tandem::route_tokens(logits, {}, softmax);
  EXPECT_EQ(indices[0][0].item<int64_t>(), 0);
  EXPECT_EQ(indices[0][1].item<int64_t>(), 3);
  // Normalised: e^2 / (e^2 + e^1.5).
  EXPECT_NEAR(weights[0][0].item<double>(), 1.0 / (1.0 + std::exp(-0.5)), 1e-6);
  softmax.normalize_top_k = false;  // the plain softmax probabilities
  const double total = std::exp(2.0) + std::exp(-1.0) + std::exp(0.5) + std::exp(1.5);
  EXPECT_NEAR(tandem::route_tokens(logits, {}, softmax).second[0][0].item<double>(),
              std::exp(2.0) / total, 1e-6);

  // MiniMax-M2: the bias moves expert 2 ahead of expert 3 in the choice, not into the weights.
  tandem::MoeConfig sigmoid = softmax;
  sigmoid.scoring = tandem::RouterScoring::SigmoidWithBias;
  const at::Tensor bias = at::tensor({0.0f, 0.0f, 0.3f, 0.0f});
  auto [chosen, sigmoid_weights] = tandem::route_tokens(logits, bias, sigmoid);
  std::vector<int64_t> picked = {chosen[0][0].item<int64_t>(), chosen[0][1].item<int64_t>()};
  std::sort(picked.begin(), picked.end());
  EXPECT_EQ(picked, (std::vector<int64_t>{0, 2}));
  const auto s = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  const double w0 = s(2.0) / (s(2.0) + s(0.5));
  const int64_t slot0 = chosen[0][0].item<int64_t>() == 0 ? 0 : 1;
  EXPECT_NEAR(sigmoid_weights[0][slot0].item<double>(), w0, 1e-6);
}

// GLM-4.5 / DeepSeek-V3: group-limited routing, worked by hand. 8 experts in 2 groups of 4,
// top-2 of 1 group. Group 0's choice scores (sigmoid + bias) are led by expert 1 alone; group 1
// has no single best expert but a better best two, so group 1 stays open and expert 1, the best
// expert of all, is not chosen.
TEST(MoeRouter, GroupLimitedRoutingAsDeepSeekV3) {
  const auto logit = [](double p) { return static_cast<float>(std::log(p / (1 - p))); };
  // sigmoid(logits) = 0.10 0.95 0.10 0.10 | 0.60 0.70 0.65 0.05
  const at::Tensor logits = at::tensor({logit(0.10), logit(0.95), logit(0.10), logit(0.10),
                                        logit(0.60), logit(0.70), logit(0.65), logit(0.05)})
                                .view({1, 8});
  const at::Tensor bias = at::zeros({8});
  tandem::MoeConfig moe;
  moe.num_experts = 8;
  moe.experts_per_token = 2;
  moe.scoring = tandem::RouterScoring::GroupedSigmoid;
  moe.groups = 2;
  moe.top_groups = 1;
  moe.routed_scaling_factor = 2.5;
  moe.normalize_top_k = true;
  // Group scores (best two): 0.95 + 0.10 = 1.05 against 0.70 + 0.65 = 1.35: group 1 is open.
  auto [indices, weights] = tandem::route_tokens(logits, bias, moe);
  std::vector<std::pair<int64_t, double>> chosen;
  for (int64_t j = 0; j < 2; ++j)
    chosen.emplace_back(indices[0][j].item<int64_t>(), weights[0][j].item<double>());
  std::sort(chosen.begin(), chosen.end());
  ASSERT_EQ(chosen[0].first, 5);
  ASSERT_EQ(chosen[1].first, 6);
  EXPECT_NEAR(chosen[0].second, 0.70 / (0.70 + 0.65) * 2.5, 1e-6);
  EXPECT_NEAR(chosen[1].second, 0.65 / (0.70 + 0.65) * 2.5, 1e-6);
  // Both groups open: experts 1 and 5. Without normalisation the weights are the sigmoids x 2.5.
  moe.top_groups = 2;
  moe.normalize_top_k = false;
  std::tie(indices, weights) = tandem::route_tokens(logits, bias, moe);
  std::vector<int64_t> picked = {indices[0][0].item<int64_t>(), indices[0][1].item<int64_t>()};
  std::sort(picked.begin(), picked.end());
  EXPECT_EQ(picked, (std::vector<int64_t>{1, 5}));
  EXPECT_NEAR(weights.sum().item<double>(), (0.95 + 0.70) * 2.5, 1e-6);
  // The bias moves the choice (group 0 now scores 0.95 + 0.50 = 1.45 and expert 2 passes
  // expert 5), never the weights: sigmoid 0.10 of expert 2 is its weight.
  moe.top_groups = 1;
  const at::Tensor shifted = at::tensor({0.0f, 0.0f, 0.4f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f});
  std::tie(indices, weights) = tandem::route_tokens(logits, shifted, moe);
  picked = {indices[0][0].item<int64_t>(), indices[0][1].item<int64_t>()};
  std::sort(picked.begin(), picked.end());
  EXPECT_EQ(picked, (std::vector<int64_t>{1, 2}));
  EXPECT_NEAR(weights.sum().item<double>(), (0.95 + 0.10) * 2.5, 1e-6);
}

// transformers' load_balancing_loss_func on the fixtures' router logits, and padding weighed 0
// counts as if the token were not there.
TEST(MoeRouter, LoadBalancingLossMatchesTransformers) {
  for (const std::string fixture : {"qwen3_moe", "mixtral", "minimax_m2", "glm4_moe", "deepseek_v3",
                                    "deepseek_v3_q_proj", "gpt_oss"}) {
    const std::string dir = model_fixture(fixture);
    const auto file = tandem::safetensors::File::open(dir + "/reference.safetensors");
    std::map<std::string, at::Tensor> reference;
    for (const auto& info : file.header().tensors)
      reference[info.name] = tandem::read_tensor(file, info);
    tandem::RunContext run;
    const tandem::CausalLM model = tandem::load_causal_lm(dir, at::kFloat, run);
    const at::Tensor ids = reference.at("input_ids");
    tandem::RouterLoad load;
    at::NoGradGuard no_grad;
    model->forward_hidden(ids, tandem::AttentionLayout::causal(ids.size(0), ids.size(1), at::kCPU),
                          {}, nullptr, &load);
    int64_t sparse = 0;
    for (bool s : model->config().moe.sparse_layers) sparse += s;
    EXPECT_EQ(load.layers, sparse) << fixture;
    const double expected = reference.at("aux_loss").item<double>();
    std::printf("[moe] %s aux loss %.6f (transformers %.6f)\n", fixture.c_str(),
                load.loss().item<double>(), expected);
    EXPECT_NEAR(load.loss().item<double>(), expected, 1e-5 * std::max(1.0, expected)) << fixture;
  }
  at::manual_seed(0);
  const at::Tensor logits = at::randn({5, 4});
  tandem::RouterLoad masked, subset;
  masked.token_weights = at::tensor({1.0f, 0.0f, 1.0f, 1.0f, 0.0f});
  masked.add(logits, 2);
  subset.add(logits.index_select(0, at::tensor({0, 2, 3}, at::kLong)), 2);
  EXPECT_NEAR(masked.loss().item<double>(), subset.loss().item<double>(), 1e-6);
  // Balanced routing gives 1 x k: uniform probabilities, each expert picked equally often.
  tandem::RouterLoad uniform;
  uniform.add(at::zeros({4, 4}), 1);
  EXPECT_NEAR(uniform.loss().item<double>(), 1.0, 1e-6);
}

}  // namespace
