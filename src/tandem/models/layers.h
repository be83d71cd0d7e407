#pragma once
// The building blocks of Llama-family models. Parameters are created uninitialised (a checkpoint
// fills them, or `init_normal_` for a fresh model), so loading a large frozen model never pays
// for a random init it throws away. Names match HF keys (`weight`, `bias`).
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "tandem/models/decoder_config.h"

namespace tandem {

/// y = x W^T (+ b). weight (out, in), bias (out).
class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in_features, int64_t out_features, bool bias,
             const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x) const;  // (..., in) -> (..., out)
  at::Tensor weight;
  at::Tensor bias;  // undefined when the layer has none
};
TORCH_MODULE(Linear);

/// Row lookup. weight (vocab, hidden).
class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(int64_t vocab_size, int64_t hidden_size, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& ids) const;  // (B, T) int64 -> (B, T, hidden)
  at::Tensor weight;
};
TORCH_MODULE(Embedding);

/// weight * x / rms(x), normalised in fp32 and cast back before scaling (transformers' order).
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);
/// (1 + weight) * x / rms(x), all in fp32 and cast back last: the zero-centred RMSNorm of
/// Qwen3.5/3.6 and Qwen3-Next, whose stored weights are centred on 0.
at::Tensor zero_centered_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// The three weight-reading ops, each through with_full_parameters (dist/sharding.h): plain ATen
// calls unless the weights are sharded, when they are gathered for this call only. The layers
// below and the frozen heads use them.
/// x (..., in) @ weight (out, in)^T (+ bias (out), optional) -> (..., out).
at::Tensor apply_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});
/// Rows of weight (vocab, hidden) for ids (...) int64 -> (..., hidden).
at::Tensor apply_embedding(const at::Tensor& weight, const at::Tensor& ids);
/// rms_norm(x, weight, eps), or zero_centered_rms_norm when `zero_centered`.
at::Tensor apply_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps,
                          bool zero_centered = false);

/// RMSNorm as transformers computes it: normalise in fp32, cast back, then scale; or, when
/// `zero_centered`, zero_centered_rms_norm (a fresh one's weight is 0 there, not 1).
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t size, double eps, const at::TensorOptions& options,
              bool zero_centered = false);
  at::Tensor forward(const at::Tensor& x) const;  // (..., size) -> (..., size)
  at::Tensor weight;
  double eps;
  bool zero_centered;
};
TORCH_MODULE(RMSNorm);

/// down(silu(gate(x)) * up(x)).
class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(int64_t hidden_size, int64_t intermediate_size, bool bias,
          const at::TensorOptions& options, MlpActivation activation = MlpActivation::Silu);
  /// down_proj(act(gate_proj(x)) * up_proj(x)), act silu or the tanh GELU. (B, T, H) -> (B, T, H)
  at::Tensor forward(const at::Tensor& x) const;
  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  MlpActivation activation;
};
TORCH_MODULE(Mlp);

/// Fills every parameter of `module`: RMSNorm weights with 1 (0 when zero-centred), biases with
/// 0, the rest N(0, std).
void init_normal_(torch::nn::Module& module, double std, uint64_t seed);

}  // namespace tandem
