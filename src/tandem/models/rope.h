#pragma once
// Rotary position embeddings (Su et al.), in the rotate-half layout transformers uses, with
// Llama 3's frequency scaling or YaRN's (Peng et al.: the low frequencies interpolated by
// `factor`, the high ones kept, a linear blend between; cos and sin scaled by an attention
// factor).
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <utility>

#include "tandem/models/decoder_config.h"

namespace tandem {

/// Inverse frequencies (head_dim / 2,) in fp32: theta^(-2i/d), rescaled for `linear` (divided by
/// factor), `llama3` / `yarn`.
at::Tensor rope_inverse_frequencies(int64_t head_dim, double theta, const RopeScaling& scaling);

/// The factor cos and sin are multiplied by: 1, or YaRN's attention factor (given, or
/// 0.1 ln(factor) + 1, or with mscale / mscale_all_dim the ratio of those two terms).
double rope_attention_scaling(const RopeScaling& scaling);

/// A model's inverse frequencies (rotated dims / 2,) fp32, kept on the device it computes on:
/// copied there once, by the first forward on that device (a model moved to another device
/// copies again), so no forward sends them from the host.
class RopeFrequencies {
 public:
  RopeFrequencies() = default;
  explicit RopeFrequencies(at::Tensor host, double attention_scaling = 1.0)
      : host_(std::move(host)), attention_scaling_(attention_scaling) {}
  /// A model's, from its rotated dims, theta and scaling.
  static RopeFrequencies of(int64_t rotated_dims, double theta, const RopeScaling& scaling);
  /// The frequencies on `device`.
  const at::Tensor& on(const c10::Device& device) const;
  /// What cos and sin are multiplied by (rope_attention_scaling).
  double attention_scaling() const { return attention_scaling_; }

 private:
  at::Tensor host_;
  double attention_scaling_ = 1.0;
  mutable at::Tensor on_device_;  // the copy on the device last asked for
};

struct RopeTables {
  at::Tensor cos;  // (B, 1, T, rotated dims), compute dtype
  at::Tensor sin;  // (B, 1, T, head_dim)
};

/// cos/sin for integer positions (B, T), computed in fp32 on the positions' device, times the
/// attention scaling, then cast to `dtype`.
RopeTables rope_tables(const RopeFrequencies& frequencies, const at::Tensor& positions,
                       c10::ScalarType dtype);

/// x * cos + rotate_half(x) * sin, for x (B, heads, T, head_dim). Tables narrower than head_dim
/// (partial RoPE, MiniMax-M2's rotary_dim) rotate the first dims and pass the others through.
at::Tensor apply_rope(const at::Tensor& x, const RopeTables& tables);

}  // namespace tandem
