#pragma once
// Batched generation with a KV cache (models/kv_cache.h): the prompts are left-padded into one
// batch and run once (prefill), then each step runs every unfinished row's last token once.
// Greedy, or sampled (temperature, top-k, top-p) from a seeded generator; every token comes with
// its log-probability under the distribution it was chosen from. The cache holds
// longest prompt + max_new_tokens slots per row (KvCache::bytes()).
#include <ATen/core/Generator.h>

#include <cstdint>
#include <vector>

#include "tandem/eval/speculative.h"
#include "tandem/models/frozen.h"

namespace tandem {

struct SamplingOptions {
  double temperature = 0;  // 0: greedy (argmax; ties to the lowest id, as torch.argmax)
  int64_t top_k = 0;       // 0: every token
  double top_p = 1.0;      // nucleus: the smallest set of tokens whose probability reaches top_p
};

struct Generation {
  std::vector<int64_t> tokens;  // new tokens (stop included), at most max_new_tokens
  std::vector<float>
      logprobs;  // log p(token) under the (temperature-scaled, filtered) distribution
};

/// Continues every prompt. Sampling draws from `generator` (required unless greedy), on the host,
/// row by row in order: the same seed gives the same tokens on any device, up to rounding.
std::vector<Generation> generate(const FrozenModel& model,
                                 const std::vector<std::vector<int64_t>>& prompts,
                                 const DecodeOptions& options, const SamplingOptions& sampling,
                                 at::Generator* generator = nullptr);

}  // namespace tandem
