#pragma once
// The sparse MLP of mixture-of-experts decoders (Qwen3-MoE, Mixtral, MiniMax-M2, Qwen3.5-MoE,
// Qwen3-Next, GLM-4.5): a router picks the top-k experts of each token, every expert is a SwiGLU
// MLP, and the token's output is the router-weighted sum of its experts' outputs, plus, in
// Qwen3.5-MoE and Qwen3-Next, a shared expert every token runs, scaled by
// sigmoid(shared_expert_gate x), and in GLM-4.5 (DeepSeek-V3's layout) shared experts added as
// they are.
//
// Expert compute is grouped: the (token, expert) pairs are sorted by expert, and each expert runs
// its two matmuls once, on all of its rows: through ATen's grouped matmul (two calls per layer,
// offsets on the device) where choose_expert_gemm says so, one expert at a time elsewhere. The work
// is that of the active parameters (k experts per token), never that of every expert; model FLOPs
// count 2 * H * E (router) + 2 * k * 3 * H * I (experts) per token (models/flops.cpp).
//
// Parameters carry transformers 5's names and layout, so `named_parameters()` is what
// transformers holds in memory: `gate.weight` (E, H), `experts.gate_up_proj` (E, 2I, H; the gate
// rows, then the up rows), `experts.down_proj` (E, H, I), and for MiniMax-M2 the buffer
// `e_score_correction_bias` (E,), which only steers the choice of experts and is never trained.
// gpt-oss names its router `router.weight` (E, H) with `router.bias` (E,) and biases its experts,
// `experts.gate_up_proj_bias` (E, 2I; gate, then up) and `experts.down_proj_bias` (E, H); its
// experts apply the clamped SwiGLU (ClampedSwiglu).
// Checkpoints store experts one tensor each, or transformed (gpt-oss); models/stored_weights.h
// maps the names.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "tandem/models/decoder_config.h"
#include "tandem/models/layers.h"

namespace tandem {

/// What the routers of one forward chose, summed over its MoE layers: the inputs of the
/// load-balancing loss. Set `token_weights` before the forward to leave padding out.
struct RouterLoad {
  at::Tensor token_weights;  // in: (B*T,) fp32, 1 for a real token, 0 for padding; undefined: all 1
  at::Tensor assignments;    // (E,) fp32: top-k picks per expert (of the softmax), no gradient
  at::Tensor probabilities;  // (E,) fp32: the routers' softmax summed over tokens (with gradient)
  at::Tensor rows;           // 0-dim fp32: weighted tokens, summed over layers
  int64_t num_experts = 0;
  int64_t layers = 0;

  /// Adds one layer's router logits (N, E) for its top-k.
  void add(const at::Tensor& router_logits, int64_t top_k);
  /// The Switch Transformer load-balancing loss E * sum_e f_e * P_e, where f_e and P_e are the
  /// expert's share of top-k picks and its mean router probability over every token of every
  /// MoE layer: transformers' `load_balancing_loss_func` (before `router_aux_loss_coef`).
  /// 0-dim fp32; zero when no MoE layer ran.
  at::Tensor loss() const;
};

/// The experts of one layer, stacked.
class ExpertsImpl : public torch::nn::Module {
 public:
  ExpertsImpl(int64_t num_experts, int64_t hidden_size, int64_t intermediate_size,
              const at::TensorOptions& options, bool biases = false);
  at::Tensor gate_up_proj;       // (E, 2I, H)
  at::Tensor down_proj;          // (E, H, I)
  at::Tensor gate_up_proj_bias;  // (E, 2I), gpt-oss; else undefined
  at::Tensor down_proj_bias;     // (E, H), gpt-oss; else undefined
};
TORCH_MODULE(Experts);

class SparseMoeImpl : public torch::nn::Module {
 public:
  SparseMoeImpl(const DecoderConfig& config, const at::TensorOptions& options);
  /// x (B, T, H) -> (B, T, H). When `load` is given, the router's logits are added to it.
  at::Tensor forward(const at::Tensor& x, RouterLoad* load = nullptr) const;

  Linear gate{nullptr};  // the router: (E, H), no bias (gpt-oss: named `router`, with a bias)
  Experts experts{nullptr};
  // (E,) buffer: MiniMax-M2's (here, model dtype) or DeepSeek-V3 layout's (`gate.`, fp32);
  // undefined otherwise
  at::Tensor e_score_correction_bias;
  Mlp shared_expert{nullptr};          // Qwen3.5-MoE, Qwen3-Next (null otherwise)
  Linear shared_expert_gate{nullptr};  // (1, H), no bias
  Mlp shared_experts{nullptr};         // DeepSeek-V3 layout: ungated (null otherwise)
  MoeConfig moe;
};
TORCH_MODULE(SparseMoe);

/// The chosen experts of each token and their weights, as the family's router computes them
/// from logits (N, E): indices (N, k) int64 and weights (N, k) (fp32, or the logits' dtype for
/// Qwen3-MoE, as transformers casts them). `bias`: the e_score_correction_bias (MiniMax-M2,
/// DeepSeek-V3 layout).
std::pair<at::Tensor, at::Tensor> route_tokens(const at::Tensor& router_logits,
                                               const at::Tensor& bias, const MoeConfig& moe);

/// How the experts' matmuls run: ATen's grouped matmul (two calls per layer, the rows of each
/// expert given by offsets on the device, no host wait) or one pair of matmuls per expert, sized
/// by the token counts read on the host (one device wait per layer).
enum class ExpertGemm { Grouped, PerExpert };

/// The policy (pure): grouped where the kernel takes the call: rows of whole 16-byte units
/// (hidden and intermediate sizes times the element size), on the CPU in fp32, bf16 or fp16 (not
/// fp64), on CUDA in bf16 where the grouped kernel was verified on the device (`cuda_verified`:
/// grouped_expert_gemm_verified), on the meta device (a planned GPU run) in bf16; one expert at a
/// time otherwise.
ExpertGemm choose_expert_gemm(c10::DeviceType device, c10::ScalarType dtype, int64_t hidden_size,
                              int64_t intermediate_size, bool cuda_verified);

/// Whether the grouped matmul runs on `device` in `dtype` and equals the per-expert matmuls
/// there: a tiny random layer (one expert without tokens), the output and every input gradient,
/// tried once per device and dtype and remembered. False when it throws or differs.
bool grouped_expert_gemm_verified(const c10::Device& device, c10::ScalarType dtype);

/// What some families' experts add to the plain SwiGLU expert (gpt-oss): biases after each
/// projection, and the clamped SwiGLU. Empty: silu(gate) * up, no biases.
struct ExpertExtras {
  at::Tensor gate_up_bias;  // (E, 2I): gate, then up; or undefined
  at::Tensor down_bias;     // (E, H) or undefined
  ClampedSwiglu swiglu;     // disabled: silu(gate) * up
};

/// An expert's activation of its gate_up rows (P, 2I) (gate, then up) -> (P, I): SwiGLU, or the
/// clamped SwiGLU (u + 1) g sigmoid(alpha g), g = min(gate, limit), u = clamp(up, -limit, limit).
at::Tensor expert_activation(const at::Tensor& gate_up, const ClampedSwiglu& swiglu);

/// sum over k of weights[n, k] * expert_{indices[n, k]}(x[n]), for x (N, H), grouped by expert.
at::Tensor run_experts(const at::Tensor& x, const at::Tensor& indices, const at::Tensor& weights,
                       const at::Tensor& gate_up_proj, const at::Tensor& down_proj, ExpertGemm gemm,
                       const ExpertExtras& extras = {});

}  // namespace tandem
