#include "tandem/models/dflash_attention.h"

#include <ATen/ATen.h>

#include <cmath>

#include "tandem/core/error.h"
#include "tandem/models/banded_attention.h"

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
  if (options.kernel == AttentionKernel::Dense) {
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
