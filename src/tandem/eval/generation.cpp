#include "tandem/eval/generation.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "tandem/core/device.h"
#include "tandem/core/error.h"
#include "tandem/core/host_read.h"

namespace tandem {

namespace {

// The distribution a token is drawn from: log-probabilities (V,) fp32 on the host, after the
// temperature and the top-k / top-p filters (filtered tokens at -inf).
at::Tensor sampling_log_probs(const at::Tensor& logits, const SamplingOptions& sampling) {
  at::Tensor scaled = logits / sampling.temperature;
  const int64_t vocab = scaled.size(0);
  if (sampling.top_k > 0 && sampling.top_k < vocab) {
    const at::Tensor kth = std::get<0>(at::topk(scaled, sampling.top_k)).select(0, -1);
    scaled = scaled.masked_fill(scaled < kth, -INFINITY);
  }
  if (sampling.top_p < 1.0) {
    auto [sorted, order] = at::sort(scaled, /*stable=*/true, 0, /*descending=*/true);
    const at::Tensor cumulative = at::softmax(sorted, 0).cumsum(0);
    // Keep a token while the probability before it is below top_p (the first always stays).
    const at::Tensor drop_sorted = (cumulative - at::softmax(sorted, 0)) >= sampling.top_p;
    const at::Tensor drop = at::zeros_like(drop_sorted).scatter(0, order, drop_sorted);
    scaled = scaled.masked_fill(drop, -INFINITY);
  }
  return at::log_softmax(scaled, 0);
}

}  // namespace

void check_sampling_options(const DecodeOptions& options, const SamplingOptions& sampling,
                            bool has_generator) {
  check(options.max_new_tokens > 0, "[generate] max_new_tokens must be positive");
  check(std::isfinite(sampling.temperature) && sampling.temperature >= 0, "[generate] temperature ",
        sampling.temperature, " must be a finite number >= 0 (0: greedy)");
  check(sampling.top_k >= 0, "[generate] top_k must be >= 0 (0: off)");
  check(sampling.top_p > 0 && sampling.top_p <= 1, "[generate] top_p must be in (0, 1]");
  check(sampling.temperature == 0 || has_generator, "[generate] sampling needs a seeded generator");
}

void check_prompt(const std::vector<int64_t>& prompt, int64_t vocab_size) {
  check(!prompt.empty(), "[generate] an empty prompt");
  for (int64_t id : prompt)
    check(id >= 0 && id < vocab_size, "[generate] token id ", id, " is outside the vocabulary [0, ",
          vocab_size, ")");
}

RowTokens choose_row_tokens(const at::Tensor& logits, const SamplingOptions& sampling) {
  RowTokens chosen;
  chosen.sampling = sampling;
  if (sampling.temperature == 0) {  // every row's choice and its log-probability at once
    const int64_t batch = logits.size(0);
    chosen.greedy_tokens = logits.argmax(1);
    chosen.greedy_logprobs =
        at::log_softmax(logits, 1).gather(1, chosen.greedy_tokens.view({batch, 1})).view({batch});
  }
  return chosen;
}

std::pair<int64_t, float> RowTokens::greedy(int64_t b) const {
  return {greedy_tokens.data_ptr<int64_t>()[b], greedy_logprobs.data_ptr<float>()[b]};
}

std::pair<int64_t, float> RowTokens::sample(const at::Tensor& logits, int64_t b,
                                            at::Generator& generator) const {
  const at::Tensor log_probs = sampling_log_probs(logits[b], sampling);
  const int64_t token = at::multinomial(log_probs.exp(), 1, false, generator).item<int64_t>();
  return {token, log_probs[token].item<float>()};
}

PaddedPrompts left_pad(const std::vector<std::vector<int64_t>>& prompts) {
  PaddedPrompts padded;
  for (const auto& prompt : prompts)
    padded.longest = std::max<int64_t>(padded.longest, static_cast<int64_t>(prompt.size()));
  const int64_t batch = static_cast<int64_t>(prompts.size());
  padded.ids = at::zeros({batch, padded.longest}, at::kLong);
  padded.positions = at::zeros({batch, padded.longest}, at::kLong);
  padded.valid = at::zeros({batch, padded.longest}, at::kBool);
  for (int64_t b = 0; b < batch; ++b) {
    const auto& prompt = prompts[b];
    const int64_t length = static_cast<int64_t>(prompt.size()), pad = padded.longest - length;
    padded.ids[b].narrow(0, pad, length).copy_(at::tensor(prompt, at::kLong));
    padded.positions[b].narrow(0, pad, length).copy_(at::arange(length, at::kLong));
    padded.valid[b].narrow(0, pad, length).fill_(true);
  }
  return padded;
}

StepInputs::StepInputs(int64_t batch)
    : ids(at::zeros({batch, 1}, at::kLong)),
      positions(at::zeros({batch, 1}, at::kLong)),
      valid(at::zeros({batch, 1}, at::kBool)) {}

void StepInputs::set(int64_t row, int64_t token, int64_t position) {
  ids.data_ptr<int64_t>()[row] = token;
  positions.data_ptr<int64_t>()[row] = position;
  valid.data_ptr<bool>()[row] = true;
}

at::Tensor forward_step(const FrozenModel& model, const PaddedPrompts& inputs, KvCache& cache) {
  const at::Device device = model.device();
  return model
      .forward_cached(to_device(inputs.ids, device), to_device(inputs.positions, device),
                      to_device(inputs.valid, device), cache)
      .select(1, inputs.longest - 1);
}

at::Tensor forward_step(const FrozenModel& model, const StepInputs& inputs, KvCache& cache) {
  const at::Device device = model.device();
  return model
      .forward_cached(to_device(inputs.ids, device), to_device(inputs.positions, device),
                      to_device(inputs.valid, device), cache)
      .select(1, 0);
}

at::Tensor next_token_logits(const FrozenModel& model, const at::Tensor& last) {
  return read_on_host(at::linear(last, model.lm_head_weight()).to(at::kFloat),
                      HostRead::DecodedTokens);
}

bool sequence_ends(const Generation& out, int64_t token, const DecodeOptions& options) {
  return std::find(options.stop_ids.begin(), options.stop_ids.end(), token) !=
             options.stop_ids.end() ||
         static_cast<int64_t>(out.tokens.size()) >= options.max_new_tokens;
}

std::vector<Generation> generate(const FrozenModel& model,
                                 const std::vector<std::vector<int64_t>>& prompts,
                                 const DecodeOptions& options, const SamplingOptions& sampling,
                                 at::Generator* generator) {
  check(!prompts.empty(), "[generate] no prompts");
  check_sampling_options(options, sampling, generator != nullptr);
  const bool greedy = sampling.temperature == 0;
  const int64_t batch = static_cast<int64_t>(prompts.size());
  for (const auto& prompt : prompts) check_prompt(prompt, model.config().vocab_size);
  const PaddedPrompts padded = left_pad(prompts);
  std::vector<int64_t> next_position(batch);
  for (int64_t b = 0; b < batch; ++b) next_position[b] = static_cast<int64_t>(prompts[b].size());
  KvCache cache = model.new_cache(batch, padded.longest + options.max_new_tokens);
  at::Tensor last = forward_step(model, padded, cache);  // (B, H)
  std::vector<Generation> out(batch);
  std::vector<bool> done(batch, false);
  while (true) {
    const at::Tensor logits = next_token_logits(model, last);  // (B, V)
    const RowTokens chosen = choose_row_tokens(logits, sampling);
    StepInputs step(batch);
    bool all_done = true;
    for (int64_t b = 0; b < batch; ++b) {
      if (done[b]) continue;
      // Sampling draws row by row in order from the one generator.
      const auto [token, logprob] =
          greedy ? chosen.greedy(b) : chosen.sample(logits, b, *generator);
      Generation& row = out[b];
      row.tokens.push_back(token);
      row.logprobs.push_back(logprob);
      done[b] = sequence_ends(row, token, options);
      if (done[b]) continue;
      all_done = false;
      step.set(b, token, next_position[b]++);
    }
    if (all_done) break;
    last = forward_step(model, step, cache);  // finished rows run a padding slot: nothing reads it
  }
  return out;
}

}  // namespace tandem
