#pragma once
// GRPO and GSPO from rollouts (docs/grpo-gspo.md): a policy causal LM (trained, configured
// like SFT's `model`) on sampled completions with the sampler's per-token log-probabilities
// (log pi_old) and an advantage per completion (given, or from group rewards). The current
// log-probabilities come from the chunked LM head (never full logits).
//   grpo: token-level ratios, normalised by the step's labelled tokens
//   gspo: one length-normalised ratio per completion, normalised by the step's completions
// Packed rows hold several rollouts; each token knows its document, so padding (clamped onto the
// last document, loss-masked out) never enters a ratio.
#include <string>

#include "tandem/objectives/description.h"
#include "tandem/objectives/objective.h"
#include "tandem/objectives/policy_loss.h"
#include "tandem/objectives/sft.h"

namespace tandem {

struct RolloutSample;

struct PolicyOptions {
  SftOptions policy;            // model.* (path or fresh config), loss.chunk_tokens, fp32_lm_head
  bool sequence_level = false;  // gspo: true
  ClipRange clip;               // loss.epsilon_low / loss.epsilon_high
};

/// Reads `model.*` and `loss.*` (epsilon_low, epsilon_high) for objective "grpo" or "gspo".
/// Defaults: GRPO 0.2 / 0.2 (TRL), GSPO 3e-4 / 4e-4 (the GSPO paper's ranges).
PolicyOptions policy_options(const Config& config, const std::string& objective,
                             const RunContext& run = {});

class PolicyObjective : public Objective {
 public:
  explicit PolicyObjective(const PolicyOptions& options);
  std::string name() const override { return options_.sequence_level ? "gspo" : "grpo"; }
  torch::nn::Module& trainable() override { return *policy_; }
  Normalization normalization() const override {
    return options_.sequence_level ? Normalization::Documents : Normalization::Tokens;
  }
  /// Labelled tokens, and documents with at least one labelled token.
  StepTotals count(const PackedBatch& batch) const override;
  ObjectiveOutput compute(const PackedBatch& batch, const StepTotals& totals) override;
  void export_model(const std::string& dir) const override {
    export_causal_lm(policy_, dir, options_.policy.model_path);
  }
  double model_flops(const PackedBatch& batch) const override;
  /// Takes the rollouts (old log-probs, advantages); checks their ids against the vocabulary.
  void attach_data(const DataContext& data) override;

  CausalLM& policy() { return policy_; }

 private:
  PolicyOptions options_;
  CausalLM policy_{nullptr};
  const std::vector<RolloutSample>* rollouts_ = nullptr;
};

/// training.objective: grpo and gspo (objectives/description.h).
ObjectiveDescription grpo_description();
ObjectiveDescription gspo_description();

}  // namespace tandem
