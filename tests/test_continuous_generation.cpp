// Continuous batching (eval/continuous_generation.h): every sequence gets the tokens generate()
// gives it alone, greedy (with log-probabilities within 1e-5) and sampled from its own seed, on
// fixtures with each kind of cache (full attention, a sliding window, Gated DeltaNet states,
// latent attention, attention sinks), while rows are refilled, the cache's slots are shifted
// down and the cache grows.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "tandem/eval/continuous_generation.h"
#include "tandem/models/frozen.h"
#include "test_util.h"

namespace {

using tandem::ContinuousGenerator;
using tandem::FrozenModel;
using tandem::Generation;

// 21 prompts: short ones first (2 rows of them fill the cache first sized for them, so its slots
// are shifted down), then one longer than that cache (it grows).
std::vector<std::vector<int64_t>> prompts_for(int64_t vocab) {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(11);
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t length : {4, 7, 3, 9, 5, 6, 4, 8, 3, 6, 5, 7, 4, 3, 6, 8, 5, 4, 6, 40, 12}) {
    const at::Tensor ids = at::randint(3, vocab - 3, {length}, generator, at::kLong);
    prompts.emplace_back(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + length);
  }
  return prompts;
}

// Runs every prompt through `rows` rows, submitting them all at once or, when `streamed`, one
// more each time a sequence ends; returns the generations by request id.
std::map<int64_t, Generation> run_continuous(const FrozenModel& model,
                                             const std::vector<std::vector<int64_t>>& prompts,
                                             const tandem::DecodeOptions& options,
                                             const tandem::SamplingOptions& sampling, int64_t rows,
                                             bool streamed, ContinuousGenerator::Stats* stats) {
  ContinuousGenerator generator(model, options, sampling, rows);
  size_t submitted = 0;
  auto submit = [&] {
    generator.submit(prompts[submitted], 1000 + submitted);
    submitted += 1;
  };
  while (submitted < (streamed ? std::min<size_t>(rows, prompts.size()) : prompts.size())) submit();
  std::map<int64_t, Generation> out;
  while (true) {
    auto finished = generator.next_finished();
    if (finished.empty()) break;
    for (size_t i = 1; i < finished.size(); ++i)
      EXPECT_LT(finished[i - 1].first, finished[i].first);  // in id order
    for (auto& [id, generation] : finished) {
      EXPECT_FALSE(out.count(id));
      out[id] = std::move(generation);
      if (streamed && submitted < prompts.size()) submit();
    }
  }
  EXPECT_EQ(generator.running(), 0);
  EXPECT_EQ(generator.queued(), 0);
  if (stats) *stats = generator.stats();
  return out;
}

TEST(ContinuousBatching, EachSequenceGetsWhatItGetsAloneGreedyAndSampled) {
  for (const std::string name :
       {"llama3", "mistral", "qwen3_5", "deepseek_v3", "gpt_oss", "gemma3_text"}) {
    const FrozenModel model =
        FrozenModel::load(tandem::testing::model_fixture(name), at::kFloat, at::kCPU);
    const auto prompts = prompts_for(model.config().vocab_size);
    tandem::DecodeOptions options;
    options.max_new_tokens = 10;
    // Stop ids that end some sequences early: tokens the first prompts generate mid-way.
    const auto unstopped = tandem::generate(model, {prompts[0], prompts[3]}, options, {});
    options.stop_ids = {unstopped[0].tokens[2], unstopped[1].tokens[5]};

    for (const double temperature : {0.0, 0.8}) {
      tandem::SamplingOptions sampling;
      sampling.temperature = temperature;
      sampling.top_k = temperature > 0 ? 20 : 0;
      for (const bool streamed : {false, true}) {
        ContinuousGenerator::Stats stats;
        const auto continuous =
            run_continuous(model, prompts, options, sampling, 2, streamed, &stats);
        ASSERT_EQ(continuous.size(), prompts.size()) << name;
        std::set<size_t> lengths;
        double worst = 0;
        for (size_t i = 0; i < prompts.size(); ++i) {
          at::Generator seeded = at::detail::createCPUGenerator(1000 + i);
          const Generation alone =
              tandem::generate(model, {prompts[i]}, options, sampling, &seeded)[0];
          const Generation& mine = continuous.at(static_cast<int64_t>(i));
          EXPECT_EQ(mine.tokens, alone.tokens)
              << name << " prompt " << i << " temperature " << temperature;
          for (size_t t = 0; t < std::min(mine.logprobs.size(), alone.logprobs.size()); ++t)
            worst = std::max(worst, double(std::abs(mine.logprobs[t] - alone.logprobs[t])));
          lengths.insert(mine.tokens.size());
        }
        EXPECT_LT(worst, 1e-5) << name;
        if (temperature == 0) EXPECT_GE(lengths.size(), 2u) << name << ": none ended early";
        // Rows were refilled, the slots shifted down and the cache grew for the long prompts.
        EXPECT_GT(stats.prefills, 2) << name;
        EXPECT_GT(stats.shifts, 0) << name << ": " << stats.steps << " steps";
        EXPECT_GT(stats.grows, 0) << name;
      }
    }
  }
}

TEST(ContinuousBatching, RefusesWhatGenerateRefuses) {
  const FrozenModel model =
      FrozenModel::load(tandem::testing::model_fixture("llama3"), at::kFloat, at::kCPU);
  tandem::DecodeOptions options;
  EXPECT_THROW(ContinuousGenerator(model, options, {}, 0), tandem::Error);
  ContinuousGenerator generator(model, options, {}, 2);
  EXPECT_THROW(generator.submit({}), tandem::Error);
  EXPECT_THROW(generator.submit({1, model.config().vocab_size}), tandem::Error);
  EXPECT_TRUE(generator.next_finished().empty());  // nothing queued
}

}  // namespace
