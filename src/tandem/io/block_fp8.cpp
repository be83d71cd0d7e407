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
  // Each scale repeated over its block, the edge blocks cut to the weight.
  const at::Tensor scales = scale_inv.to(at::kFloat)
                                .repeat_interleave(blocks.block_rows, 0)
                                .narrow(0, 0, rows)
                                .repeat_interleave(blocks.block_cols, 1)
                                .narrow(1, 0, cols);  // (R, C)
  return q.to(at::kFloat) * scales;
}

}  // namespace tandem
