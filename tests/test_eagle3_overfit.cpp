// The overfit gate: a draft trained to convergence on a handful of the target's own
// greedy continuations must be accepted in full when it speculates on those same prompts:
// τ = TTT length + 1 exactly. Any off-by-one in shifts, positions, the TTT attention or the
// vocab map makes it fail. Also: the output stays identical to greedy decoding.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>

#include "overfit.h"
#include "speculative_fixtures.h"
#include "tandem/data/packing.h"
#include "tandem/eval/eagle3_decode.h"
#include "tandem/eval/speculative.h"
#include "tandem/eval/uncached_decode.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/objectives/eagle3.h"
#include "test_util.h"

namespace {

using tandem::testing::kSharpen;
using tandem::testing::sharpened_target;

TEST(Eagle3Overfit, DraftTrainedOnAFewSamplesReachesMaximumAcceptanceLength) {
  const int64_t ttt_length = 7, verify_steps = 4, prompt_length = 6;
  tandem::Eagle3Options options;
  tandem::testing::ScratchDir scratch;
  options.target_path = sharpened_target(scratch / "target");
  options.aux_layer_ids = {0, 1, 2};
  options.ttt_length = ttt_length;
  options.draft_vocab_size = 512;  // the whole vocab: every target choice is reachable
  options.intermediate_size = 128;
  options.seed = 1;
  tandem::Eagle3Objective objective(options);
  {  // lm_head starts from the target's rows; undo the sharpening there so training starts sane
    at::NoGradGuard no_grad;
    objective.draft()->lm_head->weight.div_(kSharpen);
  }
  const auto target =
      tandem::FrozenModel::load(options.target_path, at::kFloat, at::Device(at::kCPU));

  // Samples: random prompts followed by the target's own greedy continuation (the usual
  // self-distillation data for drafts), long enough for every drafted position to be trained.
  tandem::DecodeOptions decode;
  decode.max_new_tokens = 1 + verify_steps * (ttt_length + 1);
  tandem::DecodeOptions longer = decode;
  longer.max_new_tokens = decode.max_new_tokens + ttt_length + 2;
  std::vector<std::vector<int64_t>> prompts;
  std::vector<tandem::TokenizedDocument> documents;
  at::manual_seed(7);
  for (int i = 0; i < 4; ++i) {
    const at::Tensor random = at::randint(3, 512, {prompt_length}, at::kLong);
    std::vector<int64_t> prompt(random.data_ptr<int64_t>(),
                                random.data_ptr<int64_t>() + prompt_length);
    const std::vector<int64_t> continuation = tandem::greedy_decode(target, prompt, longer);
    tandem::TokenizedDocument document;
    for (int64_t id : prompt)
      document.ids.push_back(static_cast<int32_t>(id)), document.loss_mask.push_back(0);
    for (int64_t id : continuation)
      document.ids.push_back(static_cast<int32_t>(id)), document.loss_mask.push_back(1);
    prompts.push_back(prompt);
    documents.push_back(document);
  }
  tandem::PackingOptions packing;
  packing.seq_len = 64;
  packing.mode = tandem::PackingMode::Padded;
  const tandem::PackedBatch batch = tandem::pack_documents(documents, packing);

  // Train until every position is right, then some more for margin.
  const tandem::testing::OverfitResult trained =
      tandem::testing::overfit_one_batch(objective, batch, {700, 100, 250});
  ASSERT_EQ(trained.accuracy, 1.0)
      << "training accuracy did not converge in " << trained.steps << " steps";

  at::NoGradGuard no_grad;
  tandem::AcceptanceStats stats(ttt_length);
  for (const auto& prompt : prompts) {
    const tandem::SpeculativeOutput output =
        tandem::eagle3_decode(target, *objective.draft(), prompt, ttt_length, decode);
    EXPECT_EQ(output.tokens, tandem::greedy_decode(target, prompt, decode));
    EXPECT_EQ(output.accepted.size(), static_cast<size_t>(verify_steps));
    stats.add(output);
  }
  EXPECT_DOUBLE_EQ(stats.tau(), ttt_length + 1.0) << "steps trained: " << trained.steps;
  for (double rate : stats.conditional_acceptance()) EXPECT_DOUBLE_EQ(rate, 1.0);

  // Decoding on past the trained continuations: every token accepted first, then a draft that is
  // right on some tokens and wrong on others (rollbacks of every length). The KV-cached decoder
  // accepts exactly what the uncached reference (every forward over the whole prefix) accepts.
  tandem::DecodeOptions beyond = decode;
  beyond.max_new_tokens = decode.max_new_tokens + 24;
  tandem::AcceptanceStats unseen(ttt_length);
  for (const auto& prompt : prompts) {
    const auto cached =
        tandem::eagle3_decode(target, *objective.draft(), prompt, ttt_length, beyond);
    const auto reference = tandem::eagle3_decode(target, *objective.draft(), prompt, ttt_length,
                                                 beyond.without_cache());
    EXPECT_EQ(cached.accepted, reference.accepted);
    EXPECT_EQ(cached.tokens, reference.tokens);
    unseen.add(cached);
  }
  std::cout << "[eagle3 overfit] decoding past the trained tokens: tau " << unseen.tau() << "\n";
  EXPECT_GT(unseen.tau(), 1.0);  // some accepted, some rejected: the comparison means something
  EXPECT_LT(unseen.tau(), ttt_length + 1.0);
}

}  // namespace
