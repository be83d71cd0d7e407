// DFlash block speculative decoding (eval/dflash_decode.h): output identical to plain greedy
// decoding of the target for any draft, stop tokens, the same result through the export, and
// the overfit gate: a draft trained to convergence on a handful of the target's own
// greedy continuations is accepted in full on them, τ = block_size exactly.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "overfit.h"
#include "speculative_fixtures.h"
#include "tandem/data/packing.h"
#include "tandem/eval/dflash_decode.h"
#include "tandem/eval/uncached_decode.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/objectives/dflash.h"
#include "tandem/objectives/dflash_export.h"
#include "test_util.h"

namespace {

using tandem::testing::ScratchDir;

tandem::DFlashOptions draft_options(const std::string& target, int64_t block_size) {
  tandem::DFlashOptions options;
  options.target_path = target;
  options.dims = {2, 64, 6, 2, 16};
  options.target_layer_ids = {0, 2};
  options.block_size = block_size;
  options.mask_token_id = 511;
  options.seed = 5;
  return options;
}

using tandem::testing::random_prompts;
using tandem::testing::sharpened_target;

tandem::FrozenModel load_target(const std::string& dir) {
  return tandem::testing::load_cpu_target(dir);
}

TEST(DFlashDecoding, OutputEqualsGreedyDecodingOfTheTargetForARandomDraft) {
  const std::string fixture = tandem::testing::model_fixture("llama3");
  tandem::DFlashObjective objective(draft_options(fixture, 4));
  const auto target = load_target(fixture);
  tandem::DecodeOptions decode;
  decode.max_new_tokens = 20;
  for (int64_t k : {3, 1}) {
    tandem::AcceptanceStats stats(k);
    for (const auto& prompt : random_prompts(3, 6, 11)) {
      const auto output =
          tandem::dflash_decode(target, *objective.draft(), at::Tensor(), prompt, k, decode);
      EXPECT_EQ(output.tokens, tandem::greedy_decode(target, prompt, decode)) << "k = " << k;
      EXPECT_EQ(static_cast<int64_t>(output.tokens.size()), 20);
      const auto reference = tandem::dflash_decode(target, *objective.draft(), at::Tensor(), prompt,
                                                   k, decode.without_cache());
      EXPECT_EQ(output.accepted, reference.accepted) << "k = " << k;
      EXPECT_EQ(output.tokens, reference.tokens) << "k = " << k;
      for (int64_t accepted : output.accepted) EXPECT_LE(accepted, k);
      stats.add(output);
    }
    EXPECT_GE(stats.tau(), 1.0);
    EXPECT_LE(stats.tau(), k + 1.0);
  }
  EXPECT_THROW(tandem::dflash_decode(target, *objective.draft(), at::Tensor(), {5, 6}, 4, decode),
               tandem::Error);  // more than block_size - 1 tokens
}

TEST(DFlashDecoding, StopsAtTheFirstStopToken) {
  const std::string fixture = tandem::testing::model_fixture("llama3");
  tandem::DFlashObjective objective(draft_options(fixture, 4));
  const auto target = load_target(fixture);
  const std::vector<int64_t> prompt = {5, 6, 7, 8};
  tandem::DecodeOptions decode;
  decode.max_new_tokens = 12;
  const auto free_run = tandem::greedy_decode(target, prompt, decode);
  decode.stop_ids = {free_run[3]};
  const auto stopped =
      tandem::dflash_decode(target, *objective.draft(), at::Tensor(), prompt, 3, decode);
  EXPECT_EQ(stopped.tokens, tandem::greedy_decode(target, prompt, decode));
  EXPECT_LE(stopped.tokens.size(), 4u);
  EXPECT_EQ(stopped.tokens.back(), free_run[3]);
}

TEST(DFlashDecoding, TheExportedDraftDecodesLikeTheTrainedOne) {
  const std::string fixture = tandem::testing::model_fixture("llama3");
  tandem::DFlashObjective objective(draft_options(fixture, 4));
  ScratchDir scratch;
  objective.export_model(scratch / "export");
  const tandem::DFlashExport loaded = tandem::load_dflash_export(scratch / "export", at::kFloat);
  const auto target = load_target(fixture);
  tandem::DecodeOptions decode;
  decode.max_new_tokens = 16;
  for (const auto& prompt : random_prompts(2, 5, 3)) {
    const auto a =
        tandem::dflash_decode(target, *objective.draft(), at::Tensor(), prompt, 3, decode);
    const auto b =
        tandem::dflash_decode(target, *loaded.draft, loaded.mask_embedding, prompt, 3, decode);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.accepted, b.accepted);
  }
}

void expect_overfit_reaches_block_size(int64_t block_size) {
  const int64_t verify_steps = 4, prompt_length = 6;
  ScratchDir scratch;
  tandem::DFlashOptions options = draft_options(sharpened_target(scratch / "target"), block_size);
  options.dims = {1, 128, 4, 2, 16};
  options.seed = 1;
  tandem::DFlashObjective objective(options);
  const auto target = load_target(options.target_path);

  // Samples: random prompts followed by the target's own greedy continuation, long enough for
  // every block the decoder will draft to have been an anchor in training.
  tandem::DecodeOptions decode;
  decode.max_new_tokens = 1 + verify_steps * block_size;
  tandem::DecodeOptions longer = decode;
  longer.max_new_tokens = decode.max_new_tokens + block_size + 2;
  const auto prompts = random_prompts(4, prompt_length, 7);
  const tandem::PackedBatch batch = tandem::testing::greedy_continuations(
      target, prompts, longer, prompt_length + 1 + (verify_steps + 1) * block_size + 2);

  // Train until every slot of every block is right, then some more for margin.
  const tandem::testing::OverfitResult trained =
      tandem::testing::overfit_one_batch(objective, batch, {600, 50, 200});
  ASSERT_EQ(trained.accuracy, 1.0)
      << "training accuracy did not converge in " << trained.steps << " steps";

  // Through the export, as `tandem eval` runs it.
  objective.export_model(scratch / "export");
  const tandem::DFlashExport draft = tandem::load_dflash_export(scratch / "export", at::kFloat);
  tandem::AcceptanceStats stats(block_size - 1);
  for (const auto& prompt : prompts) {
    const tandem::SpeculativeOutput output = tandem::dflash_decode(
        target, *draft.draft, draft.mask_embedding, prompt, block_size - 1, decode);
    EXPECT_EQ(output.tokens, tandem::greedy_decode(target, prompt, decode));
    EXPECT_EQ(output.accepted.size(), static_cast<size_t>(verify_steps));
    stats.add(output);
  }
  std::cout << "[dflash overfit] block size " << block_size << ": " << trained.steps
            << " steps, tau " << stats.tau() << "\n";
  EXPECT_DOUBLE_EQ(stats.tau(), static_cast<double>(block_size))
      << "steps trained: " << trained.steps;
  for (double rate : stats.conditional_acceptance()) EXPECT_DOUBLE_EQ(rate, 1.0);

  // Decoding on past the trained continuations: every token accepted first, then a draft that is
  // right on some tokens and wrong on others (rollbacks of every length). The KV-cached decoder
  // accepts exactly what the uncached reference (every forward over the whole prefix) accepts.
  tandem::DecodeOptions beyond = decode;
  beyond.max_new_tokens = decode.max_new_tokens + 24;
  tandem::AcceptanceStats unseen(block_size - 1);
  for (const auto& prompt : prompts) {
    const auto cached = tandem::dflash_decode(target, *draft.draft, draft.mask_embedding, prompt,
                                              block_size - 1, beyond);
    const auto reference = tandem::dflash_decode(target, *draft.draft, draft.mask_embedding, prompt,
                                                 block_size - 1, beyond.without_cache());
    EXPECT_EQ(cached.accepted, reference.accepted);
    EXPECT_EQ(cached.tokens, reference.tokens);
    unseen.add(cached);
  }
  std::cout << "[dflash overfit] decoding past the trained tokens: tau " << unseen.tau() << "\n";
  EXPECT_GT(unseen.tau(), 1.0);  // some accepted, some rejected: the comparison means something
  EXPECT_LT(unseen.tau(), static_cast<double>(block_size));
}

TEST(DFlashOverfit, BlockSize4DraftTrainedOnAFewSamplesReachesTauEqualToTheBlockSize) {
  expect_overfit_reaches_block_size(4);
}

TEST(DFlashOverfit, BlockSize8DraftTrainedOnAFewSamplesReachesTauEqualToTheBlockSize) {
  expect_overfit_reaches_block_size(8);
}

}  // namespace

namespace {

// `tandem eval` tells a DFlash export from its config.json, proposes block_size - 1 tokens by
// default and checks the output against greedy decoding.
TEST(DFlashEvalCli, DetectsTheDraftTypeAndDefaultsToBlockSizeMinusOneTokens) {
  const std::string fixture = tandem::testing::model_fixture("llama3");
  tandem::DFlashObjective objective(draft_options(fixture, 4));
  ScratchDir scratch;
  objective.export_model(scratch / "export");
  {
    std::ofstream data(scratch / "prompts.jsonl");
    for (const auto& prompt : random_prompts(2, 8, 9))
      data << nlohmann::json{{"input_ids", prompt}}.dump() << "\n";
  }
  const auto result = tandem::testing::run_command(
      tandem::testing::tandem_binary() + " eval --target " + fixture + " --draft " +
      (scratch / "export") + " --data " + (scratch / "prompts.jsonl") +
      " --format pretokenized --prompt-tokens 5 --max-new-tokens 12 --out " +
      (scratch / "report.json"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("DFlash draft, k = 3 draft tokens per step"), std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("2/2 outputs identical"), std::string::npos) << result.output;
  const auto report = nlohmann::json::parse(std::ifstream(scratch / "report.json"));
  EXPECT_EQ(report["draft_type"], "dflash");
  EXPECT_EQ(report["draft_tokens"], 3);
  EXPECT_EQ(report["acceptance_conditional"].size(), 3u);
  EXPECT_GE(report["tau"].get<double>(), 1.0);
}

}  // namespace
