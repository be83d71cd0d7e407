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

std::vector<Generation> generate(const FrozenModel& model,
                                 const std::vector<std::vector<int64_t>>& prompts,
                                 const DecodeOptions& options, const SamplingOptions& sampling,
                                 at::Generator* generator) {
  check(!prompts.empty(), "[generate] no prompts");
  check(options.max_new_tokens > 0, "[generate] max_new_tokens must be positive");
  const bool greedy = sampling.temperature == 0;
  check(std::isfinite(sampling.temperature) && sampling.temperature >= 0, "[generate] temperature ",
        sampling.temperature, " must be a finite number >= 0 (0: greedy)");
  check(sampling.top_k >= 0, "[generate] top_k must be >= 0 (0: off)");
  check(sampling.top_p > 0 && sampling.top_p <= 1, "[generate] top_p must be in (0, 1]");
  check(greedy || generator, "[generate] sampling needs a seeded generator");
  const int64_t batch = static_cast<int64_t>(prompts.size());
  const int64_t vocab = model.config().vocab_size;
  int64_t longest = 0;
  for (const auto& prompt : prompts) {
    check(!prompt.empty(), "[generate] an empty prompt");
    for (int64_t id : prompt)
      check(id >= 0 && id < vocab, "[generate] token id ", id, " is outside the vocabulary [0, ",
            vocab, ")");
    longest = std::max<int64_t>(longest, static_cast<int64_t>(prompt.size()));
  }
  // The prompts left-padded into one (B, longest) batch: positions count real tokens only.
  at::Tensor ids = at::zeros({batch, longest}, at::kLong);
  at::Tensor positions = at::zeros({batch, longest}, at::kLong);
  at::Tensor valid = at::zeros({batch, longest}, at::kBool);
  std::vector<int64_t> next_position(batch);
  for (int64_t b = 0; b < batch; ++b) {
    const auto& prompt = prompts[b];
    const int64_t length = static_cast<int64_t>(prompt.size()), pad = longest - length;
    ids[b].narrow(0, pad, length).copy_(at::tensor(prompt, at::kLong));
    positions[b].narrow(0, pad, length).copy_(at::arange(length, at::kLong));
    valid[b].narrow(0, pad, length).fill_(true);
    next_position[b] = length;
  }
  const at::Device device = model.device();
  KvCache cache = model.new_cache(batch, longest + options.max_new_tokens);
  at::Tensor last = model
                        .forward_cached(to_device(ids, device), to_device(positions, device),
                                        to_device(valid, device), cache)
                        .select(1, longest - 1);  // (B, H)
  std::vector<Generation> out(batch);
  std::vector<bool> done(batch, false);
  while (true) {
    const at::Tensor logits = read_on_host(  // (B, V)
        at::linear(last, model.lm_head_weight()).to(at::kFloat), HostRead::DecodedTokens);
    at::Tensor step_ids = at::zeros({batch, 1}, at::kLong);
    at::Tensor step_positions = at::zeros({batch, 1}, at::kLong);
    at::Tensor step_valid = at::zeros({batch, 1}, at::kBool);
    auto ids_at = step_ids.accessor<int64_t, 2>();
    auto positions_at = step_positions.accessor<int64_t, 2>();
    auto valid_at = step_valid.accessor<bool, 2>();
    // Greedy: every row's choice and its log-probability at once.
    at::Tensor greedy_tokens, greedy_logprobs;
    if (greedy) {
      greedy_tokens = logits.argmax(1);  // (B,)
      greedy_logprobs =
          at::log_softmax(logits, 1).gather(1, greedy_tokens.view({batch, 1})).view({batch});
    }
    bool all_done = true;
    for (int64_t b = 0; b < batch; ++b) {
      if (done[b]) continue;
      int64_t token;
      float logprob;
      if (greedy) {
        token = greedy_tokens.data_ptr<int64_t>()[b];
        logprob = greedy_logprobs.data_ptr<float>()[b];
      } else {
        const at::Tensor log_probs = sampling_log_probs(logits[b], sampling);
        token = at::multinomial(log_probs.exp(), 1, false, *generator).item<int64_t>();
        logprob = log_probs[token].item<float>();
      }
      Generation& row = out[b];
      row.tokens.push_back(token);
      row.logprobs.push_back(logprob);
      const bool stop = std::find(options.stop_ids.begin(), options.stop_ids.end(), token) !=
                        options.stop_ids.end();
      done[b] = stop || static_cast<int64_t>(row.tokens.size()) >= options.max_new_tokens;
      if (done[b]) continue;
      all_done = false;
      ids_at[b][0] = token;
      positions_at[b][0] = next_position[b]++;
      valid_at[b][0] = true;
    }
    if (all_done) break;
    // Finished rows run a padding slot: nothing reads it.
    last = model
               .forward_cached(to_device(step_ids, device), to_device(step_positions, device),
                               to_device(step_valid, device), cache)
               .select(1, 0);
  }
  return out;
}

}  // namespace tandem
