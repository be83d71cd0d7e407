#pragma once
// A Gated DeltaNet layer's token mixer (the linear-attention layers of the Qwen3.5/3.6 hybrids),
// forward only, from its checkpoint tensors:
//
//   qkv = silu(causal depthwise conv (in_proj_qkv x))     conv over the q | k | v channels
//   q, k, v = split(qkv) into Hk x K, Hk x K, Hv x V heads
//   beta = sigmoid(in_proj_b x),  g = −exp(A_log) · softplus(in_proj_a x + dt_bias)
//   o = gated delta rule (q, k, v, g, beta)               models/gated_delta_rule.h
//   out = out_proj (rmsnorm(o) · norm.weight · silu(in_proj_z x))   per value head, in fp32
//
// The conv window and the recurrent state restart at every packed document, exactly as running
// each document alone.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "tandem/models/gated_delta_rule.h"

namespace tandem {

/// A layer's tensors, as checkpoints name them under `linear_attn.`. The projections are either
/// Qwen3.5's four or Qwen3-Next's fused two (the other set undefined).
struct GatedDeltaNetWeights {
  at::Tensor in_proj_qkv;  // (2 Hk K + Hv V, hidden)
  at::Tensor in_proj_z;    // (Hv V, hidden)
  at::Tensor in_proj_b;    // (Hv, hidden)
  at::Tensor in_proj_a;    // (Hv, hidden)
  // Qwen3-Next: per key head h, rows [q_h (K) | k_h (K) | v of its r = Hv/Hk value heads (r V) |
  // z of them (r V)], and [b of its r value heads | a of them].
  at::Tensor in_proj_qkvz;  // (Hk (2K + 2 r V), hidden)
  at::Tensor in_proj_ba;    // (Hk 2 r, hidden)
  at::Tensor conv1d;        // (2 Hk K + Hv V, 1, kernel)
  at::Tensor dt_bias;       // (Hv,)
  at::Tensor A_log;         // (Hv,)
  at::Tensor norm;          // (V,): the gated RMSNorm's weight (plain, not 1 + w)
  at::Tensor out_proj;      // (hidden, Hv V)
};

struct GatedDeltaNetShape {
  int64_t key_heads = 0, value_heads = 0, key_dim = 0, value_dim = 0;
  double rms_norm_eps = 1e-6;
};

/// x (B, T, hidden) -> (B, T, hidden) in x's dtype. `bounds`: per row, its document bounds
/// [0, s_1, ..., T] (empty: one document per row).
at::Tensor gated_deltanet_forward(const at::Tensor& x, const GatedDeltaNetWeights& weights,
                                  const GatedDeltaNetShape& shape,
                                  const std::vector<std::vector<int64_t>>& bounds,
                                  const GatedDeltaOptions& options = {});

/// The causal depthwise convolution of x (B, T, C) with `weight` (C, 1, kernel), each packed
/// document's window starting at its first token: out_t = Σ_i weight[:, kernel − 1 − i] x_{t−i}
/// over t − i within t's document. (B, T, C).
at::Tensor causal_depthwise_conv(const at::Tensor& x, const at::Tensor& weight,
                                 const std::vector<std::vector<int64_t>>& bounds);

}  // namespace tandem
