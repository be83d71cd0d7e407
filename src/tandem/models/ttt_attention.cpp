#include "tandem/models/ttt_attention.h"

#include <ATen/ATen.h>

#include <cmath>

#include "tandem/core/error.h"

namespace tandem {

namespace {

// (B, kv_heads, T, d) -> (B, heads, T, d): kv head j serves query heads j*g .. j*g+g-1.
at::Tensor expand_kv(const at::Tensor& kv, int64_t heads) {
  const int64_t groups = heads / kv.size(1);
  return groups == 1 ? kv : kv.repeat_interleave(groups, 1);
}

}  // namespace

at::Tensor ttt_attention(const at::Tensor& q, const at::Tensor& context_k,
                         const at::Tensor& context_v, const at::Tensor& context_mask,
                         const std::vector<at::Tensor>& step_k,
                         const std::vector<at::Tensor>& step_v) {
  check(q.dim() == 4 && context_k.dim() == 4 && context_v.sizes() == context_k.sizes(),
        "[ttt_attention] q must be (B, heads, Tq, d) and keys/values (B, kv_heads, Tk, d); got ",
        q.sizes(), " and ", context_k.sizes());
  check(step_k.size() == step_v.size(), "[ttt_attention] ", step_k.size(), " step keys but ",
        step_v.size(), " step values");
  const int64_t heads = q.size(1), length = context_k.size(2);
  check(heads % context_k.size(1) == 0, "[ttt_attention] ", heads,
        " query heads are not a multiple of ", context_k.size(1), " key/value heads");
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  const at::Tensor q32 = q.to(at::kFloat);

  // Scores: the causal block (B, heads, Tq, Tk), then one column per later step (B, heads, Tq, 1).
  std::vector<at::Tensor> scores;
  scores.push_back(at::matmul(q32, expand_kv(context_k, heads).to(at::kFloat).transpose(2, 3))
                       .mul_(scale)
                       .masked_fill(context_mask.logical_not(), -INFINITY));
  for (const at::Tensor& key : step_k) {
    check(key.size(2) == q.size(2), "[ttt_attention] step keys cover ", key.size(2),
          " positions, the queries ", q.size(2));
    scores.push_back((q32 * expand_kv(key, heads).to(at::kFloat)).sum(-1, true).mul_(scale));
  }
  const at::Tensor probabilities = at::softmax(at::cat(scores, -1), -1);  // (B, h, Tq, Tk + i)

  at::Tensor out = at::matmul(probabilities.narrow(-1, 0, length),
                              expand_kv(context_v, heads).to(at::kFloat));
  for (size_t j = 0; j < step_v.size(); ++j)
    out = out + probabilities.narrow(-1, length + static_cast<int64_t>(j), 1) *
                    expand_kv(step_v[j], heads).to(at::kFloat);
  return out.to(q.scalar_type());
}

}  // namespace tandem
