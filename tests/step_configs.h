#pragma once
// The data and configs of one training step of every objective on the fixture models: what the
// device tests (test_device.cpp: the same step on the CPU and on CUDA) and the meta-device tests
// (test_meta_step.cpp) run. Every frozen model is given fp32, as the trained models default to,
// so a step means the same on every device.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <string>

#include "tandem/objectives/sft.h"
#include "test_util.h"

namespace tandem::testing {

class StepConfigs {
 public:
  StepConfigs() {
    std::mt19937 random(0);
    std::ofstream docs(dir_ / "docs.jsonl"), rollouts(dir_ / "rollouts.jsonl");
    for (int d = 0; d < 8; ++d) {
      const int length = 20 + static_cast<int>(random() % 12);
      std::string ids, mask, completion, logprobs;
      for (int t = 0; t < length; ++t) {
        ids += (t ? "," : "") + std::to_string(3 + random() % 509);
        mask += std::string(t ? "," : "") + (t < 3 ? "0" : "1");
      }
      docs << R"({"input_ids": [)" << ids << R"(], "loss_mask": [)" << mask << "]}\n";
      for (int t = 0; t < 10; ++t) {
        completion += (t ? "," : "") + std::to_string(3 + random() % 509);
        logprobs += std::string(t ? "," : "") + "-" + std::to_string(1 + random() % 5);
      }
      rollouts << R"({"prompt_ids": [5, 6, 7, 8], "completion_ids": [)" << completion
               << R"(], "old_logprobs": [)" << logprobs << R"(], "advantage": )"
               << (d % 2 ? "0.5" : "-0.5") << "}\n";
    }
    std::ifstream all(tandem::testing::source_path("data/demo/preference.jsonl"));
    std::ofstream pairs(dir_ / "pairs.jsonl");
    std::string line;
    for (int i = 0; i < 4 && std::getline(all, line); ++i) pairs << line << "\n";
    // A vocab-4096 policy for the demo tokenizer's preference pairs: the demo student shape.
    tandem::SftOptions fresh;
    fresh.model_config = tandem::testing::source_path("configs/demo-student-model.json");
    fresh.seed = 3;
    tandem::export_causal_lm(tandem::make_causal_lm(fresh), (dir_ / "policy"), /*source_dir=*/"");
  }

  std::string data(const std::string& extra = "") const {
    return "data: {path: " + (dir_ / "docs.jsonl") + ", format: pretokenized, seq_len: 32, " +
           "micro_batch_rows: 2, cache_dir: " + (dir_ / "cache") + extra + "}\n";
  }
  /// A one-step job of `objective` on this directory's data; `training` adds training keys
  /// ("run_dir: ..., steps: 12"), `data_keys` data keys (", validation: ...").
  std::string config(const std::string& objective, const std::string& training_keys = "",
                     const std::string& data_keys = "") const {
    const std::string llama = tandem::testing::model_fixture("llama3");
    const std::string qwen3 = tandem::testing::model_fixture("qwen3");
    const std::string training = "training: {objective: " + objective + ", seed: 0" +
                                 (training_keys.empty() ? "" : ", " + training_keys) + "}\n";
    if (objective == "sft")
      return "model: {path: " + llama + ", dtype: fp32}\nloss: {chunk_tokens: 16}\n" +
             data(data_keys) + training;
    if (objective == "eagle3")
      return "target: {path: " + llama +
             ", dtype: fp32}\ndraft: {aux_layer_ids: [0, 1, 2], ttt_length: 3, "
             "draft_vocab_size: 128, intermediate_size: 96, dtype: fp32}\n" +
             data(data_keys) + training;
    if (objective == "dflash")
      return "target: {path: " + qwen3 +
             ", dtype: fp32}\ndraft: {num_layers: 2, target_layer_ids: [0, 2], "
             "block_size: 4, mask_token_id: 511, dtype: fp32}\nloss: {max_anchors: 8, "
             "chunk_tokens: 16}\n" +
             data(data_keys) + training;
    if (objective == "dspark")
      return "target: {path: " + qwen3 +
             ", dtype: fp32}\ndraft: {num_layers: 2, target_layer_ids: [0, 2], "
             "block_size: 4, mask_token_id: 511, markov_rank: 8, dtype: fp32}\nloss: "
             "{max_anchors: 8, chunk_tokens: 16}\n" +
             data(data_keys) + training;
    if (objective == "distill")
      return "model: {config: " + llama + "/config.json, dtype: fp32}\nteacher: {path: " + llama +
             ", dtype: fp32}\nloss: {divergence: jsd, beta: 0.5, chunk_tokens: 16}\n" +
             data(data_keys) + training;
    if (objective == "dpo")
      return "model: {path: " + (dir_ / "policy") + ", dtype: fp32}\nreference: {dtype: fp32}\n" +
             "loss: {beta: 0.1, chunk_tokens: 64}\n" + "data: {path: " + (dir_ / "pairs.jsonl") +
             ", format: preference, tokenizer: " +
             tandem::testing::source_path("data/demo/tokenizer") + ", seq_len: 512, " +
             "micro_batch_rows: 2, cache_dir: " + (dir_ / "cache") + data_keys + "}\n" + training;
    if (objective == "gspo")
      return "model: {path: " + llama +
             ", dtype: fp32}\nloss: {chunk_tokens: 16}\ndata: {path: " + (dir_ / "rollouts.jsonl") +
             ", format: rollout, seq_len: 32, micro_batch_rows: 2" + data_keys + "}\n" + training;
    throw std::runtime_error("no step config for " + objective);
  }
  /// EAGLE-3 offline: the online config plus a capture of its target, made by the binary.
  /// The documents file (pretokenized) and the preference pairs.
  std::string docs_path() const { return dir_ / "docs.jsonl"; }
  std::string pairs_path() const { return dir_ / "pairs.jsonl"; }

  std::string eagle3_offline() const {
    const std::string online = config("eagle3");
    std::ofstream(dir_ / "eagle3.yaml") << online;
    const auto captured = tandem::testing::run_command(tandem::testing::tandem_binary() +
                                                       " capture " + (dir_ / "eagle3.yaml") +
                                                       " --device cpu --out " + (dir_ / "capture"));
    EXPECT_EQ(captured.exit_code, 0) << captured.output;
    return "target: {path: " + tandem::testing::model_fixture("llama3") +
           ", dtype: fp32}\ndraft: {aux_layer_ids: [0, 1, 2], ttt_length: 3, draft_vocab_size: "
           "128, "
           "intermediate_size: 96, dtype: fp32}\n" +
           data(", capture: " + (dir_ / "capture")) + "training: {objective: eagle3, seed: 0}\n";
  }

 private:
  ScratchDir dir_;
};

inline const char* kObjectives[] = {"sft", "eagle3", "dflash", "dspark", "distill", "dpo", "gspo"};

}  // namespace tandem::testing
