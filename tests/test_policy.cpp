// The GRPO/GSPO objective on packed rollouts: with old log-probs taken while sampling from the
// policy itself, every ratio is 1 and the KL estimate 0 (the sampler's and the trainer's
// log-probs line up token for token, padding included); accumulation over micro-batches with
// the step's totals equals one big batch; rollout ids outside the vocabulary fail at start-up.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include "tandem/data/datasets.h"
#include "tandem/data/packing.h"
#include "tandem/eval/generation.h"
#include "tandem/models/frozen.h"
#include "tandem/objectives/policy.h"
#include "test_util.h"

namespace {

// Six rollouts in three groups of two, sampled from the llama3 fixture.
std::vector<tandem::RolloutSample> sampled_rollouts() {
  const tandem::FrozenModel model =
      tandem::FrozenModel::load(tandem::testing::model_fixture("llama3"), at::kFloat, at::kCPU);
  at::Generator generator = at::detail::createCPUGenerator(11);
  tandem::DecodeOptions decode;
  decode.max_new_tokens = 6;
  std::vector<tandem::RolloutSample> samples;
  tandem::SamplingOptions sampling;
  sampling.temperature = 1.0;
  for (int prompt = 0; prompt < 3; ++prompt) {
    std::vector<int64_t> prompt_ids;
    for (int t = 0; t < 3 + prompt; ++t) prompt_ids.push_back((t * 53 + prompt * 7) % 500 + 3);
    const auto group =
        tandem::generate(model, {prompt_ids, prompt_ids}, decode, sampling, &generator);
    for (int s = 0; s < 2; ++s) {
      const tandem::Generation& completion = group[s];
      tandem::RolloutSample sample;
      sample.prompt_ids.assign(prompt_ids.begin(), prompt_ids.end());
      sample.completion_ids.assign(completion.tokens.begin(), completion.tokens.end());
      sample.old_logprobs = completion.logprobs;
      sample.reward = static_cast<double>((prompt + s) % 3);
      sample.group_id = std::to_string(prompt);
      sample.source = "rollouts.jsonl:" + std::to_string(samples.size() + 1);
      samples.push_back(sample);
    }
  }
  tandem::compute_group_advantages(samples);
  return samples;
}

tandem::PackedBatch pack(const std::vector<tandem::RolloutSample>& samples,
                         const std::vector<int64_t>& indices, int64_t seq_len) {
  std::vector<tandem::TokenizedDocument> documents;
  for (int64_t i : indices) documents.push_back(samples[static_cast<size_t>(i)].document());
  tandem::PackingOptions packing;
  packing.seq_len = seq_len;
  tandem::PackedBatch batch = tandem::pack_documents(documents, packing);
  for (auto& document : batch.documents)
    document.dataset_index = indices[static_cast<size_t>(document.source_index)];
  return batch;
}

tandem::PolicyOptions options_for(bool sequence_level) {
  tandem::PolicyOptions options;
  options.policy.model_path = tandem::testing::model_fixture("llama3");
  options.policy.loss.chunk_tokens = 5;
  options.sequence_level = sequence_level;
  return options;
}

std::map<std::string, double> metrics_of(const tandem::ObjectiveOutput& output) {
  return output.metric_values();
}

TEST(PolicyObjective, OnPolicyRolloutsHaveRatioOneAndZeroKl) {
  const auto samples = sampled_rollouts();
  for (const bool sequence_level : {false, true}) {
    SCOPED_TRACE(sequence_level ? "gspo" : "grpo");
    tandem::PolicyObjective objective(options_for(sequence_level));
    objective.attach_data({nullptr, &samples, "", 24});
    // 2 rows of 24: several rollouts per row and padding at the end of the last row.
    const tandem::PackedBatch batch = pack(samples, {0, 1, 2, 3, 4, 5}, 24);
    ASSERT_GT(batch.rows(), 1);
    ASSERT_LT(batch.num_tokens, batch.rows() * 24);
    const tandem::StepTotals totals = objective.count(batch);
    EXPECT_EQ(totals.documents, 6);
    const tandem::ObjectiveOutput output = objective.compute(batch, totals);
    const auto metrics = metrics_of(output);
    EXPECT_NEAR(metrics.at("ratio_mean"), 1.0, 1e-5);
    EXPECT_NEAR(metrics.at("kl_new_old"), 0.0, 1e-8);
    EXPECT_EQ(metrics.at("clipped_fraction"), 0.0);
    // Ratio 1: the loss is minus the mean advantage (per token or per document).
    double expected = 0;
    if (sequence_level) {
      for (const auto& sample : samples) expected -= *sample.advantage / 6.0;
    } else {
      double tokens = 0;
      for (const auto& sample : samples) {
        expected -= *sample.advantage * static_cast<double>(sample.completion_ids.size());
        tokens += static_cast<double>(sample.completion_ids.size());
      }
      expected /= tokens;
    }
    EXPECT_NEAR(output.loss.item<double>(), expected, 1e-5);
    EXPECT_GT(metrics.at("entropy"), 0.0);
  }
}

TEST(PolicyObjective, MicroBatchesWithTheStepTotalsEqualOneBatch) {
  auto samples = sampled_rollouts();
  for (size_t i = 0; i < samples.size(); ++i)  // off-policy, so ratios and clipping matter
    for (float& value : samples[i].old_logprobs) value += 0.3f * static_cast<float>(i % 3) - 0.3f;
  for (const bool sequence_level : {false, true}) {
    SCOPED_TRACE(sequence_level ? "gspo" : "grpo");
    tandem::PolicyOptions options = options_for(sequence_level);
    options.clip = {0.2, 0.28};
    tandem::PolicyObjective whole(options), split(options);
    whole.attach_data({nullptr, &samples, "", 64});
    split.attach_data({nullptr, &samples, "", 64});
    const tandem::PackedBatch all = pack(samples, {0, 1, 2, 3, 4, 5}, 64);
    tandem::ObjectiveOutput one = whole.compute(all, whole.count(all));
    one.loss.backward();
    const std::vector<tandem::PackedBatch> parts = {pack(samples, {0, 1, 2}, 64),
                                                    pack(samples, {3, 4, 5}, 64)};
    tandem::StepTotals totals;
    for (const auto& part : parts) totals.add(split.count(part));
    double loss = 0, ratio = 0;
    for (const auto& part : parts) {
      tandem::ObjectiveOutput output = split.compute(part, totals);
      output.loss.backward();
      loss += output.loss.item<double>();
      ratio += metrics_of(output).at("ratio_mean");
    }
    EXPECT_NEAR(loss, one.loss.item<double>(), 1e-6);
    EXPECT_NEAR(ratio, metrics_of(one).at("ratio_mean"), 1e-6);
    const auto expected = whole.policy()->named_parameters();
    for (const auto& parameter : split.policy()->named_parameters())
      EXPECT_LT(
          (parameter.value().grad() - expected[parameter.key()].grad()).abs().max().item<double>(),
          1e-5 * (expected[parameter.key()].grad().abs().max().item<double>() + 1e-12))
          << parameter.key();
  }
}

TEST(PolicyObjective, RolloutIdsOutsideTheVocabularyFailAtStartUp) {
  auto samples = sampled_rollouts();
  samples[2].completion_ids[1] = 700;
  tandem::PolicyObjective objective(options_for(true));
  EXPECT_NE(tandem::testing::error_of([&] {
              objective.attach_data({nullptr, &samples, "", 24});
            }).find("rollouts.jsonl:3: token id 700 is outside the policy's vocabulary [0, 512)"),
            std::string::npos);
}

}  // namespace
