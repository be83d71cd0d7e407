#include "tandem/eval/speculative.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "tandem/core/error.h"

namespace tandem {

namespace {

at::Tensor as_row(const std::vector<int64_t>& ids) {
  return at::tensor(ids, at::kLong).view({1, static_cast<int64_t>(ids.size())});
}

bool is_stop(int64_t id, const DecodeOptions& options) {
  return std::find(options.stop_ids.begin(), options.stop_ids.end(), id) != options.stop_ids.end();
}

// Cuts `tokens` after the first stop id and at max_new_tokens; true when generation is over.
bool finish(std::vector<int64_t>& tokens, const DecodeOptions& options) {
  for (size_t i = 0; i < tokens.size(); ++i)
    if (is_stop(tokens[i], options)) {
      tokens.resize(i + 1);
      break;
    }
  if (static_cast<int64_t>(tokens.size()) > options.max_new_tokens)
    tokens.resize(static_cast<size_t>(options.max_new_tokens));
  return static_cast<int64_t>(tokens.size()) >= options.max_new_tokens ||
         (!tokens.empty() && is_stop(tokens.back(), options));
}

// Greedy target choices at the last `count` positions of `ids`: (count,) int64.
struct TargetPass {
  at::Tensor choices;  // (count,) argmax of the target logits
  at::Tensor aux;      // (1, T, 3H) the draft's features, when asked for
};

TargetPass run_target(const FrozenModel& target, const std::vector<int64_t>& ids, int64_t count,
                      const std::vector<int64_t>& aux_layers) {
  const at::Tensor row = as_row(ids);
  const int64_t length = row.size(1);
  const FrozenModel::Output out = target.forward(
      row, AttentionLayout::causal(1, length, at::kCPU), aux_layers, /*with_logits=*/false);
  TargetPass pass;
  const at::Tensor last = out.final_hidden[0].narrow(0, length - count, count);  // (count, H)
  pass.choices = at::linear(last, target.lm_head_weight()).argmax(-1);
  if (!aux_layers.empty()) {
    std::vector<at::Tensor> parts;
    for (int64_t layer : aux_layers) parts.push_back(out.hidden.at(layer));
    pass.aux = at::cat(parts, -1);
  }
  return pass;
}

}  // namespace

std::vector<int64_t> greedy_decode(const FrozenModel& target, const std::vector<int64_t>& prompt,
                                   const DecodeOptions& options) {
  check(!prompt.empty(), "[eval] empty prompt");
  std::vector<int64_t> ids = prompt, tokens;
  while (!finish(tokens, options)) {
    const int64_t next = run_target(target, ids, 1, {}).choices.item<int64_t>();
    ids.push_back(next);
    tokens.push_back(next);
  }
  return tokens;
}

SpeculativeOutput speculative_decode(const FrozenModel& target, const Eagle3DraftImpl& draft,
                                     const std::vector<int64_t>& prompt, int64_t draft_tokens,
                                     const DecodeOptions& options) {
  check(!prompt.empty(), "[eval] empty prompt");
  check(draft_tokens >= 1, "[eval] draft tokens per step must be >= 1");
  at::NoGradGuard no_grad;
  const std::vector<int64_t>& aux_layers = draft.config().aux_layer_ids;
  const FrozenHead head = target.head();
  const c10::ScalarType dtype = draft.fc->weight.scalar_type();
  const at::Tensor draft_to_target = draft.draft_to_target();

  SpeculativeOutput output;
  std::vector<int64_t> ids = prompt;  // tokens whose target features are known
  TargetPass pass = run_target(target, ids, 1, aux_layers);
  int64_t bonus = pass.choices.item<int64_t>();  // the target's next token, not yet verified on
  output.tokens.push_back(bonus);
  while (!finish(output.tokens, options)) {
    // Draft k tokens from the last position: step 0 over the whole context, then one query.
    const int64_t n = static_cast<int64_t>(ids.size());
    std::vector<int64_t> shifted(ids.begin() + 1, ids.end());
    shifted.push_back(bonus);  // position t reads x_{t+1}
    TttState state;
    at::Tensor out = draft.step(head.embed(as_row(shifted)).to(dtype),
                                draft.fc->forward(pass.aux.narrow(1, 0, n).to(dtype)),
                                at::arange(n, at::kLong).view({1, n}),
                                causal_context_mask(AttentionLayout::causal(1, n, at::kCPU)), state);
    at::Tensor last = out.narrow(1, n - 1, 1);  // (1, 1, H)
    const at::Tensor all_context = at::ones({1, 1, 1, n}, at::kBool);
    std::vector<int64_t> proposal;
    for (int64_t j = 0; j < draft_tokens; ++j) {
      if (j > 0)
        last = draft.step(head.embed(as_row({proposal.back()})).to(dtype), last,
                          at::full({1, 1}, n - 1 + j, at::kLong), all_context, state);
      const int64_t draft_id = draft.logits(last).argmax(-1).item<int64_t>();
      proposal.push_back(draft_to_target[draft_id].item<int64_t>());
    }

    // Verify: the target scores ids + bonus + proposal in one forward.
    std::vector<int64_t> candidate = ids;
    candidate.push_back(bonus);
    candidate.insert(candidate.end(), proposal.begin(), proposal.end());
    pass = run_target(target, candidate, draft_tokens + 1, aux_layers);
    const at::Tensor choices = pass.choices;  // choices[j]: the target's token after candidate[n + j]
    int64_t accepted = 0;
    while (accepted < draft_tokens && choices[accepted].item<int64_t>() == proposal[accepted])
      ++accepted;
    output.accepted.push_back(accepted);
    ids.push_back(bonus);
    ids.insert(ids.end(), proposal.begin(), proposal.begin() + accepted);
    output.tokens.insert(output.tokens.end(), proposal.begin(), proposal.begin() + accepted);
    bonus = choices[accepted].item<int64_t>();
    output.tokens.push_back(bonus);
  }
  return output;
}

void AcceptanceStats::add(const SpeculativeOutput& output) {
  const int64_t k = static_cast<int64_t>(reached_.size()) - 1;
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
  return {{"tau", tau()},
          {"verify_steps", steps_},
          {"tokens_from_verify_steps", tokens_},
          {"acceptance_conditional", conditional_acceptance()},
          {"acceptance_cumulative", cumulative_acceptance()}};
}

}  // namespace tandem
