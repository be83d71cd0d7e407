#pragma once
// Pieces the speculative decoders in eval/ share (EAGLE-3 and DFlash, cached and uncached): the
// stop rule, and the target's side of cached verification.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "tandem/eval/speculative.h"
#include "tandem/models/frozen.h"
#include "tandem/models/kv_cache.h"

namespace tandem {

/// ids as a (1, T) int64 row.
at::Tensor decode_row(const std::vector<int64_t>& ids, const at::Device& device);

/// Cuts `tokens` after the first stop id and at max_new_tokens; true when generation is over.
bool decode_finished(std::vector<int64_t>& tokens, const DecodeOptions& options);

/// What a target forward over some new tokens gives the decoder.
struct TargetPass {
  at::Tensor choices;   // (count,) on the host: the greedy target choice after each token
  at::Tensor features;  // (1, count, k * H) cat of the outputs of `layers`; undefined if none
};

/// The target of one speculative decode (batch 1) with a KV cache over the tokens it has verified:
/// each verification runs only the bonus token and the proposal, and the rejected part of the
/// proposal is dropped from the cache again.
class CachedTarget {
 public:
  /// `capacity`: the most tokens the cache will hold (prompt + new tokens + one proposal).
  CachedTarget(const FrozenModel& target, std::vector<int64_t> layers, int64_t capacity);

  /// Runs `tokens` after those already cached: their choices and features.
  TargetPass run(const std::vector<int64_t>& tokens);

  /// One speculative step: runs bonus + proposal, accepts the longest prefix of `proposal` equal
  /// to the target's choices, keeps bonus + accepted tokens in the cache (their features in
  /// `verified`: (1, 1 + accepted, k * H)), records the step in `output` and returns the target's
  /// next choice (the new bonus token).
  int64_t verify(int64_t bonus, const std::vector<int64_t>& proposal, TargetPass& verified,
                 SpeculativeOutput& output);

  const KvCache& cache() const { return cache_; }

 private:
  const FrozenModel& target_;
  std::vector<int64_t> layers_;
  KvCache cache_;
};

/// The accepted length of `proposal` against the target's `choices` (choices[j]: the target's
/// token after the j-th token it scored, the bonus first), recorded in `output` with the accepted
/// tokens and the next bonus, which is returned.
int64_t accept_proposal(const std::vector<int64_t>& proposal, const at::Tensor& choices,
                        SpeculativeOutput& output);

}  // namespace tandem
