#pragma once
// A frozen model (target, teacher, reference): loaded once from an HF checkpoint, run without
// autograd, never handed to an optimizer, never re-initialised. It is not a torch::nn::Module,
// so it cannot be registered as a child of a trainable model by accident; its tensors are
// recorded in a process-wide registry that `trainable_parameters` consults.
#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "tandem/models/decoder.h"

namespace tandem {

class FrozenModel {
 public:
  /// Loads `dir` (config.json + safetensors) in `dtype` on `device`, frozen.
  static FrozenModel load(const std::string& dir, c10::ScalarType dtype, const at::Device& device);
  FrozenModel(FrozenModel&&) = default;
  FrozenModel& operator=(FrozenModel&&) = delete;  // would drop the old model's registration
  ~FrozenModel();

  struct Output {
    at::Tensor logits;                     // (B, T, V); undefined unless requested
    at::Tensor final_hidden;               // (B, T, H) after the final norm
    std::map<int64_t, at::Tensor> hidden;  // layer i -> raw output of decoder layer i (B, T, H)
  };
  /// One forward without autograd: hidden states of `layers` plus, if `with_logits`, logits.
  Output forward(const at::Tensor& ids, const AttentionLayout& layout,
                 const std::vector<int64_t>& layers, bool with_logits = true) const;

  const DecoderConfig& config() const { return model_->config(); }
  const std::string& dir() const { return dir_; }
  /// Read-only views of the weights by HF name (for sharing with drafts and for checks).
  std::map<std::string, at::Tensor> named_weights() const;
  /// The token embedding (V, H) and output projection (V, H), frozen.
  at::Tensor embed_tokens() const { return model_->model->embed_tokens->weight; }
  at::Tensor lm_head_weight() const { return model_->lm_head_weight(); }
  at::Tensor final_norm_weight() const { return model_->model->norm->weight; }

 private:
  FrozenModel(std::string dir, CausalLM model);
  std::string dir_;
  CausalLM model_{nullptr};
};

/// True when `tensor` shares storage with the weights of a live FrozenModel.
bool is_frozen(const at::Tensor& tensor);

/// The parameters of `module` that an optimizer may update: those with requires_grad. Errors if
/// any of them is a frozen model's weight (which would mean a frozen model is being trained).
std::vector<std::pair<std::string, at::Tensor>> trainable_parameters(
    const torch::nn::Module& module);

}  // namespace tandem
