#pragma once
// Speculative decoding with an EAGLE-3 draft (eval/speculative.h is the loop). The draft keeps
// the step-0 keys and values of every verified position (its context); each step it runs step 0
// over the newly verified positions (position t reads token t + 1 and the target's features of
// t), then unrolls greedily from the last one: step j's query at position n - 1 + j sees the
// whole context and the earlier steps' keys, exactly as the test-time-training unroll trains it.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "tandem/eval/draft_proposer.h"
#include "tandem/eval/speculative.h"
#include "tandem/models/eagle3.h"
#include "tandem/models/frozen.h"

namespace tandem {

class Eagle3Proposer : public DraftProposer {
 public:
  /// Proposes `draft_tokens` (>= 1) tokens per step.
  Eagle3Proposer(const FrozenModel& target, const Eagle3DraftImpl& draft, int64_t draft_tokens);

  const std::vector<int64_t>& target_layers() const override;
  int64_t draft_tokens() const override { return draft_tokens_; }
  void reset() override;
  void extend(const std::vector<int64_t>& ids, const at::Tensor& features, int64_t next) override;
  std::vector<int64_t> propose(int64_t next) override;

 private:
  const Eagle3DraftImpl& draft_;
  FrozenHead head_;
  int64_t draft_tokens_;
  c10::ScalarType dtype_;
  at::Tensor draft_to_target_;  // (D,) on the host
  TttState state_;              // step-0 keys/values of the positions seen, then the unroll's
  at::Tensor last_;             // (1, 1, H): step 0's output at the last context position
  /// Positions in the context: its step-0 keys.
  int64_t context_length() const;
};

/// speculative_decode with an Eagle3Proposer.
SpeculativeOutput eagle3_decode(const FrozenModel& target, const Eagle3DraftImpl& draft,
                                const std::vector<int64_t>& prompt, int64_t draft_tokens,
                                const DecodeOptions& options);

}  // namespace tandem
