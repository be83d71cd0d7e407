// The DFlash export (docs/dflash.md, z-lab DFlashDraftModel format read by SGLang and vLLM):
// exactly the keys, shapes and config fields the engines read, a round trip that rebuilds the same
// draft, the grown-mask-token files, atomic replacement, and errors that name the file.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tandem/core/error.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/objectives/dflash.h"
#include "tandem/objectives/dflash_export.h"
#include "test_util.h"

namespace {

using tandem::testing::ScratchDir;

// The DFlash fixture's draft (tests/test_dflash.cpp): 2 layers, 6 heads, 2 KV heads, head_dim 16,
// intermediate 64, reading target layers 0 and 2, RoPE theta 10000, mask token 511.
tandem::DFlashOptions export_options(int64_t block_size) {
  tandem::DFlashOptions options;
  options.target_path = tandem::testing::model_fixture("llama3");
  options.dims = {2, 64, 6, 2, 16};
  options.target_layer_ids = {0, 2};
  options.block_size = block_size;
  options.gamma = 2.0;
  options.mask_token_id = 511;
  options.rope_theta = 10000.0;
  options.seed = 3;
  return options;
}

nlohmann::json read_config(const std::string& dir) {
  return nlohmann::json::parse(std::ifstream(dir + "/config.json"));
}

// The draft's normed output on random blocks and context: (1, bs, H).
at::Tensor draft_output(const tandem::DFlashDraftImpl& draft, int64_t seed) {
  at::NoGradGuard no_grad;
  at::manual_seed(seed);
  const int64_t bs = draft.config().block_size, n = 9, hidden = draft.config().layer.hidden_size;
  const at::Tensor features =
      at::randn({1, n, static_cast<int64_t>(draft.config().target_layer_ids.size()) * 64});
  return draft.forward(at::randn({1, bs, hidden}), draft.context(features),
                       at::arange(n, at::kLong).view({1, n}),
                       at::arange(n, n + bs, at::kLong).view({1, bs}),
                       tandem::KeyBands::from_host(at::zeros({1, bs}, at::kLong),
                                                   at::full({1, bs}, n - 1, at::kLong), c10::kCPU),
                       at::ones({1, 1}, at::kBool));
}

TEST(DFlashExport, ExactlyTheKeysShapesAndConfigEnginesRead) {
  ScratchDir scratch;
  tandem::DFlashObjective objective(export_options(8));
  EXPECT_TRUE(objective.export_at_checkpoints());
  const std::string dir = scratch / "export";
  objective.export_model(dir);

  const int64_t hidden = 64, inter = 64, q = 6 * 16, kv = 2 * 16;
  std::map<std::string, std::vector<int64_t>> expected = {{"fc.weight", {hidden, 2 * hidden}},
                                                          {"hidden_norm.weight", {hidden}},
                                                          {"norm.weight", {hidden}}};
  for (int i = 0; i < 2; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    expected[p + "self_attn.q_proj.weight"] = {q, hidden};
    expected[p + "self_attn.k_proj.weight"] = {kv, hidden};
    expected[p + "self_attn.v_proj.weight"] = {kv, hidden};
    expected[p + "self_attn.o_proj.weight"] = {hidden, q};
    expected[p + "self_attn.q_norm.weight"] = {16};
    expected[p + "self_attn.k_norm.weight"] = {16};
    expected[p + "mlp.gate_proj.weight"] = {inter, hidden};
    expected[p + "mlp.up_proj.weight"] = {inter, hidden};
    expected[p + "mlp.down_proj.weight"] = {hidden, inter};
    expected[p + "input_layernorm.weight"] = {hidden};
    expected[p + "post_attention_layernorm.weight"] = {hidden};
  }
  const auto checkpoint = tandem::HfCheckpoint::open(dir);
  std::map<std::string, std::vector<int64_t>> found;
  for (const std::string& name : checkpoint.names()) found[name] = checkpoint.info(name).shape;
  EXPECT_EQ(found, expected);  // no embed_tokens, no lm_head, no model. prefix
  EXPECT_EQ(checkpoint.info("fc.weight").dtype, tandem::safetensors::Dtype::F32);

  // Exactly these files: no grown-mask files, no staging leftovers beside the directory.
  std::set<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    files.insert(entry.path().filename().string());
  EXPECT_EQ(files, (std::set<std::string>{"config.json", "model.safetensors"}));
  EXPECT_FALSE(std::filesystem::exists(dir + ".tmp"));
  EXPECT_FALSE(std::filesystem::exists(dir + ".old"));

  const nlohmann::json config = read_config(dir);
  EXPECT_EQ(config["architectures"], nlohmann::json::array({"DFlashDraftModel"}));
  EXPECT_EQ(config["model_type"], "qwen3");
  EXPECT_EQ(config["block_size"], 8);
  EXPECT_EQ(config["dflash_config"]["mask_token_id"], 511);
  EXPECT_EQ(config["dflash_config"]["target_layer_ids"], nlohmann::json::array({0, 2}));
  EXPECT_EQ(config["num_target_layers"], 4);  // SGLang checks target_layer_ids against it
  EXPECT_EQ(config["target_hidden_size"], 64);
  EXPECT_EQ(config["hidden_size"], 64);
  EXPECT_EQ(config["num_hidden_layers"], 2);
  EXPECT_EQ(config["num_attention_heads"], 6);
  EXPECT_EQ(config["num_key_value_heads"], 2);
  EXPECT_EQ(config["head_dim"], 16);
  EXPECT_EQ(config["intermediate_size"], 64);
  EXPECT_EQ(config["vocab_size"], 512);
  EXPECT_EQ(config["max_position_embeddings"], 512);
  EXPECT_DOUBLE_EQ(config["rms_norm_eps"].get<double>(), 1e-6);
  EXPECT_DOUBLE_EQ(config["rope_theta"].get<double>(), 10000.0);
  EXPECT_TRUE(config["rope_scaling"].is_null());  // draft.rope_theta set: unscaled
  EXPECT_EQ(config["hidden_act"], "silu");
  EXPECT_EQ(config["attention_bias"], false);
  EXPECT_EQ(config["tie_word_embeddings"], false);
  EXPECT_EQ(config["torch_dtype"], "float32");
  EXPECT_FALSE(config.contains("layer_types"));
  EXPECT_FALSE(config.contains("tandem"));

  // Exporting again replaces the directory whole.
  { std::ofstream(dir + "/stale.txt") << "x"; }
  objective.export_model(dir);
  EXPECT_FALSE(std::filesystem::exists(dir + "/stale.txt"));
}

TEST(DFlashExport, TheTargetsRopeScalingTravelsWithTheDraft) {
  ScratchDir scratch;
  tandem::DFlashOptions options = export_options(4);
  options.rope_theta.reset();  // the target's llama3-scaled RoPE
  tandem::DFlashObjective objective(options);
  objective.export_model(scratch / "export");
  const nlohmann::json config = read_config(scratch / "export");
  EXPECT_DOUBLE_EQ(config["rope_theta"].get<double>(), 500000.0);
  EXPECT_EQ(config["rope_scaling"]["rope_type"], "llama3");
  EXPECT_DOUBLE_EQ(config["rope_scaling"]["factor"].get<double>(), 8.0);
  const tandem::DFlashExport loaded = tandem::load_dflash_export(scratch / "export", at::kFloat);
  EXPECT_EQ(loaded.draft->config().layer.rope_scaling.type, "llama3");
  EXPECT_TRUE(draft_output(*loaded.draft, 5).equal(draft_output(*objective.draft(), 5)));
}

TEST(DFlashExport, LoadingTheExportRebuildsTheSameDraft) {
  ScratchDir scratch;
  tandem::DFlashObjective objective(export_options(4));
  objective.export_model(scratch / "export");
  const tandem::DFlashExport loaded = tandem::load_dflash_export(scratch / "export", at::kFloat);
  const tandem::DFlashConfig& config = loaded.draft->config();
  EXPECT_EQ(config.block_size, 4);
  EXPECT_EQ(config.mask_token_id, 511);
  EXPECT_EQ(config.target_layer_ids, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(config.target_hidden_size, 64);
  EXPECT_EQ(config.layer.num_hidden_layers, 2);
  EXPECT_TRUE(config.layer.qk_norm);
  EXPECT_EQ(loaded.num_target_layers, 4);
  EXPECT_FALSE(loaded.mask_embedding.defined());
  for (const auto& parameter : objective.draft()->named_parameters())
    EXPECT_TRUE(loaded.draft->named_parameters()[parameter.key()].equal(parameter.value()))
        << parameter.key();
  EXPECT_TRUE(draft_output(*loaded.draft, 1).equal(draft_output(*objective.draft(), 1)));
  EXPECT_TRUE(tandem::is_dflash_export(scratch / "export"));
}

TEST(DFlashExport, AGrownMaskTokenShipsItsRowAndSaysHowToServeIt) {
  ScratchDir scratch;
  tandem::DFlashObjective objective(export_options(4));
  tandem::DFlashConfig config = objective.draft()->config();
  config.mask_token_id = 512;  // = the target's vocab_size: the grown row
  tandem::DFlashDraft draft(config, at::TensorOptions().dtype(at::kFloat));
  tandem::DFlashExportInfo info;
  info.num_target_layers = 4;
  info.mask_embedding = at::randn({64});
  info.mask_token = "<|MASK|>";
  info.serving_note = "mask_token_id 512 >= target vocab_size 512";
  EXPECT_THROW(tandem::write_dflash_export(*draft, scratch / "bad", tandem::DFlashExportInfo{4}),
               tandem::Error);  // grown id without its row
  tandem::write_dflash_export(*draft, scratch / "export", info);
  const std::string dir = scratch / "export";
  for (const char* file : {"mask_embedding.pt", "mask_embedding.safetensors", "README.md"})
    EXPECT_TRUE(std::filesystem::exists(dir + "/" + file)) << file;
  {  // torch.save's zip format, which vLLM's torch.load(weights_only=True) reads
    std::ifstream pt(dir + "/mask_embedding.pt", std::ios::binary);
    char magic[2] = {};
    pt.read(magic, 2);
    EXPECT_EQ(std::string(magic, 2), "PK");
  }
  // Where the repo's tools venv has torch (tools/check_eagle3_export.sh uses it), load the .pt
  // the way vLLM does.
  if (std::filesystem::exists(".venv-tools/bin/python")) {
    const auto loaded_pt = tandem::testing::run_command(
        ".venv-tools/bin/python -c \"import sys, torch; t = torch.load(sys.argv[1], "
        "weights_only=True); print(tuple(t.shape), float(t[0]))\" " +
        dir + "/mask_embedding.pt");
    if (loaded_pt.output.find("No module named") == std::string::npos) {
      EXPECT_EQ(loaded_pt.exit_code, 0) << loaded_pt.output;
      EXPECT_NE(loaded_pt.output.find("(64,)"), std::string::npos) << loaded_pt.output;
    }
  }
  const nlohmann::json json = read_config(dir);
  EXPECT_EQ(json["dflash_config"]["mask_token_id"], 512);
  EXPECT_EQ(json["dflash_config"]["mask_token"], "<|MASK|>");
  EXPECT_EQ(json["tandem"]["mask_token_grown"], true);
  const tandem::DFlashExport loaded = tandem::load_dflash_export(dir, at::kFloat);
  ASSERT_TRUE(loaded.mask_embedding.defined());
  EXPECT_TRUE(loaded.mask_embedding.equal(info.mask_embedding));
  // Without its row the grown id cannot be served: a clear error naming the file.
  std::filesystem::remove(dir + "/mask_embedding.safetensors");
  try {
    tandem::load_dflash_export(dir, at::kFloat);
    FAIL() << "expected an error";
  } catch (const tandem::Error& e) {
    EXPECT_NE(std::string(e.what()).find("mask_embedding.safetensors"), std::string::npos)
        << e.what();
  }
}

TEST(DFlashExport, LoadErrorsNameTheFileAndTheProblem) {
  ScratchDir scratch;
  tandem::DFlashObjective objective(export_options(4));
  const std::string dir = scratch / "export";
  const auto expect_error = [&](const std::string& needle) {
    try {
      tandem::load_dflash_export(dir, at::kFloat);
      ADD_FAILURE() << "expected an error mentioning " << needle;
    } catch (const tandem::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const auto rewrite = [&](const std::function<void(nlohmann::json&)>& edit) {
    objective.export_model(dir);
    nlohmann::json json = read_config(dir);
    edit(json);
    std::ofstream(dir + "/config.json") << json.dump();
  };
  rewrite([](nlohmann::json& j) { j["architectures"] = {"LlamaForCausalLMEagle3"}; });
  expect_error(dir + "/config.json: architectures must be [\"DFlashDraftModel\"]");
  rewrite([](nlohmann::json& j) { j.erase("dflash_config"); });
  expect_error("dflash_config");
  rewrite([](nlohmann::json& j) { j["dflash_config"]["target_layer_ids"] = {0, 7}; });
  expect_error("target_layer_ids entry 7");
  rewrite([](nlohmann::json& j) { j["dflash_config"]["use_swa"] = true; });
  expect_error("unsupported dflash_config field 'use_swa'");
  rewrite([](nlohmann::json& j) { j["num_attention_heads"] = 4; });
  expect_error("'layers.0.self_attn.q_proj.weight' has shape");
}

}  // namespace

namespace {

// tools/check_dflash_export.py: stdlib-only checks of the config fields and tensors SGLang and
// vLLM read; skipped where no python3 is installed.
TEST(DFlashExport, PassesTheEngineReaderCheck) {
  if (tandem::testing::run_command("python3 --version").exit_code != 0)
    GTEST_SKIP() << "python3 not installed";
  ScratchDir scratch;
  tandem::DFlashObjective objective(export_options(4));
  objective.export_model(scratch / "export");
  const std::string check = "python3 tools/check_dflash_export.py " + (scratch / "export") +
                            " --target " + tandem::testing::model_fixture("llama3");
  const auto ok = tandem::testing::run_command(check);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  // A config SGLang would misread: no num_target_layers.
  nlohmann::json json = read_config(scratch / "export");
  json.erase("num_target_layers");
  std::ofstream(scratch / "export/config.json") << json.dump();
  const auto bad = tandem::testing::run_command(check);
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("num_target_layers missing"), std::string::npos) << bad.output;
}

}  // namespace
