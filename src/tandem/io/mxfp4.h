#pragma once
// MXFP4 weights (the OCP microscaling format), as gpt-oss checkpoints store their experts: a
// weight W (..., R, K) is split along K into blocks of 32 values that share one power-of-two
// scale, each value a 4-bit FP4 (e2m1) code:
//   W_blocks  U8 (..., R, K / 32, 16): two codes per byte, the low nibble the even element
//   W_scales  U8 (..., R, K / 32):     the block's scale 2^(s - 127) (E8M0; 255 is NaN)
// A code is a sign bit, two exponent bits and one mantissa bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and
// their negatives. config.json says "quantization_config": {"quant_method": "mxfp4", ...}
// (io/quantization_config.h); models/stored_weights.h finds the pair of a model tensor.
#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

/// Values per block, and bytes per block of codes.
constexpr int64_t kMxfp4Block = 32;
constexpr int64_t kMxfp4BlockBytes = kMxfp4Block / 2;

/// The names a quantized tensor `name` is stored under: `name`_blocks and `name`_scales.
std::string mxfp4_blocks_name(const std::string& name);
std::string mxfp4_scales_name(const std::string& name);

/// The stored shapes of a weight of `shape` (..., R, K): blocks (..., R, K / 32, 16) and scales
/// (..., R, K / 32). An Error naming `where` when K is not a multiple of 32.
std::vector<int64_t> mxfp4_blocks_shape(c10::IntArrayRef shape, const std::string& where);
std::vector<int64_t> mxfp4_scales_shape(c10::IntArrayRef shape, const std::string& where);

/// blocks U8 (..., R, G, 16), scales U8 (..., R, G) -> the weight (..., R, 32 G) in fp32, exact.
/// An Error naming `where` for shapes that do not pair up, another dtype, or a NaN scale (255).
at::Tensor dequantize_mxfp4(const at::Tensor& blocks, const at::Tensor& scales,
                            const std::string& where);

}  // namespace tandem
