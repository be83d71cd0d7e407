#pragma once
// Pieces the speculative decoders in eval/ share (every draft, cached and uncached): the stop
// rule, and the target's side of cached verification.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "tandem/eval/acceptance_rule.h"
#include "tandem/eval/speculative.h"
#include "tandem/models/frozen.h"
#include "tandem/models/kv_cache.h"

namespace tandem {

/// ids as a (1, T) int64 row.
at::Tensor decode_row(const std::vector<int64_t>& ids, const at::Device& device);

/// Cuts `tokens` after the first stop id and at max_new_tokens; true when generation is over.
bool decode_finished(std::vector<int64_t>& tokens, const DecodeOptions& options);

/// The target of one speculative decode (batch 1) with a KV cache over the tokens it has verified:
/// each verification runs only the bonus token and the proposal, and the rejected part of the
/// proposal is dropped from the cache again.
class CachedTarget {
 public:
  /// `capacity`: the most tokens the cache will hold (prompt + new tokens + one proposal).
  /// `rule` scores every forward and accepts proposals; it must outlive this.
  CachedTarget(const FrozenModel& target, std::vector<int64_t> layers, int64_t capacity,
               AcceptanceRule& rule);

  /// Runs `tokens` after those already cached: their scores and features.
  TargetPass run(const std::vector<int64_t>& tokens);

  /// One speculative step: runs bonus + proposal, accepts a prefix of `proposal` by the rule,
  /// keeps bonus + accepted tokens in the cache (their features in `verified`:
  /// (1, 1 + accepted, k * H)), records the step in `output` and returns the target's next token
  /// (the new bonus token).
  int64_t verify(int64_t bonus, const std::vector<int64_t>& proposal, TargetPass& verified,
                 SpeculativeOutput& output);

  const KvCache& cache() const { return cache_; }

 private:
  const FrozenModel& target_;
  std::vector<int64_t> layers_;
  KvCache cache_;
  AcceptanceRule& rule_;
};

}  // namespace tandem
