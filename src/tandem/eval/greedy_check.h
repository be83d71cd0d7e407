#pragma once
// `tandem eval`'s greedy check: speculative decoding must give the target's own greedy tokens.
// In fp32 the two decodings compute the same numbers up to the order of sums, so any difference is
// an error. In bf16 or fp16 a batched verification (k + 1 positions in one forward) and a
// one-token decoding step round differently, and a near-tied argmax may then go either way:
// the check reports how many outputs match and where each other one first diverges, and fails
// only when asked to (`--strict-greedy-check`).
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace tandem {

/// The first token where a prompt's speculative output and its greedy decoding differ.
struct GreedyMismatch {
  int64_t document = 0;            // the prompt's document in --data
  int64_t position = 0;            // index into the generated tokens
  int64_t speculative_token = -1;  // -1: that output had ended
  int64_t greedy_token = -1;       // -1: that output had ended
};

/// nullopt when the two outputs are equal.
std::optional<GreedyMismatch> first_divergence(int64_t document,
                                               const std::vector<int64_t>& speculative,
                                               const std::vector<int64_t>& greedy);

/// Whether mismatches fail the run: in fp32 always; in bf16 and fp16 only when `strict`.
bool greedy_mismatch_fails(c10::ScalarType dtype, bool strict);

}  // namespace tandem
