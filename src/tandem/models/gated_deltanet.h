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

/// A Gated DeltaNet layer's decoding state for a batch of rows (a KvCache holds one per
/// linear-attention layer), and what its last cached forward keeps to roll back into it.
struct GatedDeltaNetState {
  at::Tensor conv_window;  // (B, kernel - 1, C): the conv inputs of the last kernel - 1 slots
  at::Tensor recurrent;    // (B, Hv, K, V) fp32: the gated delta rule's state
  // The last forward: the state before it and its slots' inputs, kept when it had at most
  // kRollbackSlots slots (a speculative verification), so a prefix of it can be replayed.
  at::Tensor window_before, recurrent_before;
  at::Tensor pending_inputs;                   // (B, n, C) conv inputs
  at::Tensor pending_q, pending_k, pending_v;  // after the conv: (B, n, heads, dim)
  at::Tensor pending_g, pending_beta;          // (B, n, Hv)
  int64_t pending = 0;                         // n; 0 when nothing is kept
  static constexpr int64_t kRollbackSlots = 256;

  /// Zeros for `batch` rows of a layer of `shape` with conv `kernel`, conv inputs in `options`.
  static GatedDeltaNetState zeros(int64_t batch, const GatedDeltaNetShape& shape, int64_t kernel,
                                  const at::TensorOptions& options);
  int64_t bytes() const;  // the state itself (conv window and recurrent state)
};

/// x (B, T, hidden) -> (B, T, hidden) in x's dtype. `bounds`: per row, its document bounds
/// [0, s_1, ..., T] (empty: one document per row).
at::Tensor gated_deltanet_forward(const at::Tensor& x, const GatedDeltaNetWeights& weights,
                                  const GatedDeltaNetShape& shape,
                                  const std::vector<std::vector<int64_t>>& bounds,
                                  const GatedDeltaOptions& options = {});

/// The cached form: x (B, n, hidden) of n new slots continuing each row of `state` (updated).
/// `valid` (B, n) bool: a padding slot feeds the conv a zero and leaves the recurrent state as it
/// is (beta = 0, no decay), which is exactly a row's leading padding; a padding slot after a
/// row's real tokens shifts a zero into its conv window (generation pads only finished rows).
/// One slot runs the recurrence, more the chunked form from the state.
at::Tensor gated_deltanet_step(const at::Tensor& x, const at::Tensor& valid,
                               const GatedDeltaNetWeights& weights, const GatedDeltaNetShape& shape,
                               GatedDeltaNetState& state, const GatedDeltaOptions& options = {});

/// Rolls `state` back to just after the first `kept` slots of its last forward (0 <= kept <=
/// state.pending; the forward must have kept its inputs): the conv window and the recurrent
/// state recomputed from those slots (speculative decoding drops the rejected tokens).
void rollback_gated_deltanet(GatedDeltaNetState& state, int64_t kept, bool normalize_qk = true);

/// The causal depthwise convolution of x (B, T, C) with `weight` (C, 1, kernel), each packed
/// document's window starting at its first token: out_t = Σ_i weight[:, kernel − 1 − i] x_{t−i}
/// over t − i within t's document. (B, T, C).
at::Tensor causal_depthwise_conv(const at::Tensor& x, const at::Tensor& weight,
                                 const std::vector<std::vector<int64_t>>& bounds);

}  // namespace tandem
