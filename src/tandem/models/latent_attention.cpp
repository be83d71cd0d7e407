#include "tandem/models/latent_attention.h"

#include <ATen/ATen.h>

#include <cmath>

#include "tandem/core/error.h"
#include "tandem/dist/sharding.h"
#include "tandem/models/causal_attention.h"
#include "tandem/models/decoder.h"

namespace tandem {

bool latent_attention_absorbs(const LatentAttentionConfig& c, int64_t heads, int64_t n,
                              int64_t slots) {
  const double h = static_cast<double>(heads), rank = static_cast<double>(c.kv_lora_rank);
  const double qn = static_cast<double>(n), s = static_cast<double>(slots);
  const double up = static_cast<double>(c.qk_nope_head_dim + c.v_head_dim);
  const double absorbed =
      qn * h * s * (2.0 * rank + static_cast<double>(c.qk_rope_head_dim)) + qn * h * up * rank;
  const double expanded =
      s * h * up * rank + qn * h * s * static_cast<double>(c.qk_head_dim() + c.v_head_dim);
  return absorbed < expanded;
}

LatentAttentionImpl::LatentAttentionImpl(const DecoderConfig& config,
                                         const at::TensorOptions& options)
    : shape(config.latent_attention), num_heads(config.num_attention_heads) {
  check(shape.enabled(), "[latent_attention] the config has no latent attention");
  const int64_t hidden = config.hidden_size, qk = shape.qk_head_dim();
  // transformers builds both latent norms with its RMSNorm's default eps, not rms_norm_eps.
  constexpr double kLatentNormEps = 1e-6;
  // Registered in transformers' order, so parameters list as its modules do.
  if (shape.q_lora_rank == 0) {
    q_proj = register_module("q_proj", Linear(hidden, num_heads * qk, false, options));
  } else {
    q_a_proj = register_module("q_a_proj", Linear(hidden, shape.q_lora_rank, false, options));
    q_a_layernorm =
        register_module("q_a_layernorm", RMSNorm(shape.q_lora_rank, kLatentNormEps, options));
    q_b_proj =
        register_module("q_b_proj", Linear(shape.q_lora_rank, num_heads * qk, false, options));
  }
  kv_a_proj_with_mqa =
      register_module("kv_a_proj_with_mqa",
                      Linear(hidden, shape.kv_lora_rank + shape.qk_rope_head_dim, false, options));
  kv_a_layernorm =
      register_module("kv_a_layernorm", RMSNorm(shape.kv_lora_rank, kLatentNormEps, options));
  kv_b_proj = register_module(
      "kv_b_proj", Linear(shape.kv_lora_rank,
                          num_heads * (shape.qk_nope_head_dim + shape.v_head_dim), false, options));
  o_proj = register_module("o_proj", Linear(num_heads * shape.v_head_dim, hidden, false, options));
}

at::Tensor LatentAttentionImpl::rotate(const at::Tensor& x, const RopeTables& rope) const {
  if (!shape.rope_interleave) return apply_rope(x, rope);
  // (..., d) as (..., d/2, 2) pairs -> (..., 2, d/2): the evens, then the odds.
  const at::Tensor pairs = x.unflatten(-1, {shape.qk_rope_head_dim / 2, 2});
  return apply_rope(pairs.transpose(-1, -2).flatten(-2), rope);
}

std::pair<at::Tensor, at::Tensor> LatentAttentionImpl::query(const at::Tensor& x,
                                                             const RopeTables& rope) const {
  const int64_t batch = x.size(0), length = x.size(1);
  const at::Tensor q =
      q_proj ? q_proj->forward(x) : q_b_proj->forward(q_a_layernorm->forward(q_a_proj->forward(x)));
  const at::Tensor heads =
      q.view({batch, length, num_heads, shape.qk_head_dim()}).transpose(1, 2);  // (B, h, T, qk)
  return {heads.narrow(-1, 0, shape.qk_nope_head_dim),
          rotate(heads.narrow(-1, shape.qk_nope_head_dim, shape.qk_rope_head_dim), rope)};
}

at::Tensor LatentAttentionImpl::latent(const at::Tensor& x, const RopeTables& rope) const {
  const int64_t batch = x.size(0), length = x.size(1);
  const at::Tensor compressed = kv_a_proj_with_mqa->forward(x);  // (B, T, rank + rope)
  const at::Tensor c = kv_a_layernorm->forward(compressed.narrow(-1, 0, shape.kv_lora_rank));
  const at::Tensor k_rope = compressed.narrow(-1, shape.kv_lora_rank, shape.qk_rope_head_dim)
                                .reshape({batch, 1, length, shape.qk_rope_head_dim});
  return at::cat({c.unsqueeze(1), rotate(k_rope, rope)}, -1);  // (B, 1, T, rank + rope)
}

std::pair<at::Tensor, at::Tensor> LatentAttentionImpl::expand(const at::Tensor& latent) const {
  const int64_t batch = latent.size(0), slots = latent.size(2);
  const int64_t nope = shape.qk_nope_head_dim, rope_dims = shape.qk_rope_head_dim;
  const at::Tensor c = latent.narrow(-1, 0, shape.kv_lora_rank).squeeze(1);  // (B, S, rank)
  const at::Tensor up = kv_b_proj->forward(c)
                            .view({batch, slots, num_heads, nope + shape.v_head_dim})
                            .transpose(1, 2);  // (B, h, S, nope + v)
  const at::Tensor k_rope =
      latent.narrow(-1, shape.kv_lora_rank, rope_dims).expand({batch, num_heads, slots, rope_dims});
  return {at::cat({up.narrow(-1, 0, nope), k_rope}, -1), up.narrow(-1, nope, shape.v_head_dim)};
}

QueryKeyValue LatentAttentionImpl::project(const at::Tensor& x, const RopeTables& rope) const {
  auto [q_nope, q_rope] = query(x, rope);
  auto [k, v] = expand(latent(x, rope));
  at::Tensor q = at::cat({q_nope, q_rope}, -1);
  if (shape.softmax_scale_factor != 1.0) q = q * shape.softmax_scale_factor;
  const int64_t pad = shape.qk_head_dim() - shape.v_head_dim;
  return {q, k, pad > 0 ? at::constant_pad_nd(v, {0, pad}) : v, at::Tensor()};
}

at::Tensor LatentAttentionImpl::output(const at::Tensor& attended) const {
  const int64_t batch = attended.size(0), length = attended.size(2);
  return o_proj->forward(attended.narrow(-1, 0, shape.v_head_dim)
                             .transpose(1, 2)
                             .reshape({batch, length, num_heads * shape.v_head_dim}));
}

at::Tensor LatentAttentionImpl::forward_cached(const at::Tensor& x, const RopeTables& rope,
                                               const at::Tensor& mask, KvCache& cache,
                                               int64_t layer, LatentCachePath path) const {
  const int64_t batch = x.size(0), n = x.size(1);
  auto [q_nope, q_rope] = query(x, rope);
  const at::Tensor latents = cache.append_latent(layer, latent(x, rope));  // (B, 1, S, r + rope)
  const int64_t slots = latents.size(2), rank = shape.kv_lora_rank;
  const double scale =
      shape.softmax_scale_factor / std::sqrt(static_cast<double>(shape.qk_head_dim()));
  const bool absorb =
      path == LatentCachePath::Absorbed ||
      (path == LatentCachePath::Auto && latent_attention_absorbs(shape, num_heads, n, slots));
  if (!absorb) {
    auto [k, v] = expand(latents);
    return output(sdpa(at::cat({q_nope, q_rope}, -1), k, v, mask, scale));
  }
  // kv_b_proj (h (nope + v), rank) as per-head maps from the latent: the keys' W_k (h, nope, rank)
  // and the values' W_v (h, v, rank). q_nope . (W_k c) = (q_nope W_k) . c, and the values'
  // W_v (sum_j p_j c_j): every head attends to the one latent key head [c | k_rope].
  const at::Tensor attended = with_full_parameters(
      {kv_b_proj->weight}, {q_nope, q_rope, latents, mask}, [&](const auto& in, const auto& w) {
        const at::Tensor up =
            w[0].view({num_heads, shape.qk_nope_head_dim + shape.v_head_dim, rank});
        const at::Tensor w_k = up.narrow(1, 0, shape.qk_nope_head_dim);  // (h, nope, rank)
        const at::Tensor w_v = up.narrow(1, shape.qk_nope_head_dim, shape.v_head_dim);
        const at::Tensor q_latent = at::matmul(in[0], w_k);  // (B, h, n, rank)
        // Heads folded into the queries of one head: (B, 1, h n, rank + rope), mask to match.
        const at::Tensor q = at::cat({q_latent, in[1]}, -1).reshape({batch, 1, num_heads * n, -1});
        const at::Tensor seen =
            in[3].expand({batch, num_heads, n, slots}).reshape({batch, 1, num_heads * n, slots});
        const at::Tensor mixed = sdpa(q, in[2], in[2].narrow(-1, 0, rank), seen, scale)
                                     .view({batch, num_heads, n, rank});
        return std::vector<at::Tensor>{at::matmul(mixed, w_v.transpose(1, 2))};  // (B, h, n, v)
      })[0];
  return output(attended);
}

}  // namespace tandem
