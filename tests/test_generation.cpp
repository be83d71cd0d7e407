// KV-cached generation (models/kv_cache.h, eval/generation.h) against uncached forwards of the
// whole sequence, on every model fixture, batched with prompts of different lengths.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "tandem/core/json_file.h"
#include "tandem/eval/draft_proposer.h"
#include "tandem/eval/generation.h"
#include "tandem/eval/speculative.h"
#include "tandem/eval/uncached_decode.h"
#include "tandem/models/frozen.h"
#include "test_util.h"

namespace {

using tandem::FrozenModel;

const std::vector<std::string> kFixtures = {"llama3",
                                            "mistral",
                                            "qwen2",
                                            "qwen3",
                                            "qwen3_moe",
                                            "mixtral",
                                            "minimax_m2",
                                            "qwen3_5",
                                            "qwen3_5_moe",
                                            "qwen3_next",
                                            "glm4_moe",
                                            "deepseek_v3",
                                            "deepseek_v3_q_proj",
                                            "gemma3_text",
                                            "gemma3",
                                            "gpt_oss"};

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

// A hybrid model's cache: its Gated DeltaNet layers roll back by replaying the kept slots of the
// last forward from the state before it, which gives the states of running them alone: after
// rolling back 4 of 6 slots (twice over: 6 -> 4 -> 3), running the dropped ones again gives the
// first run's hidden states. Rolling back past the last forward is refused, naming why.
TEST(KvCache, HybridRollbackReplaysTheKeptSlots) {
  for (const std::string name : {"qwen3_5_moe", "qwen3_next"}) {
    const FrozenModel model =
        FrozenModel::load(tandem::testing::model_fixture(name), at::kFloat, at::kCPU);
    tandem::KvCache cache = model.new_cache(1, 16);
    const at::Tensor ids = at::tensor({5, 17, 40, 3, 99, 250, 77, 12}, at::kLong).view({1, 8});
    const at::Tensor positions = at::arange(8, at::kLong).view({1, 8});
    const at::Tensor valid = at::ones({1, 8}, at::kBool);
    const auto run = [&](int64_t from, int64_t n) {
      return model.forward_cached(ids.narrow(1, from, n), positions.narrow(1, from, n),
                                  valid.narrow(1, from, n), cache);
    };
    const at::Tensor prefix = run(0, 2);
    const at::Tensor first = run(2, 6);  // slots 2..7
    cache.truncate(6);
    cache.truncate(5);  // further back within the same forward
    const at::Tensor again = run(5, 3);
    const double scale = std::max(1.0, first.abs().max().item<double>());
    const double diff = (again - first.narrow(1, 3, 3)).abs().max().item<double>();
    std::printf("[generate] %s: rolled back 3 of 6 slots and ran them again: max |diff| %.3g\n",
                name.c_str(), diff);
    EXPECT_LE(diff, 1e-5 * scale) << name;
    // One slot at a time (the recurrent form) after a rollback to the forward's start.
    cache.truncate(5);
    const at::Tensor single = run(5, 1);
    EXPECT_LE((single - first.narrow(1, 3, 1)).abs().max().item<double>(), 1e-5 * scale) << name;
    const std::string error = tandem::testing::error_of([&] { cache.truncate(2); });
    EXPECT_NE(error.find("rolls back only into its last forward"), std::string::npos) << error;
    EXPECT_TRUE(prefix.defined());
  }
}

// A proposer that knows the target's greedy continuation and gets one position of each proposal
// wrong, in turn (the first, the second, ..., none), so verifications accept every length 0..k.
class OracleProposer : public tandem::DraftProposer {
 public:
  OracleProposer(std::vector<int64_t> greedy, int64_t prompt_length, int64_t vocab)
      : greedy_(std::move(greedy)), prompt_length_(prompt_length), vocab_(vocab) {}
  const std::vector<int64_t>& target_layers() const override { return layers_; }
  int64_t draft_tokens() const override { return 3; }
  void reset() override { seen_ = 0; }
  void extend(const std::vector<int64_t>& ids, const at::Tensor&, int64_t) override {
    seen_ += static_cast<int64_t>(ids.size());
  }
  std::vector<int64_t> propose(int64_t) override {
    std::vector<int64_t> proposal;
    const int64_t at = seen_ - prompt_length_;  // greedy_[at] is the bonus token
    for (int64_t j = 1; j <= draft_tokens(); ++j) {
      const size_t index =
          static_cast<size_t>(std::min<int64_t>(at + j, static_cast<int64_t>(greedy_.size()) - 1));
      proposal.push_back(greedy_[index]);
    }
    const int64_t wrong = step_++ % (draft_tokens() + 1);
    if (wrong < draft_tokens()) proposal[wrong] = (proposal[wrong] + 1) % vocab_;
    return proposal;
  }

 private:
  std::vector<int64_t> greedy_, layers_;  // reads no target layer: no features either way
  int64_t prompt_length_, vocab_, seen_ = 0, step_ = 0;
};

// Speculative decoding accepts every length 0..k in turn: with the cache (a hybrid's Gated
// DeltaNet states rolled back past each rejected token, GLM-4.5's group-routed experts run on
// each verification, DeepSeek-V3's latent cache truncated) the tokens and the accepted lengths
// equal the uncached decoder's, and the output is the greedy decode.
TEST(KvCache, SpeculativeDecodingEqualsUncached) {
  for (const std::string name :
       {"qwen3_5", "qwen3_next", "glm4_moe", "deepseek_v3", "gemma3_text", "gpt_oss"}) {
    const FrozenModel model =
        FrozenModel::load(tandem::testing::model_fixture(name), at::kFloat, at::kCPU);
    const std::vector<int64_t> prompt = prompts_for(model.config().vocab_size, 11)[1];
    tandem::DecodeOptions options;
    options.max_new_tokens = 16;
    const std::vector<int64_t> greedy = tandem::greedy_decode(model, prompt, options);
    const int64_t vocab = model.config().vocab_size;
    OracleProposer cached_draft(greedy, static_cast<int64_t>(prompt.size()), vocab);
    OracleProposer uncached_draft(greedy, static_cast<int64_t>(prompt.size()), vocab);
    const auto cached = tandem::speculative_decode(model, cached_draft, prompt, options);
    const auto uncached =
        tandem::speculative_decode(model, uncached_draft, prompt, options.without_cache());
    EXPECT_EQ(cached.tokens, greedy) << name;
    EXPECT_EQ(cached.tokens, uncached.tokens) << name;
    EXPECT_EQ(cached.accepted, uncached.accepted) << name;
    std::set<int64_t> lengths(cached.accepted.begin(), cached.accepted.end());
    EXPECT_GE(lengths.size(), 3u) << name << ": too few accepted lengths exercised";
    std::printf("[generate] %s speculative: %zu verifications, accepted lengths seen %zu\n",
                name.c_str(), cached.accepted.size(), lengths.size());
  }
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
