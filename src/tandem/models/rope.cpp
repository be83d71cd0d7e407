#include "tandem/models/rope.h"

#include <ATen/ATen.h>

#include <cmath>

#include "tandem/core/device.h"

namespace tandem {

namespace {

// YaRN: the dim (of `dims`, in units of pairs counted as transformers does) whose wavelength
// turns `rotations` times over the original context.
double yarn_correction_dim(double rotations, int64_t dims, double theta, double context) {
  return static_cast<double>(dims) * std::log(context / (rotations * 2 * M_PI)) /
         (2 * std::log(theta));
}

// YaRN's attention-scale term for a context `factor` times longer.
double yarn_mscale(double factor, double mscale) {
  return factor <= 1 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

// Between the two correction dims, a linear ramp from the original frequencies (fast dims,
// ramp 0) to the interpolated ones (slow dims, ramp 1). `powers` (dims / 2,) fp32: theta^(2i/d).
// Every fp32 op in transformers' order: its inv_freq bit for bit, which cos and sin at long
// positions need.
at::Tensor yarn_inverse_frequencies(const at::Tensor& powers, int64_t dims, double theta,
                                    const RopeScaling& scaling) {
  const double context = static_cast<double>(scaling.original_max_position_embeddings);
  double low = yarn_correction_dim(scaling.beta_fast, dims, theta, context);
  double high = yarn_correction_dim(scaling.beta_slow, dims, theta, context);
  if (scaling.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dims - 1));
  if (low == high) high += 0.001;  // no division by zero
  const at::Tensor ramp =
      ((at::arange(dims / 2, at::kFloat) - low) / (high - low)).clamp(0, 1);  // (dims / 2,)
  const at::Tensor extrapolated = 1.0 / powers, interpolated = 1.0 / (scaling.factor * powers);
  const at::Tensor kept = 1 - ramp;  // the original frequency's share
  return interpolated * (1 - kept) + extrapolated * kept;
}

}  // namespace

at::Tensor rope_inverse_frequencies(int64_t head_dim, double theta, const RopeScaling& scaling) {
  // theta ** (2i / d) with the exponent formed in fp32, as transformers does.
  const at::Tensor exponents = at::arange(0, head_dim, 2, at::kLong).to(at::kFloat) / head_dim;
  const at::Tensor powers = at::pow(theta, exponents);
  if (scaling.type == "yarn") return yarn_inverse_frequencies(powers, head_dim, theta, scaling);
  at::Tensor inverse = 1.0 / powers;
  if (scaling.type == "linear") return inverse / scaling.factor;  // positions divided by factor
  if (scaling.type != "llama3") return inverse;
  // Llama 3: long wavelengths are divided by `factor`, short ones kept, the band in between
  // interpolated smoothly.
  const double old_context = static_cast<double>(scaling.original_max_position_embeddings);
  const double low_freq_wavelength = old_context / scaling.low_freq_factor;
  const double high_freq_wavelength = old_context / scaling.high_freq_factor;
  const at::Tensor wavelength = 2 * M_PI / inverse;
  at::Tensor scaled =
      at::where(wavelength > low_freq_wavelength, inverse / scaling.factor, inverse);
  const at::Tensor smooth = (old_context / wavelength - scaling.low_freq_factor) /
                            (scaling.high_freq_factor - scaling.low_freq_factor);
  const at::Tensor smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled;
  const at::Tensor is_medium =
      (wavelength >= high_freq_wavelength).logical_and(wavelength <= low_freq_wavelength);
  return at::where(is_medium, smoothed, scaled);
}

double rope_attention_scaling(const RopeScaling& scaling) {
  if (scaling.type != "yarn") return 1.0;
  if (scaling.attention_factor > 0) return scaling.attention_factor;
  if (scaling.mscale > 0 && scaling.mscale_all_dim > 0)
    return yarn_mscale(scaling.factor, scaling.mscale) /
           yarn_mscale(scaling.factor, scaling.mscale_all_dim);
  return yarn_mscale(scaling.factor, 1.0);
}

RopeFrequencies RopeFrequencies::of(int64_t rotated_dims, double theta,
                                    const RopeScaling& scaling) {
  return RopeFrequencies(rope_inverse_frequencies(rotated_dims, theta, scaling),
                         rope_attention_scaling(scaling));
}

const at::Tensor& RopeFrequencies::on(const c10::Device& device) const {
  if (!on_device_.defined() || on_device_.device() != device) on_device_ = to_device(host_, device);
  return on_device_;
}

RopeTables rope_tables(const RopeFrequencies& frequencies, const at::Tensor& positions,
                       c10::ScalarType dtype) {
  const at::Tensor freqs =
      positions.to(at::kFloat).unsqueeze(-1) * frequencies.on(positions.device()).view({1, 1, -1});
  const at::Tensor angles = at::cat({freqs, freqs}, -1).unsqueeze(1);  // (B, 1, T, head_dim)
  const double scale = frequencies.attention_scaling();
  if (scale == 1.0) return {angles.cos().to(dtype), angles.sin().to(dtype)};
  return {(angles.cos() * scale).to(dtype), (angles.sin() * scale).to(dtype)};
}

at::Tensor apply_rope(const at::Tensor& x, const RopeTables& tables) {
  const int64_t rotated_dims = tables.cos.size(-1), dims = x.size(-1);
  if (rotated_dims < dims)  // partial RoPE: the first dims rotate, the rest pass through
    return at::cat({apply_rope(x.narrow(-1, 0, rotated_dims), tables),
                    x.narrow(-1, rotated_dims, dims - rotated_dims)},
                   -1);
  const int64_t half = x.size(-1) / 2;
  const at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * tables.cos + rotated * tables.sin;
}

}  // namespace tandem
