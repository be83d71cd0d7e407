// Speculative sampling (eval/acceptance_rule.h): the rejection rule's output is distributed as
// plain sampling from the target. Checked statistically with Pearson's chi-square against exact
// probabilities computed here independently: one verification step on hand-made logits (every
// outcome's probability written out by hand), and whole decodes of the fixture target against
// the product of its conditional probabilities, with plain sampling (generate) through the same
// test as a control. Also: the cached decoder draws exactly what the uncached reference draws,
// greedy verification is unchanged, and `tandem eval --temperature` reports τ at T.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "speculative_fixtures.h"
#include "tandem/eval/acceptance_rule.h"
#include "tandem/eval/dspark_decode.h"
#include "tandem/eval/generation.h"
#include "tandem/eval/speculative.h"
#include "tandem/eval/uncached_decode.h"
#include "tandem/models/decoder.h"
#include "tandem/objectives/dspark.h"
#include "test_util.h"

namespace {

using Sequence = std::vector<int64_t>;
using tandem::testing::random_prompts;
using tandem::testing::ScratchDir;

// The chi-square value exceeded with probability `alpha` at `dof` degrees of freedom
// (Wilson-Hilferty), for alpha = 1e-4 (z = 3.719).
double chi_square_critical(int64_t dof) {
  const double d = static_cast<double>(dof), z = 3.719;
  return d * std::pow(1 - 2 / (9 * d) + z * std::sqrt(2 / (9 * d)), 3);
}

// Pearson's chi-square of `counts` (n draws) against `probability`: one bin per outcome expected
// at least 5 times, the rest pooled into one bin. Returns {statistic, degrees of freedom}.
std::pair<double, int64_t> chi_square(const std::map<Sequence, int64_t>& counts, int64_t n,
                                      const std::map<Sequence, double>& probability) {
  double statistic = 0, pooled_probability = 1;
  int64_t bins = 0, pooled_count = n;
  for (const auto& [outcome, p] : probability) {
    const double expected = p * static_cast<double>(n);
    if (expected < 5) continue;
    const auto found = counts.find(outcome);
    const double observed = found == counts.end() ? 0.0 : static_cast<double>(found->second);
    statistic += (observed - expected) * (observed - expected) / expected;
    pooled_probability -= p;
    pooled_count -= static_cast<int64_t>(observed);
    bins += 1;
  }
  const double expected = pooled_probability * static_cast<double>(n);
  if (expected >= 5) {
    statistic += (pooled_count - expected) * (pooled_count - expected) / expected;
    bins += 1;
  } else {
    EXPECT_LE(pooled_count, 20) << "outcomes of total probability " << pooled_probability
                                << " were drawn " << pooled_count << " times";
  }
  return {statistic, bins - 1};
}

// One verification step, k = 2, vocabulary 5, hand-made logits. Emitted tokens and their exact
// probabilities (p_j = softmax(row j / T), proposal x0, x1): (a) for a != x0 with p0(a);
// (x0, b) for b != x1 with p0(x0) p1(b); (x0, x1, c) with p0(x0) p1(x1) p2(c).
TEST(SpeculativeSampling, OneStepEmitsTokensWithTheTargetsProbabilities) {
  const at::Tensor logits = at::tensor({1.0f, 2.0f, 0.5f, -1.0f, 0.0f,   // before x0
                                        0.3f, -0.2f, 1.5f, 1.4f, 0.1f,   // before x1
                                        2.0f, 0.0f, 0.0f, 1.0f, -3.0f})  // after x1
                                .view({3, 5});
  const Sequence proposal{1, 3};  // x0 likely, x1 a close second
  for (const double temperature : {1.0, 0.6}) {
    tandem::DecodeOptions options;
    options.temperature = temperature;
    options.seed = 17;
    tandem::AcceptanceRule rule(options);
    tandem::TargetPass pass;
    pass.logits = logits;
    std::vector<std::vector<double>> p;
    for (int64_t row = 0; row < 3; ++row) {
      const at::Tensor probs = at::softmax(logits[row].to(at::kDouble) / temperature, 0);
      p.emplace_back(probs.data_ptr<double>(), probs.data_ptr<double>() + 5);
    }
    std::map<Sequence, double> exact;
    for (int64_t a = 0; a < 5; ++a) {
      if (a != proposal[0]) exact[{a}] = p[0][a];
      if (a != proposal[1]) exact[{proposal[0], a}] = p[0][proposal[0]] * p[1][a];
      exact[{proposal[0], proposal[1], a}] = p[0][proposal[0]] * p[1][proposal[1]] * p[2][a];
    }
    const int64_t n = 40000;
    std::map<Sequence, int64_t> counts;
    for (int64_t i = 0; i < n; ++i) {
      tandem::SpeculativeOutput output;
      const int64_t next = rule.accept(proposal, pass, output);
      ASSERT_EQ(output.tokens.back(), next);
      ASSERT_EQ(output.proposed, std::vector<int64_t>{2});
      ASSERT_EQ(static_cast<int64_t>(output.tokens.size()), output.accepted[0] + 1);
      counts[output.tokens] += 1;
    }
    const auto [statistic, dof] = chi_square(counts, n, exact);
    EXPECT_GE(dof, 10);  // nearly every outcome is expected often enough for a bin of its own
    EXPECT_LT(statistic, chi_square_critical(dof)) << "temperature " << temperature;
    std::cout << "[sampling] one step at T " << temperature << ": chi-square " << statistic
              << " on " << dof << " degrees of freedom (critical " << chi_square_critical(dof)
              << ")\n";
  }
  // Greedy: the longest prefix equal to the argmax choices, then the choice after it.
  tandem::AcceptanceRule greedy{tandem::DecodeOptions{}};
  tandem::TargetPass pass;
  pass.choices = at::tensor({1L, 2L, 0L});
  tandem::SpeculativeOutput output;
  EXPECT_EQ(greedy.accept({1, 3}, pass, output), 2);
  EXPECT_EQ(output.tokens, (Sequence{1, 2}));
  EXPECT_EQ(output.accepted, std::vector<int64_t>{1});
}

// Proposes the target's own greedy continuation of everything verified so far (run uncached):
// a deterministic draft whose proposals are often, but not always, accepted at a temperature.
class GreedyContinuationProposer : public tandem::DraftProposer {
 public:
  GreedyContinuationProposer(const tandem::FrozenModel& target, int64_t k)
      : target_(target), k_(k) {}
  const std::vector<int64_t>& target_layers() const override { return layers_; }
  int64_t draft_tokens() const override { return k_; }
  void reset() override { context_.clear(); }
  void extend(const std::vector<int64_t>& ids, const at::Tensor&, int64_t) override {
    context_.insert(context_.end(), ids.begin(), ids.end());
  }
  std::vector<int64_t> propose(int64_t next) override {
    Sequence context = context_;
    context.push_back(next);
    tandem::DecodeOptions options;
    options.max_new_tokens = k_;
    return tandem::greedy_decode(target_, context, options);
  }

 private:
  const tandem::FrozenModel& target_;
  int64_t k_;
  std::vector<int64_t> layers_, context_;
};

// p(sequence | prompt) at temperature T: the product of the target's conditionals, from one
// forward over prompt + sequence.
double sequence_probability(const tandem::FrozenModel& target, const Sequence& prompt,
                            const Sequence& sequence, double temperature) {
  Sequence ids = prompt;
  ids.insert(ids.end(), sequence.begin(), sequence.end() - 1);
  const int64_t length = static_cast<int64_t>(ids.size()), count = sequence.size();
  const at::Tensor row = at::tensor(ids, at::kLong).view({1, length});
  const auto out = target.forward(row, tandem::AttentionLayout::causal(1, length, at::kCPU), {},
                                  /*with_logits=*/false);
  const at::Tensor logits =
      at::linear(out.final_hidden[0].narrow(0, length - count, count), target.lm_head_weight());
  const at::Tensor log_p = at::log_softmax(logits.to(at::kDouble) / temperature, -1);
  double total = 0;
  for (int64_t j = 0; j < count; ++j) total += log_p[j][sequence[j]].item<double>();
  return std::exp(total);
}

// Whole decodes of 3 tokens from one prompt, speculative (k = 2) and plain sampling, against the
// exact probabilities of every 3-token sequence drawn.
TEST(SpeculativeSampling, DecodedSequencesAreDistributedAsPlainSamplingFromTheTarget) {
  ScratchDir scratch;
  // The fixture's lm_head x100 at T = 25: distributions as peaked as x4 at T = 1, so that a few
  // hundred sequences hold most of the mass and proposals are both accepted and rejected.
  const auto target =
      tandem::testing::load_cpu_target(tandem::testing::sharpened_target(scratch / "target"));
  const double temperature = 25;
  const Sequence prompt = random_prompts(1, 5, 23)[0];
  tandem::DecodeOptions decode;
  decode.max_new_tokens = 3;
  decode.temperature = temperature;
  GreedyContinuationProposer proposer(target, 2);

  const int64_t n = 3000;
  std::map<Sequence, int64_t> speculative, plain;
  int64_t accepted = 0, steps = 0;
  at::Generator generator = at::detail::createCPUGenerator(99);
  tandem::SamplingOptions sampling;
  sampling.temperature = temperature;
  for (int64_t i = 0; i < n; ++i) {
    decode.seed = 1000 + i;
    const auto output = tandem::speculative_decode(target, proposer, prompt, decode);
    ASSERT_EQ(output.tokens.size(), 3u);
    speculative[output.tokens] += 1;
    for (int64_t a : output.accepted) accepted += a, steps += 1;
    plain[tandem::generate(target, {prompt}, decode, sampling, &generator)[0].tokens] += 1;
  }
  std::map<Sequence, double> exact;
  for (const auto* counts : {&speculative, &plain})
    for (const auto& [sequence, count] : *counts)
      if (!exact.count(sequence))
        exact[sequence] = sequence_probability(target, prompt, sequence, temperature);
  const auto [speculative_statistic, speculative_dof] = chi_square(speculative, n, exact);
  const auto [plain_statistic, plain_dof] = chi_square(plain, n, exact);
  std::cout << "[sampling] 3-token decodes at T " << temperature << ": " << exact.size()
            << " distinct sequences; speculative chi-square " << speculative_statistic << " on "
            << speculative_dof << " dof, plain sampling " << plain_statistic << " on " << plain_dof
            << " dof; " << static_cast<double>(accepted) / steps
            << " draft tokens accepted per step\n";
  ASSERT_GE(speculative_dof, 10) << "too few frequent sequences for the test to say anything";
  EXPECT_LT(speculative_statistic, chi_square_critical(speculative_dof));
  EXPECT_LT(plain_statistic, chi_square_critical(plain_dof));  // the control
  // Proposals are accepted and rejected both, so both branches of the rule ran.
  EXPECT_GT(accepted, steps / 4);
  EXPECT_LT(accepted, 2 * steps);
}

// The cached decoder makes the same draws from the same seed as the uncached reference, with a
// real draft; different seeds give different outputs; greedy verification still gives greedy
// decoding.
TEST(SpeculativeSampling, CachedDrawsEqualTheUncachedReference) {
  const std::string fixture = tandem::testing::model_fixture("llama3");
  const auto target = tandem::testing::load_cpu_target(fixture);
  tandem::DSparkObjective objective(tandem::testing::tiny_dspark_options(fixture));
  at::NoGradGuard no_grad;
  tandem::DecodeOptions decode;
  decode.max_new_tokens = 16;
  decode.temperature = 0.8;
  std::set<Sequence> outputs;
  for (const auto& prompt : random_prompts(3, 6, 5)) {
    for (uint64_t seed : {1u, 2u}) {
      decode.seed = seed;
      tandem::DSparkProposer proposer(target, objective.dspark(), 4, 0);
      const auto cached = tandem::speculative_decode(target, proposer, prompt, decode);
      const auto reference =
          tandem::speculative_decode(target, proposer, prompt, decode.without_cache());
      EXPECT_EQ(cached.tokens, reference.tokens);
      EXPECT_EQ(cached.accepted, reference.accepted);
      outputs.insert(cached.tokens);
    }
  }
  EXPECT_GE(outputs.size(), 5u);  // 6 decodes: seeds and prompts give other draws
}

// `tandem eval --temperature 1`: τ at T = 1, timed against plain sampling, the same report from
// the same seed, another from another seed; no greedy check, and a strict one is refused.
TEST(SpeculativeSampling, EvalReportsTauAtATemperature) {
  const std::string fixture = tandem::testing::model_fixture("llama3");
  tandem::DSparkObjective objective(tandem::testing::tiny_dspark_options(fixture));
  ScratchDir scratch;
  objective.export_model(scratch / "export");
  {
    std::ofstream data(scratch / "prompts.jsonl");
    for (const auto& prompt : random_prompts(3, 8, 9))
      data << nlohmann::json{{"input_ids", prompt}}.dump() << "\n";
  }
  const std::string command =
      tandem::testing::tandem_binary() + " eval --target " + fixture + " --draft " +
      (scratch / "export") + " --data " + (scratch / "prompts.jsonl") +
      " --format pretokenized --prompt-tokens 5 --max-new-tokens 12" + " --temperature 1";
  auto report_of = [&](const std::string& flags, const std::string& name) {
    const auto result =
        tandem::testing::run_command(command + flags + " --out " + (scratch / name));
    EXPECT_EQ(result.exit_code, 0) << result.output;
    EXPECT_NE(result.output.find("[eval] sampling:"), std::string::npos) << result.output;
    return nlohmann::json::parse(std::ifstream(scratch / name));
  };
  const auto first = report_of(" --seed 4", "a.json"), again = report_of(" --seed 4", "b.json");
  const auto other = report_of(" --seed 5", "c.json");
  EXPECT_EQ(first["temperature"], 1.0);
  EXPECT_EQ(first["seed"], 4);
  EXPECT_FALSE(first.contains("greedy_identical"));
  EXPECT_TRUE(first.contains("sampling_tokens_per_s"));
  EXPECT_GE(first["tau"].get<double>(), 1.0);
  EXPECT_EQ(first["per_prompt"], again["per_prompt"]);
  EXPECT_NE(first["per_prompt"], other["per_prompt"]);
  const auto strict = tandem::testing::run_command(command + " --strict-greedy-check");
  EXPECT_NE(strict.exit_code, 0);
  EXPECT_NE(strict.output.find("--strict-greedy-check compares with greedy"), std::string::npos)
      << strict.output;
}

}  // namespace
