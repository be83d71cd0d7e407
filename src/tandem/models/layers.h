#pragma once
// The building blocks of Llama-family models. Parameters are created uninitialised (a checkpoint
// fills them, or `init_normal_` for a fresh model), so loading a large frozen model never pays
// for a random init it throws away. Names match HF keys (`weight`, `bias`).
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

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

// The three weight-reading ops, each through with_full_parameters (dist/sharding.h): plain ATen
// calls unless the weights are sharded, when they are gathered for this call only. The layers
// below and the frozen heads use them.
/// x (..., in) @ weight (out, in)^T (+ bias (out), optional) -> (..., out).
at::Tensor apply_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});
/// Rows of weight (vocab, hidden) for ids (...) int64 -> (..., hidden).
at::Tensor apply_embedding(const at::Tensor& weight, const at::Tensor& ids);
/// rms_norm(x, weight, eps).
at::Tensor apply_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

/// RMSNorm as transformers computes it: normalise in fp32, cast back, then scale.
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t size, double eps, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x) const;  // (..., size) -> (..., size)
  at::Tensor weight;
  double eps;
};
TORCH_MODULE(RMSNorm);

/// Fills every parameter of `module`: RMSNorm weights with 1, biases with 0, the rest N(0, std).
void init_normal_(torch::nn::Module& module, double std, uint64_t seed);

}  // namespace tandem
