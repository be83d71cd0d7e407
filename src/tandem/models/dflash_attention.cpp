#include "tandem/models/dflash_attention.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <tuple>

#include "tandem/core/device.h"
#include "tandem/core/error.h"
#include "tandem/models/banded_attention.h"
#include "tandem/models/fused_dflash_attention.h"
#include "tandem/models/kernel_choice.h"

namespace tandem {

namespace {

// The dense reference: one (bs, S + bs) score block per block query row, the context part
// masked by context_mask (B, A, S).
at::Tensor dense_dflash_attention(const at::Tensor& q, const at::Tensor& context_k,
                                  const at::Tensor& context_v, const at::Tensor& block_k,
                                  const at::Tensor& block_v, const at::Tensor& context_mask,
                                  const at::Tensor& block_valid) {
  check(q.dim() == 4 && context_k.dim() == 4 && context_v.sizes() == context_k.sizes() &&
            block_k.dim() == 4 && block_v.sizes() == block_k.sizes(),
        "[dflash_attention] q must be (B, heads, Q, d) and keys/values (B, kv_heads, T, d); got ",
        q.sizes(), ", ", context_k.sizes(), " and ", block_k.sizes());
  const int64_t batch = q.size(0), heads = q.size(1), queries = q.size(2), dim = q.size(3);
  const int64_t kv_heads = context_k.size(1), length = context_k.size(2);
  check(heads % kv_heads == 0, "[dflash_attention] ", heads, " query heads are not a multiple of ",
        kv_heads, " key/value heads");
  check(context_mask.dim() == 3 && context_mask.size(0) == batch &&
            context_mask.size(2) == length &&
            block_valid.sizes() == context_mask.sizes().slice(0, 2),
        "[dflash_attention] context_mask must be (B, A, S) = (", batch, ", A, ", length,
        ") and block_valid (B, A); got ", context_mask.sizes(), " and ", block_valid.sizes());
  const int64_t blocks = context_mask.size(1);
  check(blocks > 0 && queries % blocks == 0 && block_k.size(2) == queries, "[dflash_attention] ",
        queries, " queries and ", block_k.size(2), " block keys do not make ", blocks,
        " equal blocks");
  const int64_t block_size = queries / blocks, groups = heads / kv_heads;
  const at::ScalarType compute = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));

  // Query head j * groups + r reads kv head j: split heads as (kv_heads, groups) and broadcast
  // the keys over the groups instead of copying them.
  const at::Tensor query = q.to(compute).reshape({batch, kv_heads, groups, queries, dim});
  const at::Tensor context_keys = context_k.to(compute).unsqueeze(2);    // (B, kvh, 1, S, d)
  const at::Tensor context_values = context_v.to(compute).unsqueeze(2);  // (B, kvh, 1, S, d)
  const std::vector<int64_t> per_block = {batch, kv_heads, 1, blocks, block_size, dim};
  const at::Tensor block_keys = block_k.to(compute).reshape(per_block);    // (B, kvh, 1, A, bs, d)
  const at::Tensor block_values = block_v.to(compute).reshape(per_block);  // (B, kvh, 1, A, bs, d)
  const at::Tensor block_queries =
      query.reshape({batch, kv_heads, groups, blocks, block_size, dim});  // (B, kvh, g, A, bs, d)

  const at::Tensor visible = context_mask.to(at::kBool).view({batch, 1, 1, blocks, 1, length});
  const at::Tensor context_scores =
      at::matmul(query, context_keys.transpose(-1, -2))
          .mul_(scale)
          .view({batch, kv_heads, groups, blocks, block_size, length})
          .masked_fill(visible.logical_not(), -INFINITY);  // (B, kvh, g, A, bs, S)
  const at::Tensor block_scores = at::matmul(block_queries, block_keys.transpose(-1, -2))
                                      .mul_(scale);  // (B, kvh, g, A, bs, bs)
  const at::Tensor valid = block_valid.to(compute).view({batch, 1, 1, blocks, 1, 1});
  const at::Tensor probabilities =
      at::softmax(at::cat({context_scores, block_scores}, -1), -1) * valid;  // (.., bs, S + bs)

  const at::Tensor from_context = at::matmul(
      probabilities.narrow(-1, 0, length).reshape({batch, kv_heads, groups, queries, length}),
      context_values);  // (B, kvh, g, Q, d)
  const at::Tensor from_block =
      at::matmul(probabilities.narrow(-1, length, block_size), block_values);  // (.., A, bs, d)
  return (from_context + from_block.reshape({batch, kv_heads, groups, queries, dim}))
      .reshape({batch, heads, queries, dim})
      .to(q.scalar_type());
}

}  // namespace

at::Tensor dflash_attention(const at::Tensor& q, const at::Tensor& context_k,
                            const at::Tensor& context_v, const at::Tensor& block_k,
                            const at::Tensor& block_v, const KeyBands& context_bands,
                            const at::Tensor& block_valid, const AttentionOptions& options) {
  check(q.dim() == 4 && block_k.dim() == 4 && block_v.sizes() == block_k.sizes() &&
            block_k.size(2) == q.size(2) && block_valid.dim() == 2 &&
            block_valid.size(0) == q.size(0) && block_valid.size(1) > 0 &&
            q.size(2) % block_valid.size(1) == 0,
        "[dflash_attention] ", q.size(2), " queries and block keys ", block_k.sizes(),
        " do not make ", block_valid.sizes(), " equal blocks");
  const int64_t blocks = block_valid.size(1), block_size = q.size(2) / blocks;
  const KernelChoice choice = choose_dflash_kernel(
      options.kernel, q.device().type(), q.scalar_type(), q.size(3),
      q.is_cuda() && options.kernel == AttentionKernel::Fused &&
          fused_dflash_attention_verified(q.device(), q.scalar_type(), q.size(3)));
  if (q.is_cuda()) log_kernel_choice_once("DFlash", q, choice);
  if (choice.kernel == AttentionKernel::Fused)
    return fused_dflash_attention(q, context_k, context_v, block_k, block_v, context_bands,
                                  block_valid, options.query_chunk);
  if (choice.kernel == AttentionKernel::Dense) {
    const at::Tensor per_block_rows =  // the first query of each block: (B, A, S)
        context_bands.dense_mask(context_k.size(2)).slice(1, 0, c10::nullopt, block_size);
    return dense_dflash_attention(q, context_k, context_v, block_k, block_v, per_block_rows,
                                  block_valid);
  }
  const std::vector<int64_t> per_block = {block_k.size(0), block_k.size(1), blocks, block_size,
                                          block_k.size(3)};
  return banded_attention(q, context_k, context_v, context_bands, block_k.reshape(per_block),
                          block_v.reshape(per_block), block_valid, options);
}

bool fused_dflash_attention_verified(const c10::Device& device, c10::ScalarType dtype,
                                     int64_t head_dim) {
  return remembered_check(check_kind("fused dflash", device, dtype, head_dim), [&] {
    // Two rows of three blocks of 8 over 40 context keys, 4 query heads on 2 key heads; row 0's
    // first block sees no context, row 1's last block is invalid.
    const int64_t block_size = 8, blocks = 3, length = 40, queries = blocks * block_size;
    const at::Tensor anchors = at::tensor({0, 9, 30, 5, 17, 0}, at::kLong).view({2, blocks});
    const at::Tensor valid = at::tensor({1, 1, 1, 1, 1, 0}, at::kLong).view({2, blocks}) == 1;
    const at::Tensor first = at::zeros({2, blocks}, at::kLong);
    const at::Tensor last = at::where(valid, anchors - 1, -1);
    const KeyBands bands = KeyBands::from_host(first.repeat_interleave(block_size, 1),
                                               last.repeat_interleave(block_size, 1), device);
    const at::TensorOptions options = at::TensorOptions().dtype(dtype).device(device);
    const at::Generator generator = at::detail::createCPUGenerator(20261126);
    auto random = [&](std::vector<int64_t> sizes) {
      return at::randn(sizes, generator).to(options).requires_grad_(true);
    };
    const std::vector<at::Tensor> inputs = {
        random({2, 4, queries, head_dim}), random({2, 2, length, head_dim}),
        random({2, 2, length, head_dim}), random({2, 2, queries, head_dim}),
        random({2, 2, queries, head_dim})};
    const at::Tensor weights = at::randn({2, 4, queries, head_dim}, generator).to(options);
    const at::Tensor valid_device = to_device(valid, device);
    auto run = [&](bool fused) {
      const at::Tensor out =
          fused ? fused_dflash_attention(inputs[0], inputs[1], inputs[2], inputs[3], inputs[4],
                                         bands, valid_device, 16)
                : dense_dflash_attention(
                      inputs[0], inputs[1], inputs[2], inputs[3], inputs[4],
                      bands.dense_mask(length).slice(1, 0, c10::nullopt, block_size), valid_device);
      return output_and_gradients_on_host(out, inputs, weights);
    };
    return kernels_agree(run(true), run(false), dtype == at::kFloat ? 1e-4 : 3e-2);
  });
}

at::Tensor dflash_dense_mask(const at::Tensor& context_mask, const at::Tensor& block_valid,
                             int64_t block_size) {
  const int64_t batch = context_mask.size(0), blocks = context_mask.size(1);
  const at::Tensor valid = block_valid.to(at::kBool).unsqueeze(2);  // (B, A, 1)
  const at::Tensor block_of_key =
      at::arange(blocks * block_size, context_mask.options().dtype(at::kLong))
          .div(block_size, "floor");
  const at::Tensor own = at::arange(blocks, block_of_key.options()).view({1, blocks, 1}) ==
                         block_of_key.view({1, 1, blocks * block_size});  // (1, A, A * bs)
  const at::Tensor per_block =
      at::cat({context_mask.to(at::kBool), own.expand({batch, blocks, blocks * block_size})}, 2)
          .logical_and(valid);                        // (B, A, S + A * bs)
  return per_block.repeat_interleave(block_size, 1);  // (B, A * bs, S + A * bs)
}

}  // namespace tandem
