#pragma once
// Block-wise FP8 weights (config.json: io/quantization_config.h): each quantized Linear weight
// `X.weight` (R, C) is stored as F8_E4M3 next to `X.weight_scale_inv` (ceil(R / B0),
// ceil(C / B1)) F32, and the weight is
//   W[i, j] = float(q[i, j]) * weight_scale_inv[i / B0, j / B1]
// (edge blocks are partial). tandem dequantizes each such tensor as it loads it, to fp32 and
// then to the run's dtype; what stays unquantized (embeddings, norms, routers, lm_head) is read
// as stored.
#include <ATen/core/Tensor.h>

#include <string>

#include "tandem/io/quantization_config.h"

namespace tandem {

/// Checks that a weight of `weight_shape` (R, C) and its scale of `scale_shape` make a block-wise
/// FP8 pair: 2-D, the scale (ceil(R / B0), ceil(C / B1)); an Error naming `where` otherwise.
void check_block_fp8_shapes(at::IntArrayRef weight_shape, at::IntArrayRef scale_shape,
                            const BlockFp8& blocks, const std::string& where);

/// W = q * scale_inv[i / B0, j / B1] in fp32: q (R, C) float8_e4m3fn, scale_inv (ceil(R / B0),
/// ceil(C / B1)) float. Shapes that disagree are an Error naming `where`.
at::Tensor dequantize_block_fp8(const at::Tensor& q, const at::Tensor& scale_inv,
                                const BlockFp8& blocks, const std::string& where);

}  // namespace tandem
