#include "tandem/eval/uncached_decode.h"

#include <ATen/ATen.h>

#include "tandem/core/error.h"
#include "tandem/eval/decode_steps.h"

namespace tandem {

namespace {

// One target forward over all of `ids`: the rule's scores after the last `count` of them, and
// the features of `layers` at every position.
TargetPass run_target(const FrozenModel& target, const std::vector<int64_t>& ids, int64_t count,
                      const std::vector<int64_t>& layers, const AcceptanceRule& rule) {
  const at::Tensor row = decode_row(ids, target.device());
  const int64_t length = row.size(1);
  const FrozenModel::Output out = target.forward(
      row, AttentionLayout::causal(1, length, target.device()), layers, /*with_logits=*/false);
  TargetPass pass;
  const at::Tensor last = out.final_hidden[0].narrow(0, length - count, count);  // (count, H)
  rule.score(last, target.lm_head_weight(), pass);
  if (!layers.empty()) {
    std::vector<at::Tensor> parts;
    for (int64_t layer : layers) parts.push_back(out.hidden.at(layer));
    pass.features = at::cat(parts, -1);
  }
  return pass;
}

// Verification by one forward over ids + bonus + proposal (`pass` becomes that forward: the
// features of every position); `ids` grows by the bonus and the accepted tokens.
int64_t verify_proposal(const FrozenModel& target, const std::vector<int64_t>& proposal,
                        const std::vector<int64_t>& layers, AcceptanceRule& rule,
                        std::vector<int64_t>& ids, int64_t bonus, TargetPass& pass,
                        SpeculativeOutput& output) {
  std::vector<int64_t> candidate = ids;
  candidate.push_back(bonus);
  candidate.insert(candidate.end(), proposal.begin(), proposal.end());
  pass = run_target(target, candidate, static_cast<int64_t>(proposal.size()) + 1, layers, rule);
  const int64_t next_bonus = rule.accept(proposal, pass, output);
  ids.push_back(bonus);
  ids.insert(ids.end(), proposal.begin(), proposal.begin() + output.accepted.back());
  return next_bonus;
}

}  // namespace

std::vector<int64_t> greedy_decode(const FrozenModel& target, const std::vector<int64_t>& prompt,
                                   const DecodeOptions& options) {
  check(!prompt.empty(), "[eval] empty prompt");
  std::vector<int64_t> ids = prompt, tokens;
  const AcceptanceRule greedy{DecodeOptions{}};
  while (!decode_finished(tokens, options)) {
    const int64_t next = run_target(target, ids, 1, {}, greedy).choices.item<int64_t>();
    ids.push_back(next);
    tokens.push_back(next);
  }
  return tokens;
}

SpeculativeOutput speculative_decode_uncached(const FrozenModel& target, DraftProposer& proposer,
                                              const std::vector<int64_t>& prompt,
                                              const DecodeOptions& options) {
  check(!prompt.empty(), "[eval] empty prompt");
  at::NoGradGuard no_grad;
  const std::vector<int64_t>& layers = proposer.target_layers();

  AcceptanceRule rule(options);
  SpeculativeOutput output;
  std::vector<int64_t> ids = prompt;  // tokens whose target features are known
  TargetPass pass = run_target(target, ids, 1, layers, rule);
  int64_t bonus = rule.choose(pass, 0);  // the target's next token, not yet run by it
  output.tokens.push_back(bonus);
  while (!decode_finished(output.tokens, options)) {
    const int64_t n = static_cast<int64_t>(ids.size());
    proposer.reset();
    // A draft that reads no target layer gets no features (undefined), as the cached path gives.
    proposer.extend(ids, pass.features.defined() ? pass.features.narrow(1, 0, n) : at::Tensor(),
                    bonus);
    const std::vector<int64_t> proposal = proposer.propose(bonus);
    bonus = verify_proposal(target, proposal, layers, rule, ids, bonus, pass, output);
  }
  return output;
}

}  // namespace tandem
