#pragma once
// The reference decoders: no KV cache, so every target forward recomputes the whole prefix and
// every EAGLE-3 draft round its whole context. Slow (each token costs more than the last) and
// simple; they are what the cached decoders are checked against (tests, `tandem eval
// --no-kv-cache`) and what "before" means in the eval benchmark.
#include <cstdint>
#include <vector>

#include "tandem/eval/draft_proposer.h"
#include "tandem/eval/speculative.h"
#include "tandem/models/frozen.h"

namespace tandem {

/// Plain greedy decoding, one full target forward per token. Returns the new tokens (stop
/// included).
std::vector<int64_t> greedy_decode(const FrozenModel& target, const std::vector<int64_t>& prompt,
                                   const DecodeOptions& options);

/// speculative_decode (eval/speculative.h) without a cache: every step the target runs the whole
/// sequence and the draft re-reads the whole context from scratch (reset, then one extend).
SpeculativeOutput speculative_decode_uncached(const FrozenModel& target, DraftProposer& proposer,
                                              const std::vector<int64_t>& prompt,
                                              const DecodeOptions& options);

}  // namespace tandem
