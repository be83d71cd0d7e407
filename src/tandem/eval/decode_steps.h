#pragma once
// Pieces every decoder in eval/ shares (greedy, EAGLE-3 and DFlash speculative decoding): one
// target forward over a whole sequence (no KV cache: each step recomputes the prefix, which keeps
// the decoders simple and exact; eval is for acceptance, not speed), and the stop rule.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "tandem/eval/speculative.h"
#include "tandem/models/frozen.h"

namespace tandem {

/// ids as a (1, T) int64 row.
at::Tensor decode_row(const std::vector<int64_t>& ids, const at::Device& device);

/// Cuts `tokens` after the first stop id and at max_new_tokens; true when generation is over.
bool decode_finished(std::vector<int64_t>& tokens, const DecodeOptions& options);

/// One target forward over `ids`.
struct TargetPass {
  at::Tensor choices;   // (count,) greedy target choices after each of the last `count` ids
  at::Tensor features;  // (1, T, k * H) cat of the outputs of `layers`; undefined if none asked
};
TargetPass run_target(const FrozenModel& target, const std::vector<int64_t>& ids, int64_t count,
                      const std::vector<int64_t>& layers);

/// One speculative step's verification: the target scores ids + bonus + proposal in one forward
/// (`pass` becomes that forward); the matching prefix of `proposal` is accepted, `ids`, `output`
/// and its accepted counts grow, and the target's next choice (the new bonus token) is returned.
int64_t verify_proposal(const FrozenModel& target, const std::vector<int64_t>& proposal,
                        const std::vector<int64_t>& layers, std::vector<int64_t>& ids,
                        int64_t bonus, TargetPass& pass, SpeculativeOutput& output);

}  // namespace tandem
