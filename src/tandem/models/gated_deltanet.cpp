#include "tandem/models/gated_deltanet.h"

#include <ATen/ATen.h>

#include "tandem/core/device.h"
#include "tandem/core/error.h"

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

}  // namespace

at::Tensor gated_deltanet_forward(const at::Tensor& x, const GatedDeltaNetWeights& w,
                                  const GatedDeltaNetShape& shape,
                                  const std::vector<std::vector<int64_t>>& bounds,
                                  const GatedDeltaOptions& options) {
  const int64_t B = x.size(0), T = x.size(1);
  const int64_t Hk = shape.key_heads, Hv = shape.value_heads, K = shape.key_dim,
                V = shape.value_dim;
  const Projected p = project(x, w, shape);
  const at::Tensor mixed = at::silu(causal_depthwise_conv(p.qkv, w.conv1d, bounds));
  const at::Tensor q = mixed.narrow(2, 0, Hk * K).view({B, T, Hk, K});
  const at::Tensor k = mixed.narrow(2, Hk * K, Hk * K).view({B, T, Hk, K});
  const at::Tensor v = mixed.narrow(2, 2 * Hk * K, Hv * V).view({B, T, Hv, V});
  const at::Tensor beta = at::sigmoid(p.b);
  const at::Tensor g =
      -w.A_log.to(at::kFloat).exp() * at::softplus(p.a.to(at::kFloat) + w.dt_bias.to(at::kFloat));
  const at::Tensor o = chunked_gated_delta_rule(q, k, v, g, beta, bounds, options);  // (B,T,Hv,V)
  // The gated RMSNorm per value head: normalised in fp32, weighted in the input dtype, gated.
  const at::Tensor of = o.to(at::kFloat);
  const at::Tensor normed =
      (of * at::rsqrt(of.square().mean(-1, true) + shape.rms_norm_eps)).to(o.scalar_type());
  const at::Tensor gated = (w.norm * normed) * at::silu(p.z.to(at::kFloat));
  return at::linear(gated.to(x.scalar_type()).reshape({B, T, Hv * V}), w.out_proj);
}

}  // namespace tandem
