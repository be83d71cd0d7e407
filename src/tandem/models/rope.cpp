#include "tandem/models/rope.h"

#include <ATen/ATen.h>

#include <cmath>

#include "tandem/core/device.h"

namespace tandem {

at::Tensor rope_inverse_frequencies(int64_t head_dim, double theta, const RopeScaling& scaling) {
  // theta ** (2i / d) with the exponent formed in fp32, as transformers does.
  const at::Tensor exponents = at::arange(0, head_dim, 2, at::kLong).to(at::kFloat) / head_dim;
  at::Tensor inverse = 1.0 / at::pow(theta, exponents);
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

const at::Tensor& RopeFrequencies::on(const c10::Device& device) const {
  if (!on_device_.defined() || on_device_.device() != device) on_device_ = to_device(host_, device);
  return on_device_;
}

RopeTables rope_tables(const RopeFrequencies& frequencies, const at::Tensor& positions,
                       c10::ScalarType dtype) {
  const at::Tensor freqs =
      positions.to(at::kFloat).unsqueeze(-1) * frequencies.on(positions.device()).view({1, 1, -1});
  const at::Tensor angles = at::cat({freqs, freqs}, -1).unsqueeze(1);  // (B, 1, T, head_dim)
  return {angles.cos().to(dtype), angles.sin().to(dtype)};
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
