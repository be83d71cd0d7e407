// Export of trained causal LMs: the committed exports under tests/fixtures/exports were written
// by `tandem train` (tools/make_export_fixtures.sh) and loaded by transformers, whose logits sit
// beside them; tandem must agree with those logits, and a fresh export must have exactly the
// same format (files, config fields, tensor names, shapes, dtypes) and reload to the same model.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tandem/io/hf_checkpoint.h"
#include "tandem/io/safetensors.h"
#include "tandem/io/tensor_io.h"
#include "tandem/models/frozen.h"
#include "tandem/objectives/sft.h"
#include "test_util.h"

namespace {

std::string export_fixture(const std::string& name) {
  return tandem::testing::source_path("tests/fixtures/exports/" + name);
}

class ExportParity : public ::testing::TestWithParam<std::string> {};

TEST_P(ExportParity, TransformersLogitsMatchTandem) {
  const std::string dir = export_fixture(GetParam());
  const auto reference = tandem::safetensors::File::open(dir + "/transformers_logits.safetensors");
  const at::Tensor ids = tandem::read_tensor(reference, reference.info("input_ids"));
  const at::Tensor expected = tandem::read_tensor(reference, reference.info("logits"));
  ASSERT_GT(expected.std().item<double>(), 0.3);
  const auto model = tandem::FrozenModel::load(dir, at::kFloat, at::kCPU);
  const auto out =
      model.forward(ids, tandem::AttentionLayout::causal(ids.size(0), ids.size(1), at::kCPU), {});
  EXPECT_LE((out.logits - expected).abs().max().item<double>(), 1e-4) << GetParam();
}

TEST_P(ExportParity, FreshExportHasTheSameFormat) {
  const std::string fixture = export_fixture(GetParam());
  tandem::SftOptions options;
  options.model_config = export_fixture(GetParam() + ".model.json");
  options.dtype = GetParam() == "qwen3-bf16" ? at::kBFloat16 : at::kFloat;
  tandem::SftObjective objective(options);
  tandem::testing::ScratchDir dir;
  objective.export_model(dir / "export");

  auto config_of = [](const std::string& d) {
    return nlohmann::json::parse(std::ifstream(d + "/config.json"));
  };
  EXPECT_EQ(config_of(dir / "export"), config_of(fixture));
  const auto fresh = tandem::HfCheckpoint::open(dir / "export");
  const auto committed = tandem::HfCheckpoint::open(fixture);
  ASSERT_EQ(fresh.names(), committed.names());
  for (const std::string& name : fresh.names()) {
    EXPECT_EQ(fresh.info(name).shape, committed.info(name).shape) << name;
    EXPECT_EQ(fresh.info(name).dtype, committed.info(name).dtype) << name;
  }
  // The export reloads to the very same model.
  const auto reloaded = tandem::FrozenModel::load(dir / "export", options.dtype, at::kCPU);
  const at::Tensor ids = at::arange(10, at::kLong).unsqueeze(0);
  const auto layout = tandem::AttentionLayout::causal(1, 10, at::kCPU);
  at::NoGradGuard no_grad;
  const at::Tensor original =
      objective.model()->logits(objective.model()->forward_hidden(ids, layout));
  EXPECT_TRUE(at::equal(reloaded.forward(ids, layout, {}).logits, original));
}

// generation_config.json (the sampling defaults and stop ids vLLM and transformers read): copied
// from the checkpoint the model started from, else written from its config's bos/eos/pad.
TEST(ExportGenerationConfig, CopiedFromTheStartingCheckpointElseWrittenFromTheConfig) {
  tandem::testing::ScratchDir dir;
  auto json_of = [](const std::string& path) { return nlohmann::json::parse(std::ifstream(path)); };
  tandem::SftOptions from_checkpoint;
  from_checkpoint.model_path = tandem::testing::model_fixture("llama3");
  tandem::SftObjective(from_checkpoint).export_model(dir / "copied");
  EXPECT_EQ(json_of(dir / "copied/generation_config.json"),
            json_of(from_checkpoint.model_path + "/generation_config.json"));

  tandem::SftOptions fresh;
  fresh.model_config = export_fixture("llama-fp32.model.json");  // bos 1, eos 2, no pad
  tandem::SftObjective(fresh).export_model(dir / "written");
  EXPECT_EQ(
      json_of(dir / "written/generation_config.json"),
      nlohmann::json({{"_from_model_config", true}, {"bos_token_id", 1}, {"eos_token_id", 2}}));
}

INSTANTIATE_TEST_SUITE_P(Exports, ExportParity,
                         ::testing::Values("llama-fp32", "qwen3-bf16", "minimax-moe-fp32"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
