#pragma once
// Ancestral sampling from a frozen model, with the log-probability of every sampled token under
// the distribution it was drawn from (softmax of the fp32 logits, temperature 1): the "old"
// log-probabilities GRPO/GSPO rollouts carry. Recomputes the whole prefix per token (no KV
// cache): meant for small demos and tests, not for serving-scale generation.
#include <ATen/core/Generator.h>

#include <cstdint>
#include <vector>

#include "tandem/eval/speculative.h"
#include "tandem/models/frozen.h"

namespace tandem {

struct SampledCompletion {
  std::vector<int64_t> tokens;   // new tokens (stop included), at most max_new_tokens
  std::vector<float> logprobs;   // log p(token) under the model, one per token
};

/// Samples one completion of `prompt`; draws come from `generator` (seeded by the caller).
SampledCompletion sample_completion(const FrozenModel& model, const std::vector<int64_t>& prompt,
                                    const DecodeOptions& options, at::Generator& generator);

}  // namespace tandem
