#include "tandem/models/banded_attention.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tandem/core/error.h"

namespace tandem {

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// The keys one chunk of queries visits, read from the host bands.
struct ChunkKeys {
  int64_t begin = 0, end = 0;          // [begin, end): the union of the chunk's bands
  int64_t all_begin = 0, all_end = 0;  // [all_begin, all_end): keys every query sees (no mask)
};

std::vector<ChunkKeys> chunk_keys(const KeyBands& bands, int64_t query_chunk, int64_t keys) {
  const int64_t rows = bands.rows(), queries = bands.queries();
  const int64_t* first = bands.first_host.data_ptr<int64_t>();
  const int64_t* last = bands.last_host.data_ptr<int64_t>();
  std::vector<ChunkKeys> chunks;
  for (int64_t q0 = 0; q0 < queries; q0 += query_chunk) {
    int64_t begin = keys, end = 0, all_begin = 0, all_end = keys;
    for (int64_t b = 0; b < rows; ++b)
      for (int64_t t = q0; t < std::min(queries, q0 + query_chunk); ++t) {
        const int64_t f = std::max<int64_t>(first[b * queries + t], 0);
        const int64_t l = std::min<int64_t>(last[b * queries + t], keys - 1) + 1;  // exclusive
        begin = std::min(begin, f);
        end = std::max(end, l);
        all_begin = std::max(all_begin, f);
        all_end = std::min(all_end, l);
      }
    ChunkKeys chunk;
    if (begin < end) chunk = {begin, end, all_begin, std::max(all_begin, all_end)};
    chunks.push_back(chunk);
  }
  return chunks;
}

// Everything of one call that is not differentiated, shared by forward and backward.
struct BandedCall {
  KeyBands bands;
  at::Tensor local_visible;  // (B, Tq / G) bool or undefined
  AttentionOptions options;
  int64_t group_queries = 1;  // G
  at::Tensor
      sinks;  // (heads,) in the compute dtype: each head's sink logit (gpt-oss); or undefined
};

// The running softmax's start for a chunk of nq queries: nothing seen (max -inf, sum 0), or with
// attention sinks the sink already seen, a key of logit sinks[h] and value 0 (max = the sink,
// sum = 1), so the output and the log-sum-exp include it. Rows (B, kvh, nq * g): row t * g + r
// of kv head j is query t of head j * g + r.
std::pair<at::Tensor, at::Tensor> softmax_start(const BandedCall& call, int64_t batch,
                                                int64_t kv_heads, int64_t nq, int64_t groups,
                                                const at::TensorOptions& options) {
  if (!call.sinks.defined())
    return {at::full({batch, kv_heads, nq * groups}, -kInfinity, options),
            at::zeros({batch, kv_heads, nq * groups}, options)};
  const at::Tensor max = call.sinks.view({1, kv_heads, 1, groups})
                             .expand({batch, kv_heads, nq, groups})
                             .reshape({batch, kv_heads, nq * groups});
  return {max, at::ones({batch, kv_heads, nq * groups}, options)};
}

// The working layout: query head j * g + r reads kv head j, and a query's g heads sit side by
// side, so one chunk of queries is one contiguous (chunk * g) block of rows per kv head.
// (B, heads, T, d) -> (B, kv_heads, T * g, d).
at::Tensor to_rows(const at::Tensor& x, int64_t kv_heads, at::ScalarType dtype) {
  const int64_t batch = x.size(0), heads = x.size(1), length = x.size(2), dim = x.size(3);
  const int64_t groups = heads / kv_heads;
  return x.to(dtype)
      .reshape({batch, kv_heads, groups, length, dim})
      .permute({0, 1, 3, 2, 4})
      .reshape({batch, kv_heads, length * groups, dim})
      .contiguous();
}

// (B, kv_heads, T * g, d) -> (B, heads, T, d) laid out in memory as (B, T, heads, d): the
// attention's output projection reads it as (B, T, heads * d) without a copy, so the one tensor
// serves as this kernel's saved output and as o_proj's saved input.
at::Tensor from_rows(const at::Tensor& rows, int64_t heads, at::ScalarType dtype) {
  const int64_t batch = rows.size(0), kv_heads = rows.size(1), dim = rows.size(3);
  const int64_t groups = heads / kv_heads, length = rows.size(2) / groups;
  return rows.view({batch, kv_heads, length, groups, dim})
      .permute({0, 2, 1, 3, 4})  // (B, T, kvh, g, d)
      .to(dtype)
      .contiguous()
      .view({batch, length, heads, dim})
      .transpose(1, 2);
}

// Scores of a chunk's query rows against keys [k0, k0 + n), masked outside each query's band:
// rows (B, kvh, nq * g, d), keys (B, kvh, n, d) -> (B, kvh, nq * g, n).
at::Tensor tile_scores(const at::Tensor& rows, const at::Tensor& keys, double scale,
                       const BandedCall& call, int64_t q0, int64_t nq, int64_t k0,
                       const ChunkKeys& chunk) {
  at::Tensor scores = at::matmul(rows, keys.transpose(-1, -2)).mul_(scale);
  const int64_t n = keys.size(2);
  if (k0 >= chunk.all_begin && k0 + n <= chunk.all_end) return scores;  // every query sees all
  const at::Tensor columns = at::arange(k0, k0 + n, call.bands.first.options()).view({1, 1, n});
  const at::Tensor hidden =
      (columns < call.bands.first.narrow(1, q0, nq).unsqueeze(2))
          .logical_or(columns > call.bands.last.narrow(1, q0, nq).unsqueeze(2));
  const int64_t batch = rows.size(0), kv_heads = rows.size(1), groups = rows.size(2) / nq;
  scores.view({batch, kv_heads, nq, groups, n})
      .masked_fill_(hidden.view({batch, 1, nq, 1, n}), -kInfinity);
  return scores;
}

// Scores of a chunk's query rows against their groups' local keys:
// rows (B, kvh, nq * g, d), local_k (B, kvh, nq / G, L, d) -> (B, kvh, nq / G, G * g, L).
at::Tensor local_scores(const at::Tensor& rows, const at::Tensor& local_k, double scale,
                        const BandedCall& call, int64_t q0, int64_t nq) {
  const int64_t batch = rows.size(0), kv_heads = rows.size(1), dim = rows.size(3);
  const int64_t G = call.group_queries, per_group = rows.size(2) / (nq / G);
  at::Tensor scores =
      at::matmul(rows.view({batch, kv_heads, nq / G, per_group, dim}), local_k.transpose(-1, -2))
          .mul_(scale);
  if (call.local_visible.defined())
    scores.masked_fill_(
        call.local_visible.narrow(1, q0 / G, nq / G).logical_not().view({batch, 1, nq / G, 1, 1}),
        -kInfinity);
  return scores;
}

struct Forward {
  at::Tensor out;  // (B, kvh, Tq * g, d) compute dtype
  at::Tensor lse;  // (B, kvh, Tq * g): log-sum-exp of each query's scores, +inf when it sees none
};

// The online softmax of one query chunk, fed a block of scores at a time.
struct RunningSoftmax {
  at::Tensor max, sum, acc;  // (B, kvh, R), (B, kvh, R), (B, kvh, R, d)

  // scores (B, kvh, R, n); values_of(p) returns p @ values as (B, kvh, R, d).
  template <typename ValuesOf>
  void add(const at::Tensor& scores, ValuesOf values_of) {
    const at::Tensor new_max = at::maximum(max, scores.amax(-1));
    const at::Tensor shift = new_max.masked_fill(new_max == -kInfinity, 0.0);  // never inf - inf
    const at::Tensor p = (scores - shift.unsqueeze(-1)).exp_();
    const at::Tensor rescale = (max - shift).exp_();
    sum.mul_(rescale).add_(p.sum(-1));
    acc.mul_(rescale.unsqueeze(-1)).add_(values_of(p));
    max = new_max;
  }
};

Forward banded_forward(const at::Tensor& rows, const at::Tensor& k, const at::Tensor& v,
                       const at::Tensor& local_k, const at::Tensor& local_v, double scale,
                       const BandedCall& call) {
  const int64_t batch = rows.size(0), kv_heads = rows.size(1), dim = rows.size(3);
  const int64_t queries = call.bands.queries(), groups = rows.size(2) / queries;
  const int64_t keys = k.size(2), G = call.group_queries;
  const int64_t query_chunk = call.options.query_chunk, key_chunk = call.options.key_chunk;
  const bool has_local = local_k.defined();
  Forward result{at::zeros_like(rows),
                 at::empty({batch, kv_heads, queries * groups}, rows.options())};
  const std::vector<ChunkKeys> chunks = chunk_keys(call.bands, query_chunk, keys);
  for (int64_t c = 0; c < static_cast<int64_t>(chunks.size()); ++c) {
    const int64_t q0 = c * query_chunk, nq = std::min(query_chunk, queries - q0);
    const at::Tensor chunk_rows = rows.narrow(2, q0 * groups, nq * groups);  // (B, kvh, R, d)
    auto [start_max, start_sum] = softmax_start(call, batch, kv_heads, nq, groups, rows.options());
    RunningSoftmax softmax{start_max, start_sum,
                           at::zeros({batch, kv_heads, nq * groups, dim}, rows.options())};
    if (has_local) {
      const at::Tensor group_k = local_k.narrow(2, q0 / G, nq / G);
      const at::Tensor group_v = local_v.narrow(2, q0 / G, nq / G);
      const at::Tensor scores = local_scores(chunk_rows, group_k, scale, call, q0, nq);
      softmax.add(scores.view({batch, kv_heads, nq * groups, -1}), [&](const at::Tensor& p) {
        return at::matmul(p.view(scores.sizes()), group_v)
            .view({batch, kv_heads, nq * groups, dim});
      });
    }
    const ChunkKeys& chunk = chunks[c];
    for (int64_t k0 = chunk.begin; k0 < chunk.end; k0 += key_chunk) {
      const int64_t n = std::min(key_chunk, chunk.end - k0);
      const at::Tensor tile_v = v.narrow(2, k0, n);
      softmax.add(tile_scores(chunk_rows, k.narrow(2, k0, n), scale, call, q0, nq, k0, chunk),
                  [&](const at::Tensor& p) { return at::matmul(p, tile_v); });
    }
    const at::Tensor empty = softmax.sum == 0;  // queries that see no key: output 0
    result.out.narrow(2, q0 * groups, nq * groups)
        .copy_(softmax.acc / softmax.sum.masked_fill(empty, 1.0).unsqueeze(-1));
    result.lse.narrow(2, q0 * groups, nq * groups)
        .copy_((softmax.max + softmax.sum.log()).masked_fill_(empty, kInfinity));
  }
  return result;
}

struct Gradients {
  at::Tensor rows, k, v, local_k, local_v;
};

// dS = P * (dP - D) with P recomputed from the saved log-sum-exp (flash attention's backward).
Gradients banded_backward(const at::Tensor& rows, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& local_k, const at::Tensor& local_v,
                          const Forward& saved, const at::Tensor& grad_rows, double scale,
                          const BandedCall& call) {
  const int64_t batch = rows.size(0), kv_heads = rows.size(1);
  const int64_t queries = call.bands.queries(), groups = rows.size(2) / queries;
  const int64_t keys = k.size(2), G = call.group_queries;
  const int64_t query_chunk = call.options.query_chunk, key_chunk = call.options.key_chunk;
  const bool has_local = local_k.defined();
  const at::Tensor delta = (grad_rows * saved.out).sum(-1);  // D: (B, kvh, Tq * g)
  Gradients grads{at::zeros_like(rows), at::zeros_like(k), at::zeros_like(v),
                  has_local ? at::zeros_like(local_k) : at::Tensor(),
                  has_local ? at::zeros_like(local_v) : at::Tensor()};
  const std::vector<ChunkKeys> chunks = chunk_keys(call.bands, query_chunk, keys);
  for (int64_t c = 0; c < static_cast<int64_t>(chunks.size()); ++c) {
    const int64_t q0 = c * query_chunk, nq = std::min(query_chunk, queries - q0);
    const int64_t r0 = q0 * groups, nr = nq * groups;
    const at::Tensor chunk_rows = rows.narrow(2, r0, nr);                    // (B, kvh, R, d)
    const at::Tensor chunk_grad = grad_rows.narrow(2, r0, nr);               // dO (B, kvh, R, d)
    const at::Tensor chunk_lse = saved.lse.narrow(2, r0, nr).unsqueeze(-1);  // (B, kvh, R, 1)
    const at::Tensor chunk_delta = delta.narrow(2, r0, nr).unsqueeze(-1);    // (B, kvh, R, 1)
    at::Tensor chunk_grad_rows = grads.rows.narrow(2, r0, nr);  // dQ, accumulated in place
    if (has_local) {
      const at::Tensor group_k = local_k.narrow(2, q0 / G, nq / G);  // (B, kvh, nq/G, L, d)
      const at::Tensor group_v = local_v.narrow(2, q0 / G, nq / G);
      const at::Tensor scores = local_scores(chunk_rows, group_k, scale, call, q0, nq);
      const auto grouped = [&](const at::Tensor& x) {  // (B, kvh, R, ...) -> per group
        return x.view({batch, kv_heads, nq / G, nr / (nq / G), x.size(3)});
      };
      const at::Tensor p = (scores - grouped(chunk_lse)).exp_();  // (B, kvh, nq/G, G*g, L)
      const at::Tensor grad_group = grouped(chunk_grad);
      grads.local_v.narrow(2, q0 / G, nq / G).add_(at::matmul(p.transpose(-1, -2), grad_group));
      const at::Tensor ds =
          p.mul_(at::matmul(grad_group, group_v.transpose(-1, -2)).sub_(grouped(chunk_delta)))
              .mul_(scale);
      grouped(chunk_grad_rows).add_(at::matmul(ds, group_k));
      grads.local_k.narrow(2, q0 / G, nq / G)
          .add_(at::matmul(ds.transpose(-1, -2), grouped(chunk_rows)));
    }
    const ChunkKeys& chunk = chunks[c];
    for (int64_t k0 = chunk.begin; k0 < chunk.end; k0 += key_chunk) {
      const int64_t n = std::min(key_chunk, chunk.end - k0);
      const at::Tensor tile_k = k.narrow(2, k0, n), tile_v = v.narrow(2, k0, n);
      const at::Tensor p =
          tile_scores(chunk_rows, tile_k, scale, call, q0, nq, k0, chunk).sub_(chunk_lse).exp_();
      grads.v.narrow(2, k0, n).add_(at::matmul(p.transpose(-1, -2), chunk_grad));
      const at::Tensor ds =
          p.mul_(at::matmul(chunk_grad, tile_v.transpose(-1, -2)).sub_(chunk_delta)).mul_(scale);
      chunk_grad_rows.add_(at::matmul(ds, tile_k));
      grads.k.narrow(2, k0, n).add_(at::matmul(ds.transpose(-1, -2), chunk_rows));
    }
  }
  return grads;
}

at::ScalarType compute_dtype(const at::Tensor& q) {
  return q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// Local keys arrive as one (B, kvh, Tq / G, L, d) tensor, or as L per-step tensors
// (B, kvh, Tq, d) (TTT, G = 1) that are stacked here for the call's duration only: saving the
// stack for backward would copy every earlier step's keys again at each unroll step. Returns
// them in the compute dtype, undefined when there are none.
at::Tensor local_tensor(at::TensorList parts, at::ScalarType dtype) {
  if (parts.empty()) return at::Tensor();
  if (parts.size() == 1 && parts[0].dim() == 5) return parts[0].to(dtype);
  return at::stack(parts, 3).to(dtype);
}

// The gradient of local_tensor(parts, ...) split back into one gradient per part.
void append_local_grads(const at::Tensor& grad, at::TensorList parts,
                        torch::autograd::variable_list& out) {
  if (parts.empty()) return;
  if (!grad.defined()) {
    out.insert(out.end(), parts.size(), at::Tensor());
  } else if (parts.size() == 1 && parts[0].dim() == 5) {
    out.push_back(grad.to(parts[0].scalar_type()));
  } else {
    for (const at::Tensor& part : grad.unbind(3)) out.push_back(part.to(parts[0].scalar_type()));
  }
}

class BandedAttentionFunction : public torch::autograd::Function<BandedAttentionFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v, at::TensorList local_k,
                            at::TensorList local_v, const BandedCall* call) {
    const at::ScalarType dtype = compute_dtype(q);
    const int64_t kv_heads = k.size(1);
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
    const at::Tensor rows = to_rows(q, kv_heads, dtype);
    const Forward result =
        banded_forward(rows, k.to(dtype), v.to(dtype), local_tensor(local_k, dtype),
                       local_tensor(local_v, dtype), scale, *call);
    const at::Tensor output = from_rows(result.out, q.size(1), q.scalar_type());
    // The output is saved in q's dtype rather than the fp32 accumulator: one copy of it lives.
    torch::autograd::variable_list saved = {q, k, v, output, result.lse};
    saved.insert(saved.end(), local_k.begin(), local_k.end());
    saved.insert(saved.end(), local_v.begin(), local_v.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["local_parts"] = static_cast<int64_t>(local_k.size());
    ctx->saved_data["first"] = call->bands.first;
    ctx->saved_data["last"] = call->bands.last;
    ctx->saved_data["first_host"] = call->bands.first_host;
    ctx->saved_data["last_host"] = call->bands.last_host;
    ctx->saved_data["local_visible"] = call->local_visible;
    ctx->saved_data["query_chunk"] = call->options.query_chunk;
    ctx->saved_data["key_chunk"] = call->options.key_chunk;
    ctx->saved_data["group_queries"] = call->group_queries;
    // Sinks need not be kept: the saved log-sum-exp includes them, and a sink's value is 0.
    return output;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2];
    const int64_t parts = ctx->saved_data["local_parts"].toInt();
    const std::vector<at::Tensor> local_k(saved.begin() + 5, saved.begin() + 5 + parts);
    const std::vector<at::Tensor> local_v(saved.begin() + 5 + parts, saved.end());
    BandedCall call;
    call.bands.first = ctx->saved_data["first"].toTensor();
    call.bands.last = ctx->saved_data["last"].toTensor();
    call.bands.first_host = ctx->saved_data["first_host"].toTensor();
    call.bands.last_host = ctx->saved_data["last_host"].toTensor();
    const c10::IValue& visible = ctx->saved_data["local_visible"];
    if (visible.isTensor()) call.local_visible = visible.toTensor();
    call.options.query_chunk = ctx->saved_data["query_chunk"].toInt();
    call.options.key_chunk = ctx->saved_data["key_chunk"].toInt();
    call.group_queries = ctx->saved_data["group_queries"].toInt();

    const at::ScalarType dtype = compute_dtype(q);
    const int64_t kv_heads = k.size(1);
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
    const Gradients grads = banded_backward(
        to_rows(q, kv_heads, dtype), k.to(dtype), v.to(dtype), local_tensor(local_k, dtype),
        local_tensor(local_v, dtype), Forward{to_rows(saved[3], kv_heads, dtype), saved[4]},
        to_rows(grad_outputs[0], kv_heads, dtype), scale, call);
    torch::autograd::variable_list out = {from_rows(grads.rows, q.size(1), q.scalar_type()),
                                          grads.k.to(k.scalar_type()), grads.v.to(v.scalar_type())};
    append_local_grads(grads.local_k, local_k, out);
    append_local_grads(grads.local_v, local_v, out);
    out.push_back(at::Tensor());  // the call
    return out;
  }
};

// The shapes every call shares: queries, keys and values, the bands, the chunk sizes.
void check_call(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                const KeyBands& bands, const AttentionOptions& options) {
  check(q.dim() == 4 && k.dim() == 4 && v.sizes() == k.sizes() && q.size(0) == k.size(0) &&
            q.size(3) == k.size(3),
        "[attention] q must be (B, heads, Tq, d) and keys/values (B, kv_heads, Tk, d); got ",
        q.sizes(), ", ", k.sizes(), " and ", v.sizes());
  check(q.size(1) % k.size(1) == 0, "[attention] ", q.size(1),
        " query heads are not a multiple of ", k.size(1), " key/value heads");
  check(bands.first_host.defined() && bands.rows() == q.size(0) && bands.queries() == q.size(2),
        "[attention] the key bands cover ", bands.first_host.sizes(), ", the queries (", q.size(0),
        ", ", q.size(2), ")");
  check(options.query_chunk > 0 && options.key_chunk > 0,
        "[attention] chunk sizes must be > 0, got ", options.query_chunk, " queries and ",
        options.key_chunk, " keys");
}

}  // namespace

at::Tensor banded_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const KeyBands& bands, const at::Tensor& local_k,
                            const at::Tensor& local_v, const at::Tensor& local_visible,
                            const AttentionOptions& options, const at::Tensor& sinks) {
  check_call(q, k, v, bands, options);
  const int64_t batch = q.size(0), queries = q.size(2), dim = q.size(3), kv_heads = k.size(1);
  BandedCall call{bands, local_visible, options, 1, at::Tensor()};
  if (sinks.defined()) {
    check(sinks.dim() == 1 && sinks.size(0) == q.size(1) && sinks.device() == q.device(),
          "[attention] sinks must be (heads,) = (", q.size(1), ") on ", q.device().str(), ", got ",
          sinks.sizes(), " on ", sinks.device().str());
    call.sinks = sinks.to(compute_dtype(q));
  }
  if (local_k.defined()) {
    check(local_k.dim() == 5 && local_v.sizes() == local_k.sizes() && local_k.size(0) == batch &&
              local_k.size(1) == kv_heads && local_k.size(4) == dim && local_k.size(2) > 0 &&
              queries % local_k.size(2) == 0,
          "[attention] local keys/values must be (B, kv_heads, Tq / G, L, d) with G dividing ",
          queries, "; got ", local_k.sizes(), " and ", local_v.sizes());
    call.group_queries = queries / local_k.size(2);
    check(!local_visible.defined() ||
              local_visible.sizes() == at::IntArrayRef({batch, local_k.size(2)}),
          "[attention] local_visible must be (B, Tq / G) = (", batch, ", ", local_k.size(2),
          "), got ", local_visible.sizes());
  }
  if (call.local_visible.defined()) call.local_visible = call.local_visible.to(at::kBool);
  // Whole groups per chunk: the local keys of a group are never split across chunks.
  call.options.query_chunk =
      std::max<int64_t>(1, options.query_chunk / call.group_queries) * call.group_queries;
  std::vector<at::Tensor> keys_local, values_local;
  if (local_k.defined()) keys_local = {local_k}, values_local = {local_v};
  return BandedAttentionFunction::apply(q, k, v, at::TensorList(keys_local),
                                        at::TensorList(values_local), &call);
}

at::Tensor banded_attention_with_step_keys(const at::Tensor& q, const at::Tensor& k,
                                           const at::Tensor& v, const KeyBands& bands,
                                           const std::vector<at::Tensor>& step_k,
                                           const std::vector<at::Tensor>& step_v,
                                           const AttentionOptions& options) {
  if (step_k.empty())
    return banded_attention(q, k, v, bands, at::Tensor(), at::Tensor(), at::Tensor(), options);
  check_call(q, k, v, bands, options);  // the step tensors' shapes: ttt_attention checks them
  BandedCall call{bands, at::Tensor(), options, 1, at::Tensor()};
  return BandedAttentionFunction::apply(q, k, v, at::TensorList(step_k), at::TensorList(step_v),
                                        &call);
}

}  // namespace tandem
