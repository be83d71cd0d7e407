#include "tandem/eval/sampling.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "tandem/core/error.h"

namespace tandem {

SampledCompletion sample_completion(const FrozenModel& model, const std::vector<int64_t>& prompt,
                                    const DecodeOptions& options, at::Generator& generator) {
  check(!prompt.empty(), "[rollout] empty prompt");
  check(options.max_new_tokens > 0, "[rollout] max_new_tokens must be positive");
  at::NoGradGuard no_grad;
  SampledCompletion out;
  std::vector<int64_t> ids = prompt;
  while (static_cast<int64_t>(out.tokens.size()) < options.max_new_tokens) {
    const int64_t length = static_cast<int64_t>(ids.size());
    const at::Tensor row = at::tensor(ids, at::kLong).view({1, length}).to(model.device());
    const FrozenModel::Output pass = model.forward(
        row, AttentionLayout::causal(1, length, model.device()), {}, /*with_logits=*/false);
    const at::Tensor last = pass.final_hidden[0][length - 1];  // (H,)
    // Drawn on the host with the CPU generator: the same seed gives the same draws on any device
    // (up to the logits' rounding).
    const at::Tensor log_probs =
        at::log_softmax(at::matmul(model.lm_head_weight(), last).to(at::kFloat), 0).cpu();  // (V,)
    const int64_t token =
        at::multinomial(log_probs.exp(), 1, /*replacement=*/false, generator).item<int64_t>();
    out.tokens.push_back(token);
    out.logprobs.push_back(log_probs[token].item<float>());
    ids.push_back(token);
    if (std::find(options.stop_ids.begin(), options.stop_ids.end(), token) != options.stop_ids.end())
      break;
  }
  return out;
}

}  // namespace tandem
