#pragma once
// What a draft gives speculative decoding (eval/speculative.h). The decode loop owns the target
// (its KV cache, verification, acceptance); a draft only keeps its own view of the tokens the
// target has verified and proposes the next ones. A new draft writes one DraftProposer.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace tandem {

class DraftProposer {
 public:
  virtual ~DraftProposer() = default;

  /// The target decoder layers whose outputs the draft reads, in the order `extend` gets them.
  virtual const std::vector<int64_t>& target_layers() const = 0;
  /// Tokens proposed per step (k).
  virtual int64_t draft_tokens() const = 0;
  /// Forgets every position: the next `extend` starts again at position 0 (the uncached
  /// reference decoder re-reads the whole context every step).
  virtual void reset() = 0;
  /// The target has verified `ids`, the positions right after those already seen, and its
  /// chosen token after them is `next` (the bonus token: not yet run through the target).
  /// features (1, ids.size(), layers * H_target): the outputs of target_layers() at those
  /// positions, concatenated.
  virtual void extend(const std::vector<int64_t>& ids, const at::Tensor& features,
                      int64_t next) = 0;
  /// The draft_tokens() tokens it proposes to follow `next` (target vocabulary ids).
  virtual std::vector<int64_t> propose(int64_t next) = 0;
};

}  // namespace tandem
