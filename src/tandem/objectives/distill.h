#pragma once
// Knowledge distillation (docs/distillation.md): a student causal LM (trained, configured like
// SFT's `model`) learns the next-token distributions of a frozen teacher (`teacher`) on the same
// batch, through objectives/distill_loss.h (both LM heads fused into a chunked loss). Normalised
// by the loss-masked next-token targets of the step. Exports the student as an HF checkpoint.
#include <string>

#include "tandem/models/frozen.h"
#include "tandem/objectives/description.h"
#include "tandem/objectives/distill_loss.h"
#include "tandem/objectives/objective.h"
#include "tandem/objectives/sft.h"

namespace tandem {

struct DistillOptions {
  SftOptions student;  // model.* (path or fresh config), loss.chunk_tokens, loss.fp32_lm_head
  std::string teacher_path;
  c10::ScalarType teacher_dtype = c10::ScalarType::Float;
  DistillLossOptions loss;
};

/// Reads `model.*`, `teacher.*` and `loss.*` (divergence, beta, temperature, hard_label_weight).
DistillOptions distill_options(const Config& config, const RunContext& run = {});

/// `loss.divergence`, `beta`, `temperature` and `hard_label_weight` (core/config_schema.h
/// keys::distill_loss), each checked where it is read. Distillation's loss and DFlash's
/// `teacher: target` read them alike.
DistillLossOptions read_distill_loss(const Config& config);

class DistillObjective : public Objective {
 public:
  /// Loads the teacher frozen; errors before loading anything if the vocab sizes differ.
  explicit DistillObjective(const DistillOptions& options);
  std::string name() const override { return "distill"; }
  std::vector<std::string> frozen_models() const override { return {"teacher"}; }
  torch::nn::Module& trainable() override { return *student_; }
  StepTotals count(const PackedBatch& batch) const override;
  ObjectiveOutput compute(const PackedBatch& batch, const StepTotals& totals) override;
  void export_model(const std::string& dir) const override {
    export_causal_lm(student_, dir, options_.student.model_path);
  }
  double model_flops(const PackedBatch& batch) const override;

  CausalLM& student() { return student_; }
  const FrozenModel& teacher() const { return *teacher_; }

 private:
  DistillOptions options_;
  CausalLM student_{nullptr};
  std::optional<FrozenModel> teacher_;
};

/// training.objective: distill (objectives/description.h).
ObjectiveDescription distill_description();

}  // namespace tandem
