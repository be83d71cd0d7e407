// The DPO objective: a policy equal to its reference has loss log 2 per pair and zero rewards;
// precomputed reference log-probs (packed differently) give the same loss and gradients as the
// live reference; the reference stays bit-identical and out of the optimizer; a vocab mismatch
// or a cache from other data fails before training.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tandem/data/packing.h"
#include "tandem/objectives/dpo.h"
#include "tandem/train/optimizer.h"
#include "test_util.h"

namespace {

// Two preference records (documents 0..3: chosen, rejected, chosen, rejected), shared prompts.
std::vector<tandem::TokenizedDocument> pair_documents() {
  std::vector<tandem::TokenizedDocument> documents;
  for (int record = 0; record < 2; ++record)
    for (int side = 0; side < 2; ++side) {
      tandem::TokenizedDocument document;
      const int prompt = 4 + record, completion = 5 + 2 * side + record;
      for (int t = 0; t < prompt + completion; ++t) {
        const int salt = t < prompt ? 0 : side * 13;
        document.ids.push_back(static_cast<int32_t>((t * 31 + record * 97 + salt) % 500 + 3));
        document.loss_mask.push_back(t >= prompt);
      }
      documents.push_back(document);
    }
  return documents;
}

tandem::PackedBatch pack(const std::vector<tandem::TokenizedDocument>& documents,
                         tandem::PackingMode mode, int64_t seq_len) {
  tandem::PackingOptions packing;
  packing.seq_len = seq_len;
  packing.mode = mode;
  tandem::PackedBatch batch = tandem::pack_documents(documents, packing);
  for (auto& document : batch.documents) document.dataset_index = document.source_index;
  return batch;
}

tandem::DpoOptions live_options() {
  tandem::DpoOptions options;
  options.policy.model_path = tandem::testing::model_fixture("llama3");
  options.reference_path = tandem::testing::model_fixture("llama3");
  options.policy.loss.chunk_tokens = 7;
  return options;
}

TEST(DpoObjective, PolicyEqualToItsReferenceHasLossLog2AndZeroRewards) {
  tandem::DpoObjective objective(live_options());
  const tandem::PackedBatch batch = pack(pair_documents(), tandem::PackingMode::Packed, 64);
  ASSERT_EQ(batch.rows(), 1);  // both pairs share one row: document boundaries matter
  const tandem::StepTotals totals = objective.count(batch);
  EXPECT_EQ(totals.documents, 4);
  tandem::ObjectiveOutput output = objective.compute(batch, totals);
  EXPECT_NEAR(output.loss.item<double>(), std::log(2.0), 1e-6);
  const std::map<std::string, double> metrics = output.metric_values();
  EXPECT_NEAR(metrics.at("rewards/chosen"), 0.0, 1e-6);
  EXPECT_NEAR(metrics.at("rewards/margin"), 0.0, 1e-6);
  EXPECT_EQ(metrics.at("pairs"), 2.0);
  output.loss.backward();
  double gradient = 0;
  for (const auto& parameter : objective.policy()->parameters())
    gradient += parameter.grad().abs().sum().item<double>();
  EXPECT_GT(gradient, 0.0);  // d/dpolicy of -log sigma(beta Delta) at Delta = 0 is not zero
}

TEST(DpoObjective, PrecomputedReferenceEqualsTheLiveOneAndTheReferenceNeverChanges) {
  tandem::testing::ScratchDir dir;
  const auto documents = pair_documents();
  const tandem::PackedBatch packed = pack(documents, tandem::PackingMode::Packed, 64);

  tandem::DpoObjective live(live_options());
  std::map<std::string, at::Tensor> reference_before;
  for (const auto& [name, weight] : live.reference()->named_weights())
    reference_before[name] = weight.clone();
  for (const auto& [name, tensor] : tandem::trainable_parameters(*live.policy()))
    EXPECT_FALSE(tandem::is_frozen(tensor)) << name;
  const tandem::StepTotals totals = live.count(packed);
  tandem::ObjectiveOutput live_output = live.compute(packed, totals);
  live_output.loss.backward();

  // The cache: the reference run over the same documents packed one per row (as a different
  // batch composition would), written and read through the file format.
  const tandem::PackedBatch padded = pack(documents, tandem::PackingMode::Padded, 24);
  at::Tensor hidden;
  {
    at::NoGradGuard no_grad;
    hidden = live.reference()->forward(padded.input_ids, padded.layout(), {}, false).final_hidden;
  }
  const at::Tensor sums = tandem::document_logprobs(hidden, live.reference()->lm_head_weight(),
                                                    padded, live_options().policy.loss);
  tandem::ReferenceLogprobsInfo info;
  info.dataset_key = "0123456789abcdef";
  info.documents = 4;
  info.seq_len = 64;
  info.vocab_size = 512;
  info.reference = tandem::testing::model_fixture("llama3");
  info.dtype = "fp32";
  tandem::ReferenceLogprobs::write(dir / "reference.safetensors", sums,
                                   tandem::document_target_counts(padded), info);

  tandem::DpoOptions cached_options = live_options();
  cached_options.reference_logprobs = dir / "reference.safetensors";
  tandem::DpoObjective cached(cached_options);
  EXPECT_EQ(cached.reference(), nullptr);  // no reference model in memory
  EXPECT_TRUE(cached.frozen_models().empty());
  // A policy different from the reference, identically in both objectives.
  {
    at::NoGradGuard no_grad;
    for (auto* objective : {&live, &cached}) {
      at::manual_seed(7);
      for (auto& parameter : objective->policy()->parameters())
        parameter.add_(at::randn_like(parameter) * 0.01);
    }
    live.policy()->zero_grad();
  }
  tandem::ObjectiveOutput a = live.compute(packed, totals);
  a.loss.backward();
  tandem::ObjectiveOutput b = cached.compute(packed, totals);
  b.loss.backward();
  EXPECT_GT(std::abs(a.loss.item<double>() - std::log(2.0)), 1e-4);
  EXPECT_NEAR(a.loss.item<double>(), b.loss.item<double>(), 1e-6);
  const auto live_parameters = live.policy()->named_parameters();
  for (const auto& parameter : cached.policy()->named_parameters()) {
    const at::Tensor& expected = live_parameters[parameter.key()].grad();
    EXPECT_LT((parameter.value().grad() - expected).abs().max().item<double>(),
              1e-5 * (expected.abs().max().item<double>() + 1e-12))
        << parameter.key();
  }
  tandem::MixedPrecisionAdamW optimizer(tandem::trainable_parameters(*live.policy()), {});
  optimizer.step(1e-2);
  for (const auto& [name, weight] : live.reference()->named_weights())
    EXPECT_TRUE(at::equal(weight, reference_before.at(name))) << name;

  // The cache refuses other data, another seq_len and another reference.
  EXPECT_NE(tandem::testing::error_of([&] {
              tandem::ReferenceLogprobs::open(dir / "reference.safetensors")
                  .check_matches("fedcba9876543210", 4, 64, "other.jsonl");
            }).find("computed for other data"),
            std::string::npos);
  EXPECT_NE(tandem::testing::error_of([&] {
              tandem::ReferenceLogprobs::open(dir / "reference.safetensors")
                  .check_matches("0123456789abcdef", 4, 128, "same.jsonl");
            }).find("computed with seq_len 64"),
            std::string::npos);
  tandem::DpoOptions wrong_reference = cached_options;
  wrong_reference.reference_path = tandem::testing::model_fixture("qwen3");
  EXPECT_NE(tandem::testing::error_of([&] {
              tandem::DpoObjective objective(wrong_reference);
            }).find("computed with the reference"),
            std::string::npos);
}

// The pair-fused loss (chunks of 7 tokens: two passes; 4096: one pass) and the full-logits path
// (chunk_tokens 0) give the same loss and gradients.
TEST(DpoObjective, FusedAndFullLogitsPathsAgree) {
  const tandem::PackedBatch batch = pack(pair_documents(), tandem::PackingMode::Packed, 64);
  std::vector<std::pair<double, std::map<std::string, at::Tensor>>> results;
  for (const int64_t chunk : {int64_t{0}, int64_t{7}, int64_t{4096}}) {
    tandem::DpoOptions options = live_options();
    options.policy.loss.chunk_tokens = chunk;
    options.loss_type = tandem::DpoLossType::Ipo;
    tandem::DpoObjective objective(options);
    {
      at::NoGradGuard no_grad;
      at::manual_seed(3);
      for (auto& parameter : objective.policy()->parameters())
        parameter.add_(at::randn_like(parameter) * 0.02);
    }
    tandem::ObjectiveOutput output = objective.compute(batch, objective.count(batch));
    output.loss.backward();
    std::map<std::string, at::Tensor> grads;
    for (const auto& parameter : objective.policy()->named_parameters())
      grads[parameter.key()] = parameter.value().grad().clone();
    results.emplace_back(output.loss.item<double>(), grads);
  }
  for (size_t i = 1; i < results.size(); ++i) {
    EXPECT_NEAR(results[i].first, results[0].first, 1e-6 * std::abs(results[0].first));
    for (const auto& [name, grad] : results[0].second)
      EXPECT_LT((results[i].second.at(name) - grad).abs().max().item<double>(),
                1e-5 * (grad.abs().max().item<double>() + 1e-12))
          << name;
  }
}

TEST(DpoObjective, VocabMismatchFailsAtStartUp) {
  tandem::testing::ScratchDir dir;
  std::ifstream in(tandem::testing::model_fixture("llama3") + "/config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config["vocab_size"] = 600;
  std::ofstream(dir / "config.json") << config.dump();
  tandem::DpoOptions options = live_options();
  options.policy.model_path.clear();
  options.policy.model_config = dir / "config.json";
  EXPECT_NE(tandem::testing::error_of([&] {
              tandem::DpoObjective objective(options);
            }).find("DPO needs the same vocabulary"),
            std::string::npos);
}

}  // namespace
