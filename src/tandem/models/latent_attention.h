#pragma once
// DeepSeek-V3's multi-head latent attention (MLA; DeepSeek-V2 paper), as transformers'
// DeepseekV3Attention computes it, with the checkpoint's module names:
//
//   query   q = q_b_proj(q_a_layernorm(q_a_proj(x)))  or  q_proj(x)     (B, T, heads * qk)
//           per head [q_nope (qk_nope) | q_rope (qk_rope)], RoPE on q_rope
//   latent  [c (kv_lora_rank) | k_rope (qk_rope)] = kv_a_proj_with_mqa(x); c = kv_a_layernorm(c);
//           RoPE on k_rope: one key head shared by every query head
//   keys    per head [k_nope | k_rope], values v, with [k_nope | v] = kv_b_proj(c) per head
//   output  o_proj(softmax(q k^T * qk^-0.5 * m^2) v)     (m: LatentAttentionConfig)
//
// With rope_interleave the RoPE dims are stored as pairs (x0, x1), (x2, x3), ...; they are
// de-interleaved (evens, then odds) and rotated in the rotate-half layout, which is transformers'
// arithmetic. The uncached forward hands the kernels of the other families (causal, packed,
// blockwise, varlen) q, k of qk dims and v zero-padded to qk dims, with the m^2 correction folded
// into q; `output` drops the padding. The KV cache keeps the latent form, [c | k_rope] per token
// (kv_lora_rank + qk_rope values: 576 for DeepSeek-V3, against heads x (qk + v) = 40,960 for full
// keys and values), and attends either by expanding it through kv_b_proj (as transformers does)
// or by absorbing kv_b_proj into the query and the output (one shared key head of 576 dims), the
// cheaper of the two for the call (latent_attention_absorbs).
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "tandem/models/decoder_config.h"
#include "tandem/models/kv_cache.h"
#include "tandem/models/layers.h"
#include "tandem/models/rope.h"

namespace tandem {

struct QueryKeyValue;  // models/decoder.h

/// How a cached call attends over the latent cache.
enum class LatentCachePath {
  Auto,      // the cheaper of the two for this call (latent_attention_absorbs)
  Expanded,  // every cached latent through kv_b_proj to full keys and values
  Absorbed,  // kv_b_proj folded into the query and the output
};

/// Whether attending n new tokens over `slots` cached ones costs fewer multiply-adds absorbed
/// (n (2 kv_lora_rank + qk_rope) slots + 2 n heads qk_nope-or-v kv_lora_rank) than expanded
/// (slots heads (qk_nope + v) kv_lora_rank + n slots heads (qk + v)). Decoding steps absorb;
/// long prefills expand.
bool latent_attention_absorbs(const LatentAttentionConfig& config, int64_t heads, int64_t n,
                              int64_t slots);

class LatentAttentionImpl : public torch::nn::Module {
 public:
  LatentAttentionImpl(const DecoderConfig& config, const at::TensorOptions& options);
  /// x (B, T, H) -> q (B, heads, T, qk) times m^2, k (B, heads, T, qk), v (B, heads, T, qk):
  /// the values zero-padded from v_head_dim. RoPE applied; for the kernels of every family.
  QueryKeyValue project(const at::Tensor& x, const RopeTables& rope) const;
  /// Attended values (B, heads, T, qk or v_head_dim) -> (B, T, H): the values' own dims through
  /// o_proj.
  at::Tensor output(const at::Tensor& attended) const;
  /// Generation: x (B, n, H) of n new slots of layer `layer` of `cache` (its latent form); `mask`
  /// (B, 1, n, slots) bool: which slots each new one sees. -> (B, n, H).
  at::Tensor forward_cached(const at::Tensor& x, const RopeTables& rope, const at::Tensor& mask,
                            KvCache& cache, int64_t layer,
                            LatentCachePath path = LatentCachePath::Auto) const;

  Linear q_proj{nullptr}, q_a_proj{nullptr}, q_b_proj{nullptr};
  RMSNorm q_a_layernorm{nullptr};
  Linear kv_a_proj_with_mqa{nullptr};
  RMSNorm kv_a_layernorm{nullptr};
  Linear kv_b_proj{nullptr}, o_proj{nullptr};
  LatentAttentionConfig shape;
  int64_t num_heads;

 private:
  /// x (B, T, H) -> q_nope (B, heads, T, qk_nope), q_rope (B, heads, T, qk_rope) rotated.
  std::pair<at::Tensor, at::Tensor> query(const at::Tensor& x, const RopeTables& rope) const;
  /// x (B, T, H) -> [c | k_rope] (B, 1, T, kv_lora_rank + qk_rope): c normed, k_rope rotated.
  at::Tensor latent(const at::Tensor& x, const RopeTables& rope) const;
  /// latent (B, 1, S, kv_lora_rank + qk_rope) -> k (B, heads, S, qk), v (B, heads, S, v_head_dim).
  std::pair<at::Tensor, at::Tensor> expand(const at::Tensor& latent) const;
  /// RoPE on x (B, heads, T, qk_rope), de-interleaving it first with rope_interleave.
  at::Tensor rotate(const at::Tensor& x, const RopeTables& rope) const;
};
TORCH_MODULE(LatentAttention);

}  // namespace tandem
