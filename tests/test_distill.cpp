// The distillation objective: a student equal to its teacher has zero loss and gradient; a
// fresh student learns; the teacher stays bit-identical and out of the optimizer; a vocab
// mismatch is an error at start-up, before anything is loaded.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tandem/core/config.h"
#include "tandem/data/packing.h"
#include "tandem/objectives/distill.h"
#include "tandem/train/optimizer.h"
#include "test_util.h"

namespace {

tandem::PackedBatch small_batch() {
  std::vector<tandem::TokenizedDocument> documents;
  for (int d = 0; d < 3; ++d) {
    tandem::TokenizedDocument document;
    for (int t = 0; t < 10 + 3 * d; ++t) {
      document.ids.push_back(static_cast<int32_t>((t * 37 + d * 101) % 500 + 3));
      document.loss_mask.push_back(t >= 2);
    }
    documents.push_back(document);
  }
  tandem::PackingOptions packing;
  packing.seq_len = 24;
  return tandem::pack_documents(documents, packing);
}

tandem::DistillOptions options_for(const std::string& student_path) {
  tandem::DistillOptions options;
  options.student.model_path = student_path;
  options.teacher_path = tandem::testing::model_fixture("llama3");
  return options;
}

TEST(Distill, StudentEqualToItsTeacherHasZeroLossAndGradient) {
  tandem::DistillObjective objective(options_for(tandem::testing::model_fixture("llama3")));
  const tandem::PackedBatch batch = small_batch();
  const tandem::StepTotals totals = objective.count(batch);
  EXPECT_GT(totals.loss_tokens, 0);
  tandem::ObjectiveOutput output = objective.compute(batch, totals);
  EXPECT_LT(std::abs(output.loss.item<double>()), 1e-6);
  output.loss.backward();
  int checked = 0;
  for (const auto& parameter : objective.student()->named_parameters()) {
    ASSERT_TRUE(parameter.value().grad().defined()) << parameter.key();
    EXPECT_LT(parameter.value().grad().abs().max().item<double>(), 1e-5) << parameter.key();
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST(Distill, FreshStudentLearnsAndTheTeacherNeverChanges) {
  tandem::DistillOptions options = options_for("");
  options.student.model_config = tandem::testing::model_fixture("llama3") + "/config.json";
  options.loss.divergence = tandem::Divergence::JSD;
  options.loss.beta = 0.5;
  options.loss.temperature = 2.0;
  options.loss.hard_label_weight = 0.1;
  options.loss.chunk_tokens = 16;
  tandem::DistillObjective objective(options);
  std::map<std::string, at::Tensor> teacher_before;
  for (const auto& [name, weight] : objective.teacher().named_weights())
    teacher_before[name] = weight.clone();
  const auto trainable = tandem::trainable_parameters(*objective.student());
  for (const auto& [name, tensor] : trainable) EXPECT_FALSE(tandem::is_frozen(tensor)) << name;
  tandem::MixedPrecisionAdamW optimizer(trainable, {});
  const tandem::PackedBatch batch = small_batch();
  const tandem::StepTotals totals = objective.count(batch);
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    tandem::ObjectiveOutput output = objective.compute(batch, totals);
    output.loss.backward();
    optimizer.step(3e-3);
    optimizer.zero_grad();
    (step == 0 ? first : last) = output.loss.item<double>();
  }
  EXPECT_LT(last, 0.5 * first);
  for (const auto& [name, weight] : objective.teacher().named_weights())
    EXPECT_TRUE(weight.equal(teacher_before.at(name))) << name;
}

TEST(Distill, VocabMismatchFailsAtStartUp) {
  tandem::testing::ScratchDir dir;
  nlohmann::json config = nlohmann::json::parse(
      std::ifstream(tandem::testing::model_fixture("llama3") + "/config.json"));
  config["vocab_size"] = 600;
  std::ofstream(dir / "config.json") << config.dump();
  tandem::DistillOptions options = options_for("");
  options.student.model_config = dir / "config.json";
  EXPECT_NE(tandem::testing::error_of([&] {
              tandem::DistillObjective objective(options);
            }).find("has a vocab of 512 tokens, the student (" + dir / "config.json" + ") 600"),
            std::string::npos);
}

TEST(Objectives, UnknownNameListsTheAvailableOnes) {
  const tandem::Config config = tandem::Config::parse("training: {objective: medusa}", "run.yaml");
  const std::string error = tandem::testing::error_of([&] { tandem::make_objective(config, {}); });
  EXPECT_NE(error.find("unknown objective 'medusa'"), std::string::npos) << error;
  EXPECT_NE(error.find("eagle3, dflash, dspark, distill"), std::string::npos) << error;
}

}  // namespace

// The loss settings are checked where they are read, naming the key (issue 19): the same
// function reads them for distillation and for DFlash's `teacher: target`.
TEST(Distill, LossSettingsOutOfRangeNameTheKey) {
  const std::string base = "model:\n  config: student.json\nteacher:\n  path: teacher\nloss:\n";
  for (const auto& [line, phrase] : std::vector<std::pair<std::string, std::string>>{
           {"  temperature: 0\n", "run.yaml: loss.temperature: must be a finite number > 0, got 0"},
           {"  temperature: .inf\n", "loss.temperature: must be a finite number > 0, got inf"},
           {"  beta: 1.5\n", "run.yaml: loss.beta: must be in [0, 1], got 1.5"},
           {"  hard_label_weight: -0.1\n", "loss.hard_label_weight: must be in [0, 1]"},
           {"  chunk_tokens: -3\n", "loss.chunk_tokens: must be in 0..16777216"}}) {
    const tandem::Config config = tandem::Config::parse(base + line, "run.yaml");
    const std::string message = tandem::testing::error_of([&] { tandem::distill_options(config); });
    EXPECT_NE(message.find(phrase), std::string::npos) << line << message;
  }
}
