#include "tandem/models/varlen_attention.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>

#include "tandem/core/device.h"
#include "tandem/core/error.h"

namespace tandem {

PackedSequences packed_sequences(const std::vector<std::vector<int64_t>>& bounds, int64_t rows,
                                 int64_t length, const c10::Device& device) {
  std::vector<int32_t> offsets = {0};
  int64_t longest = 0;
  for (int64_t b = 0; b < rows; ++b) {
    const std::vector<int64_t> whole_row = {0, length};
    const std::vector<int64_t>& row = bounds.empty() ? whole_row : bounds[static_cast<size_t>(b)];
    check(row.size() >= 2 && row.front() == 0 && row.back() == length, "[attention] row ", b,
          "'s documents do not cover its ", length, " tokens");
    for (size_t i = 0; i + 1 < row.size(); ++i) {
      longest = std::max(longest, row[i + 1] - row[i]);
      offsets.push_back(static_cast<int32_t>(b * length + row[i + 1]));
    }
  }
  const at::Tensor host = at::tensor(offsets, at::kInt);
  return {to_device(host, device), longest};
}

KernelChoice choose_varlen_kernel(AttentionKernel asked, c10::DeviceType device,
                                  c10::ScalarType dtype, int64_t head_dim, bool cuda_verified) {
  if (const auto common = asked_or_unsupported(asked, dtype)) return *common;
  if (device != c10::kCUDA)
    return {AttentionKernel::Blockwise, "no variable-length kernel on " +
                                            c10::DeviceTypeName(device) +
                                            ": SDPA per document, blockwise for windows"};
  if (dtype != c10::kBFloat16 && dtype != c10::kHalf)
    return {AttentionKernel::Blockwise,
            "the variable-length flash kernel needs bf16 or fp16, not " +
                std::string(c10::toString(dtype))};
  if (head_dim % 8 != 0 || head_dim > 256)
    return {AttentionKernel::Blockwise,
            "the variable-length flash kernel needs a head dim that is a multiple of 8 up to "
            "256, not " +
                std::to_string(head_dim)};
  if (!cuda_verified)
    return {AttentionKernel::Blockwise,
            "the variable-length flash kernel failed or differed from the reference on this GPU"};
  return {AttentionKernel::Fused, "the variable-length flash kernel, one call per layer"};
}

at::Tensor varlen_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const PackedSequences& sequences, int64_t window) {
  const int64_t rows = q.size(0), heads = q.size(1), length = q.size(2), dim = q.size(3);
  check(
      k.size(0) == rows && k.size(2) == length && v.sizes() == k.sizes() && heads % k.size(1) == 0,
      "[attention] variable-length attention needs q (B, heads, T, d) and k/v (B, kv_heads, T, "
      "d); got ",
      q.sizes(), " and ", k.sizes());
  const auto packed = [&](const at::Tensor& x) {  // (B, h, T, d) -> (B * T, h, d)
    return x.transpose(1, 2).reshape({rows * length, x.size(1), dim}).contiguous();
  };
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  const std::optional<int64_t> left =
      window > 0 ? std::optional<int64_t>(window - 1) : std::nullopt;
  const std::optional<int64_t> right = window > 0 ? std::optional<int64_t>(0) : std::nullopt;
  const auto result = at::_flash_attention_forward(
      packed(q), packed(k), packed(v), sequences.offsets, sequences.offsets, sequences.longest,
      sequences.longest, /*dropout_p=*/0.0, /*is_causal=*/true, /*return_debug_mask=*/false, scale,
      left, right);
  return std::get<0>(result).reshape({rows, length, heads, dim}).transpose(1, 2);  // (B, h, T, d)
}

bool varlen_attention_verified(const c10::Device& device, c10::ScalarType dtype, int64_t head_dim) {
  return remembered_check(check_kind("varlen", device, dtype, head_dim), [&] {
    // Two rows of 24 tokens, row 0 as documents [0, 10) and [10, 24); 4 query heads on 2.
    const int64_t rows = 2, length = 24, heads = 4, kv_heads = 2;
    const std::vector<std::vector<int64_t>> bounds = {{0, 10, 24}, {0, 24}};
    const PackedSequences sequences = packed_sequences(bounds, rows, length, device);
    const at::TensorOptions options = at::TensorOptions().dtype(dtype).device(device);
    const at::Generator generator = at::detail::createCPUGenerator(20261126);
    auto random = [&](int64_t h) {
      return at::randn({rows, h, length, head_dim}, generator).to(options).requires_grad_(true);
    };
    const std::vector<at::Tensor> inputs = {random(heads), random(kv_heads), random(kv_heads)};
    const at::Tensor weights = at::randn({rows, heads, length, head_dim}, generator).to(options);
    at::Tensor document = at::zeros({rows, length}, at::kLong);
    document[0].narrow(0, 10, 14).fill_(1);
    document = to_device(document, device);
    bool equal = true;
    for (const int64_t window : {int64_t{0}, int64_t{5}}) {
      const at::Tensor index =
          at::arange(length, at::TensorOptions().dtype(at::kLong).device(device));
      at::Tensor allowed = (index.view({1, length}) <= index.view({length, 1})).unsqueeze(0);
      if (window > 0)
        allowed = allowed.logical_and((index.view({length, 1}) - index.view({1, length})) < window);
      allowed = allowed.logical_and(document.unsqueeze(2) == document.unsqueeze(1)).unsqueeze(1);
      auto run = [&](bool varlen) {
        at::Tensor out;
        if (varlen) {
          out = varlen_causal_attention(inputs[0], inputs[1], inputs[2], sequences, window);
        } else {  // fp32 softmax over the dense mask, keys repeated per query head
          const at::Tensor key = inputs[1].to(at::kFloat).repeat_interleave(heads / kv_heads, 1);
          const at::Tensor value = inputs[2].to(at::kFloat).repeat_interleave(heads / kv_heads, 1);
          const at::Tensor scores = at::matmul(inputs[0].to(at::kFloat), key.transpose(2, 3))
                                        .mul_(1.0 / std::sqrt(static_cast<double>(head_dim)))
                                        .masked_fill(allowed.logical_not(), -INFINITY);
          out = at::matmul(at::softmax(scores, -1), value);
        }
        return output_and_gradients_on_host(out, inputs, weights);
      };
      equal = equal && kernels_agree(run(true), run(false), 3e-2);
    }
    return equal;
  });
}

}  // namespace tandem
