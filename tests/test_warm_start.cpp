// Warm start (model.init_from, draft.init_from): a run starts from an earlier run's weights (its
// checkpoint, its run directory, or its export) with a fresh optimizer, data position and step
// count. Checked by training one step at a learning rate of 1e-12 (AdamW moves each weight by
// about lr): the new run's weights after that step are the source's to 1e-9, while its counters
// start over; a model of other shapes is refused, naming the tensor, and nothing is written.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "step_configs.h"
#include "tandem/train/checkpoint.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using tandem::testing::run_command;
using tandem::testing::ScratchDir;
using tandem::testing::StepConfigs;
using tandem::testing::tandem_binary;

std::map<std::string, at::Tensor> newest_weights(const std::string& run_dir) {
  return tandem::find_latest_valid(run_dir).checkpoint->read_tensors("model.safetensors");
}

nlohmann::json newest_state(const std::string& run_dir) {
  return nlohmann::json::parse(
      tandem::find_latest_valid(run_dir).checkpoint->read_text("trainer_state.json"));
}

// Trains `objective` 3 steps into dir/source, then one step at lr 1e-12 from `init_from(dir)`:
// the weights carry over, the counters do not.
void expect_warm_start_carries_the_weights(const std::string& objective, const std::string& section,
                                           const std::string& source_suffix) {
  SCOPED_TRACE(objective + " from source" + source_suffix);
  const StepConfigs configs;
  ScratchDir dir;
  const std::string source = dir.write(
      "source.yaml",
      configs.config(objective, "run_dir: " + (dir / "source") + ", steps: 3, lr: 1.0e-2"));
  const auto trained = run_command(tandem_binary() + " train " + source);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const std::string warm = dir.write(
      "warm.yaml",
      configs.config(objective, "run_dir: " + (dir / "warm") + ", steps: 1, lr: 1.0e-12"));
  const auto started = run_command(tandem_binary() + " train " + warm + " " + section +
                                   ".init_from=" + (dir / "source") + source_suffix);
  ASSERT_EQ(started.exit_code, 0) << started.output;
  EXPECT_NE(started.output.find("[train] warm start from"), std::string::npos) << started.output;
  EXPECT_EQ(started.output.find("resuming from"), std::string::npos) << started.output;
  const auto before = newest_weights(dir / "source"), after = newest_weights(dir / "warm");
  ASSERT_EQ(before.size(), after.size());
  int moved = 0;
  for (const auto& [name, tensor] : before) {
    ASSERT_TRUE(after.count(name)) << name;
    const double difference =
        (after.at(name).to(at::kDouble) - tensor.to(at::kDouble)).abs().max().item<double>();
    EXPECT_LT(difference, 1e-9) << name;
    moved += difference > 0;
  }
  EXPECT_GT(moved, 0) << "the step at lr 1e-12 changed nothing: the test proves nothing";
  const nlohmann::json state = newest_state(dir / "warm");
  EXPECT_EQ(state["step"].get<int64_t>(), 1);
  EXPECT_EQ(state["sampler"]["epoch"].get<int64_t>(), 0);
  EXPECT_LT(state["documents_seen"].get<int64_t>(),
            newest_state(dir / "source")["documents_seen"].get<int64_t>());
}

TEST(WarmStart, SftFromARunDirectoryACheckpointAndAnHfExport) {
  expect_warm_start_carries_the_weights("sft", "model", "");
  expect_warm_start_carries_the_weights("sft", "model", "/step-00000003");
  expect_warm_start_carries_the_weights("sft", "model", "/export");
}

TEST(WarmStart, Eagle3DraftFromItsRunAndItsExport) {
  expect_warm_start_carries_the_weights("eagle3", "draft", "");
  expect_warm_start_carries_the_weights("eagle3", "draft", "/export");
}

TEST(WarmStart, DFlashDraftFromItsRunAndItsExport) {
  expect_warm_start_carries_the_weights("dflash", "draft", "");
  expect_warm_start_carries_the_weights("dflash", "draft", "/export");
}

TEST(WarmStart, DSparkDraftFromItsRunAndItsExport) {
  expect_warm_start_carries_the_weights("dspark", "draft", "");
  expect_warm_start_carries_the_weights("dspark", "draft", "/export");
}

TEST(WarmStart, OtherShapesOrNoCheckpointAreRefusedAndNothingIsWritten) {
  const StepConfigs configs;
  ScratchDir dir;
  const std::string source = dir.write(
      "source.yaml",
      configs.config("eagle3", "run_dir: " + (dir / "source") + ", steps: 1, lr: 1.0e-3"));
  ASSERT_EQ(run_command(tandem_binary() + " train " + source).exit_code, 0);
  const std::string warm =
      dir.write("warm.yaml",
                configs.config("eagle3", "run_dir: " + (dir / "warm") + ", steps: 1, lr: 1.0e-3"));
  const auto wider = run_command(tandem_binary() + " train " + warm +
                                 " draft.intermediate_size=64 draft.init_from=" + (dir / "source"));
  EXPECT_NE(wider.exit_code, 0);
  EXPECT_NE(wider.output.find("[warm start]"), std::string::npos) << wider.output;
  EXPECT_NE(wider.output.find("shapes differ from the configured model"), std::string::npos)
      << wider.output;
  EXPECT_NE(wider.output.find("is [64, "), std::string::npos) << wider.output;
  EXPECT_TRUE(tandem::list_checkpoints(dir / "warm").empty());
  const auto nowhere =
      run_command(tandem_binary() + " train " + warm + " draft.init_from=" + (dir / "nowhere"));
  EXPECT_NE(nowhere.exit_code, 0);
  EXPECT_NE(nowhere.output.find("nowhere: no such directory"), std::string::npos) << nowhere.output;
  const auto other = run_command(tandem_binary() + " train " + warm +
                                 " draft.init_from=" + tandem::testing::model_fixture("llama3"));
  EXPECT_NE(other.exit_code, 0);
  // A model, not a draft: its lm_head has the target's vocabulary, not the draft's.
  EXPECT_NE(other.output.find("lm_head.weight is [512, 64] there, [128, 64] here"),
            std::string::npos)
      << other.output;
}

}  // namespace
