#pragma once
// The decoders' causal attention over packed documents and sliding windows on CUDA as one call
// of ATen's variable-length flash kernel per layer (`_flash_attention_forward` with sequence
// offsets), instead of one SDPA call per document (packed rows) or the blockwise kernel
// (sliding windows). The documents of every row are laid end to end as one (B * T, heads, d)
// sequence; `offsets` say where each document starts; a window is the kernel's own left window.
// CUDA only (ATen has no CPU variable-length kernel): on the CPU and wherever the policy says no,
// models/causal_attention.h keeps its per-document and blockwise paths.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <vector>

#include "tandem/models/attention_options.h"
#include "tandem/models/kernel_choice.h"

namespace tandem {

/// The documents of B rows of T tokens laid end to end: offsets (n + 1,) int32 (row b's document
/// bounds [0, s_1, ..., T] shifted by b * T), and the longest document's length. `bounds` per row
/// as document_bounds (models/key_bands.h); empty means one document per row.
struct PackedSequences {
  at::Tensor offsets;  // (n + 1,) int32 on the device
  int64_t longest = 0;
};
PackedSequences packed_sequences(const std::vector<std::vector<int64_t>>& bounds, int64_t rows,
                                 int64_t length, const c10::Device& device);

/// The policy (pure): `dense` and `blockwise` as asked (no variable-length call); `fused` on CUDA
/// for bf16/fp16 with a head dim that is a multiple of 8 up to 256 where the kernel was verified
/// on the device (`cuda_verified`: cuda_flash_attention_runs and varlen_attention_verified);
/// the per-document / blockwise paths otherwise (kernel Blockwise, with the reason).
KernelChoice choose_varlen_kernel(AttentionKernel asked, c10::DeviceType device,
                                  c10::ScalarType dtype, int64_t head_dim, bool cuda_verified);

/// Whether the variable-length kernel runs on `device` for this dtype and head dim and equals a
/// dense fp32 reference there: two rows, one of two documents, grouped-query attention, with
/// and without a window; the output and every input gradient. Tried once per kind and
/// remembered; false when it throws or differs.
bool varlen_attention_verified(const c10::Device& device, c10::ScalarType dtype, int64_t head_dim);

/// q (B, heads, T, d), k/v (B, kv_heads, T, d) -> (B, heads, T, d): causal attention within each
/// document of `sequences`, over the last `window` keys when window > 0. Differentiable in q, k
/// and v (ATen's backward of the kernel).
at::Tensor varlen_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const PackedSequences& sequences, int64_t window);

}  // namespace tandem
