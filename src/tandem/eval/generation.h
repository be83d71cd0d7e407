#pragma once
// Batched generation with a KV cache (models/kv_cache.h): the prompts are left-padded into one
// batch and run once (prefill), then each step runs every unfinished row's last token once.
// Greedy, or sampled (temperature, top-k, top-p) from a seeded generator; every token comes with
// its log-probability under the distribution it was chosen from. The cache holds
// longest prompt + max_new_tokens slots per row (KvCache::bytes()).
#include <ATen/core/Generator.h>

#include <cstdint>
#include <utility>
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

/// The pieces generate() and continuous batching (eval/continuous_generation.h) share:
/// Checks the options (a sampled run needs a generator); errors start with "[generate]".
void check_sampling_options(const DecodeOptions& options, const SamplingOptions& sampling,
                            bool has_generator);
/// Checks that `prompt` is non-empty and its ids are inside the vocabulary.
void check_prompt(const std::vector<int64_t>& prompt, int64_t vocab_size);
/// The next token of each row of `logits` (B, V) host fp32.
struct RowTokens {
  at::Tensor greedy_tokens, greedy_logprobs;  // (B,), computed at once when greedy
  /// Row b's argmax and its log-probability.
  std::pair<int64_t, float> greedy(int64_t b) const;
  /// A draw for row b from the temperature-scaled, filtered distribution, and its log-probability.
  std::pair<int64_t, float> sample(const at::Tensor& logits, int64_t b,
                                   at::Generator& generator) const;
  SamplingOptions sampling;
};
RowTokens choose_row_tokens(const at::Tensor& logits, const SamplingOptions& sampling);
/// Prompts left-padded into one batch: ids, positions (counting real tokens only) and validity
/// flags, each (B, longest) on the host.
struct PaddedPrompts {
  at::Tensor ids, positions, valid;
  int64_t longest = 0;
};
PaddedPrompts left_pad(const std::vector<std::vector<int64_t>>& prompts);
/// One new slot per row: (B, 1) ids, positions and validity on the host, rows filled by set().
struct StepInputs {
  explicit StepInputs(int64_t batch);
  void set(int64_t row, int64_t token, int64_t position);
  at::Tensor ids, positions, valid;
};
/// Runs `inputs` through `model` into `cache` and returns each row's last hidden state (B, H).
at::Tensor forward_step(const FrozenModel& model, const PaddedPrompts& inputs, KvCache& cache);
at::Tensor forward_step(const FrozenModel& model, const StepInputs& inputs, KvCache& cache);
/// The next-token logits (B, V) on the host in fp32 of each row's last hidden state (B, H).
at::Tensor next_token_logits(const FrozenModel& model, const at::Tensor& last);
/// Whether `out`, which just took `token`, is complete: a stop id, or max_new_tokens reached.
bool sequence_ends(const Generation& out, int64_t token, const DecodeOptions& options);

/// Continues every prompt. Sampling draws from `generator` (required unless greedy), on the host,
/// row by row in order: the same seed gives the same tokens on any device, up to rounding.
std::vector<Generation> generate(const FrozenModel& model,
                                 const std::vector<std::vector<int64_t>>& prompts,
                                 const DecodeOptions& options, const SamplingOptions& sampling,
                                 at::Generator* generator = nullptr);

}  // namespace tandem
