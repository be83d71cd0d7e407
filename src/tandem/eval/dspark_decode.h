#pragma once
// Block speculative decoding with a DSpark draft (models/dspark.h; eval/speculative.h is the
// loop). As DFlash's (eval/dflash_decode.h) the bonus token b at position n anchors the block
// [b, MASK x (bs - 1)], which sees the context of positions < n; but every slot predicts: slot k
// gives token n + k + 1. One backbone forward gives the base logits of all slots; then the Markov
// chain runs slot by slot: prev_0 = b, token_k = argmax(lm_head h_k + markov_w2 markov_w1[prev_k]),
// prev_{k+1} = token_k. With a confidence threshold t > 0 the proposal stops before the first
// slot whose confidence sigmoid(proj(h_k, markov_w1[prev_k])) is below t (DeepSpec's rule), so
// fewer tokens are drafted and verified when the head expects a rejection.
#include <cstdint>
#include <vector>

#include "tandem/eval/dflash_decode.h"
#include "tandem/models/dspark.h"

namespace tandem {

class DSparkProposer : public DFlashProposer {
 public:
  /// Proposes up to `draft_tokens` (1..block_size) tokens per step.
  DSparkProposer(const FrozenModel& target, const DSparkDraftImpl& draft, int64_t draft_tokens,
                 double confidence_threshold);
  std::vector<int64_t> propose(int64_t next) override;

 private:
  const DSparkDraftImpl& dspark_;
  double confidence_threshold_;
};

}  // namespace tandem
