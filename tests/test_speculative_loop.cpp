// The speculative-decoding loop (eval/speculative.h) over the proposer interface
// (eval/draft_proposer.h), with proposers whose acceptance is known by hand: one that proposes
// the target's own greedy continuation (every proposal accepted in full, τ = k + 1) and one that
// never does (nothing accepted, τ = 1). Both outputs equal greedy decoding, with and without the
// KV cache; the features the loop hands a proposer are the target's layer outputs at exactly
// the positions verified, in order, and the uncached loop starts the draft afresh every step.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "tandem/eval/draft_proposer.h"
#include "tandem/eval/greedy_check.h"
#include "tandem/eval/speculative.h"
#include "tandem/eval/uncached_decode.h"
#include "tandem/models/frozen.h"
#include "test_util.h"

namespace {

// Proposes tokens of a known continuation `script` of the prompt (prompt + continuation):
// `offset` 0 proposes the target's own greedy tokens, 1 shifts each by one id (never right).
class ScriptedProposer : public tandem::DraftProposer {
 public:
  ScriptedProposer(std::vector<int64_t> script, int64_t draft_tokens, int64_t offset, int64_t vocab)
      : script_(std::move(script)), draft_tokens_(draft_tokens), offset_(offset), vocab_(vocab) {}

  const std::vector<int64_t>& target_layers() const override { return layers_; }
  int64_t draft_tokens() const override { return draft_tokens_; }
  void reset() override {
    seen_.clear();
    features_.clear();
    ++resets;
  }
  void extend(const std::vector<int64_t>& ids, const at::Tensor& features, int64_t next) override {
    EXPECT_EQ(features.size(0), 1);
    EXPECT_EQ(features.size(1), static_cast<int64_t>(ids.size()));
    seen_.insert(seen_.end(), ids.begin(), ids.end());
    features_.push_back(features);
    next_ = next;
  }
  std::vector<int64_t> propose(int64_t next) override {
    EXPECT_EQ(next, next_);
    const size_t position = seen_.size();  // where `next` sits
    EXPECT_EQ(script_.at(position), next) << "the bonus token is the target's greedy choice";
    std::vector<int64_t> proposal;
    for (int64_t j = 1; j <= draft_tokens_; ++j)
      proposal.push_back((script_.at(position + static_cast<size_t>(j)) + offset_) % vocab_);
    return proposal;
  }

  std::vector<int64_t> seen_;  // every id extend() was given, in order
  std::vector<at::Tensor> features_;
  int resets = 0;

 private:
  std::vector<int64_t> script_;
  int64_t draft_tokens_, offset_, vocab_, next_ = -1;
  std::vector<int64_t> layers_{0, 2};
};

struct Fixture {
  tandem::FrozenModel target = tandem::FrozenModel::load(tandem::testing::model_fixture("llama3"),
                                                         at::kFloat, at::Device(at::kCPU));
  std::vector<int64_t> prompt{5, 17, 42, 8, 99, 3};
  int64_t vocab = target.config().vocab_size;

  // The prompt followed by `count` greedy tokens of the target.
  std::vector<int64_t> greedy_script(int64_t count) const {
    tandem::DecodeOptions options;
    options.max_new_tokens = count;
    std::vector<int64_t> script = prompt;
    for (int64_t id : tandem::greedy_decode(target, prompt, options)) script.push_back(id);
    return script;
  }
};

TEST(SpeculativeLoop, AProposerOfTheGreedyContinuationIsAcceptedInFull) {
  Fixture f;
  const int64_t k = 3;
  tandem::DecodeOptions options;
  options.max_new_tokens = 13;
  const std::vector<int64_t> script = f.greedy_script(options.max_new_tokens + k + 2);
  const std::vector<int64_t> greedy(
      script.begin() + static_cast<int64_t>(f.prompt.size()),
      script.begin() + static_cast<int64_t>(f.prompt.size()) + options.max_new_tokens);
  for (bool kv_cache : {true, false}) {
    options.kv_cache = kv_cache;
    ScriptedProposer proposer(script, k, /*offset=*/0, f.vocab);
    const tandem::SpeculativeOutput output =
        tandem::speculative_decode(f.target, proposer, f.prompt, options);
    EXPECT_EQ(output.tokens, greedy) << "kv_cache " << kv_cache;
    // 1 bonus token, then k + 1 tokens per verification: 1 + 3 * 4 = 13 in 3 steps.
    EXPECT_EQ(output.accepted, (std::vector<int64_t>{k, k, k})) << "kv_cache " << kv_cache;
    tandem::AcceptanceStats stats(k);
    stats.add(output);
    EXPECT_DOUBLE_EQ(stats.tau(), static_cast<double>(k + 1));
    // The cached loop starts the draft once, before the prompt; the uncached one every step.
    EXPECT_EQ(proposer.resets, kv_cache ? 1 : 3);
  }
}

TEST(SpeculativeLoop, AProposerThatIsNeverRightYieldsOneTokenPerStep) {
  Fixture f;
  const int64_t k = 2;
  tandem::DecodeOptions options;
  options.max_new_tokens = 7;
  const std::vector<int64_t> script = f.greedy_script(options.max_new_tokens + k + 2);
  for (bool kv_cache : {true, false}) {
    options.kv_cache = kv_cache;
    ScriptedProposer proposer(script, k, /*offset=*/1, f.vocab);
    const tandem::SpeculativeOutput output =
        tandem::speculative_decode(f.target, proposer, f.prompt, options);
    EXPECT_EQ(output.tokens, std::vector<int64_t>(script.begin() + 6, script.begin() + 13));
    EXPECT_EQ(output.accepted, std::vector<int64_t>(6, 0)) << "kv_cache " << kv_cache;
  }
}

TEST(SpeculativeLoop, TheCachedLoopHandsTheDraftEachVerifiedPositionOnceWithItsFeatures) {
  Fixture f;
  const int64_t k = 3;
  tandem::DecodeOptions options;
  options.max_new_tokens = 11;
  const std::vector<int64_t> script = f.greedy_script(options.max_new_tokens + k + 2);
  for (int64_t offset : {0, 1}) {  // long and short acceptances: different cache rollbacks
    ScriptedProposer proposer(script, k, offset, f.vocab);
    tandem::speculative_decode(f.target, proposer, f.prompt, options);
    // The positions seen are a prefix of prompt + greedy tokens, each exactly once.
    ASSERT_LE(proposer.seen_.size(), script.size());
    EXPECT_EQ(proposer.seen_,
              std::vector<int64_t>(script.begin(),
                                   script.begin() + static_cast<int64_t>(proposer.seen_.size())));
    // Their features, handed over piece by piece from the KV-cached verifications, equal one
    // uncached forward of the target over the whole prefix.
    const int64_t n = static_cast<int64_t>(proposer.seen_.size());
    const at::Tensor row = at::tensor(proposer.seen_, at::kLong).view({1, n});
    const tandem::FrozenModel::Output full = f.target.forward(
        row, tandem::AttentionLayout::causal(1, n, at::Device(at::kCPU)), {0, 2}, false);
    const at::Tensor expected = at::cat({full.hidden.at(0), full.hidden.at(2)}, -1);
    const at::Tensor handed = at::cat(proposer.features_, 1);
    ASSERT_EQ(handed.sizes(), expected.sizes());
    EXPECT_TRUE(at::allclose(handed, expected, 1e-5, 1e-5))
        << "offset " << offset << ": max diff " << (handed - expected).abs().max().item<float>();
  }
}

}  // namespace

namespace {

// eval's greedy check (eval/greedy_check.h), by hand.
TEST(GreedyCheck, FirstDivergenceByHand) {
  EXPECT_FALSE(tandem::first_divergence(3, {5, 6, 7}, {5, 6, 7}).has_value());
  const auto differs = tandem::first_divergence(3, {5, 6, 7, 8}, {5, 6, 9, 8});
  ASSERT_TRUE(differs.has_value());
  EXPECT_EQ(differs->document, 3);
  EXPECT_EQ(differs->position, 2);
  EXPECT_EQ(differs->speculative_token, 7);
  EXPECT_EQ(differs->greedy_token, 9);
  const auto ended = tandem::first_divergence(4, {5, 6}, {5, 6, 2});  // speculative stopped early
  ASSERT_TRUE(ended.has_value());
  EXPECT_EQ(ended->position, 2);
  EXPECT_EQ(ended->speculative_token, -1);
  EXPECT_EQ(ended->greedy_token, 2);
}

TEST(GreedyCheck, AMismatchFailsInFp32OrWhenStrict) {
  EXPECT_TRUE(tandem::greedy_mismatch_fails(at::kFloat, false));
  EXPECT_FALSE(tandem::greedy_mismatch_fails(at::kBFloat16, false));
  EXPECT_FALSE(tandem::greedy_mismatch_fails(at::kHalf, false));
  EXPECT_TRUE(tandem::greedy_mismatch_fails(at::kBFloat16, true));
}

}  // namespace
