#include "tandem/eval/speculative.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "tandem/core/error.h"
#include "tandem/eval/decode_steps.h"
#include "tandem/eval/uncached_decode.h"

namespace tandem {

SpeculativeOutput speculative_decode(const FrozenModel& target, DraftProposer& proposer,
                                     const std::vector<int64_t>& prompt,
                                     const DecodeOptions& options) {
  if (!options.kv_cache) return speculative_decode_uncached(target, proposer, prompt, options);
  check(!prompt.empty(), "[eval] empty prompt");
  at::NoGradGuard no_grad;
  const int64_t prompt_length = static_cast<int64_t>(prompt.size());
  AcceptanceRule rule(options);
  CachedTarget cached(target, proposer.target_layers(),
                      prompt_length + options.max_new_tokens + proposer.draft_tokens() + 1, rule);

  SpeculativeOutput output;
  TargetPass pass = cached.run(prompt);
  int64_t bonus = rule.choose(pass, prompt_length - 1);  // not yet run by the target
  output.tokens.push_back(bonus);
  // The tokens the target has verified and the draft has not seen (their features in `pass`):
  // the prompt first, then each step's bonus and accepted tokens.
  std::vector<int64_t> fresh = prompt;
  proposer.reset();  // a proposer may have served another prompt
  while (!decode_finished(output.tokens, options)) {
    proposer.extend(fresh, pass.features, bonus);
    const std::vector<int64_t> proposal = proposer.propose(bonus);
    const int64_t previous_bonus = bonus;
    bonus = cached.verify(previous_bonus, proposal, pass, output);
    fresh.assign({previous_bonus});
    fresh.insert(fresh.end(), proposal.begin(), proposal.begin() + output.accepted.back());
  }
  return output;
}

void AcceptanceStats::add(const SpeculativeOutput& output) {
  const int64_t k = static_cast<int64_t>(reached_.size()) - 1;
  int64_t prompt_tokens = 0;
  for (int64_t accepted : output.accepted) prompt_tokens += accepted + 1;
  per_prompt_.emplace_back(prompt_tokens, static_cast<int64_t>(output.accepted.size()));
  for (size_t step = 0; step < output.accepted.size(); ++step) {
    const int64_t accepted = output.accepted[step];
    const int64_t proposed = step < output.proposed.size() ? output.proposed[step] : k;
    steps_ += 1;
    tokens_ += accepted + 1;
    drafted_ += proposed;
    for (int64_t j = 1; j <= k; ++j) {
      if (accepted >= j - 1 && proposed >= j) reached_[j] += 1;
      if (accepted >= j) accepted_at_[j] += 1;
    }
  }
}

double AcceptanceStats::tau() const {
  return steps_ == 0 ? 0.0 : static_cast<double>(tokens_) / static_cast<double>(steps_);
}

std::pair<double, double> AcceptanceStats::tau_interval(int resamples) const {
  const size_t prompts = per_prompt_.size();
  if (prompts < 2) return {tau(), tau()};
  std::mt19937_64 random(0);
  std::uniform_int_distribution<size_t> pick(0, prompts - 1);
  std::vector<double> taus;
  for (int r = 0; r < resamples; ++r) {
    int64_t tokens = 0, steps = 0;
    for (size_t i = 0; i < prompts; ++i) {
      const auto& [t, s] = per_prompt_[pick(random)];
      tokens += t;
      steps += s;
    }
    taus.push_back(steps == 0 ? 0.0 : static_cast<double>(tokens) / static_cast<double>(steps));
  }
  std::sort(taus.begin(), taus.end());
  auto percentile = [&](double q) {
    return taus[static_cast<size_t>(std::lround(q * static_cast<double>(taus.size() - 1)))];
  };
  return {percentile(0.025), percentile(0.975)};
}

double AcceptanceStats::drafted_per_step() const {
  return steps_ == 0 ? 0.0 : static_cast<double>(drafted_) / static_cast<double>(steps_);
}

std::vector<double> AcceptanceStats::conditional_acceptance() const {
  std::vector<double> out;
  for (size_t j = 1; j < reached_.size(); ++j)
    out.push_back(reached_[j] == 0 ? 0.0 : static_cast<double>(accepted_at_[j]) / reached_[j]);
  return out;
}

std::vector<double> AcceptanceStats::cumulative_acceptance() const {
  std::vector<double> out;
  for (size_t j = 1; j < accepted_at_.size(); ++j)
    out.push_back(steps_ == 0 ? 0.0 : static_cast<double>(accepted_at_[j]) / steps_);
  return out;
}

nlohmann::json AcceptanceStats::to_json() const {
  const auto [low, high] = tau_interval();
  return {{"tau", tau()},
          {"tau_ci95", {low, high}},
          {"tau_ci_method", "bootstrap over prompts, 2000 resamples, percentile"},
          {"verify_steps", steps_},
          {"drafted_per_step", drafted_per_step()},
          {"tokens_from_verify_steps", tokens_},
          {"acceptance_conditional", conditional_acceptance()},
          {"acceptance_cumulative", cumulative_acceptance()}};
}

}  // namespace tandem
