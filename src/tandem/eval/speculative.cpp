#include "tandem/eval/speculative.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "tandem/core/error.h"
#include "tandem/eval/decode_steps.h"

namespace tandem {

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

SpeculativeOutput speculative_decode(const FrozenModel& target, const Eagle3DraftImpl& draft,
                                     const std::vector<int64_t>& prompt, int64_t draft_tokens,
                                     const DecodeOptions& options) {
  check(!prompt.empty(), "[eval] empty prompt");
  check(draft_tokens >= 1, "[eval] draft tokens per step must be >= 1");
  at::NoGradGuard no_grad;
  const std::vector<int64_t>& aux_layers = draft.config().aux_layer_ids;
  const FrozenHead head = target.head();
  const c10::ScalarType dtype = draft.fc->weight.scalar_type();
  const at::Tensor draft_to_target = draft.draft_to_target().cpu();  // read on the host
  const at::Device device = target.device();
  const at::TensorOptions ids_on_device = at::TensorOptions().dtype(at::kLong).device(device);

  SpeculativeOutput output;
  std::vector<int64_t> ids = prompt;  // tokens whose target features are known
  TargetPass pass = run_target(target, ids, 1, aux_layers);
  int64_t bonus = pass.choices.item<int64_t>();  // the target's next token, not yet verified on
  output.tokens.push_back(bonus);
  while (!decode_finished(output.tokens, options)) {
    // Draft k tokens from the last position: step 0 over the whole context, then one query.
    const int64_t n = static_cast<int64_t>(ids.size());
    std::vector<int64_t> shifted(ids.begin() + 1, ids.end());
    shifted.push_back(bonus);  // position t reads x_{t+1}
    TttState state;
    at::Tensor out = draft.step(head.embed(decode_row(shifted, device)).to(dtype),
                                draft.fc->forward(pass.features.narrow(1, 0, n).to(dtype)),
                                at::arange(n, ids_on_device).view({1, n}),
                                causal_key_bands(AttentionLayout::causal(1, n, device)), state);
    at::Tensor last = out.narrow(1, n - 1, 1);  // (1, 1, H)
    const KeyBands all_context =                // one query that sees the whole context
        KeyBands::from_host(at::zeros({1, 1}, at::kLong), at::full({1, 1}, n - 1, at::kLong),
                            device);
    std::vector<int64_t> proposal;
    for (int64_t j = 0; j < draft_tokens; ++j) {
      if (j > 0)
        last = draft.step(head.embed(decode_row({proposal.back()}, device)).to(dtype), last,
                          at::full({1, 1}, n - 1 + j, ids_on_device), all_context, state);
      const int64_t draft_id = draft.logits(last).argmax(-1).item<int64_t>();
      proposal.push_back(draft_to_target[draft_id].item<int64_t>());
    }

    bonus = verify_proposal(target, proposal, aux_layers, ids, bonus, pass, output);
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
