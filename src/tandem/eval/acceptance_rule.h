#pragma once
// How speculative decoding (eval/speculative.h) accepts a draft's proposal.
//
// Greedy (temperature 0): the longest prefix of the proposal equal to the target's argmax
// choices is accepted, then the target's choice after it is the bonus token; the output is the
// target's greedy decoding.
//
// Sampling (temperature T > 0): the standard rejection rule for a draft that proposes one token
// per position (its most likely one, so the proposal's distribution q is one-hot, as vLLM treats
// EAGLE and DFlash proposals). With p = softmax(logits / T), the target's distribution before
// proposal token x_j: x_j is accepted with probability min(1, p(x_j) / q(x_j)) = p(x_j); at the
// first rejection one token is drawn from p with x_j removed (renormalized); after a fully
// accepted proposal the bonus token is drawn from p after the last one. Each emitted token is
// then distributed exactly as plain sampling from the target at T: P(x_j) = p(x_j), and for
// y != x_j, P(y) = (1 - p(x_j)) p(y) / (1 - p(x_j)) = p(y).
// Draws come from a CPU generator seeded by DecodeOptions::seed, on the host, in a fixed order
// (one uniform per proposal token tested, then one draw from the residual or the bonus row): the
// same seed gives the same tokens on any device, up to rounding of the logits.
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "tandem/eval/speculative.h"

namespace tandem {

/// What the decoder keeps of a target forward over `count` new positions.
struct TargetPass {
  at::Tensor choices;   // greedy: (count,) int64 on the host, the argmax after each position
  at::Tensor logits;    // sampling: (count, V) fp32 on the host, the logits after each position
  at::Tensor features;  // (1, count, layers * H) cat of the outputs of the draft's target layers;
                        // undefined if it reads none
};

class AcceptanceRule {
 public:
  /// Greedy when options.temperature is 0, else sampling from a generator seeded by options.seed.
  explicit AcceptanceRule(const DecodeOptions& options);

  bool samples() const { return temperature_ > 0; }

  /// The scores the rule reads after `hidden` (count, H), the target's final hidden states:
  /// fills pass.choices (greedy) or pass.logits (sampling), one host read.
  void score(const at::Tensor& hidden, const at::Tensor& lm_head, TargetPass& pass) const;

  /// The target's token after scored position `row` alone: its argmax, or a draw at T.
  int64_t choose(const TargetPass& pass, int64_t row);

  /// One verification: pass rows 0..k score the positions before proposal tokens 0..k-1 and
  /// after the last one (k = proposal.size()). Records the accepted count, the proposed count and
  /// the emitted tokens (accepted ones, then one from the target) in `output`; returns that last
  /// token, the next bonus.
  int64_t accept(const std::vector<int64_t>& proposal, const TargetPass& pass,
                 SpeculativeOutput& output);

 private:
  at::Tensor probabilities(const TargetPass& pass, int64_t row) const;  // (V,) fp64, host
  int64_t draw(const at::Tensor& weights);                              // one id ~ weights

  double temperature_ = 0;
  at::Generator generator_;  // CPU; undefined when greedy
};

}  // namespace tandem
