#pragma once
// Rotary position embeddings (Su et al.), in the rotate-half layout transformers uses, with
// Llama 3's frequency scaling.
#include <ATen/core/Tensor.h>

#include "tandem/models/decoder_config.h"

namespace tandem {

/// Inverse frequencies (head_dim / 2,) in fp32: theta^(-2i/d), rescaled for `llama3`.
at::Tensor rope_inverse_frequencies(int64_t head_dim, double theta, const RopeScaling& scaling);

struct RopeTables {
  at::Tensor cos;  // (B, 1, T, rotated dims), compute dtype
  at::Tensor sin;  // (B, 1, T, head_dim)
};

/// cos/sin for integer positions (B, T), computed in fp32 then cast to `dtype`.
RopeTables rope_tables(const at::Tensor& inverse_frequencies, const at::Tensor& positions,
                       c10::ScalarType dtype);

/// x * cos + rotate_half(x) * sin, for x (B, heads, T, head_dim). Tables narrower than head_dim
/// (partial RoPE, MiniMax-M2's rotary_dim) rotate the first dims and pass the others through.
at::Tensor apply_rope(const at::Tensor& x, const RopeTables& tables);

}  // namespace tandem
