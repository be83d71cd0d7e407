#include "tandem/io/mxfp4.h"

#include <ATen/ATen.h>

#include "tandem/core/error.h"

namespace tandem {

std::string mxfp4_blocks_name(const std::string& name) { return name + "_blocks"; }
std::string mxfp4_scales_name(const std::string& name) { return name + "_scales"; }

std::vector<int64_t> mxfp4_scales_shape(c10::IntArrayRef shape, const std::string& where) {
  check(!shape.empty() && shape.back() % kMxfp4Block == 0, where, ": its shape ", shape,
        " does not split into MXFP4 blocks of ", kMxfp4Block, " along the last dim");
  std::vector<int64_t> out = shape.vec();
  out.back() /= kMxfp4Block;
  return out;
}

std::vector<int64_t> mxfp4_blocks_shape(c10::IntArrayRef shape, const std::string& where) {
  std::vector<int64_t> out = mxfp4_scales_shape(shape, where);
  out.push_back(kMxfp4BlockBytes);
  return out;
}

at::Tensor dequantize_mxfp4(const at::Tensor& blocks, const at::Tensor& scales,
                            const std::string& where) {
  check(blocks.scalar_type() == at::kByte && scales.scalar_type() == at::kByte, where,
        ": MXFP4 blocks and scales must be U8, got ", blocks.scalar_type(), " and ",
        scales.scalar_type());
  check(blocks.dim() >= 2 && blocks.size(-1) == kMxfp4BlockBytes &&
            scales.sizes() == blocks.sizes().slice(0, blocks.dim() - 1),
        where, ": MXFP4 blocks ", blocks.sizes(), " and scales ", scales.sizes(),
        " do not pair up (blocks (..., G, 16) beside scales (..., G))");
  check(!scales.eq(255).any().item<bool>(), where,
        ": an MXFP4 scale is 255, which E8M0 reserves for NaN (a corrupt checkpoint?)");
  // e2m1: sign bit 3, exponent bits 2..1, mantissa bit 0 (subnormal when the exponent is 0).
  const at::Tensor codes = at::arange(16, at::TensorOptions().dtype(at::kInt));
  const at::Tensor exponent = at::bitwise_right_shift(codes, 1).bitwise_and(3).to(at::kFloat);
  const at::Tensor mantissa = codes.bitwise_and(1).to(at::kFloat);
  const at::Tensor magnitude =
      at::where(exponent > 0, at::exp2(exponent - 1) * (1 + mantissa / 2), mantissa / 2);
  const at::Tensor table = at::where(at::bitwise_right_shift(codes, 3).bitwise_and(1).to(at::kBool),
                                     -magnitude, magnitude)
                               .to(blocks.device());
  const at::Tensor bytes = blocks.to(at::kLong);
  const auto lookup = [&](const at::Tensor& code) {
    return table.index_select(0, code.flatten()).view(code.sizes());
  };
  const at::Tensor low = lookup(bytes.bitwise_and(15));               // the even elements
  const at::Tensor high = lookup(at::bitwise_right_shift(bytes, 4));  // the odd ones
  at::Tensor values = at::stack({low, high}, -1).flatten(-2);         // (..., G, 32)
  values = at::ldexp(values, (scales.to(at::kInt) - 127).unsqueeze(-1));
  return values.flatten(-2);  // (..., 32 G)
}

}  // namespace tandem
