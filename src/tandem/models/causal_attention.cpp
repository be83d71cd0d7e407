#include "tandem/models/causal_attention.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "tandem/core/error.h"
#include "tandem/models/banded_attention.h"
#include "tandem/models/decoder.h"

namespace tandem {

// On CUDA, SDPA's flash kernel takes GQA but no mask, and its memory-efficient kernel takes a
// mask but not GQA: with a mask, K/V are repeated per query head so the memory-efficient kernel
// runs rather than the math fallback.
at::Tensor sdpa(const at::Tensor& q, at::Tensor k, at::Tensor v, const at::Tensor& mask) {
  bool grouped = k.size(1) != q.size(1);
  if (grouped && mask.defined() && q.is_cuda()) {
    k = k.repeat_interleave(q.size(1) / k.size(1), 1);
    v = v.repeat_interleave(q.size(1) / v.size(1), 1);
    grouped = false;
  }
  return at::scaled_dot_product_attention(
      q, k, v, mask.defined() ? std::optional<at::Tensor>(mask) : std::nullopt,
      /*dropout_p=*/0.0, /*is_causal=*/!mask.defined(), /*scale=*/std::nullopt,
      /*enable_gqa=*/grouped);
}

at::Tensor attention_mask(const AttentionLayout& layout, int64_t sliding_window) {
  if (!layout.document_ids.defined() && sliding_window == 0) return at::Tensor();
  const int64_t length = layout.positions.size(1);
  const auto device = layout.positions.device();
  const at::Tensor index = at::arange(length, at::TensorOptions().dtype(at::kLong).device(device));
  const at::Tensor query = index.view({length, 1});
  const at::Tensor key = index.view({1, length});
  at::Tensor allowed = key <= query;  // (T, T)
  if (sliding_window > 0) allowed = allowed.logical_and(query - key < sliding_window);
  allowed = allowed.unsqueeze(0);  // (1, T, T)
  if (layout.document_ids.defined()) {
    const at::Tensor& doc = layout.document_ids;  // (B, T)
    allowed = allowed.logical_and(doc.unsqueeze(2) == doc.unsqueeze(1));
  }
  return allowed.unsqueeze(1);  // (B or 1, 1, T, T)
}

CausalAttentionPlan plan_causal_attention(const AttentionLayout& layout, int64_t sliding_window,
                                          const AttentionOptions& options) {
  CausalAttentionPlan plan;
  plan.options = options;
  if (options.kernel == AttentionKernel::Dense) {
    plan.dense_mask = attention_mask(layout, sliding_window);
    return plan;
  }
  if (sliding_window > 0) {
    plan.window_bands = causal_key_bands(layout, sliding_window);
    return plan;
  }
  if (!layout.document_ids.defined()) return plan;
  plan.document_bounds = document_bounds(layout.host_document_ids());
  const bool single = std::all_of(plan.document_bounds.begin(), plan.document_bounds.end(),
                                  [](const std::vector<int64_t>& row) { return row.size() == 2; });
  if (single) plan.document_bounds.clear();  // every row one document: plain causal
  return plan;
}

at::Tensor causal_attention(const QueryKeyValue& qkv, const CausalAttentionPlan& plan) {
  if (plan.options.kernel == AttentionKernel::Dense)
    return sdpa(qkv.q, qkv.k, qkv.v, plan.dense_mask);
  if (plan.window_bands.first.defined())
    return banded_attention(qkv.q, qkv.k, qkv.v, plan.window_bands, at::Tensor(), at::Tensor(),
                            at::Tensor(), plan.options);
  if (plan.document_bounds.empty()) return sdpa(qkv.q, qkv.k, qkv.v, at::Tensor());
  check(static_cast<int64_t>(plan.document_bounds.size()) == qkv.q.size(0),
        "[attention] the plan covers ", plan.document_bounds.size(), " rows, the batch ",
        qkv.q.size(0));
  std::vector<at::Tensor> rows;
  for (int64_t b = 0; b < qkv.q.size(0); ++b) {
    const std::vector<int64_t>& bounds = plan.document_bounds[static_cast<size_t>(b)];
    std::vector<at::Tensor> documents;
    for (size_t i = 0; i + 1 < bounds.size(); ++i) {
      const int64_t begin = bounds[i], length = bounds[i + 1] - bounds[i];
      const auto slice = [&](const at::Tensor& x) {  // (1, heads, length, d)
        return x.narrow(0, b, 1).narrow(2, begin, length);
      };
      documents.push_back(sdpa(slice(qkv.q), slice(qkv.k), slice(qkv.v), at::Tensor()));
    }
    rows.push_back(documents.size() == 1 ? documents[0] : at::cat(documents, 2));
  }
  return at::cat(rows, 0);  // (B, heads, T, d)
}

}  // namespace tandem
