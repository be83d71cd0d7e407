#pragma once
// Supervised fine-tuning / pre-training: causal-LM cross-entropy on loss-masked tokens, with the
// LM head fused into the chunked loss (objectives/fused_vocab_loss.h).
#include <string>

#include "tandem/core/run_context.h"
#include "tandem/models/decoder.h"
#include "tandem/objectives/description.h"
#include "tandem/objectives/fused_vocab_loss.h"
#include "tandem/objectives/objective.h"

namespace tandem {

struct SftOptions {
  std::string model_path;    // HF checkpoint to start from, or "" for a fresh model
  std::string model_config;  // config.json of a fresh model (when model_path is "")
  c10::ScalarType dtype = c10::ScalarType::Float;
  double init_std = 0.02;  // fresh model: N(0, init_std) matrices, unit norms
  uint64_t seed = 0;
  FusedLossOptions loss;
  double router_aux_loss_coef = 0;  // mixture-of-experts models (objectives/router_loss.h)
  RunContext run;  // device (and rank-0 loading, sharding on load) the model lives with
};

/// Reads `model.*` and `loss.*` of the config; the seed is `run.seed` (training.seed).
SftOptions sft_options(const Config& config, const RunContext& run = {});

/// The architecture `options` describe: model.path's config.json, or model.config.
DecoderConfig student_decoder_config(const SftOptions& options);
/// The trained causal LM of `options`: loaded from model.path, or fresh from model.config with
/// N(0, init_std) weights; every parameter requires grad.
CausalLM make_causal_lm(const SftOptions& options);

/// The position-t target is the next token of the same document, counted when that token's
/// loss_mask is 1. (B, T) -> mask (B, T-1) of positions that carry a target.
at::Tensor next_token_targets(const PackedBatch& batch);
/// StepTotals of a next-token objective (SFT, distillation): its targets and documents.
StepTotals next_token_totals(const PackedBatch& batch);

/// The positions of `batch` that predict a target, on the batch's device, found on its host
/// copy (so the device is never waited for):
struct NextTokenPositions {
  at::Tensor index;          // (N,) int64: flat position b * T + t among the batch's B * T tokens
  at::Tensor labels;         // (N,) int64: the target x_{t+1}
  at::Tensor document;       // (N,) int64: global document (PackedBatch::global_document_ids)
  at::Tensor host_document;  // (N,) the same indices, on the host (where they were found)
};
NextTokenPositions next_token_positions(const PackedBatch& batch);
/// The rows of `hidden` (B, T, H) at flat positions `index` (N,) -> (N, H).
at::Tensor gather_positions(const at::Tensor& hidden, const at::Tensor& index);

class SftObjective : public Objective {
 public:
  explicit SftObjective(const SftOptions& options);
  std::string name() const override { return "sft"; }
  torch::nn::Module& trainable() override { return *model_; }
  StepTotals count(const PackedBatch& batch) const override;
  ObjectiveOutput compute(const PackedBatch& batch, const StepTotals& totals) override;
  void export_model(const std::string& dir) const override;
  double model_flops(const PackedBatch& batch) const override;
  CausalLM& model() { return model_; }

 private:
  SftOptions options_;
  CausalLM model_{nullptr};
};

/// Writes `model` as an HF checkpoint directory (config.json + safetensors) that transformers
/// loads; the tied lm_head is not stored.
/// Writes `model` as an HF checkpoint into `dir`: config.json, the weights and
/// generation_config.json (the sampling defaults engines read: copied from `source_dir`, the
/// checkpoint the model started from, when it has one; else bos/eos/pad from the config).
void export_causal_lm(const CausalLM& model, const std::string& dir, const std::string& source_dir);

/// training.objective: sft (objectives/description.h).
ObjectiveDescription sft_description();

}  // namespace tandem
