#pragma once
// The reference decoders: no KV cache, so every target forward recomputes the whole prefix and
// every EAGLE-3 draft round its whole context. Slow (each token costs more than the last) and
// simple; they are what the cached decoders are checked against (tests, `tandem eval
// --no-kv-cache`) and what "before" means in the eval benchmark.
#include <cstdint>
#include <vector>

#include "tandem/eval/speculative.h"
#include "tandem/models/dflash.h"
#include "tandem/models/eagle3.h"
#include "tandem/models/frozen.h"

namespace tandem {

/// Plain greedy decoding, one full target forward per token. Returns the new tokens (stop
/// included).
std::vector<int64_t> greedy_decode(const FrozenModel& target, const std::vector<int64_t>& prompt,
                                   const DecodeOptions& options);

/// speculative_decode (eval/speculative.h) without a cache.
SpeculativeOutput speculative_decode_uncached(const FrozenModel& target,
                                              const Eagle3DraftImpl& draft,
                                              const std::vector<int64_t>& prompt,
                                              int64_t draft_tokens, const DecodeOptions& options);

/// dflash_decode (eval/dflash_decode.h) without a cache.
SpeculativeOutput dflash_decode_uncached(const FrozenModel& target, const DFlashDraftImpl& draft,
                                         const at::Tensor& mask_embedding,
                                         const std::vector<int64_t>& prompt, int64_t draft_tokens,
                                         const DecodeOptions& options);

}  // namespace tandem
