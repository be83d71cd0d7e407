#include "tandem/models/gated_deltanet.h"

#include <ATen/ATen.h>

#include "tandem/core/device.h"
#include "tandem/core/error.h"
#include "tandem/models/lean_layers.h"

namespace tandem {

at::Tensor causal_depthwise_conv(const at::Tensor& x, const at::Tensor& weight,
                                 const std::vector<std::vector<int64_t>>& bounds) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), kernel = weight.size(-1);
  check(weight.dim() == 3 && weight.size(0) == C && weight.size(1) == 1, "[gated-deltanet] conv1d ",
        weight.sizes(), " is not (", C, ", 1, kernel)");
  // Each token's distance from its document's start, (B, T): a shift by i reaches back only when
  // i <= that distance.
  std::vector<int64_t> offset(static_cast<size_t>(B * T));
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<int64_t> one = {0, T};
    const std::vector<int64_t>& row = bounds.empty() ? one : bounds.at(static_cast<size_t>(b));
    for (size_t d = 0; d + 1 < row.size(); ++d)
      for (int64_t t = row[d]; t < row[d + 1]; ++t)
        offset[static_cast<size_t>(b * T + t)] = t - row[d];
  }
  const at::Tensor since_start =
      to_device(at::tensor(offset, at::kLong), x.device()).view({B, T, 1});
  at::Tensor out = x * weight.select(2, kernel - 1).squeeze(1).to(x.scalar_type());
  for (int64_t i = 1; i < kernel && i < T; ++i) {
    // x_{t-i}: x shifted right by i, zero where t - i leaves the document.
    const at::Tensor shifted =
        at::cat({at::zeros({B, i, C}, x.options()), x.narrow(1, 0, T - i)}, 1)
            .masked_fill(since_start < i, 0);
    out = out + shifted * weight.select(2, kernel - 1 - i).squeeze(1).to(x.scalar_type());
  }
  return out;
}

namespace {

// The projections of x (B, T, hidden), in Qwen3.5's layout whichever the checkpoint stores.
struct Projected {
  at::Tensor qkv;   // (B, T, 2 Hk K + Hv V): every q head, every k head, every v head
  at::Tensor z;     // (B, T, Hv, V)
  at::Tensor b, a;  // (B, T, Hv)
};

Projected project(const at::Tensor& x, const GatedDeltaNetWeights& w,
                  const GatedDeltaNetShape& shape) {
  const int64_t B = x.size(0), T = x.size(1);
  const int64_t Hk = shape.key_heads, Hv = shape.value_heads, K = shape.key_dim,
                V = shape.value_dim;
  if (!w.in_proj_qkvz.defined()) {
    check(w.in_proj_qkv.size(0) == 2 * Hk * K + Hv * V, "[gated-deltanet] in_proj_qkv ",
          w.in_proj_qkv.sizes(), " does not give 2 x ", Hk, " x ", K, " + ", Hv, " x ", V,
          " channels");
    return {at::linear(x, w.in_proj_qkv), at::linear(x, w.in_proj_z).view({B, T, Hv, V}),
            at::linear(x, w.in_proj_b), at::linear(x, w.in_proj_a)};
  }
  // Qwen3-Next: the rows come grouped per key head; regroup them per kind.
  const int64_t r = Hv / Hk;
  check(w.in_proj_qkvz.size(0) == Hk * (2 * K + 2 * r * V) && w.in_proj_ba.size(0) == Hk * 2 * r,
        "[gated-deltanet] in_proj_qkvz ", w.in_proj_qkvz.sizes(), " and in_proj_ba ",
        w.in_proj_ba.sizes(), " do not give ", Hk, " key heads of ", K, " and ", Hv,
        " value heads of ", V);
  const at::Tensor qkvz = at::linear(x, w.in_proj_qkvz).view({B, T, Hk, 2 * K + 2 * r * V});
  const at::Tensor ba = at::linear(x, w.in_proj_ba).view({B, T, Hk, 2 * r});
  const at::Tensor q = qkvz.narrow(3, 0, K).reshape({B, T, Hk * K});
  const at::Tensor k = qkvz.narrow(3, K, K).reshape({B, T, Hk * K});
  const at::Tensor v = qkvz.narrow(3, 2 * K, r * V).reshape({B, T, Hv * V});
  return {at::cat({q, k, v}, 2), qkvz.narrow(3, 2 * K + r * V, r * V).reshape({B, T, Hv, V}),
          ba.narrow(3, 0, r).reshape({B, T, Hv}), ba.narrow(3, r, r).reshape({B, T, Hv})};
}

// The conv's output -> q, k, v heads, and the gates: beta = sigmoid(b), g = -exp(A_log) *
// softplus(a + dt_bias) in fp32; a padding slot (`valid` false, when given) gets beta = g = 0.
struct Mixed {
  at::Tensor q, k, v;  // (B, T, Hk, K), (B, T, Hk, K), (B, T, Hv, V)
  at::Tensor g, beta;  // (B, T, Hv)
};

Mixed mix(const at::Tensor& conv_out, const Projected& p, const GatedDeltaNetWeights& w,
          const GatedDeltaNetShape& shape, const at::Tensor& valid) {
  const int64_t B = conv_out.size(0), T = conv_out.size(1);
  const int64_t Hk = shape.key_heads, Hv = shape.value_heads, K = shape.key_dim,
                V = shape.value_dim;
  const at::Tensor mixed = at::silu(conv_out);
  Mixed out{mixed.narrow(2, 0, Hk * K).view({B, T, Hk, K}),
            mixed.narrow(2, Hk * K, Hk * K).view({B, T, Hk, K}),
            mixed.narrow(2, 2 * Hk * K, Hv * V).view({B, T, Hv, V}), at::Tensor(),
            at::sigmoid(p.b)};
  out.g =
      -w.A_log.to(at::kFloat).exp() * at::softplus(p.a.to(at::kFloat) + w.dt_bias.to(at::kFloat));
  if (valid.defined()) {
    const at::Tensor real = valid.view({B, T, 1});
    out.g = out.g.masked_fill(real.logical_not(), 0);
    out.beta = out.beta.masked_fill(real.logical_not(), 0);
  }
  return out;
}

// The gated RMSNorm per value head (normalised in fp32, weighted in the input dtype, gated by
// silu(z)) and out_proj: o (B, T, Hv, V) -> (B, T, hidden) in `dtype`.
at::Tensor gated_output(const at::Tensor& o, const at::Tensor& z, const GatedDeltaNetWeights& w,
                        const GatedDeltaNetShape& shape, c10::ScalarType dtype) {
  const at::Tensor gated =
      lean_rms_norm(o, w.norm, shape.rms_norm_eps) * at::silu(z.to(at::kFloat));
  return at::linear(gated.to(dtype).reshape({o.size(0), o.size(1), o.size(2) * o.size(3)}),
                    w.out_proj);
}

}  // namespace

at::Tensor gated_deltanet_forward(const at::Tensor& x, const GatedDeltaNetWeights& w,
                                  const GatedDeltaNetShape& shape,
                                  const std::vector<std::vector<int64_t>>& bounds,
                                  const GatedDeltaOptions& options) {
  const Projected p = project(x, w, shape);
  const Mixed m = mix(causal_depthwise_conv(p.qkv, w.conv1d, bounds), p, w, shape, {});
  const at::Tensor o = chunked_gated_delta_rule(m.q, m.k, m.v, m.g, m.beta, bounds, options);
  return gated_output(o, p.z, w, shape, x.scalar_type());
}

GatedDeltaNetState GatedDeltaNetState::zeros(int64_t batch, const GatedDeltaNetShape& shape,
                                             int64_t kernel, const at::TensorOptions& options) {
  const int64_t channels =
      2 * shape.key_heads * shape.key_dim + shape.value_heads * shape.value_dim;
  GatedDeltaNetState state;
  state.conv_window = at::zeros({batch, kernel - 1, channels}, options);
  state.recurrent = at::zeros({batch, shape.value_heads, shape.key_dim, shape.value_dim},
                              options.dtype(at::kFloat));
  return state;
}

int64_t GatedDeltaNetState::bytes() const {
  return static_cast<int64_t>(conv_window.nbytes() + recurrent.nbytes());
}

at::Tensor gated_deltanet_step(const at::Tensor& x, const at::Tensor& valid,
                               const GatedDeltaNetWeights& w, const GatedDeltaNetShape& shape,
                               GatedDeltaNetState& state, const GatedDeltaOptions& options) {
  const int64_t n = x.size(1), history = state.conv_window.size(1);
  check(valid.dim() == 2 && valid.size(0) == x.size(0) && valid.size(1) == n,
        "[gated-deltanet] validity flags ", valid.sizes(), " for inputs ", x.sizes());
  const Projected p = project(x, w, shape);
  // The conv over the window's history and the new slots, padding fed as zeros.
  const at::Tensor inputs =
      p.qkv.masked_fill(valid.view({x.size(0), n, 1}).logical_not(), 0);  // (B, n, C)
  const at::Tensor sequence = at::cat({state.conv_window.to(inputs.scalar_type()), inputs}, 1);
  const at::Tensor conv_out = causal_depthwise_conv(sequence, w.conv1d, {}).narrow(1, history, n);
  const Mixed m = mix(conv_out, p, w, shape, valid);
  at::Tensor recurrent;
  at::Tensor o;
  if (n == 1) {
    recurrent = state.recurrent.clone();
    o = recurrent_gated_delta_rule(m.q, m.k, m.v, m.g, m.beta, recurrent, options.normalize_qk);
  } else {
    o = chunked_gated_delta_rule(m.q, m.k, m.v, m.g, m.beta, {}, options, state.recurrent,
                                 &recurrent);
  }
  // What a rollback into this forward replays (a verification's few slots, never a long prompt).
  state.pending = n <= GatedDeltaNetState::kRollbackSlots ? n : 0;
  state.window_before = state.conv_window;
  state.recurrent_before = state.recurrent;
  if (state.pending > 0) {
    state.pending_inputs = inputs;
    state.pending_q = m.q, state.pending_k = m.k, state.pending_v = m.v;
    state.pending_g = m.g, state.pending_beta = m.beta;
  } else {
    state.pending_inputs = state.pending_q = state.pending_k = state.pending_v = at::Tensor();
    state.pending_g = state.pending_beta = at::Tensor();
  }
  state.conv_window = sequence.narrow(1, n, history).contiguous();
  state.recurrent = recurrent;
  return gated_output(o, p.z, w, shape, x.scalar_type());
}

void rollback_gated_deltanet(GatedDeltaNetState& state, int64_t kept, bool normalize_qk) {
  check(kept >= 0 && kept <= state.pending, "[gated-deltanet] cannot roll back to ", kept,
        " slots of a forward that kept ", state.pending);
  const int64_t history = state.conv_window.size(1);
  state.conv_window = at::cat({state.window_before, state.pending_inputs.narrow(1, 0, kept)}, 1)
                          .narrow(1, kept, history)
                          .contiguous();
  at::Tensor recurrent = state.recurrent_before.clone();
  if (kept > 0)
    recurrent_gated_delta_rule(
        state.pending_q.narrow(1, 0, kept), state.pending_k.narrow(1, 0, kept),
        state.pending_v.narrow(1, 0, kept), state.pending_g.narrow(1, 0, kept),
        state.pending_beta.narrow(1, 0, kept), recurrent, normalize_qk);
  state.recurrent = recurrent;
  // The slots left are the kept prefix of the same forward: a later rollback may go further back.
  state.pending = kept;
  for (at::Tensor* t : {&state.pending_inputs, &state.pending_q, &state.pending_k, &state.pending_v,
                        &state.pending_g, &state.pending_beta})
    *t = t->narrow(1, 0, kept);
}

}  // namespace tandem
