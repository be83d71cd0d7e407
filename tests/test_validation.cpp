// training.epochs, data.validation and the best checkpoint.
// - The epoch plan draws exactly what the run draws: next_micro_batch_size against
//   next_micro_batch batch by batch, and plan_epochs against steps drawn from real batches.
// - Validation against training: a step that holds exactly one pass over the data computes the
//   training metrics of that data at the weights of the step before; validating the same file at
//   that step must give the same numbers (another order, other packing), objective by objective.
// - Validating changes no training number (DFlash, whose anchors are random draws).
// - The best checkpoint: best.json names the step with the best val metric, keep_last keeps
//   it, `tandem export --best` exports it; bad settings are refused with what to change.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "step_configs.h"
#include "tandem/core/config.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/epoch_plan.h"
#include "tandem/train/training_data.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using tandem::testing::run_command;
using tandem::testing::ScratchDir;
using tandem::testing::StepConfigs;
using tandem::testing::tandem_binary;

// metrics.jsonl by step.
std::map<int64_t, nlohmann::json> metrics_by_step(const std::string& run_dir) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::map<int64_t, nlohmann::json> out;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json json = nlohmann::json::parse(line);
    out[json["step"].get<int64_t>()] = json;
  }
  return out;
}

// 150 pretokenized documents of 3..70 tokens (some longer than seq_len 32: split into parts).
tandem::TrainingData random_lengths_data(const ScratchDir& dir, int64_t rows,
                                         const std::string& packing = "packed") {
  std::mt19937 random(5);
  std::ofstream docs(dir / "lengths.jsonl");
  for (int d = 0; d < 150; ++d) {
    const int length = 3 + static_cast<int>(random() % 68);
    std::string ids, mask;
    for (int t = 0; t < length; ++t) {
      ids += (t ? "," : "") + std::to_string(3 + random() % 500);
      mask += std::string(t ? "," : "") + "1";
    }
    docs << R"({"input_ids": [)" << ids << R"(], "loss_mask": [)" << mask << "]}\n";
  }
  docs.close();
  const tandem::Config config = tandem::Config::parse(
      "data: {path: " + (dir / "lengths.jsonl") + ", format: pretokenized, seq_len: 32, " +
          "micro_batch_rows: " + std::to_string(rows) + ", packing: " + packing +
          ", packing_lookahead: 3, cache_dir: " + (dir / "cache") + "}\n",
      "lengths.yaml");
  return tandem::read_training_data(config);
}

// Records the cursor has packed: those drawn from the sampler less those still pending.
int64_t packed_records(const tandem::DataCursor& cursor) {
  const tandem::SamplerState at = cursor.sampler.state();
  return at.epoch * cursor.sampler.per_rank() + at.offset -
         static_cast<int64_t>(cursor.pending.size());
}

TEST(EpochPlan, MicroBatchSizesAreTheBatchesTheRunDraws) {
  for (const std::string packing : {"packed", "best_fit", "padded"}) {
    ScratchDir dir;
    const tandem::TrainingData data = random_lengths_data(dir, 3, packing);
    tandem::SamplerOptions options;
    options.dataset_size = data.num_records();
    options.seed = 11;
    tandem::DataCursor planned(options), drawn(options);
    for (int batch = 0; batch < 120; ++batch) {  // more than two passes
      const int64_t before = packed_records(drawn);
      const tandem::PackedBatch real = tandem::next_micro_batch(drawn, data);
      const tandem::MicroBatchSize size = tandem::next_micro_batch_size(planned, data);
      ASSERT_EQ(size.records, packed_records(drawn) - before) << packing << " batch " << batch;
      EXPECT_EQ(size.documents, real.total_documents()) << packing << " batch " << batch;
      EXPECT_EQ(size.tokens, real.num_tokens) << packing << " batch " << batch;
      EXPECT_EQ(size.rows, real.rows()) << packing << " batch " << batch;
      EXPECT_EQ(size.length, real.seq_len()) << packing << " batch " << batch;
      ASSERT_EQ(planned.sampler.state(), drawn.sampler.state()) << packing << " batch " << batch;
      ASSERT_EQ(planned.pending, drawn.pending) << packing << " batch " << batch;
    }
  }
}

TEST(EpochPlan, StepsAreThoseThatFirstReachTheEndOfTheLastPass) {
  for (const std::string packing : {"packed", "best_fit"}) {
    ScratchDir dir;
    const tandem::TrainingData data = random_lengths_data(dir, 2, packing);
    tandem::SamplerOptions options;
    options.dataset_size = data.num_records();
    options.seed = 3;
    for (const tandem::StepShape shape :
         {tandem::StepShape{1, 0, 1, false}, tandem::StepShape{3, 0, 1, false},
          tandem::StepShape{1, 7, 2, true}}) {
      for (const int64_t epochs : {1, 3}) {
        const tandem::EpochPlan plan = tandem::plan_epochs(data, options, epochs, shape);
        // The same steps drawn from real micro-batches, as the trainer draws them.
        tandem::DataCursor cursor(options);
        int64_t steps = 0, micro_batches = 0, tokens = 0;
        const int64_t wanted = epochs * cursor.sampler.per_rank();
        auto consumed = [&] { return packed_records(cursor); };
        while (consumed() < wanted) {
          int64_t in_step = 0, documents = 0;
          do {
            const tandem::PackedBatch batch = tandem::next_micro_batch(cursor, data);
            in_step += 1;
            documents += batch.total_documents();
            tokens += batch.num_tokens;
          } while (!shape.complete(in_step, documents));
          steps += 1;
          micro_batches += in_step;
          if (steps < plan.steps) {
            EXPECT_LT(consumed(), wanted) << "ended before the plan";
          }
        }
        EXPECT_EQ(plan.steps, steps) << packing << ", " << epochs << " epochs";
        EXPECT_EQ(plan.micro_batches, micro_batches);
        EXPECT_EQ(plan.tokens, tokens);
        EXPECT_GE(plan.records, wanted);
        if (packing == "best_fit" && shape.micro_batches == 1 && shape.docs_per_step == 0) {
          EXPECT_EQ(plan.records, wanted);  // no micro-batch holds records of two passes
        }
        EXPECT_GT(plan.steps, 0);
      }
    }
    // More passes, more steps; a shape of 3 micro-batches per step, about a third of them.
    const auto one = tandem::plan_epochs(data, options, 1, {1, 0, 1, false});
    const auto three = tandem::plan_epochs(data, options, 3, {1, 0, 1, false});
    EXPECT_NEAR(static_cast<double>(three.steps), 3.0 * one.steps, 2.0);
    const auto grouped = tandem::plan_epochs(data, options, 1, {3, 0, 1, false});
    EXPECT_EQ(grouped.steps, (one.steps + 2) / 3);
  }
}

TEST(Epochs, TheRunTrainsThePlannedStepsAndTheDryRunPrintsThem) {
  ScratchDir dir;
  const StepConfigs configs;
  const std::string config =
      dir.write("sft.yaml", configs.config("sft", "run_dir: " + (dir / "run") +
                                                      ", epochs: 2, lr: 1.0e-3, export: false"));
  const auto dry = run_command(tandem_binary() + " train " + config + " --dry-run");
  ASSERT_EQ(dry.exit_code, 0) << dry.output;
  // 8 documents of 20..31 tokens, 2 rows of 32 per micro-batch: 2 per batch, 4 steps per pass.
  EXPECT_NE(dry.output.find("2 epochs: 8 steps planned (8 micro-batches"), std::string::npos)
      << dry.output;
  const auto trained = run_command(tandem_binary() + " train " + config);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const auto metrics = metrics_by_step(dir / "run");
  ASSERT_EQ(metrics.size(), 8u);
  EXPECT_EQ(metrics.at(8)["documents_seen"].get<int64_t>(), 16);

  const auto both = run_command(tandem_binary() + " train " + config + " training.steps=3");
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.output.find("training.steps or"), std::string::npos) << both.output;
  EXPECT_NE(both.output.find("not both"), std::string::npos) << both.output;
}

// A step of exactly one pass (docs_per_step = every document) at step 2 is trained at the
// weights validation saw after step 1: the same metrics.
TEST(Validation, EqualsTheTrainingMetricsOfTheSameRecordsAtTheSameWeights) {
  const StepConfigs configs;
  for (const std::string objective : {"sft", "eagle3", "distill", "dpo"}) {
    SCOPED_TRACE(objective);
    ScratchDir dir;
    const std::string file = objective == "dpo" ? configs.pairs_path() : configs.docs_path();
    const std::string documents = objective == "dpo" ? "8" : "8";  // 4 pairs: 8 documents
    const std::string config = dir.write(
        "run.yaml",
        configs.config(objective,
                       "run_dir: " + (dir / "run") + ", steps: 2, docs_per_step: " + documents +
                           ", eval_every: 1, lr: 1.0e-3, schedule: constant, export: false",
                       ", validation: " + file));
    const auto trained = run_command(tandem_binary() + " train " + config);
    ASSERT_EQ(trained.exit_code, 0) << trained.output;
    const auto metrics = metrics_by_step(dir / "run");
    const nlohmann::json& step1 = metrics.at(1);
    const nlohmann::json& step2 = metrics.at(2);
    EXPECT_EQ(step2["num_documents"].get<int64_t>(), 8) << "step 2 must be exactly one pass";
    int compared = 0;
    for (const auto& [name, value] : step2.items()) {
      if (!step1.contains("val/" + name) || name == "pairs" || name == "anchors") continue;
      const double train = value.get<double>(), validated = step1["val/" + name].get<double>();
      EXPECT_NEAR(validated, train, 1e-5 * std::max(1.0, std::abs(train))) << name;
      ++compared;
    }
    EXPECT_GE(compared, objective == "eagle3" ? 8 : 1);
    EXPECT_TRUE(step1.contains("val/loss"));
    EXPECT_EQ(step1["val/records"].get<int64_t>(), objective == "dpo" ? 4 : 8);
  }
}

TEST(Validation, ChangesNoTrainingNumber) {
  const StepConfigs configs;
  ScratchDir dir;
  const std::string keys = ", steps: 3, lr: 1.0e-3, export: false";
  const std::string plain =
      dir.write("plain.yaml", configs.config("dflash", "run_dir: " + (dir / "plain") + keys));
  const std::string validated = dir.write(
      "validated.yaml",
      configs.config("dflash", "run_dir: " + (dir / "validated") + keys + ", eval_every: 1",
                     ", validation: " + configs.docs_path()));
  for (const std::string& config : {plain, validated}) {
    const auto trained = run_command(tandem_binary() + " train " + config);
    ASSERT_EQ(trained.exit_code, 0) << trained.output;
  }
  const auto a = metrics_by_step(dir / "plain"), b = metrics_by_step(dir / "validated");
  ASSERT_EQ(a.size(), 3u);
  int compared = 0;
  for (const auto& [step, line] : a)
    for (const auto& [name, value] : line.items()) {
      if (name.rfind("time/", 0) == 0 || name == "tokens_per_s" || name == "peak_rss_mib") continue;
      EXPECT_EQ(value, b.at(step).at(name)) << "step " << step << " " << name;
      ++compared;
    }
  EXPECT_GE(compared, 3 * 10);
  EXPECT_TRUE(b.at(1).contains("val/loss"));
  const auto weights_a =
      tandem::find_latest_valid(dir / "plain").checkpoint->read_tensors("model.safetensors");
  const auto weights_b =
      tandem::find_latest_valid(dir / "validated").checkpoint->read_tensors("model.safetensors");
  for (const auto& [name, tensor] : weights_a)
    EXPECT_TRUE(at::equal(tensor, weights_b.at(name))) << name;
}

TEST(Validation, TheBestCheckpointIsKeptMarkedAndExported) {
  const StepConfigs configs;
  ScratchDir dir;
  // A high learning rate, so the validation loss does not simply fall at every step.
  const std::string config = dir.write(
      "run.yaml",
      configs.config("sft",
                     "run_dir: " + (dir / "run") +
                         ", steps: 6, eval_every: 1, lr: 0.3, keep_last: 1, schedule: constant",
                     ", validation: " + configs.docs_path()));
  const auto trained = run_command(tandem_binary() + " train " + config);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const auto metrics = metrics_by_step(dir / "run");
  int64_t best_step = -1;
  double best = 0;
  for (const auto& [step, line] : metrics)
    if (best_step < 0 || line["val/loss"].get<double>() < best) {
      best_step = step;
      best = line["val/loss"].get<double>();
    }
  std::ifstream in(dir / "run/best.json");
  const nlohmann::json marker = nlohmann::json::parse(in);
  EXPECT_EQ(marker["step"].get<int64_t>(), best_step);
  EXPECT_EQ(marker["metric"], "val/loss");
  EXPECT_EQ(marker["mode"], "min");
  EXPECT_DOUBLE_EQ(marker["value"].get<double>(), best);
  // keep_last 1 keeps the last checkpoint, and the best besides.
  std::vector<int64_t> kept;
  for (const auto& [step, path] : tandem::list_checkpoints(dir / "run")) kept.push_back(step);
  if (best_step == 6)
    EXPECT_EQ(kept, (std::vector<int64_t>{6}));
  else
    EXPECT_EQ(kept, (std::vector<int64_t>{best_step, 6}));
  const auto exported = run_command(tandem_binary() + " export " + (dir / "run") +
                                    " --best --out " + (dir / "best-export"));
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  EXPECT_NE(exported.output.find("step " + std::to_string(best_step)), std::string::npos)
      << exported.output;
  EXPECT_TRUE(fs::exists(dir / "best-export/model.safetensors"));
}

TEST(Validation, BadSettingsAreRefusedWithWhatToChange) {
  const StepConfigs configs;
  ScratchDir dir;
  const std::string config = dir.write(
      "run.yaml",
      configs.config("sft", "run_dir: " + (dir / "run") + ", steps: 1, lr: 1.0e-3, export: false",
                     ", validation: " + configs.docs_path()));
  const auto metric =
      run_command(tandem_binary() + " train " + config + " training.best_metric=val/nope");
  EXPECT_NE(metric.exit_code, 0);
  EXPECT_NE(metric.output.find("training.best_metric = val/nope is not a validation metric of "
                               "sft (these are: val/loss"),
            std::string::npos)
      << metric.output;
  const auto heldout =
      run_command(tandem_binary() + " train " + config + " data.validation=heldout");
  EXPECT_NE(heldout.exit_code, 0);
  EXPECT_NE(heldout.output.find("data.validation = heldout needs"), std::string::npos)
      << heldout.output;
  const auto missing = run_command(tandem_binary() + " train " + config +
                                   " data.validation=" + (dir / "none.jsonl"));
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("none.jsonl"), std::string::npos) << missing.output;
  const auto no_best = run_command(tandem_binary() + " export " + (dir / "nowhere") + " --best");
  EXPECT_NE(no_best.exit_code, 0);
  EXPECT_NE(no_best.output.find("best.json"), std::string::npos) << no_best.output;
}

}  // namespace
