// KV-cached generation (models/kv_cache.h, eval/generation.h) against uncached forwards of the
// whole sequence, on every model fixture, batched with prompts of different lengths.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tandem/core/json_file.h"
#include "tandem/eval/generation.h"
#include "tandem/eval/speculative.h"
#include "tandem/eval/uncached_decode.h"
#include "tandem/models/frozen.h"
#include "test_util.h"

namespace {

using tandem::FrozenModel;

const std::vector<std::string> kFixtures = {"llama3",    "mistral", "qwen2",     "qwen3",
                                            "qwen3_moe", "mixtral", "minimax_m2"};

std::vector<std::vector<int64_t>> prompts_for(int64_t vocab, uint64_t seed) {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t length : {5, 9, 3}) {
    const at::Tensor ids = at::randint(3, vocab - 3, {length}, generator, at::kLong);
    prompts.emplace_back(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + length);
  }
  return prompts;
}

// Every step of a batched cached run (prefill, then one token per row per step) gives the logits
// of an uncached forward over that row's whole sequence so far, within 1e-5; greedy generation
// with the cache gives the uncached greedy tokens. The mistral fixture's window (6) is shorter
// than the sequences.
TEST(KvCache, CachedStepsEqualUncachedForwards) {
  for (const std::string& name : kFixtures) {
    const FrozenModel model =
        FrozenModel::load(tandem::testing::model_fixture(name), at::kFloat, at::kCPU);
    const auto prompts = prompts_for(model.config().vocab_size, 7);
    tandem::DecodeOptions options;
    options.max_new_tokens = 10;
    const auto generated = tandem::generate(model, prompts, options, {});
    ASSERT_EQ(generated.size(), prompts.size());
    double worst = 0;
    for (size_t b = 0; b < prompts.size(); ++b) {
      EXPECT_EQ(generated[b].tokens, tandem::greedy_decode(model, prompts[b], options))
          << name << " prompt " << b;
      // The logits of every generated token's step, from one uncached forward of the sequence.
      std::vector<int64_t> sequence = prompts[b];
      sequence.insert(sequence.end(), generated[b].tokens.begin(), generated[b].tokens.end());
      const int64_t length = static_cast<int64_t>(sequence.size());
      const at::Tensor row = at::tensor(sequence, at::kLong).view({1, length});
      const auto full =
          model.forward(row, tandem::AttentionLayout::causal(1, length, at::kCPU), {});
      const int64_t first = static_cast<int64_t>(prompts[b].size()) - 1;
      for (size_t t = 0; t < generated[b].tokens.size(); ++t) {
        const at::Tensor log_probs =
            at::log_softmax(full.logits[0][first + static_cast<int64_t>(t)], 0);
        const double expected = log_probs[generated[b].tokens[t]].item<double>();
        worst = std::max(worst, std::abs(expected - generated[b].logprobs[t]));
      }
    }
    std::printf("[generate] %s: cached vs uncached log-probabilities max |diff| %.3g\n",
                name.c_str(), worst);
    EXPECT_LE(worst, 1e-5) << name;
  }
}

// Greedy generation equals transformers' `generate` (greedy, fp32, one prompt per call) token for
// token on every fixture (tools/make_generate_fixtures.py), here with the three prompts batched
// (left-padded, lengths 5, 9, 3).
TEST(Generation, GreedyEqualsTransformersGenerate) {
  for (const std::string& name : kFixtures) {
    const nlohmann::json reference = tandem::read_json_file(
        tandem::testing::source_path("tests/fixtures/generate/" + name + ".json"), "test");
    const FrozenModel model =
        FrozenModel::load(tandem::testing::model_fixture(name), at::kFloat, at::kCPU);
    const auto prompts = reference["prompts"].get<std::vector<std::vector<int64_t>>>();
    const auto expected = reference["generated"].get<std::vector<std::vector<int64_t>>>();
    tandem::DecodeOptions options;
    options.max_new_tokens = reference["max_new_tokens"].get<int64_t>();
    const auto generated = tandem::generate(model, prompts, options, {});
    for (size_t b = 0; b < prompts.size(); ++b)
      EXPECT_EQ(generated[b].tokens, expected[b]) << name << " prompt " << b;
  }
}

// The cache's logits directly: after a rollback (truncate), running the same tokens again gives
// the same logits; a step past the capacity is an error that says so.
TEST(KvCache, RollbackRecomputesTheSameAndCapacityIsEnforced) {
  const FrozenModel model =
      FrozenModel::load(tandem::testing::model_fixture("qwen3_moe"), at::kFloat, at::kCPU);
  tandem::KvCache cache = model.new_cache(1, 8);
  const at::Tensor ids = at::tensor({5, 17, 40, 3, 99, 250}, at::kLong).view({1, 6});
  const at::Tensor positions = at::arange(6, at::kLong).view({1, 6});
  const at::Tensor valid = at::ones({1, 6}, at::kBool);
  const at::Tensor first = model.forward_cached(ids, positions, valid, cache);
  EXPECT_EQ(cache.length(), 6);
  cache.truncate(3);
  const at::Tensor again = model.forward_cached(ids.narrow(1, 3, 3), positions.narrow(1, 3, 3),
                                                valid.narrow(1, 3, 3), cache);
  const double rerun = (again - first.narrow(1, 3, 3)).abs().max().item<double>();
  std::printf(
      "[generate] rolled back 3 slots and ran them again: hidden max |diff| %.3g (max "
      "|hidden| %.2f)\n",
      rerun, first.abs().max().item<double>());
  EXPECT_LE(rerun, 1e-5 * std::max(1.0, first.abs().max().item<double>()));
  const std::string error = tandem::testing::error_of([&] {
    model.forward_cached(ids.narrow(1, 0, 3), positions.narrow(1, 0, 3), valid.narrow(1, 0, 3),
                         cache);
  });
  EXPECT_NE(error.find("6 + 3 slots exceed the capacity of 8"), std::string::npos) << error;
  std::printf("[generate] a cache of 1 x 8 slots for the qwen3_moe fixture: %lld bytes\n",
              static_cast<long long>(cache.bytes()));
  // 4 layers x (keys + values) x 2 kv heads x 8 slots x 32 dims x 4 bytes + 8 flags.
  EXPECT_EQ(cache.bytes(), 4 * 2 * 2 * 8 * 32 * 4 + 8);
}

// Sampling: the same seed gives the same tokens, top_k 1 is greedy, and each log-probability is
// that of the filtered distribution the token was drawn from.
TEST(Generation, SeededSamplingIsReproducibleAndFiltersApply) {
  const FrozenModel model =
      FrozenModel::load(tandem::testing::model_fixture("llama3"), at::kFloat, at::kCPU);
  const auto prompts = prompts_for(model.config().vocab_size, 11);
  tandem::DecodeOptions options;
  options.max_new_tokens = 8;
  tandem::SamplingOptions sampling;
  sampling.temperature = 0.8;
  sampling.top_p = 0.9;
  auto run = [&](uint64_t seed, const tandem::SamplingOptions& how) {
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
    return tandem::generate(model, prompts, options, how, &generator);
  };
  const auto a = run(1, sampling), b = run(1, sampling), c = run(2, sampling);
  bool differs = false;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens);
    EXPECT_EQ(a[i].logprobs, b[i].logprobs);
    differs = differs || a[i].tokens != c[i].tokens;
    for (float logprob : a[i].logprobs) EXPECT_TRUE(std::isfinite(logprob) && logprob <= 0);
  }
  EXPECT_TRUE(differs) << "seeds 1 and 2 drew the same 24 tokens";
  tandem::SamplingOptions top1;
  top1.temperature = 1.0;
  top1.top_k = 1;
  const auto greedy = tandem::generate(model, prompts, options, {});
  const auto sampled = run(3, top1);
  for (size_t i = 0; i < greedy.size(); ++i) {
    EXPECT_EQ(sampled[i].tokens, greedy[i].tokens);
    for (float logprob : sampled[i].logprobs) EXPECT_EQ(logprob, 0.0f);  // one token left
  }
  // Stop tokens end a row early and only that row.
  tandem::DecodeOptions stopping = options;
  stopping.stop_ids = {greedy[0].tokens[2]};
  const auto stopped = tandem::generate(model, prompts, stopping, {});
  const auto first_stop =
      std::find(greedy[0].tokens.begin(), greedy[0].tokens.end(), stopping.stop_ids[0]);
  EXPECT_EQ(stopped[0].tokens, std::vector<int64_t>(greedy[0].tokens.begin(), first_stop + 1));
}

}  // namespace
