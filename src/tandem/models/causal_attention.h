#pragma once
// The attention of the decoder families (target, student, policy, reference): causal, within
// packed documents, optionally over a sliding window. Which kernel runs, chosen once per forward
// and window (plan_causal_attention), never holding a (T, T) tensor unless asked to:
//   - one document per row, no window: SDPA with is_causal (flash kernels on CPU and CUDA);
//   - packed documents, no window: SDPA with is_causal on each document's slice of the row (no
//     mask, so the flash kernels still run; on CUDA they take grouped-query attention as is);
//   - a sliding window: the blockwise kernel over per-query key bands (models/banded_attention.h);
//   - on CUDA in bf16/fp16, packed documents or a window: one variable-length flash call per
//     layer (models/varlen_attention.h) in place of the two above, where its self-check passed;
//   - AttentionKernel::Dense: the earlier path, one (B, 1, T, T) boolean mask through SDPA.
// A model with attention sinks (gpt-oss, models/attention_sinks.h) runs the blockwise kernel on
// every layer, windowed or not (its running softmax starts with the sink), and the dense path
// through masked_attention_with_sinks.
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tandem/models/attention_options.h"
#include "tandem/models/key_bands.h"
#include "tandem/models/varlen_attention.h"

namespace tandem {

struct AttentionLayout;  // models/decoder.h
struct QueryKeyValue;    // models/decoder.h

struct CausalAttentionPlan {
  AttentionOptions options;
  // Per row, the columns where its documents start, then T: [0, s_1, ..., T]. Empty when every
  // row is one causal sequence.
  std::vector<std::vector<int64_t>> document_bounds;
  KeyBands window_bands;  // set for a sliding window or attention sinks (blockwise kernel)
  at::Tensor dense_mask;  // (B or 1, 1, T, T) bool, set for AttentionKernel::Dense
  // On CUDA with the fused kernel, for packed documents or a window: the documents laid end to
  // end for one variable-length flash call per layer (models/varlen_attention.h), used where
  // choose_varlen_kernel agrees at the call; the paths above otherwise.
  PackedSequences sequences;
  int64_t window = 0;
};

/// The plan for `layout` and a sliding window (0: none; a window of at least the row's length
/// is none), for a model with attention sinks when `sinks`. Reads the layout's document ids on
/// the host (its host copy when it has one).
CausalAttentionPlan plan_causal_attention(const AttentionLayout& layout, int64_t sliding_window,
                                          const AttentionOptions& options, bool sinks = false);

/// What decides which SDPA kernel can run a call.
struct SdpaCall {
  c10::DeviceType device = c10::kCPU;
  c10::ScalarType dtype = c10::kFloat;
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  bool masked = false;  // an explicit mask (else causal, no mask)
};

/// Whether sdpa() repeats K/V per query head instead of asking SDPA for grouped-query attention.
/// On CUDA only the flash kernel takes GQA, and flash needs fp16/bf16, head_dim <= 256 and a
/// multiple of 8, and no mask; a grouped call outside that would fall back to the math kernel,
/// which keeps (heads, Tq, Tk) scores for backward (2 GiB per layer and row at 32 heads x 4K).
/// With K/V repeated the memory-efficient kernel (fp32, masks, no GQA) runs instead. On the CPU
/// SDPA takes GQA as is.
bool sdpa_repeats_kv(const SdpaCall& call);

/// The operands sdpa() hands to at::scaled_dot_product_attention, after sdpa_repeats_kv.
struct SdpaOperands {
  at::Tensor k, v;
  bool enable_gqa = false;
};
SdpaOperands sdpa_operands(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const at::Tensor& mask);

/// The SDPA kernel ATen picks for these operands: "math", "flash", "efficient", "cudnn", ...
/// (at::_fused_sdp_choice). Logged once per kind of call on a GPU, and checked there by a test.
std::string sdpa_backend(const at::Tensor& q, const SdpaOperands& operands, const at::Tensor& mask);

/// SDPA with grouped-query attention: q (B, heads, Tq, d), k/v (B, kv_heads, Tk, d), mask
/// (B or 1, 1, Tq, Tk) bool (true: may attend), or undefined for causal attention (Tq = Tk).
/// `scale` multiplies the scores (0: d^-0.5); v may be narrower than d (latent attention).
at::Tensor sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                const at::Tensor& mask, double scale = 0.0);

/// q (B, heads, T, d), k/v (B, kv_heads, T, d) -> (B, heads, T, d) as the plan says (with
/// qkv.sinks when the layer has them: the plan must have been made with `sinks`).
at::Tensor causal_attention(const QueryKeyValue& qkv, const CausalAttentionPlan& plan);

/// The boolean attention mask (B or 1, 1, T, T) for `layout` and a sliding window, or an
/// undefined tensor when plain causal attention suffices. The dense kernel's; tests compare
/// against it.
at::Tensor attention_mask(const AttentionLayout& layout, int64_t sliding_window);

}  // namespace tandem
