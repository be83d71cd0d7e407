#include "tandem/models/gated_delta_rule.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "tandem/core/device.h"
#include "tandem/core/error.h"

namespace tandem {
namespace {

// The inputs in fp32, the query/key heads repeated to the value heads, q and k normalised and q
// scaled by K^-1/2: q, k (B, T, Hv, K), v (B, T, Hv, V), g and beta (B, T, Hv).
struct Prepared {
  at::Tensor q, k, v, g, beta;
};

Prepared prepare(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                 const at::Tensor& beta, bool normalize_qk) {
  check(q.dim() == 4 && k.sizes() == q.sizes() && v.dim() == 4, "[gated-delta] q and k must be ",
        "(B, T, Hk, K) alike and v (B, T, Hv, V); got q ", q.sizes(), ", k ", k.sizes(), ", v ",
        v.sizes());
  const int64_t B = q.size(0), T = q.size(1), Hk = q.size(2), Hv = v.size(2);
  check(v.size(0) == B && v.size(1) == T && Hv % Hk == 0, "[gated-delta] v ", v.sizes(),
        " does not fit q ", q.sizes(), " (value heads must be a multiple of the key heads)");
  check(g.sizes() == at::IntArrayRef({B, T, Hv}) && beta.sizes() == g.sizes(),
        "[gated-delta] g and beta must be (B, T, Hv) = (", B, ", ", T, ", ", Hv, "); got g ",
        g.sizes(), ", beta ", beta.sizes());
  Prepared out{q.to(at::kFloat), k.to(at::kFloat), v.to(at::kFloat), g.to(at::kFloat),
               beta.to(at::kFloat)};
  if (Hv != Hk) {
    out.q = out.q.repeat_interleave(Hv / Hk, 2);
    out.k = out.k.repeat_interleave(Hv / Hk, 2);
  }
  if (normalize_qk) {
    out.q = out.q * at::rsqrt(out.q.square().sum(-1, true) + 1e-6);
    out.k = out.k * at::rsqrt(out.k.square().sum(-1, true) + 1e-6);
  }
  out.q = out.q * (1.0 / std::sqrt(static_cast<double>(q.size(3))));
  return out;
}

// Where each chunk's tokens come from: `index` (B * M * C,) positions into the flattened
// (B * T + 1) tokens, B * T standing for padding; `restart` (B, M) 1 where a chunk starts a
// document after a row's first (its state starts at zero).
struct ChunkLayout {
  at::Tensor index;
  at::Tensor restart;
  int64_t chunks = 0;  // M: chunks per row (the longest row's; shorter rows end in padding)
};

ChunkLayout chunk_layout(const std::vector<std::vector<int64_t>>& bounds, int64_t B, int64_t T,
                         int64_t C) {
  check(bounds.empty() || static_cast<int64_t>(bounds.size()) == B, "[gated-delta] ", bounds.size(),
        " rows of document bounds for ", B, " rows");
  const int64_t pad = B * T;
  std::vector<std::vector<int64_t>> rows(B);
  std::vector<std::vector<uint8_t>> restarts(B);
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<int64_t> one = {0, T};
    const std::vector<int64_t>& row = bounds.empty() ? one : bounds[b];
    check(row.size() >= 2 && row.front() == 0 && row.back() == T &&
              std::is_sorted(row.begin(), row.end()),
          "[gated-delta] row ", b, ": document bounds must rise from 0 to ", T);
    for (size_t d = 0; d + 1 < row.size(); ++d) {
      const int64_t begin = row[d], end = row[d + 1];
      if (end == begin) continue;
      const int64_t chunks = (end - begin + C - 1) / C;
      for (int64_t c = 0; c < chunks; ++c) restarts[b].push_back(c == 0 && d > 0);
      for (int64_t t = begin; t < begin + chunks * C; ++t)
        rows[b].push_back(t < end ? b * T + t : pad);
    }
  }
  ChunkLayout layout;
  for (const auto& row : rows) layout.chunks = std::max<int64_t>(layout.chunks, row.size() / C);
  std::vector<int64_t> index;
  std::vector<float> restart;
  for (int64_t b = 0; b < B; ++b) {
    rows[b].resize(layout.chunks * C, pad);
    restarts[b].resize(layout.chunks, 0);
    index.insert(index.end(), rows[b].begin(), rows[b].end());
    restart.insert(restart.end(), restarts[b].begin(), restarts[b].end());
  }
  layout.index = at::tensor(index, at::kLong);
  layout.restart = at::tensor(restart, at::kFloat).view({B, layout.chunks});
  return layout;
}

// x (B, T, H, ...) gathered into chunks: (B, H, M, C, ...), padding zero.
at::Tensor to_chunks(const at::Tensor& x, const at::Tensor& index, int64_t M, int64_t C) {
  const int64_t B = x.size(0), T = x.size(1);
  std::vector<int64_t> row_shape(x.sizes().begin() + 2, x.sizes().end());  // (H, ...)
  std::vector<int64_t> flat = {B * T};
  flat.insert(flat.end(), row_shape.begin(), row_shape.end());
  std::vector<int64_t> one = {1};
  one.insert(one.end(), row_shape.begin(), row_shape.end());
  const at::Tensor padded = at::cat({x.reshape(flat), at::zeros(one, x.options())});
  std::vector<int64_t> shape = {B, M, C};
  shape.insert(shape.end(), row_shape.begin(), row_shape.end());
  at::Tensor chunks = padded.index_select(0, index).view(shape);  // (B, M, C, H, ...)
  return x.dim() == 4 ? chunks.permute({0, 3, 1, 2, 4}) : chunks.permute({0, 3, 1, 2});
}

}  // namespace

at::Tensor chunked_gated_delta_rule(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const at::Tensor& g, const at::Tensor& beta,
                                    const std::vector<std::vector<int64_t>>& bounds,
                                    const GatedDeltaOptions& options,
                                    const at::Tensor& initial_state, at::Tensor* final_state) {
  check(options.chunk_size >= 1 && options.chunk_size <= 1024,
        "[gated-delta] chunk_size must lie in 1..1024, got ", options.chunk_size);
  const Prepared in = prepare(q, k, v, g, beta, options.normalize_qk);
  const int64_t B = q.size(0), T = q.size(1), H = v.size(2), K = q.size(3), V = v.size(3);
  const int64_t C = options.chunk_size;
  const ChunkLayout layout = chunk_layout(bounds, B, T, C);
  const int64_t M = layout.chunks;
  const at::Tensor index = to_device(layout.index, q.device());
  const at::Tensor keep = to_device(1 - layout.restart, q.device()).view({B, M, 1, 1, 1});

  // (B, H, M, C, D) and (B, H, M, C).
  const at::Tensor Q = to_chunks(in.q, index, M, C), Kc = to_chunks(in.k, index, M, C);
  const at::Tensor Vc = to_chunks(in.v, index, M, C);
  const at::Tensor G = to_chunks(in.g, index, M, C), Beta = to_chunks(in.beta, index, M, C);

  const at::Tensor gamma = G.cumsum(-1);  // Γ (B, H, M, C)
  const at::Tensor lower = at::ones({C, C}, q.options().dtype(at::kBool)).tril();
  // exp(Γ_t − Γ_j) for j <= t, 0 above the diagonal (masked before exp: no overflow).
  const at::Tensor decay =
      (gamma.unsqueeze(-1) - gamma.unsqueeze(-2)).masked_fill(lower.logical_not(), -INFINITY).exp();
  const at::Tensor Kt = Kc.transpose(-1, -2);
  // A: strictly lower (the solve is unitriangular: its diagonal and upper part are not read).
  const at::Tensor A = Beta.unsqueeze(-1) * at::matmul(Kc, Kt) * decay;
  const at::Tensor U = at::linalg_solve_triangular(A, Beta.unsqueeze(-1) * Vc, /*upper=*/false,
                                                   /*left=*/true, /*unitriangular=*/true);
  const at::Tensor W =
      at::linalg_solve_triangular(A, (Beta * gamma.exp()).unsqueeze(-1) * Kc, false, true, true);
  const at::Tensor intra = at::matmul(Q, Kt) * decay;  // (B, H, M, C, C)
  const at::Tensor Qd = Q * gamma.exp().unsqueeze(-1);
  const at::Tensor last = gamma.select(-1, C - 1);  // Γ_C (B, H, M)
  const at::Tensor Kd = (Kc * (last.unsqueeze(-1) - gamma).exp().unsqueeze(-1)).transpose(-1, -2);
  const at::Tensor chunk_decay = last.exp();

  at::Tensor S = initial_state.defined()
                     ? to_device(initial_state, q.device()).to(at::kFloat).clone()
                     : at::zeros({B, H, K, V}, q.options().dtype(at::kFloat));
  check(S.sizes() == at::IntArrayRef({B, H, K, V}), "[gated-delta] initial state ", S.sizes(),
        " is not (B, Hv, K, V) = (", B, ", ", H, ", ", K, ", ", V, ")");
  std::vector<at::Tensor> outputs;
  outputs.reserve(M);
  for (int64_t m = 0; m < M; ++m) {
    S = S * keep.select(1, m);  // a document after the row's first starts from zero
    const at::Tensor delta = U.select(2, m) - at::matmul(W.select(2, m), S);  // (B, H, C, V)
    outputs.push_back(at::matmul(Qd.select(2, m), S) + at::matmul(intra.select(2, m), delta));
    S = S * chunk_decay.select(2, m).unsqueeze(-1).unsqueeze(-1) +
        at::matmul(Kd.select(2, m), delta);
  }
  if (final_state) *final_state = S;

  // Back to token order: (B, H, M, C, V) -> (B * M * C, H, V), scattered to the real tokens.
  const at::Tensor O = at::stack(outputs, 2).permute({0, 2, 3, 1, 4}).reshape({B * M * C, H, V});
  const at::Tensor real = index < B * T;
  at::Tensor out = at::zeros({B * T, H, V}, O.options());
  out.index_copy_(0, index.masked_select(real), O.index({real}));
  return out.view({B, T, H, V}).to(v.scalar_type());
}

at::Tensor recurrent_gated_delta_rule(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const at::Tensor& g, const at::Tensor& beta,
                                      at::Tensor& state, bool normalize_qk) {
  const Prepared in = prepare(q, k, v, g, beta, normalize_qk);
  const int64_t B = q.size(0), T = q.size(1), H = v.size(2), K = q.size(3), V = v.size(3);
  check(state.defined() && state.scalar_type() == at::kFloat &&
            state.sizes() == at::IntArrayRef({B, H, K, V}),
        "[gated-delta] the recurrent state must be (B, Hv, K, V) = (", B, ", ", H, ", ", K, ", ", V,
        ") fp32");
  std::vector<at::Tensor> outputs;
  outputs.reserve(T);
  at::Tensor S = state;
  for (int64_t t = 0; t < T; ++t) {
    const at::Tensor q_t = in.q.select(1, t), k_t = in.k.select(1, t);  // (B, H, K)
    S = S * in.g.select(1, t).exp().unsqueeze(-1).unsqueeze(-1);
    const at::Tensor remembered = at::matmul(k_t.unsqueeze(-2), S).squeeze(-2);  // Sᵀk (B, H, V)
    const at::Tensor delta = (in.v.select(1, t) - remembered) * in.beta.select(1, t).unsqueeze(-1);
    S = S + k_t.unsqueeze(-1) * delta.unsqueeze(-2);
    outputs.push_back(at::matmul(q_t.unsqueeze(-2), S).squeeze(-2));  // Sᵀq (B, H, V)
  }
  state.copy_(S);
  return at::stack(outputs, 1).to(v.scalar_type());
}

}  // namespace tandem
