#pragma once
// A frozen model (target, teacher, reference): loaded once from an HF checkpoint, run without
// autograd, never handed to an optimizer, never re-initialised. It is not a torch::nn::Module,
// so it cannot be registered as a child of a trainable model by accident; its tensors are
// recorded in a process-wide registry that `trainable_parameters` consults.
#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/core/run_context.h"
#include "tandem/models/decoder.h"

namespace tandem {

class FullParameters;  // dist/sharding.h

/// A frozen weight at its full value while this object lives: gathered here when the run shards
/// frozen weights (RunContext::shard_on_load) and freed when it goes, so no caller handles the
/// sharding. Without shards it is just the weight. No autograd.
class GatheredWeight {
 public:
  explicit GatheredWeight(at::Tensor weight);
  GatheredWeight(GatheredWeight&& other) noexcept;
  GatheredWeight& operator=(GatheredWeight&&) = delete;
  ~GatheredWeight();
  const at::Tensor& value() const { return weight_; }

 private:
  at::Tensor weight_;
  std::unique_ptr<FullParameters> gathered_;
};

/// The parts of a frozen target that a draft needs besides its hidden states: the token
/// embedding, the final norm and the output projection. Frozen and registered like a model.
class FrozenHead {
 public:
  /// Reads only those tensors from the HF checkpoint `dir` (offline training: no layers loaded),
  /// under the names its checkpoints give them (a wrapped model's `model.language_model.`).
  static FrozenHead load(const std::string& dir, c10::ScalarType dtype, const RunContext& run);
  /// `zero_centered_norm`: the final norm scales by 1 + weight (Qwen3.5/3.6, Qwen3-Next).
  FrozenHead(at::Tensor embed_tokens, at::Tensor final_norm, double rms_norm_eps,
             at::Tensor lm_head, bool zero_centered_norm = false);
  FrozenHead(const FrozenHead& other);
  FrozenHead& operator=(const FrozenHead&) = delete;
  ~FrozenHead();

  /// ids (...) int64 -> embeddings (..., H).
  at::Tensor embed(const at::Tensor& ids) const;
  /// Raw output of the last decoder layer (..., H) -> the final-normed hidden state (..., H).
  at::Tensor final_norm(const at::Tensor& last_hidden) const;
  const at::Tensor& embed_tokens() const { return embed_tokens_; }  // (V, H)
  const at::Tensor& lm_head() const { return lm_head_; }            // (V, H)
  const at::Tensor& final_norm_weight() const { return final_norm_; }
  int64_t vocab_size() const { return embed_tokens_.size(0); }
  int64_t hidden_size() const { return embed_tokens_.size(1); }
  /// lm_head / embed_tokens at full value while the result lives (reading rows outside a forward).
  GatheredWeight full_lm_head() const { return GatheredWeight(lm_head_); }
  GatheredWeight full_embed_tokens() const { return GatheredWeight(embed_tokens_); }

 private:
  at::Tensor embed_tokens_, final_norm_, lm_head_;
  double rms_norm_eps_;
  bool zero_centered_norm_;
};

class FrozenModel {
 public:
  /// Loads `dir` (config.json + safetensors) in `dtype` on `run.device`, frozen (through rank-0
  /// loading and split on arrival when the context says so).
  static FrozenModel load(const std::string& dir, c10::ScalarType dtype, const RunContext& run);
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

  /// Generation: the model's forward_cached (models/decoder.h), without autograd; `captured`
  /// receives the raw outputs of `capture_layers` for the new slots.
  at::Tensor forward_cached(const at::Tensor& ids, const at::Tensor& positions,
                            const at::Tensor& valid, KvCache& cache,
                            const std::vector<int64_t>& capture_layers = {},
                            std::map<int64_t, at::Tensor>* captured = nullptr) const;
  /// An empty cache for `batch` rows of up to `capacity` slots, in this model's dtype and device.
  KvCache new_cache(int64_t batch, int64_t capacity) const;

  const DecoderConfig& config() const { return model_->config(); }
  const std::string& dir() const { return dir_; }
  /// Where its weights live (and where its inputs must be).
  at::Device device() const { return embed_tokens().device(); }
  /// Read-only views of the weights by HF name (for sharing with drafts and for checks).
  std::map<std::string, at::Tensor> named_weights() const;
  /// The token embedding (V, H) and output projection (V, H), frozen.
  at::Tensor embed_tokens() const { return model_->model->embed_tokens->weight; }
  at::Tensor lm_head_weight() const { return model_->lm_head_weight(); }
  /// lm_head_weight() at full value while the result lives (GatheredWeight).
  GatheredWeight full_lm_head() const { return GatheredWeight(lm_head_weight()); }
  at::Tensor final_norm_weight() const { return model_->model->norm->weight; }
  /// The embedding, final norm and output projection, sharing this model's tensors.
  FrozenHead head() const;

 private:
  FrozenModel(std::string dir, CausalLM model);
  std::string dir_;
  CausalLM model_{nullptr};
};

/// A draft's frozen target on `run.device`: online, the whole model into `target` and `head`
/// sharing its tensors; offline (features from a capture), only the head, read from `dir`.
void load_draft_target(const std::string& dir, c10::ScalarType dtype, bool offline,
                       const RunContext& run, std::optional<FrozenModel>& target,
                       std::unique_ptr<FrozenHead>& head);

/// What a draft reads from its frozen target on a batch (online: a forward; offline: a capture).
struct TargetFeatures {
  at::Tensor aux;   // (B, T, k * H_t): outputs of the draft's k target layers, concatenated
  at::Tensor last;  // (B, T, H_t): raw output of the last decoder layer; undefined if not read
};

/// One forward of `target` (no autograd) giving the outputs of `layers` concatenated and, when
/// `with_last`, the last decoder layer's output.
TargetFeatures target_features(const FrozenModel& target, const at::Tensor& ids,
                               const AttentionLayout& layout, const std::vector<int64_t>& layers,
                               bool with_last);

/// The weights of every live frozen model and head, each tensor once, in the order they were
/// loaded (the same on every rank: sharding them, checksumming them).
std::vector<at::Tensor> frozen_weights();

/// True when `tensor` shares storage with the weights of a live FrozenModel.
bool is_frozen(const at::Tensor& tensor);

/// The parameters of `module` that an optimizer may update: those with requires_grad. Errors if
/// any of them is a frozen model's weight (which would mean a frozen model is being trained).
std::vector<std::pair<std::string, at::Tensor>> trainable_parameters(
    const torch::nn::Module& module);

/// What a checkpoint of `module` holds: all its own parameters, trainable or not (e.g. a draft's
/// frozen lm_head), and its buffers (e.g. a draft's vocab map); never a frozen model's weights.
std::vector<std::pair<std::string, at::Tensor>> model_state(const torch::nn::Module& module);

}  // namespace tandem
