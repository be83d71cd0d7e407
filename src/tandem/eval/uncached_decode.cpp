#include "tandem/eval/uncached_decode.h"

#include <ATen/ATen.h>

#include "tandem/core/error.h"
#include "tandem/eval/decode_steps.h"
#include "tandem/eval/dflash_decode.h"

namespace tandem {

namespace {

// One target forward over all of `ids`: the choices after the last `count` of them, and the
// features of `layers` at every position.
TargetPass run_target(const FrozenModel& target, const std::vector<int64_t>& ids, int64_t count,
                      const std::vector<int64_t>& layers) {
  const at::Tensor row = decode_row(ids, target.device());
  const int64_t length = row.size(1);
  const FrozenModel::Output out = target.forward(
      row, AttentionLayout::causal(1, length, target.device()), layers, /*with_logits=*/false);
  TargetPass pass;
  const at::Tensor last = out.final_hidden[0].narrow(0, length - count, count);  // (count, H)
  pass.choices = at::linear(last, target.lm_head_weight()).argmax(-1).cpu();
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
                        const std::vector<int64_t>& layers, std::vector<int64_t>& ids,
                        int64_t bonus, TargetPass& pass, SpeculativeOutput& output) {
  std::vector<int64_t> candidate = ids;
  candidate.push_back(bonus);
  candidate.insert(candidate.end(), proposal.begin(), proposal.end());
  pass = run_target(target, candidate, static_cast<int64_t>(proposal.size()) + 1, layers);
  const int64_t next_bonus = accept_proposal(proposal, pass.choices, output);
  ids.push_back(bonus);
  ids.insert(ids.end(), proposal.begin(), proposal.begin() + output.accepted.back());
  return next_bonus;
}

}  // namespace

std::vector<int64_t> greedy_decode(const FrozenModel& target, const std::vector<int64_t>& prompt,
                                   const DecodeOptions& options) {
  check(!prompt.empty(), "[eval] empty prompt");
  std::vector<int64_t> ids = prompt, tokens;
  while (!decode_finished(tokens, options)) {
    const int64_t next = run_target(target, ids, 1, {}).choices.item<int64_t>();
    ids.push_back(next);
    tokens.push_back(next);
  }
  return tokens;
}

SpeculativeOutput speculative_decode_uncached(const FrozenModel& target,
                                              const Eagle3DraftImpl& draft,
                                              const std::vector<int64_t>& prompt,
                                              int64_t draft_tokens, const DecodeOptions& options) {
  check(!prompt.empty(), "[eval] empty prompt");
  check(draft_tokens >= 1, "[eval] draft tokens per step must be >= 1");
  at::NoGradGuard no_grad;
  const std::vector<int64_t>& aux_layers = draft.config().aux_layer_ids;
  const Eagle3Proposer proposer(target, draft);
  const at::Device device = target.device();

  SpeculativeOutput output;
  std::vector<int64_t> ids = prompt;  // tokens whose target features are known
  TargetPass pass = run_target(target, ids, 1, aux_layers);
  int64_t bonus = pass.choices.item<int64_t>();  // the target's next token, not yet verified on
  output.tokens.push_back(bonus);
  while (!decode_finished(output.tokens, options)) {
    // Step 0 over the whole context (position t reads x_{t+1}), then the proposal steps.
    const int64_t n = static_cast<int64_t>(ids.size());
    std::vector<int64_t> shifted(ids.begin() + 1, ids.end());
    shifted.push_back(bonus);
    TttState state;
    const at::Tensor out =
        draft.step(proposer.head().embed(decode_row(shifted, device)).to(proposer.dtype()),
                   draft.fc->forward(pass.features.narrow(1, 0, n).to(proposer.dtype())),
                   at::arange(n, at::TensorOptions(at::kLong).device(device)).view({1, n}),
                   causal_key_bands(AttentionLayout::causal(1, n, device)), state);
    const std::vector<int64_t> proposal =
        proposer.propose(out.narrow(1, n - 1, 1), n, draft_tokens, state);
    bonus = verify_proposal(target, proposal, aux_layers, ids, bonus, pass, output);
  }
  return output;
}

SpeculativeOutput dflash_decode_uncached(const FrozenModel& target, const DFlashDraftImpl& draft,
                                         const at::Tensor& mask_embedding,
                                         const std::vector<int64_t>& prompt, int64_t draft_tokens,
                                         const DecodeOptions& options) {
  check(!prompt.empty(), "[eval] empty prompt");
  at::NoGradGuard no_grad;
  const DFlashProposer proposer(target, draft, mask_embedding, draft_tokens);
  const std::vector<int64_t>& layers = draft.config().target_layer_ids;

  SpeculativeOutput output;
  std::vector<int64_t> ids = prompt;  // tokens whose target features are known
  TargetPass pass = run_target(target, ids, 1, layers);
  int64_t bonus = pass.choices.item<int64_t>();  // the anchor of the next block
  output.tokens.push_back(bonus);
  while (!decode_finished(output.tokens, options)) {
    // Context: the target's features of positions 0..n-1, strictly before the anchor at n.
    const int64_t n = static_cast<int64_t>(ids.size());
    const std::vector<int64_t> proposal =
        proposer.propose(draft.context(pass.features.narrow(1, 0, n).to(proposer.dtype())), bonus);
    bonus = verify_proposal(target, proposal, layers, ids, bonus, pass, output);
  }
  return output;
}

}  // namespace tandem
