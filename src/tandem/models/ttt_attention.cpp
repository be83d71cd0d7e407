#include "tandem/models/ttt_attention.h"

#include <ATen/ATen.h>

#include <cmath>

#include "tandem/core/error.h"
#include "tandem/models/banded_attention.h"
#include "tandem/models/fused_ttt_attention.h"
#include "tandem/models/kernel_choice.h"

namespace tandem {

namespace {

// (B, kv_heads, T, d) -> (B, heads, T, d): kv head j serves query heads j*g .. j*g+g-1.
at::Tensor expand_kv(const at::Tensor& kv, int64_t heads) {
  const int64_t groups = heads / kv.size(1);
  return groups == 1 ? kv : kv.repeat_interleave(groups, 1);
}

// The dense reference: the causal block (B, heads, Tq, Tk) of scores plus one column per later
// step, one softmax, autograd keeping the probabilities.
at::Tensor dense_ttt_attention(const at::Tensor& q, const at::Tensor& context_k,
                               const at::Tensor& context_v, const at::Tensor& context_mask,
                               const std::vector<at::Tensor>& step_k,
                               const std::vector<at::Tensor>& step_v) {
  const int64_t heads = q.size(1), length = context_k.size(2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  const at::Tensor q32 = q.to(at::kFloat);
  std::vector<at::Tensor> scores;
  scores.push_back(at::matmul(q32, expand_kv(context_k, heads).to(at::kFloat).transpose(2, 3))
                       .mul_(scale)
                       .masked_fill(context_mask.logical_not(), -INFINITY));
  for (const at::Tensor& key : step_k)
    scores.push_back((q32 * expand_kv(key, heads).to(at::kFloat)).sum(-1, true).mul_(scale));
  const at::Tensor probabilities = at::softmax(at::cat(scores, -1), -1);  // (B, h, Tq, Tk + i)

  at::Tensor out =
      at::matmul(probabilities.narrow(-1, 0, length), expand_kv(context_v, heads).to(at::kFloat));
  for (size_t j = 0; j < step_v.size(); ++j)
    out = out + probabilities.narrow(-1, length + static_cast<int64_t>(j), 1) *
                    expand_kv(step_v[j], heads).to(at::kFloat);
  return out.to(q.scalar_type());
}

}  // namespace

at::Tensor ttt_attention(const at::Tensor& q, const at::Tensor& context_k,
                         const at::Tensor& context_v, const KeyBands& context_bands,
                         const std::vector<at::Tensor>& step_k,
                         const std::vector<at::Tensor>& step_v, const AttentionOptions& options) {
  check(q.dim() == 4 && context_k.dim() == 4 && context_v.sizes() == context_k.sizes(),
        "[ttt_attention] q must be (B, heads, Tq, d) and keys/values (B, kv_heads, Tk, d); got ",
        q.sizes(), " and ", context_k.sizes());
  check(step_k.size() == step_v.size(), "[ttt_attention] ", step_k.size(), " step keys but ",
        step_v.size(), " step values");
  check(q.size(1) % context_k.size(1) == 0, "[ttt_attention] ", q.size(1),
        " query heads are not a multiple of ", context_k.size(1), " key/value heads");
  for (size_t j = 0; j < step_k.size(); ++j)
    check(step_k[j].sizes() ==
                  at::IntArrayRef({context_k.size(0), context_k.size(1), q.size(2), q.size(3)}) &&
              step_v[j].sizes() == step_k[j].sizes(),
          "[ttt_attention] the keys of step ", j + 1, " are ", step_k[j].sizes(),
          ", expected (B, kv_heads, Tq, d) aligned with the queries ", q.sizes());
  check(context_bands.rows() == q.size(0) && context_bands.queries() == q.size(2),
        "[ttt_attention] the bands cover (", context_bands.rows(), ", ", context_bands.queries(),
        ") queries, the queries are ", q.sizes());
  KernelChoice choice =
      choose_ttt_kernel(options.kernel, q.device().type(), q.scalar_type(), q.size(3),
                        q.is_cuda() && options.kernel == AttentionKernel::Fused &&
                            cuda_flash_attention_runs(q.device()));
  at::Tensor segments;
  if (choice.kernel == AttentionKernel::Fused) {
    segments = causal_document_segments(context_bands);
    if (!segments.defined())
      choice = {AttentionKernel::Blockwise, "bands that are not causal within documents"};
  }
  if (q.is_cuda())
    log_kernel_choice_once("TTT", q, choice);  // as SDPA's choice is (models/causal_attention.h)
  if (choice.kernel == AttentionKernel::Fused)
    return fused_ttt_attention(q, context_k, context_v, segments, step_k, step_v);
  if (choice.kernel == AttentionKernel::Dense)
    return dense_ttt_attention(q, context_k, context_v,
                               context_bands.dense_mask(context_k.size(2)).unsqueeze(1), step_k,
                               step_v);
  // Each query's own key per later step: the local keys of a group of one query.
  return banded_attention_with_step_keys(q, context_k, context_v, context_bands, step_k, step_v,
                                         options);
}

}  // namespace tandem
