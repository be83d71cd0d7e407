#pragma once
// RMSNorm and SwiGLU's gating with hand-written backward. Their composite forms (pow, mean,
// rsqrt, mul; silu, mul) each keep an extra full-size tensor per call for autograd; these keep
// only their inputs (and the inverse RMS, one value per row). At long context that is the
// difference between an EAGLE-3 unroll fitting in memory or not (docs/long-context.md).
// Forward values are the composite forms' exactly.
#include <ATen/core/Tensor.h>

namespace tandem {

/// weight * (x * rsqrt(mean(x^2) + eps)), the normalisation in fp32 and cast back to x's dtype
/// before the weight (transformers' LlamaRMSNorm). x (..., H), weight (H).
at::Tensor lean_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

/// silu(gate) * up, both (..., I) of one dtype.
at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up);

}  // namespace tandem
