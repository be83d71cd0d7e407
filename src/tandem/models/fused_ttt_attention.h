#pragma once
// EAGLE-3's test-time-training attention (models/ttt_attention.h) through ATen's fused causal
// attention, merged by log-sum-exp with the keys of the earlier unroll steps.
//
// At unroll step i a query sees its document's step-0 keys up to itself (plain causal attention
// within the document) and one key per later step at its own position. So
//   1. each document of each row is one fused causal call over the step-0 keys, which returns
//      its output O_c and log-sum-exp c per query (the flash kernels on the CPU and on CUDA);
//   2. the step keys' scores s_j = q . k_j * scale join in closed form:
//        L = logsumexp(c, s_1, ..., s_i),  O = exp(c - L) O_c + sum_j exp(s_j - L) v_j.
// Backward: the fused kernel's own backward, given the merged O and L in place of its own
// output and log-sum-exp, yields the exact gradients of q, k and v through the context keys
// (its probabilities exp(q.k - L) and its D = rowsum(dO * O) are then the merged softmax's);
// the step keys' terms are analytic: p_j = exp(s_j - L), ds_j = p_j (dO . v_j - D),
// dq += ds_j k_j scale, dk_j = ds_j q scale, dv_j = p_j dO.
//
// Memory stays linear in T (nothing of size T x T is formed) and a step issues a handful of
// operations per document instead of the blockwise kernel's ~20 per tile.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <string>
#include <vector>

#include "tandem/models/attention_options.h"
#include "tandem/models/kernel_choice.h"
#include "tandem/models/key_bands.h"

namespace tandem {

/// The policy (pure: no tensors): `dense` and `blockwise` as asked; `fused` on the CPU for fp32,
/// bf16 and fp16 (ATen's CPU flash kernel), on CUDA for bf16/fp16 with a head dim that is a
/// multiple of 8 up to 256 where the device runs the flash kernel and the fused kernel passed its
/// self-check there (`cuda_flash`: cuda_flash_attention_runs, models/kernel_choice.h, and
/// fused_ttt_attention_verified, models/ttt_attention.h), the
/// blockwise kernel otherwise.
KernelChoice choose_ttt_kernel(AttentionKernel asked, c10::DeviceType device, c10::ScalarType dtype,
                               int64_t head_dim, bool cuda_flash);

/// The documents of each row as (row, start, length), (S, 3) int64 on the host, when `bands` are
/// causal within documents (each query sees its document's keys up to itself: causal_key_bands
/// without a window); undefined otherwise (a window, a query that sees nothing), where the fused
/// kernel does not apply. Read from the bands' host copies: no device wait.
at::Tensor causal_document_segments(const KeyBands& bands);

/// The fused TTT attention. q (B, heads, T, d); context_k/context_v (B, kv_heads, T, d), each
/// query seeing its document's keys up to itself, the documents given by `segments`
/// (causal_document_segments); step_k/step_v: one (B, kv_heads, T, d) per later step, aligned
/// with the queries. Returns (B, heads, T, d) in q's dtype; differentiable in q, the context and
/// every step tensor.
at::Tensor fused_ttt_attention(const at::Tensor& q, const at::Tensor& context_k,
                               const at::Tensor& context_v, const at::Tensor& segments,
                               const std::vector<at::Tensor>& step_k,
                               const std::vector<at::Tensor>& step_v);

}  // namespace tandem
