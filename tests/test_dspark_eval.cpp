// DSpark block speculative decoding (eval/dspark_decode.h): the Markov chain against the
// independent reference's greedy chain (tools/make_dspark_fixtures.py), output identical to
// plain greedy decoding of the target and the cached loop equal to the uncached one, the
// confidence stop (fewer tokens drafted, the same output), `tandem eval` on an export, and the
// overfit gate: a draft trained on a handful of the target's own greedy continuations is
// accepted in full on them, τ = block_size + 1 exactly (every slot predicts, plus the bonus).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "fixture_tensors.h"
#include "overfit.h"
#include "speculative_fixtures.h"
#include "tandem/data/packing.h"
#include "tandem/eval/dspark_decode.h"
#include "tandem/eval/uncached_decode.h"
#include "tandem/objectives/dspark.h"
#include "tandem/objectives/dspark_export.h"
#include "test_util.h"

namespace {

using tandem::testing::random_prompts;
using tandem::testing::ScratchDir;

tandem::DSparkOptions draft_options(const std::string& target, int64_t block_size) {
  tandem::DSparkOptions options = tandem::testing::tiny_dspark_options(target);
  options.block_size = block_size;
  options.seed = 5;
  return options;
}

tandem::SpeculativeOutput dspark_decode(const tandem::FrozenModel& target,
                                        const tandem::DSparkDraftImpl& draft,
                                        const std::vector<int64_t>& prompt, int64_t draft_tokens,
                                        const tandem::DecodeOptions& options) {
  at::NoGradGuard no_grad;
  tandem::DSparkProposer proposer(target, draft, draft_tokens, options.confidence_threshold);
  return tandem::speculative_decode(target, proposer, prompt, options);
}

// The proposer's chain from each fixture anchor (its document's context strictly before the
// anchor) equals the reference's greedy chain; with a threshold it stops where the reference's
// confidences first fall below it.
TEST(DSparkDecoding, TheMarkovChainAndConfidenceMatchTheReference) {
  const auto ref = tandem::testing::fixture_tensors("tests/fixtures/dspark/reference.safetensors");
  tandem::DSparkObjective objective(draft_options(tandem::testing::model_fixture("llama3"), 4));
  {
    at::NoGradGuard no_grad;
    for (auto& parameter : objective.draft()->named_parameters())
      parameter.value().copy_(ref.at("draft." + parameter.key()));
  }
  const auto target = tandem::testing::load_cpu_target(tandem::testing::model_fixture("llama3"));
  const at::Tensor ids = ref.at("input_ids"), documents = ref.at("document_ids");
  int checked = 0, stopped_early = 0;
  for (int64_t row = 0; row < 2; ++row)
    for (int64_t i = 0; i < ref.at("anchors").size(1); ++i) {
      if (ref.at("anchor_valid")[row][i].item<int64_t>() == 0) continue;
      const int64_t anchor = ref.at("anchors")[row][i].item<int64_t>();
      int64_t start = anchor;
      while (start > 0 &&
             documents[row][start - 1].item<int64_t>() == documents[row][anchor].item<int64_t>())
        --start;
      if (anchor == start) continue;  // no context: not a decoding state
      const at::Tensor context = ref.at("context_features")[row].narrow(0, start, anchor - start);
      const at::Tensor chain = ref.at("greedy_chain")[row][i];
      const at::Tensor confidence = ref.at("greedy_chain_confidence")[row][i];
      for (const double threshold : {0.0, 0.5}) {
        at::NoGradGuard no_grad;
        tandem::DSparkProposer proposer(target, objective.dspark(), 4, threshold);
        proposer.extend({}, context.unsqueeze(0), -1);
        const std::vector<int64_t> proposal = proposer.propose(ids[row][anchor].item<int64_t>());
        int64_t expected_length = 4;
        for (int64_t k = 0; k < 4 && threshold > 0; ++k)
          if (confidence[k].item<double>() < threshold) {
            expected_length = k;
            break;
          }
        ASSERT_EQ(static_cast<int64_t>(proposal.size()), expected_length)
            << "row " << row << " anchor " << anchor << " threshold " << threshold;
        for (int64_t k = 0; k < expected_length; ++k)
          EXPECT_EQ(proposal[k], chain[k].item<int64_t>()) << "slot " << k;
        stopped_early += expected_length < 4;
      }
      ++checked;
    }
  EXPECT_GE(checked, 4);
  EXPECT_GE(stopped_early, 1) << "the threshold never stopped a chain: the check means nothing";
}

TEST(DSparkDecoding, OutputEqualsGreedyDecodingCachedOrNotWithAndWithoutTheConfidenceStop) {
  const std::string fixture = tandem::testing::model_fixture("llama3");
  tandem::DSparkObjective objective(draft_options(fixture, 4));
  const auto target = tandem::testing::load_cpu_target(fixture);
  tandem::DecodeOptions decode;
  decode.max_new_tokens = 20;
  for (const double threshold : {0.0, 0.5}) {
    decode.confidence_threshold = threshold;
    for (int64_t k : {4, 2}) {
      tandem::AcceptanceStats stats(k);
      for (const auto& prompt : random_prompts(3, 6, 11)) {
        const auto output = dspark_decode(target, objective.dspark(), prompt, k, decode);
        EXPECT_EQ(output.tokens, tandem::greedy_decode(target, prompt, decode)) << "k = " << k;
        const auto reference =
            dspark_decode(target, objective.dspark(), prompt, k, decode.without_cache());
        EXPECT_EQ(output.accepted, reference.accepted);
        EXPECT_EQ(output.proposed, reference.proposed);
        for (size_t step = 0; step < output.accepted.size(); ++step)
          EXPECT_LE(output.accepted[step], output.proposed[step]);
        stats.add(output);
      }
      EXPECT_GE(stats.tau(), 1.0);
      if (threshold == 0) EXPECT_DOUBLE_EQ(stats.drafted_per_step(), static_cast<double>(k));
    }
  }
  // A confidence head that predicts rejection everywhere drafts nothing: one token per step.
  {
    at::NoGradGuard no_grad;
    objective.dspark().confidence_head->proj->bias.fill_(-100);
  }
  decode.confidence_threshold = 0.5;
  tandem::AcceptanceStats silent(4);
  const auto prompt = random_prompts(1, 6, 3)[0];
  const auto output = dspark_decode(target, objective.dspark(), prompt, 4, decode);
  EXPECT_EQ(output.tokens, tandem::greedy_decode(target, prompt, decode));
  silent.add(output);
  EXPECT_EQ(silent.drafted_per_step(), 0.0);
  EXPECT_EQ(silent.tau(), 1.0);
  EXPECT_THROW(dspark_decode(target, objective.dspark(), prompt, 5, decode),
               tandem::Error);  // more than block_size tokens
}

void expect_overfit_reaches_block_size_plus_one(int64_t block_size) {
  const int64_t verify_steps = 4, prompt_length = 6;
  ScratchDir scratch;
  tandem::DSparkOptions options =
      draft_options(tandem::testing::sharpened_target(scratch / "target"), block_size);
  options.dims = {1, 128, 4, 2, 16};
  options.seed = 1;
  tandem::DSparkObjective objective(options);
  const auto target = tandem::testing::load_cpu_target(options.target_path);

  // Samples: random prompts followed by the target's own greedy continuation.
  tandem::DecodeOptions decode;
  decode.max_new_tokens = verify_steps * (block_size + 1);
  tandem::DecodeOptions longer = decode;
  longer.max_new_tokens = decode.max_new_tokens + block_size + 2;
  const auto prompts = random_prompts(4, prompt_length, 7);
  const tandem::PackedBatch batch = tandem::testing::greedy_continuations(
      target, prompts, longer, prompt_length + longer.max_new_tokens);

  const tandem::testing::OverfitResult trained =
      tandem::testing::overfit_one_batch(objective, batch, {800, 50, 300});
  ASSERT_EQ(trained.accuracy, 1.0)
      << "training accuracy did not converge in " << trained.steps << " steps";

  // Through the export, as `tandem eval` runs it.
  objective.export_model(scratch / "export");
  const auto draft = tandem::load_dspark_export(scratch / "export/speculators", at::kFloat);
  tandem::AcceptanceStats stats(block_size);
  for (const auto& prompt : prompts) {
    const auto output = dspark_decode(target, *draft, prompt, block_size, decode);
    EXPECT_EQ(output.tokens, tandem::greedy_decode(target, prompt, decode));
    EXPECT_EQ(output.accepted.size(), static_cast<size_t>(verify_steps));
    stats.add(output);
  }
  std::cout << "[dspark overfit] block size " << block_size << ": " << trained.steps
            << " steps, tau " << stats.tau() << "\n";
  EXPECT_DOUBLE_EQ(stats.tau(), static_cast<double>(block_size + 1))
      << "steps trained: " << trained.steps;
  for (double rate : stats.conditional_acceptance()) EXPECT_DOUBLE_EQ(rate, 1.0);

  // Past the trained continuations the draft is right on some tokens and wrong on others: the
  // cached decoder accepts exactly what the uncached reference accepts.
  tandem::DecodeOptions beyond = decode;
  beyond.max_new_tokens = decode.max_new_tokens + 24;
  tandem::AcceptanceStats unseen(block_size);
  for (const auto& prompt : prompts) {
    const auto cached = dspark_decode(target, *draft, prompt, block_size, beyond);
    const auto reference =
        dspark_decode(target, *draft, prompt, block_size, beyond.without_cache());
    EXPECT_EQ(cached.accepted, reference.accepted);
    EXPECT_EQ(cached.tokens, reference.tokens);
    unseen.add(cached);
  }
  std::cout << "[dspark overfit] decoding past the trained tokens: tau " << unseen.tau() << "\n";
  EXPECT_LT(unseen.tau(), static_cast<double>(block_size + 1));
}

TEST(DSparkOverfit, BlockSize4DraftTrainedOnAFewSamplesReachesTauOfBlockSizePlusOne) {
  expect_overfit_reaches_block_size_plus_one(4);
}

// `tandem eval` tells a DSpark export from its config.json, proposes block_size tokens by
// default, reports the drafted tokens per step and refuses a threshold for other drafts.
TEST(DSparkEvalCli, DetectsTheDraftAndReportsDraftedTokensPerStep) {
  const std::string fixture = tandem::testing::model_fixture("llama3");
  tandem::DSparkObjective objective(draft_options(fixture, 4));
  ScratchDir scratch;
  objective.export_model(scratch / "export");
  {
    std::ofstream data(scratch / "prompts.jsonl");
    for (const auto& prompt : random_prompts(2, 8, 9))
      data << nlohmann::json{{"input_ids", prompt}}.dump() << "\n";
  }
  const std::string command = tandem::testing::tandem_binary() + " eval --target " + fixture +
                              " --draft " + (scratch / "export") + " --data " +
                              (scratch / "prompts.jsonl") +
                              " --format pretokenized --prompt-tokens 5 --max-new-tokens 12";
  const auto result = tandem::testing::run_command(command + " --confidence-threshold 0.5 --out " +
                                                   (scratch / "report.json"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("DSpark draft, k = 4 draft tokens per step"), std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("2/2 outputs identical"), std::string::npos) << result.output;
  const auto report = nlohmann::json::parse(std::ifstream(scratch / "report.json"));
  EXPECT_EQ(report["draft_type"], "dspark");
  EXPECT_EQ(report["draft_tokens"], 4);
  EXPECT_EQ(report["confidence_threshold"], 0.5);
  EXPECT_LE(report["drafted_per_step"].get<double>(), 4.0);
  const auto out_of_range = tandem::testing::run_command(command + " --confidence-threshold 1.5");
  EXPECT_NE(out_of_range.exit_code, 0);
  EXPECT_NE(out_of_range.output.find("--confidence-threshold must be in [0, 1)"), std::string::npos)
      << out_of_range.output;
}

}  // namespace
