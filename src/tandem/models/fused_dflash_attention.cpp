#include "tandem/models/fused_dflash_attention.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "tandem/core/error.h"

namespace tandem {

KernelChoice choose_dflash_kernel(AttentionKernel asked, c10::DeviceType device,
                                  c10::ScalarType dtype, int64_t head_dim, bool cuda_verified) {
  if (const auto common = asked_or_unsupported(asked, dtype)) return *common;
  if (device == c10::kCPU)
    return {AttentionKernel::Fused, "the CPU flash kernel with a band mask, merged by log-sum-exp"};
  if (device != c10::kCUDA)
    return {AttentionKernel::Blockwise, "no fused kernel on " + c10::DeviceTypeName(device)};
  if (head_dim % 8 != 0 || head_dim > 256)
    return {AttentionKernel::Blockwise,
            "the fused kernel needs a head dim that is a multiple of 8 up to 256, not " +
                std::to_string(head_dim)};
  if (!cuda_verified)
    return {AttentionKernel::Blockwise,
            "the memory-efficient kernel failed or differed from the dense kernel on this GPU"};
  return {AttentionKernel::Fused,
          "the CUDA memory-efficient kernel with a band mask, merged by log-sum-exp"};
}

namespace {

// The mask's value outside a band: finite, so a query with no visible key keeps a finite softmax,
// and far below any score (fp16 cannot hold -1e30: its lowest value).
double masked_value(at::ScalarType dtype) { return dtype == at::kHalf ? -65504.0 : -1e30; }

// One fused call: queries [query_start, query_start + queries) of `row` over the keys
// [key_start, key_start + keys).
struct Chunk {
  int64_t row, query_start, queries, key_start, keys;
};

// The chunks of whole blocks, each over the key range its bands span; chunks whose queries see
// no context key are left out. From the bands' host copies: no device wait.
std::vector<Chunk> plan_chunks(const KeyBands& bands, int64_t block_size, int64_t query_chunk) {
  const int64_t per_call = std::max<int64_t>(1, query_chunk / block_size) * block_size;
  const at::Tensor first = bands.first_host.to(at::kLong).contiguous();
  const at::Tensor last = bands.last_host.to(at::kLong).contiguous();
  const auto f = first.accessor<int64_t, 2>();
  const auto l = last.accessor<int64_t, 2>();
  std::vector<Chunk> chunks;
  for (int64_t b = 0; b < first.size(0); ++b)
    for (int64_t start = 0; start < first.size(1); start += per_call) {
      const int64_t queries = std::min(per_call, first.size(1) - start);
      int64_t lowest = INT64_MAX, highest = -1;
      for (int64_t t = start; t < start + queries; ++t)
        if (l[b][t] >= f[b][t]) {
          lowest = std::min(lowest, f[b][t]);
          highest = std::max(highest, l[b][t]);
        }
      if (highest >= 0) chunks.push_back({b, start, queries, lowest, highest - lowest + 1});
    }
  return chunks;
}

at::Tensor query_slice(const at::Tensor& t, const Chunk& c) {
  return t.narrow(0, c.row, 1).narrow(2, c.query_start, c.queries);
}
at::Tensor key_slice(const at::Tensor& t, const Chunk& c) {
  return t.narrow(0, c.row, 1).narrow(2, c.key_start, c.keys);
}

// The chunk's additive mask (1, 1, queries, keys) in `dtype`: 0 inside each query's band,
// masked_value outside. On CUDA the rows are padded to a multiple of 16 elements (the
// memory-efficient kernel's alignment) and the mask is expanded over the heads.
at::Tensor chunk_mask(const KeyBands& bands, const Chunk& c, at::ScalarType dtype, int64_t heads) {
  const at::Tensor first = bands.first.narrow(0, c.row, 1).narrow(1, c.query_start, c.queries);
  const at::Tensor last = bands.last.narrow(0, c.row, 1).narrow(1, c.query_start, c.queries);
  const at::Tensor key = at::arange(c.key_start, c.key_start + c.keys, first.options());
  const at::Tensor visible = (key.view({1, -1}) >= first.view({-1, 1}))
                                 .logical_and_(key.view({1, -1}) <= last.view({-1, 1}));
  const bool cuda = first.is_cuda();
  const int64_t stride = cuda ? (c.keys + 15) / 16 * 16 : c.keys;
  at::Tensor mask =
      at::zeros({1, 1, c.queries, stride}, first.options().dtype(dtype)).narrow(3, 0, c.keys);
  mask.masked_fill_(visible.logical_not().view({1, 1, c.queries, c.keys}), masked_value(dtype));
  return cuda ? mask.expand({1, heads, c.queries, c.keys}) : mask;
}

// (1, kv_heads, n, d) -> (1, heads, n, d): the CUDA kernel takes one key head per query head.
at::Tensor per_query_head(const at::Tensor& kv, int64_t heads) {
  const int64_t groups = heads / kv.size(1);
  return groups == 1 ? kv.contiguous() : kv.repeat_interleave(groups, 1);
}

struct ChunkForward {
  at::Tensor out, lse;      // (1, heads, n, d); (1, heads, n) fp32
  at::Tensor seed, offset;  // CUDA only
  int64_t lse_width = 0;    // CUDA only: the kernel's log-sum-exp rows (n rounded up)
};

ChunkForward chunk_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const at::Tensor& mask, double scale) {
  if (q.is_cuda()) {
    const int64_t heads = q.size(1);
    auto [out, lse, seed, offset] = at::_scaled_dot_product_efficient_attention(
        q.contiguous(), per_query_head(k, heads), per_query_head(v, heads), mask,
        /*compute_log_sumexp=*/true, /*dropout_p=*/0.0, /*is_causal=*/false, scale);
    return {out, lse.narrow(2, 0, q.size(2)), seed, offset, lse.size(2)};
  }
  const auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(
      q, k, v, /*dropout_p=*/0.0, /*is_causal=*/false, mask, scale);
  return {out, lse, at::Tensor(), at::Tensor(), 0};
}

// The fused kernel's backward with the merged output and log-sum-exp in place of its own:
// dq (1, heads, n, d), dk and dv (1, kv_heads, keys, d).
std::tuple<at::Tensor, at::Tensor, at::Tensor> chunk_backward(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& mask, const at::Tensor& out, const at::Tensor& lse, double scale,
    const at::Tensor& seed, const at::Tensor& offset, int64_t lse_width) {
  if (q.is_cuda()) {
    const int64_t heads = q.size(1), kv_heads = k.size(1);
    // The rows past n as the forward leaves them (+inf: no probability).
    at::Tensor padded_lse = at::full({1, heads, lse_width}, INFINITY, lse.options());
    padded_lse.narrow(2, 0, q.size(2)).copy_(lse);
    // The kernel reads the output's rows with a stride of heads * d (it computes D = rowsum(dO * O)
    // itself for 16-bit types): the output goes in laid out (1, n, heads, d), viewed as
    // (1, heads, n, d).
    const at::Tensor out_rows = out.transpose(1, 2).contiguous().transpose(1, 2);
    auto [dq, dk, dv, unused] = at::_scaled_dot_product_efficient_attention_backward(
        grad_out.contiguous(), q.contiguous(), per_query_head(k, heads), per_query_head(v, heads),
        mask, out_rows, padded_lse, seed, offset, /*dropout_p=*/0.0, {true, true, true, false},
        /*is_causal=*/false, scale);
    if (kv_heads != heads) {  // the query heads of each key head, summed back
      dk = dk.view({1, kv_heads, heads / kv_heads, k.size(2), k.size(3)}).sum(2);
      dv = dv.view({1, kv_heads, heads / kv_heads, v.size(2), v.size(3)}).sum(2);
    }
    return {dq, dk, dv};
  }
  return at::_scaled_dot_product_flash_attention_for_cpu_backward(
      grad_out, q, k, v, out, lse, /*dropout_p=*/0.0, /*is_causal=*/false, mask, scale);
}

at::ScalarType accumulation_dtype(const at::Tensor& q) {
  return q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// The shapes of the own-block terms: (B, heads, Q, d) viewed per key head's group of query heads
// and per block: (B, kv_heads, groups, A, bs, d).
struct BlockView {
  int64_t rows, kv_heads, groups, blocks, block_size, dim;
  at::Tensor queries(const at::Tensor& t, at::ScalarType dtype) const {
    return t.to(dtype).reshape({rows, kv_heads, groups, blocks, block_size, -1});
  }
  at::Tensor keys(const at::Tensor& t, at::ScalarType dtype) const {  // (B, kvh, 1, A, bs, d)
    return t.to(dtype).reshape({rows, kv_heads, 1, blocks, block_size, dim});
  }
};

class FusedDFlashFunction : public torch::autograd::Function<FusedDFlashFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                            const at::Tensor& context_k, const at::Tensor& context_v,
                            const at::Tensor& block_k, const at::Tensor& block_v,
                            const at::Tensor& first, const at::Tensor& last,
                            const at::Tensor& block_valid, const KeyBands& bands,
                            int64_t query_chunk) {
    const int64_t rows = q.size(0), heads = q.size(1), queries = q.size(2), dim = q.size(3);
    const int64_t kv_heads = context_k.size(1), blocks = block_valid.size(1);
    const BlockView view{rows, kv_heads, heads / kv_heads, blocks, queries / blocks, dim};
    const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
    const at::ScalarType acc = accumulation_dtype(q);

    // 1. The context: one fused call per chunk.
    at::Tensor context_out = at::zeros(q.sizes(), q.options());  // (B, h, Q, d)
    at::Tensor context_lse =
        at::full({rows, heads, queries}, -INFINITY, q.options().dtype(at::kFloat));
    const std::vector<Chunk> chunks = plan_chunks(bands, view.block_size, query_chunk);
    c10::List<at::Tensor> cuda_state;
    std::vector<int64_t> lse_widths;
    for (const Chunk& c : chunks) {
      const ChunkForward part =
          chunk_forward(query_slice(q, c), key_slice(context_k, c), key_slice(context_v, c),
                        chunk_mask(bands, c, q.scalar_type(), heads), scale);
      query_slice(context_out, c).copy_(part.out);
      context_lse.narrow(0, c.row, 1).narrow(2, c.query_start, c.queries).copy_(part.lse);
      if (q.is_cuda()) {
        cuda_state.push_back(part.seed);
        cuda_state.push_back(part.offset);
        lse_widths.push_back(part.lse_width);
      }
    }

    // 2. The own-block keys, merged by log-sum-exp.
    const at::Tensor q6 = view.queries(q, acc);
    const at::Tensor scores =
        at::matmul(q6, view.keys(block_k, acc).transpose(-1, -2)).mul_(scale);  // (.., bs, bs)
    const at::Tensor context_part = view.queries(context_lse, acc);             // (.., bs, 1)
    const at::Tensor merged = at::logsumexp(at::cat({context_part, scores}, -1), -1, true);
    const at::Tensor valid = block_valid.to(acc).view({rows, 1, 1, blocks, 1, 1});
    const at::Tensor out6 = ((context_part - merged).exp_() * view.queries(context_out, acc) +
                             at::matmul((scores - merged).exp_(), view.keys(block_v, acc))) *
                            valid;
    const at::Tensor out = out6.view({rows, heads, queries, dim}).to(q.scalar_type());
    const at::Tensor lse = merged.view({rows, heads, queries}).to(at::kFloat);

    ctx->save_for_backward(
        {q, context_k, context_v, block_k, block_v, out, lse, block_valid, first, last});
    std::vector<int64_t> plan;
    for (const Chunk& c : chunks)
      plan.insert(plan.end(), {c.row, c.query_start, c.queries, c.key_start, c.keys});
    ctx->saved_data["plan"] = plan;
    ctx->saved_data["cuda_state"] = cuda_state;
    ctx->saved_data["lse_widths"] = lse_widths;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &context_k = saved[1], &context_v = saved[2];
    const at::Tensor &block_k = saved[3], &block_v = saved[4], &out = saved[5], &lse = saved[6];
    const at::Tensor& block_valid = saved[7];
    const KeyBands bands{saved[8], saved[9], at::Tensor(), at::Tensor()};
    const std::vector<int64_t> plan = ctx->saved_data["plan"].toIntVector();
    const c10::List<at::Tensor> cuda_state = ctx->saved_data["cuda_state"].toTensorList();
    const std::vector<int64_t> lse_widths = ctx->saved_data["lse_widths"].toIntVector();
    const int64_t rows = q.size(0), heads = q.size(1), queries = q.size(2), dim = q.size(3);
    const int64_t kv_heads = context_k.size(1), blocks = block_valid.size(1);
    const BlockView view{rows, kv_heads, heads / kv_heads, blocks, queries / blocks, dim};
    const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
    const at::ScalarType acc = accumulation_dtype(q);
    const at::Tensor valid = block_valid.to(acc).view({rows, 1, 1, blocks, 1, 1});
    // Invalid blocks' outputs are constant 0: no gradient flows from them.
    const at::Tensor grad_out =
        (view.queries(grad_outputs[0], acc) * valid).view(q.sizes()).to(q.scalar_type());

    // The context keys: the fused kernel's backward per chunk, key gradients summed in `acc`.
    at::Tensor dq = at::zeros(q.sizes(), q.options().dtype(acc));
    at::Tensor dk = at::zeros(context_k.sizes(), context_k.options().dtype(acc));
    at::Tensor dv = at::zeros(context_v.sizes(), context_v.options().dtype(acc));
    for (size_t i = 0; i * 5 < plan.size(); ++i) {
      const Chunk c{plan[5 * i], plan[5 * i + 1], plan[5 * i + 2], plan[5 * i + 3],
                    plan[5 * i + 4]};
      const at::Tensor mask = chunk_mask(bands, c, q.scalar_type(), heads);
      const auto [dq_part, dk_part, dv_part] = chunk_backward(
          query_slice(grad_out, c), query_slice(q, c), key_slice(context_k, c),
          key_slice(context_v, c), mask, query_slice(out, c),
          lse.narrow(0, c.row, 1).narrow(2, c.query_start, c.queries), scale,
          q.is_cuda() ? cuda_state.get(2 * i) : at::Tensor(),
          q.is_cuda() ? cuda_state.get(2 * i + 1) : at::Tensor(), q.is_cuda() ? lse_widths[i] : 0);
      query_slice(dq, c).copy_(dq_part);
      key_slice(dk, c).add_(dk_part);
      key_slice(dv, c).add_(dv_part);
    }

    // The own-block keys' analytic terms.
    const at::Tensor q6 = view.queries(q, acc), dout6 = view.queries(grad_out, acc);
    const at::Tensor keys = view.keys(block_k, acc), values = view.keys(block_v, acc);
    const at::Tensor merged = view.queries(lse, acc);                     // (.., bs, 1)
    const at::Tensor d = (dout6 * view.queries(out, acc)).sum(-1, true);  // rowsum(dO * O)
    const at::Tensor p =
        (at::matmul(q6, keys.transpose(-1, -2)).mul_(scale) - merged).exp_();  // (.., bs, bs)
    const at::Tensor ds = p * (at::matmul(dout6, values.transpose(-1, -2)) - d);
    dq.add_(at::matmul(ds, keys).mul_(scale).view(q.sizes()));
    const at::Tensor d_block_k = at::matmul(ds.transpose(-1, -2), q6).sum(2).mul_(scale);
    const at::Tensor d_block_v = at::matmul(p.transpose(-1, -2), dout6).sum(2);
    return {dq.to(q.scalar_type()),
            dk.to(context_k.scalar_type()),
            dv.to(context_v.scalar_type()),
            d_block_k.reshape(block_k.sizes()).to(block_k.scalar_type()),
            d_block_v.reshape(block_v.sizes()).to(block_v.scalar_type()),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

at::Tensor fused_dflash_attention(const at::Tensor& q, const at::Tensor& context_k,
                                  const at::Tensor& context_v, const at::Tensor& block_k,
                                  const at::Tensor& block_v, const KeyBands& context_bands,
                                  const at::Tensor& block_valid, int64_t query_chunk) {
  check(q.dim() == 4 && context_k.dim() == 4 && context_v.sizes() == context_k.sizes() &&
            block_k.dim() == 4 && block_v.sizes() == block_k.sizes() &&
            block_k.size(2) == q.size(2) && q.size(1) % context_k.size(1) == 0 &&
            block_valid.dim() == 2 && block_valid.size(0) == q.size(0) && block_valid.size(1) > 0 &&
            q.size(2) % block_valid.size(1) == 0,
        "[fused_dflash_attention] q (B, heads, A * bs, d), context and block keys (B, kv_heads, "
        "T, d) and block_valid (B, A) expected; got ",
        q.sizes(), ", ", context_k.sizes(), ", ", block_k.sizes(), " and ", block_valid.sizes());
  check(context_bands.rows() == q.size(0) && context_bands.queries() == q.size(2),
        "[fused_dflash_attention] the bands cover (", context_bands.rows(), ", ",
        context_bands.queries(), ") queries, the queries are ", q.sizes());
  return FusedDFlashFunction::apply(q, context_k, context_v, block_k, block_v, context_bands.first,
                                    context_bands.last, block_valid.to(at::kBool), context_bands,
                                    query_chunk);
}

}  // namespace tandem
