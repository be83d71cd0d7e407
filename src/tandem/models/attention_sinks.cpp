#include "tandem/models/attention_sinks.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "tandem/core/error.h"

namespace tandem {

at::Tensor masked_attention_with_sinks(const at::Tensor& q, const at::Tensor& k,
                                       const at::Tensor& v, const at::Tensor& mask,
                                       const at::Tensor& sinks, int64_t query_chunk) {
  check(q.dim() == 4 && k.dim() == 4 && v.sizes() == k.sizes() && q.size(0) == k.size(0) &&
            q.size(3) == k.size(3) && q.size(1) % k.size(1) == 0,
        "[attention] q must be (B, heads, Tq, d) and keys/values (B, kv_heads, Tk, d) with heads "
        "a multiple of kv_heads; got ",
        q.sizes(), ", ", k.sizes(), " and ", v.sizes());
  check(mask.dim() == 4 && mask.size(1) == 1 && mask.size(2) == q.size(2) &&
            mask.size(3) == k.size(2) && (mask.size(0) == 1 || mask.size(0) == q.size(0)),
        "[attention] the mask must be (B or 1, 1, Tq, Tk) for q ", q.sizes(), " and keys ",
        k.sizes(), ", got ", mask.sizes());
  check(sinks.dim() == 1 && sinks.size(0) == q.size(1) && sinks.device() == q.device(),
        "[attention] sinks must be (heads,) = (", q.size(1), ") on ", q.device().str(), ", got ",
        sinks.sizes(), " on ", sinks.device().str());
  check(query_chunk > 0, "[attention] query_chunk must be > 0, got ", query_chunk);
  const at::ScalarType dtype = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const int64_t batch = q.size(0), heads = q.size(1), queries = q.size(2), dim = q.size(3);
  const int64_t kv_heads = k.size(1), groups = heads / kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  // The scores of one chunk: (B, heads, chunk, Tk), at most 2^26 values.
  const int64_t per_query = std::max<int64_t>(1, batch * heads * k.size(2));
  const int64_t chunk_size =
      std::max<int64_t>(1, std::min(query_chunk, (int64_t{1} << 26) / per_query));
  // Each kv head's g query heads as g * n rows against its keys: no copy of the keys or values.
  const at::Tensor keys_t = k.to(dtype).transpose(-1, -2);  // (B, kvh, d, Tk)
  const at::Tensor values = v.to(dtype);                    // (B, kvh, Tk, d)
  // (1, kvh, g, 1, 1): head j * g + r is group r of kv head j.
  const at::Tensor sink = sinks.to(dtype).view({1, kv_heads, groups, 1, 1});
  const at::Tensor allowed = mask.to(at::kBool);
  at::Tensor out = at::empty({batch, heads, queries, dim}, q.options());
  for (int64_t q0 = 0; q0 < queries; q0 += chunk_size) {
    const int64_t n = std::min(chunk_size, queries - q0);
    const at::Tensor rows =
        q.narrow(2, q0, n).to(dtype).reshape({batch, kv_heads, groups * n, dim});
    at::Tensor scores = at::matmul(rows, keys_t).mul_(scale);  // (B, kvh, g * n, Tk)
    const at::Tensor grouped = scores.view({batch, kv_heads, groups, n, -1});
    grouped.masked_fill_(allowed.narrow(2, q0, n).logical_not().unsqueeze(2), -INFINITY);
    // The shift keeps exp finite (the sink is finite, so it is too) and cancels in the result:
    // no gradient flows through it, and the scores become the weights in place.
    const at::Tensor top = at::maximum(grouped.amax(-1, true), sink).detach();
    const at::Tensor weights = grouped.sub_(top).exp_();  // (B, kvh, g, n, Tk)
    const at::Tensor denominator = weights.sum(-1, true) + (sink - top).exp();
    const at::Tensor attended =
        at::matmul(scores, values).view({batch, kv_heads, groups, n, dim}) / denominator;
    out.narrow(2, q0, n).copy_(attended.view({batch, heads, n, dim}));
  }
  return out;
}

}  // namespace tandem
