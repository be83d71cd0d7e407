#pragma once
// Direct preference optimisation (docs/dpo.md): a policy causal LM (trained, configured like
// SFT's `model`) against a frozen reference, on preference pairs. Each micro-batch holds whole
// pairs (the sampler draws records); a document's completion log-probability is the sum of its
// loss-masked next-token log-probabilities, through the chunked LM head. One loss per pair,
// normalised by the step's pairs. The reference is either a frozen model (`reference.path`,
// default: the policy's starting checkpoint) or a cache of its sums written once by
// `tandem reference-logprobs` (`reference.logprobs`), so no reference model is in memory.
#include <optional>
#include <string>

#include "tandem/models/frozen.h"
#include "tandem/objectives/description.h"
#include "tandem/objectives/dpo_reference.h"
#include "tandem/objectives/objective.h"
#include "tandem/objectives/policy_loss.h"
#include "tandem/objectives/sft.h"

namespace tandem {

struct DpoOptions {
  SftOptions policy;  // model.* (path or fresh config), loss.chunk_tokens, loss.fp32_lm_head
  std::string reference_path;  // the frozen reference model (default: model.path)
  c10::ScalarType reference_dtype = c10::ScalarType::Float;
  std::string reference_logprobs;  // a `tandem reference-logprobs` file: used instead of loading
                                   // the reference (which, if set, must be the one it came from)
  DpoLossType loss_type = DpoLossType::Sigmoid;
  double beta = 0.1;
};

/// Reads `model.*`, `reference.*` (path, dtype, logprobs) and `loss.*` (type, beta).
DpoOptions dpo_options(const Config& config, const RunContext& run = {});

/// Summed log-probabilities of each document's trained next tokens, (D,) fp32 in the batch's
/// global document order. hidden (B, T, H) final-normed; lm_head (V, H).
at::Tensor document_logprobs(const at::Tensor& hidden, const at::Tensor& lm_head,
                             const PackedBatch& batch, const FusedLossOptions& options);
/// Trained next tokens per document, (D,) int64: the completion lengths IPO divides by.
at::Tensor document_target_counts(const PackedBatch& batch);

class DpoObjective : public Objective {
 public:
  /// Loads the policy and the reference (or opens the cache); errors before loading anything
  /// when their vocab sizes differ.
  explicit DpoObjective(const DpoOptions& options);
  std::string name() const override { return "dpo"; }
  std::vector<std::string> frozen_models() const override;
  torch::nn::Module& trainable() override { return *policy_; }
  Normalization normalization() const override { return Normalization::Documents; }
  StepTotals count(const PackedBatch& batch) const override;
  ObjectiveOutput compute(const PackedBatch& batch, const StepTotals& totals) override;
  void export_model(const std::string& dir) const override {
    export_causal_lm(policy_, dir, options_.policy.model_path);
  }
  double model_flops(const PackedBatch& batch) const override;
  /// Checks the data are preference pairs, and that a reference cache was made from them.
  void attach_data(const DataContext& data) override;

  CausalLM& policy() { return policy_; }
  const FrozenModel* reference() const { return reference_ ? &*reference_ : nullptr; }

 private:
  DpoOptions options_;
  CausalLM policy_{nullptr};
  std::optional<FrozenModel> reference_;
  std::optional<ReferenceLogprobs> cache_;
};

/// training.objective: dpo (objectives/description.h).
ObjectiveDescription dpo_description();

}  // namespace tandem
