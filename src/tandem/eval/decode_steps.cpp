#include "tandem/eval/decode_steps.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "tandem/core/device.h"

namespace tandem {

namespace {

bool is_stop(int64_t id, const DecodeOptions& options) {
  return std::find(options.stop_ids.begin(), options.stop_ids.end(), id) != options.stop_ids.end();
}

}  // namespace

at::Tensor decode_row(const std::vector<int64_t>& ids, const at::Device& device) {
  return to_device(at::tensor(ids, at::kLong).view({1, static_cast<int64_t>(ids.size())}), device);
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

CachedTarget::CachedTarget(const FrozenModel& target, std::vector<int64_t> layers, int64_t capacity,
                           AcceptanceRule& rule)
    : target_(target),
      layers_(std::move(layers)),
      cache_(target.new_cache(1, capacity)),
      rule_(rule) {}

TargetPass CachedTarget::run(const std::vector<int64_t>& tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const at::Device device = target_.device();
  const at::Tensor positions =
      at::arange(cache_.length(), cache_.length() + n, at::TensorOptions(at::kLong).device(device))
          .view({1, n});
  std::map<int64_t, at::Tensor> captured;
  const at::Tensor hidden = target_.forward_cached(
      decode_row(tokens, device), positions,
      at::ones({1, n}, at::TensorOptions(at::kBool).device(device)), cache_, layers_, &captured);
  TargetPass pass;
  rule_.score(hidden[0], target_.lm_head_weight(), pass);
  if (!layers_.empty()) {
    std::vector<at::Tensor> parts;
    for (int64_t layer : layers_) parts.push_back(captured.at(layer));
    pass.features = at::cat(parts, -1);
  }
  return pass;
}

int64_t CachedTarget::verify(int64_t bonus, const std::vector<int64_t>& proposal,
                             TargetPass& verified, SpeculativeOutput& output) {
  const int64_t before = cache_.length();
  std::vector<int64_t> scored{bonus};
  scored.insert(scored.end(), proposal.begin(), proposal.end());
  verified = run(scored);
  const int64_t next_bonus = rule_.accept(proposal, verified, output);
  const int64_t kept = 1 + output.accepted.back();  // the bonus and the accepted tokens
  cache_.truncate(before + kept);
  if (verified.features.defined()) verified.features = verified.features.narrow(1, 0, kept);
  return next_bonus;
}

}  // namespace tandem
