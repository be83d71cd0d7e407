#pragma once
// The DFlash draft's attention (models/dflash_attention.h) through ATen's fused attention kernels,
// merged by log-sum-exp with each block's own keys.
//
// A query of block i sees the context keys [first_i, last_i] (its anchor's document, strictly
// before the anchor) and the bs keys of its own block. So
//   1. the blocks of a row go through the fused kernel a chunk of whole blocks at a time
//      (attention.query_chunk queries), over the key range their bands span, with an additive mask
//      (0 inside each query's band, -1e30 outside, fp16's lowest value in fp16: a query that sees
//      no context key gets a log-sum-exp near it, which the merge turns into weight 0); the kernel
//      returns each query's output O_c and log-sum-exp c: the CPU flash kernel, or on CUDA the
//      memory-efficient kernel (the CUDA flash kernel takes no mask);
//   2. the own-block scores s_k = q . k_k * scale join in closed form:
//        L = logsumexp(c, s_1, ..., s_bs),  O = exp(c - L) O_c + sum_k exp(s_k - L) v_k.
// Backward: the fused kernel's own backward, given the merged O and L, yields the exact gradients
// through the context keys; the own-block terms are analytic (p_k = exp(s_k - L),
// ds_k = p_k (dO . v_k - D), D = rowsum(dO * O)), as in models/fused_ttt_attention.h.
//
// The mask of one call is (query_chunk, keys its blocks span): memory linear in the context
// length. The kernel computes the masked pairs too (the blockwise kernel skips whole tiles), but in
// a handful of calls per chunk instead of ~20 operations per tile.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "tandem/models/attention_options.h"
#include "tandem/models/kernel_choice.h"
#include "tandem/models/key_bands.h"

namespace tandem {

/// The policy (pure: no tensors): `dense` and `blockwise` as asked; `fused` on the CPU for fp32,
/// bf16 and fp16 (ATen's CPU flash kernel takes a mask), on CUDA for fp32, bf16 and fp16 with a
/// head dim that is a multiple of 8 up to 256 where the memory-efficient kernel was verified on
/// the device for this dtype and head dim (`cuda_verified`: fused_dflash_attention_verified,
/// models/dflash_attention.h), the blockwise kernel otherwise.
KernelChoice choose_dflash_kernel(AttentionKernel asked, c10::DeviceType device,
                                  c10::ScalarType dtype, int64_t head_dim, bool cuda_verified);

/// The fused DFlash attention. q (B, heads, Q, d) block queries (slot k of block i at column
/// i * bs + k); context_k/context_v (B, kv_heads, S, d); block_k/block_v (B, kv_heads, Q, d);
/// context_bands (B, Q): the context keys each query sees (the same for every query of a block);
/// block_valid (B, A) bool, Q = A * bs. `query_chunk` queries per fused call (rounded down to whole
/// blocks, at least one). Returns (B, heads, Q, d) in q's dtype, 0 for invalid blocks;
/// differentiable in q and the four key/value tensors.
at::Tensor fused_dflash_attention(const at::Tensor& q, const at::Tensor& context_k,
                                  const at::Tensor& context_v, const at::Tensor& block_k,
                                  const at::Tensor& block_v, const KeyBands& context_bands,
                                  const at::Tensor& block_valid, int64_t query_chunk);

}  // namespace tandem
