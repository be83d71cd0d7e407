#pragma once
// Speculative decoding with a draft and its frozen target: the draft proposes k tokens, the
// target scores them in one forward, a prefix of them is accepted, plus one token from the target
// (eval/acceptance_rule.h: greedily, the longest prefix equal to the target's greedy choices; at
// a temperature, by the rejection rule). τ (the acceptance length) is the mean number of tokens
// each verifying target forward yields. Greedy verification means the output must equal plain
// greedy decoding of the target; eval checks it token for token. The drafts' proposers:
// eval/eagle3_decode.h, eval/dflash_decode.h, eval/dspark_decode.h.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "tandem/eval/draft_proposer.h"
#include "tandem/models/frozen.h"

namespace tandem {

struct DecodeOptions {
  int64_t max_new_tokens = 64;
  std::vector<int64_t> stop_ids;  // generation ends after the first of these
  // Speculative decoders: false runs the reference decoders of eval/uncached_decode.h (every
  // forward recomputes the whole prefix). generate() always uses its cache.
  bool kv_cache = true;
  // Drafts with a confidence head (DSpark): a proposal stops before the first position whose
  // predicted acceptance is below this; 0 never stops early.
  double confidence_threshold = 0;
  // Speculative decoders: 0 verifies greedily (the output is the target's greedy decoding); > 0
  // samples at this temperature by the rejection rule of eval/acceptance_rule.h (the output is
  // distributed as plain sampling from the target), drawing from a CPU generator seeded by `seed`.
  double temperature = 0;
  uint64_t seed = 0;

  /// These options with kv_cache false: the reference decoders.
  DecodeOptions without_cache() const {
    DecodeOptions options = *this;
    options.kv_cache = false;
    return options;
  }
};

struct SpeculativeOutput {
  std::vector<int64_t> tokens;    // new tokens (stop included), at most max_new_tokens
  std::vector<int64_t> accepted;  // per verifying forward: draft tokens accepted (0..k)
  std::vector<int64_t> proposed;  // per verifying forward: draft tokens proposed (k, or fewer
                                  // when a confidence head stopped the proposal early)
};

/// Speculative decoding of `prompt` with any draft (eval/draft_proposer.h): the draft proposes k
/// tokens, the target verifies them in one forward over the bonus token and the proposal. The
/// target keeps a KV cache (rolled back past the accepted tokens after each verification) and
/// the draft sees only the newly verified tokens, so each step runs only new tokens through
/// either model. options.kv_cache false runs the uncached reference (eval/uncached_decode.h).
SpeculativeOutput speculative_decode(const FrozenModel& target, DraftProposer& proposer,
                                     const std::vector<int64_t>& prompt,
                                     const DecodeOptions& options);

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
  /// Per draft position j = 1..k: P(token j accepted | tokens 1..j-1 accepted and token j was
  /// proposed).
  std::vector<double> conditional_acceptance() const;
  /// Per draft position j = 1..k: P(tokens 1..j all accepted).
  std::vector<double> cumulative_acceptance() const;
  int64_t steps() const { return steps_; }
  /// Prompts added (one per add()).
  int64_t prompts() const { return static_cast<int64_t>(per_prompt_.size()); }
  /// Mean draft tokens proposed per verifying forward (k unless proposals stop early).
  double drafted_per_step() const;
  nlohmann::json to_json() const;

 private:
  std::vector<int64_t> reached_;      // [j]: steps where tokens 1..j-1 were accepted and token j
                                      // was proposed
  std::vector<int64_t> accepted_at_;  // [j]: steps where tokens 1..j were accepted
  int64_t steps_ = 0, tokens_ = 0, drafted_ = 0;
  std::vector<std::pair<int64_t, int64_t>> per_prompt_;  // (tokens, steps) of each add()
};

}  // namespace tandem
