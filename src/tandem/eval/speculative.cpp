#include "tandem/eval/speculative.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "tandem/core/error.h"
#include "tandem/core/host_read.h"
#include "tandem/eval/decode_steps.h"
#include "tandem/eval/uncached_decode.h"

namespace tandem {

Eagle3Proposer::Eagle3Proposer(const FrozenModel& target, const Eagle3DraftImpl& draft)
    : draft_(draft),
      head_(target.head()),
      dtype_(draft.fc->weight.scalar_type()),
      draft_to_target_(read_on_host(draft.draft_to_target(), HostRead::DraftVocabMap)) {}

std::vector<int64_t> Eagle3Proposer::propose(at::Tensor last, int64_t n, int64_t draft_tokens,
                                             TttState& state) const {
  const at::Device device = last.device();
  const KeyBands all_context =  // one query that sees the whole context
      KeyBands::from_host(at::zeros({1, 1}, at::kLong), at::full({1, 1}, n - 1, at::kLong), device);
  const int64_t* draft_to_target = draft_to_target_.data_ptr<int64_t>();
  std::vector<int64_t> proposal;
  for (int64_t j = 0; j < draft_tokens; ++j) {
    if (j > 0)
      last = draft_.step(head_.embed(decode_row({proposal.back()}, device)).to(dtype_), last,
                         at::full({1, 1}, n - 1 + j, at::TensorOptions(at::kLong).device(device)),
                         all_context, state);
    const int64_t draft_id =
        read_on_host(draft_.logits(last).argmax(-1), HostRead::DecodedTokens).item<int64_t>();
    proposal.push_back(draft_to_target[draft_id]);
  }
  return proposal;
}

SpeculativeOutput speculative_decode(const FrozenModel& target, const Eagle3DraftImpl& draft,
                                     const std::vector<int64_t>& prompt, int64_t draft_tokens,
                                     const DecodeOptions& options) {
  if (!options.kv_cache)
    return speculative_decode_uncached(target, draft, prompt, draft_tokens, options);
  check(!prompt.empty(), "[eval] empty prompt");
  check(draft_tokens >= 1, "[eval] draft tokens per step must be >= 1");
  at::NoGradGuard no_grad;
  const Eagle3Proposer proposer(target, draft);
  const at::Device device = target.device();
  const int64_t prompt_length = static_cast<int64_t>(prompt.size());
  CachedTarget cached(target, draft.config().aux_layer_ids,
                      prompt_length + options.max_new_tokens + draft_tokens + 1);

  SpeculativeOutput output;
  // `fresh` holds the tokens the target has run but the draft has not (their features known):
  // the prompt first, then each step's bonus and accepted tokens.
  std::vector<int64_t> fresh = prompt;
  TargetPass pass = cached.run(prompt);
  int64_t bonus = pass.choices[prompt_length - 1].item<int64_t>();  // not yet run by the target
  output.tokens.push_back(bonus);
  TttState state;  // the draft's step-0 keys of every position the target has run
  while (!decode_finished(output.tokens, options)) {
    // Step 0 over the fresh positions: position t reads x_{t+1} and the target's features of t.
    const int64_t n = cached.cache().length(), first = n - static_cast<int64_t>(fresh.size());
    std::vector<int64_t> shifted(fresh.begin() + 1, fresh.end());
    shifted.push_back(bonus);
    state.step_k.clear();
    state.step_v.clear();
    const at::Tensor out = draft.extend_context(
        proposer.head().embed(decode_row(shifted, device)).to(proposer.dtype()),
        draft.fc->forward(pass.features.to(proposer.dtype())),
        at::arange(first, n, at::kLong).view({1, n - first}), state);
    const std::vector<int64_t> proposal =
        proposer.propose(out.narrow(1, n - first - 1, 1), n, draft_tokens, state);

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
  for (int64_t accepted : output.accepted) {
    steps_ += 1;
    tokens_ += accepted + 1;
    for (int64_t j = 1; j <= k; ++j) {
      if (accepted >= j - 1) reached_[j] += 1;
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
          {"tokens_from_verify_steps", tokens_},
          {"acceptance_conditional", conditional_acceptance()},
          {"acceptance_cumulative", cumulative_acceptance()}};
}

}  // namespace tandem
