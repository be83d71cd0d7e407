#pragma once
// The gated delta rule: the linear attention of Gated DeltaNet layers (Qwen3.5/3.6 and
// Qwen3-Next hybrids), forward only. Per value head, a state S of (K, V) runs over the tokens:
//
//   S_t = exp(g_t) S_{t-1} + k_t δ_tᵀ,   δ_t = β_t (v_t − (exp(g_t) S_{t-1})ᵀ k_t),   o_t = S_tᵀ
//   q_t
//
// with q and k L2-normalised (eps 1e-6 under the root, when asked) and q scaled by K^-1/2, in
// fp32 whatever the inputs' dtype. Query/key heads serve Hv / Hk consecutive value heads.
//
// The chunked form (training-length inputs) cuts each document into chunks of C tokens. Within a
// chunk, with Γ the cumulative log decay and S0 the state at the chunk's start:
//   A   = strictly lower part of diag(β) (K Kᵀ ⊙ exp(Γ_t − Γ_j))           (C, C)
//   U   = (I + A)⁻¹ diag(β) V,   W = (I + A)⁻¹ diag(β exp(Γ)) K          (C, V), (C, K)
//   Δ   = U − W S0                                                         (the δ_t rows)
//   O   = diag(exp(Γ)) Q S0 + (Q Kᵀ ⊙ exp(Γ_t − Γ_j), j ≤ t) Δ
//   S_C = exp(Γ_C) S0 + (K ⊙ exp(Γ_C − Γ))ᵀ Δ
// so a sequence costs T/C small triangular solves and matmuls and memory linear in T (the
// largest intermediate is (T / C) chunks of (C, C)). Packed documents never share a state: each
// document is padded to whole chunks (padding has β = 0 and g = 0, so it leaves S unchanged) and
// the state restarts at zero where a document starts, exactly as running it alone.
// The recurrent form (decoding) applies the recurrence token by token to a carried state.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace tandem {

struct GatedDeltaOptions {
  int64_t chunk_size = 64;   // tokens per chunk of the chunked form
  bool normalize_qk = true;  // L2-normalise q and k (use_qk_l2norm_in_kernel)
};

/// q, k (B, T, Hk, K); v (B, T, Hv, V); g (log decay, <= 0) and beta (B, T, Hv) ->
/// output (B, T, Hv, V) in v's dtype. `bounds`: per row, its document bounds [0, s_1, ..., T]
/// (models/key_bands.h document_bounds); empty: one document per row. `initial_state`
/// (B, Hv, K, V) fp32, or undefined for zeros, is the state before each row's first document;
/// `final_state`, when given, receives the state after each row's last token (B, Hv, K, V) fp32.
at::Tensor chunked_gated_delta_rule(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const at::Tensor& g, const at::Tensor& beta,
                                    const std::vector<std::vector<int64_t>>& bounds,
                                    const GatedDeltaOptions& options = {},
                                    const at::Tensor& initial_state = {},
                                    at::Tensor* final_state = nullptr);

/// The same recurrence token by token, one document per row, from `state` (B, Hv, K, V) fp32
/// (updated in place): the decoding path, and the reference the chunked form is tested against.
at::Tensor recurrent_gated_delta_rule(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const at::Tensor& g, const at::Tensor& beta,
                                      at::Tensor& state, bool normalize_qk = true);

}  // namespace tandem
