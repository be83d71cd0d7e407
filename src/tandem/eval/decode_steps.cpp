#include "tandem/eval/decode_steps.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace tandem {

namespace {

bool is_stop(int64_t id, const DecodeOptions& options) {
  return std::find(options.stop_ids.begin(), options.stop_ids.end(), id) != options.stop_ids.end();
}

}  // namespace

at::Tensor decode_row(const std::vector<int64_t>& ids, const at::Device& device) {
  return at::tensor(ids, at::kLong).view({1, static_cast<int64_t>(ids.size())}).to(device);
}

bool decode_finished(std::vector<int64_t>& tokens, const DecodeOptions& options) {
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

TargetPass run_target(const FrozenModel& target, const std::vector<int64_t>& ids, int64_t count,
                      const std::vector<int64_t>& layers) {
  const at::Tensor row = decode_row(ids, target.device());
  const int64_t length = row.size(1);
  const FrozenModel::Output out = target.forward(
      row, AttentionLayout::causal(1, length, target.device()), layers, /*with_logits=*/false);
  TargetPass pass;
  const at::Tensor last = out.final_hidden[0].narrow(0, length - count, count);  // (count, H)
  // Read on the host: verification compares them with the proposal token by token.
  pass.choices = at::linear(last, target.lm_head_weight()).argmax(-1).cpu();
  if (!layers.empty()) {
    std::vector<at::Tensor> parts;
    for (int64_t layer : layers) parts.push_back(out.hidden.at(layer));
    pass.features = at::cat(parts, -1);
  }
  return pass;
}

int64_t verify_proposal(const FrozenModel& target, const std::vector<int64_t>& proposal,
                        const std::vector<int64_t>& layers, std::vector<int64_t>& ids,
                        int64_t bonus, TargetPass& pass, SpeculativeOutput& output) {
  const int64_t draft_tokens = static_cast<int64_t>(proposal.size());
  std::vector<int64_t> candidate = ids;
  candidate.push_back(bonus);
  candidate.insert(candidate.end(), proposal.begin(), proposal.end());
  pass = run_target(target, candidate, draft_tokens + 1, layers);
  const at::Tensor& choices = pass.choices;  // choices[j]: the target's token after candidate[n + j]
  int64_t accepted = 0;
  while (accepted < draft_tokens && choices[accepted].item<int64_t>() == proposal[accepted])
    ++accepted;
  output.accepted.push_back(accepted);
  ids.push_back(bonus);
  ids.insert(ids.end(), proposal.begin(), proposal.begin() + accepted);
  output.tokens.insert(output.tokens.end(), proposal.begin(), proposal.begin() + accepted);
  const int64_t next_bonus = choices[accepted].item<int64_t>();
  output.tokens.push_back(next_bonus);
  return next_bonus;
}

}  // namespace tandem
