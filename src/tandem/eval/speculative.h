#pragma once
// Speculative decoding with an EAGLE-3 draft and its frozen target (SPEC §6, acceptance length):
// the draft proposes k tokens, the target scores them in one forward, the longest prefix that
// equals the target's greedy choices is accepted, plus one bonus token from the target. τ is the
// mean number of tokens each verifying target forward yields. Greedy verification means the
// output must equal plain greedy decoding of the target; eval checks it token for token.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "tandem/models/eagle3.h"
#include "tandem/models/frozen.h"

namespace tandem {

struct DecodeOptions {
  int64_t max_new_tokens = 64;
  std::vector<int64_t> stop_ids;  // generation ends after the first of these
  // Speculative decoders: false runs the reference decoders of eval/uncached_decode.h (every
  // forward recomputes the whole prefix). generate() always uses its cache.
  bool kv_cache = true;
};

struct SpeculativeOutput {
  std::vector<int64_t> tokens;    // new tokens (stop included), at most max_new_tokens
  std::vector<int64_t> accepted;  // per verifying forward: draft tokens accepted (0..k)
};

/// Speculative decoding of `prompt` with `draft_tokens` (k) draft tokens per step. The target
/// keeps a KV cache (rolled back past the accepted tokens after each verification) and the draft
/// its step-0 keys and values, so each step runs only the new tokens through either model.
SpeculativeOutput speculative_decode(const FrozenModel& target, const Eagle3DraftImpl& draft,
                                     const std::vector<int64_t>& prompt, int64_t draft_tokens,
                                     const DecodeOptions& options);

/// The draft's unroll after step 0, shared by the cached and the uncached decoder: from step 0's
/// output at the last context position, k greedy draft tokens (as target ids), each step's query
/// at the next position seeing the whole context and the earlier steps' keys.
class Eagle3Proposer {
 public:
  Eagle3Proposer(const FrozenModel& target, const Eagle3DraftImpl& draft);
  /// last (1, 1, H): step 0's output at position n - 1; `state` holds the n context keys.
  std::vector<int64_t> propose(at::Tensor last, int64_t n, int64_t draft_tokens,
                               TttState& state) const;
  const FrozenHead& head() const { return head_; }
  c10::ScalarType dtype() const { return dtype_; }

 private:
  const Eagle3DraftImpl& draft_;
  FrozenHead head_;
  c10::ScalarType dtype_;
  at::Tensor draft_to_target_;  // (D,) on the host
};

/// Acceptance statistics over many prompts.
class AcceptanceStats {
 public:
  explicit AcceptanceStats(int64_t draft_tokens)
      : reached_(draft_tokens + 1, 0), accepted_at_(draft_tokens + 1, 0) {}
  void add(const SpeculativeOutput& output);
  /// τ: mean tokens per verifying target forward (accepted + 1).
  double tau() const;
  /// A 95% interval for τ: the 2.5th and 97.5th percentiles of τ over `resamples` bootstrap
  /// resamples of the prompts (each add() is one prompt; drawn with replacement from a fixed
  /// seed, so the interval is reproducible). {τ, τ} for a single prompt.
  std::pair<double, double> tau_interval(int resamples = 2000) const;
  /// Per draft position j = 1..k: P(token j accepted | tokens 1..j-1 accepted).
  std::vector<double> conditional_acceptance() const;
  /// Per draft position j = 1..k: P(tokens 1..j all accepted).
  std::vector<double> cumulative_acceptance() const;
  int64_t steps() const { return steps_; }
  nlohmann::json to_json() const;

 private:
  std::vector<int64_t> reached_;      // [j]: steps where tokens 1..j-1 were accepted
  std::vector<int64_t> accepted_at_;  // [j]: steps where tokens 1..j were accepted
  int64_t steps_ = 0, tokens_ = 0;
  std::vector<std::pair<int64_t, int64_t>> per_prompt_;  // (tokens, steps) of each add()
};

}  // namespace tandem
