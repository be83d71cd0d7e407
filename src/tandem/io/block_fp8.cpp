#include "tandem/io/block_fp8.h"

#include <ATen/ATen.h>

#include "tandem/core/error.h"

namespace tandem {

void check_block_fp8_shapes(at::IntArrayRef weight_shape, at::IntArrayRef scale_shape,
                            const BlockFp8& blocks, const std::string& where) {
  check(blocks.enabled(), where,
        " is stored as F8_E4M3 but config.json has no block-wise FP8 quantization_config "
        "(quant_method fp8 with weight_block_size)");
  check(weight_shape.size() == 2, where, ": an FP8 weight must be 2-D, got ", weight_shape);
  const int64_t rows = weight_shape[0], cols = weight_shape[1];
  const int64_t block_rows = (rows + blocks.block_rows - 1) / blocks.block_rows;
  const int64_t block_cols = (cols + blocks.block_cols - 1) / blocks.block_cols;
  check(scale_shape.size() == 2 && scale_shape[0] == block_rows && scale_shape[1] == block_cols,
        where, ": its scale has shape ", scale_shape, " but a [", rows, ", ", cols,
        "] weight in blocks of [", blocks.block_rows, ", ", blocks.block_cols, "] needs [",
        block_rows, ", ", block_cols, "]");
}

at::Tensor dequantize_block_fp8(const at::Tensor& q, const at::Tensor& scale_inv,
                                const BlockFp8& blocks, const std::string& where) {
  check_block_fp8_shapes(q.sizes(), scale_inv.sizes(), blocks, where);
  const int64_t rows = q.size(0), cols = q.size(1);
  const int64_t b0 = blocks.block_rows, b1 = blocks.block_cols;
  const at::Tensor scales = scale_inv.to(at::kFloat);          // (Rb, Cb)
  at::Tensor weight = q.to(at::kFloat, false, /*copy=*/true);  // (R, C): the one fp32 copy
  if (rows % b0 == 0 && cols % b1 == 0) {
    // Whole blocks (most published weights): each block times its scale, in place.
    weight.view({rows / b0, b0, cols / b1, b1}).mul_(scales.view({rows / b0, 1, cols / b1, 1}));
    return weight;
  }
  // Partial edge blocks: each scale repeated over its block, cut to the weight.
  return weight.mul_(scales.repeat_interleave(b0, 0)
                         .narrow(0, 0, rows)
                         .repeat_interleave(b1, 1)
                         .narrow(1, 0, cols));  // (R, C)
}

}  // namespace tandem
