#include "tandem/models/fused_ttt_attention.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cmath>
#include <tuple>

#include "tandem/core/error.h"

namespace tandem {

KernelChoice choose_ttt_kernel(AttentionKernel asked, c10::DeviceType device, c10::ScalarType dtype,
                               int64_t head_dim, bool cuda_flash) {
  if (const auto common = asked_or_unsupported(asked, dtype)) return *common;
  if (device == c10::kCPU)
    return {AttentionKernel::Fused, "the CPU flash kernel, merged by log-sum-exp"};
  if (device != c10::kCUDA)
    return {AttentionKernel::Blockwise, "no fused kernel on " + c10::DeviceTypeName(device)};
  if (dtype != c10::kBFloat16 && dtype != c10::kHalf)
    return {AttentionKernel::Blockwise,
            "the CUDA flash kernel needs bf16 or fp16, not " + std::string(c10::toString(dtype))};
  if (head_dim % 8 != 0 || head_dim > 256)
    return {AttentionKernel::Blockwise,
            "the CUDA flash kernel needs a head dim that is a "
            "multiple of 8 up to 256, not " +
                std::to_string(head_dim)};
  if (!cuda_flash)
    return {AttentionKernel::Blockwise,
            "this GPU or PyTorch build does not run the CUDA flash kernel (compute capability "
            "8.0 or later needed), or the fused kernel failed its self-check here"};
  return {AttentionKernel::Fused, "the CUDA flash kernel, merged by log-sum-exp"};
}

namespace {

// One causal call's results; on CUDA also the state its backward takes back.
struct CausalForward {
  at::Tensor out, lse;     // (1, heads, n, d) in q's dtype; (1, heads, n) fp32
  at::Tensor rng, unused;  // CUDA flash only
};

// (1, kv_heads, n, d) -> (1, heads, n, d): the CUDA kernels are given one key head per query
// head (the CPU kernel takes grouped-query attention as is).
at::Tensor per_query_head(const at::Tensor& kv, int64_t heads) {
  const int64_t groups = heads / kv.size(1);
  return groups == 1 ? kv.contiguous() : kv.repeat_interleave(groups, 1);
}

CausalForward causal_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             double scale) {
  if (q.is_cuda()) {
    const auto result = at::_scaled_dot_product_flash_attention(
        q.contiguous(), per_query_head(k, q.size(1)), per_query_head(v, q.size(1)),
        /*dropout_p=*/0.0, /*is_causal=*/true, /*return_debug_mask=*/false, scale);
    return {std::get<0>(result), std::get<1>(result), std::get<6>(result), std::get<7>(result)};
  }
  const auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(
      q, k, v, /*dropout_p=*/0.0, /*is_causal=*/true, /*attn_mask=*/std::nullopt, scale);
  return {out, lse, at::Tensor(), at::Tensor()};
}

// The fused kernel's backward with the merged output and log-sum-exp standing in for its own:
// dq, dk, dv (dk and dv with k's heads).
std::tuple<at::Tensor, at::Tensor, at::Tensor> causal_backward(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse, double scale, const at::Tensor& rng,
    const at::Tensor& unused) {
  if (q.is_cuda()) {
    const int64_t heads = q.size(1), kv_heads = k.size(1), n = q.size(2);
    auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_backward(
        grad_out.contiguous(), q.contiguous(), per_query_head(k, heads), per_query_head(v, heads),
        out.contiguous(), lse.contiguous(), at::Tensor(), at::Tensor(), n, n, /*dropout_p=*/0.0,
        /*is_causal=*/true, rng, unused, scale);
    if (kv_heads != heads) {  // the query heads of each key head, summed back
      dk = dk.view({1, kv_heads, heads / kv_heads, n, k.size(3)}).sum(2);
      dv = dv.view({1, kv_heads, heads / kv_heads, n, v.size(3)}).sum(2);
    }
    return {dq, dk, dv};
  }
  return at::_scaled_dot_product_flash_attention_for_cpu_backward(
      grad_out, q, k, v, out, lse, /*dropout_p=*/0.0, /*is_causal=*/true,
      /*attn_mask=*/std::nullopt, scale);
}

}  // namespace

at::Tensor causal_document_segments(const KeyBands& bands) {
  const at::Tensor first = bands.first_host.to(at::kLong).contiguous();
  const at::Tensor last = bands.last_host.to(at::kLong).contiguous();
  const auto f = first.accessor<int64_t, 2>();
  const auto l = last.accessor<int64_t, 2>();
  std::vector<int64_t> segments;
  for (int64_t b = 0; b < first.size(0); ++b) {
    int64_t start = 0;
    for (int64_t t = 0; t < first.size(1); ++t) {
      if (l[b][t] != t || (f[b][t] != t && (t == 0 || f[b][t] != start))) return at::Tensor();
      if (f[b][t] == t && t > 0) {
        segments.insert(segments.end(), {b, start, t - start});
      }
      start = f[b][t];
    }
    if (first.size(1) > 0) segments.insert(segments.end(), {b, start, first.size(1) - start});
  }
  return at::tensor(segments, at::kLong).view({-1, 3});
}

namespace {

at::ScalarType accumulation_dtype(const at::Tensor& q) {
  return q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// (B, kv_heads, T, d) -> (B, kv_heads, 1, T, d) in `dtype`: broadcasts over a key head's
// query heads when the queries are viewed (B, kv_heads, groups, T, d).
at::Tensor grouped(const at::Tensor& kv, at::ScalarType dtype) { return kv.to(dtype).unsqueeze(2); }

class FusedTttFunction : public torch::autograd::Function<FusedTttFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v, at::TensorList step_k,
                            at::TensorList step_v, const at::Tensor& segments) {
    const int64_t rows = q.size(0), heads = q.size(1), length = q.size(2), dim = q.size(3);
    const int64_t kv_heads = k.size(1), groups = heads / kv_heads;
    const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
    const at::ScalarType acc = accumulation_dtype(q);
    at::Tensor context_out = at::empty(q.sizes(), q.options());  // (B, h, T, d)
    at::Tensor context_lse = at::empty({rows, heads, length}, q.options().dtype(at::kFloat));
    c10::List<at::Tensor> cuda_state;
    const auto seg = segments.accessor<int64_t, 2>();
    for (int64_t i = 0; i < segments.size(0); ++i) {
      const int64_t b = seg[i][0], start = seg[i][1], n = seg[i][2];
      auto slice = [&](const at::Tensor& t) { return t.narrow(0, b, 1).narrow(2, start, n); };
      const CausalForward part = causal_forward(slice(q), slice(k), slice(v), scale);
      slice(context_out).copy_(part.out);
      context_lse.narrow(0, b, 1).narrow(2, start, n).copy_(part.lse);
      if (q.is_cuda()) {
        cuda_state.push_back(part.rng);
        cuda_state.push_back(part.unused);
      }
    }
    at::Tensor out = context_out, lse = context_lse;
    if (!step_k.empty()) {
      const at::Tensor q5 = q.to(acc).reshape({rows, kv_heads, groups, length, dim});
      std::vector<at::Tensor> scores = {context_lse.to(acc).view({rows, kv_heads, groups, length})};
      for (const at::Tensor& key : step_k)
        scores.push_back((q5 * grouped(key, acc)).sum(-1).mul_(scale));  // (B, kv, g, T)
      const at::Tensor merged = at::logsumexp(at::stack(scores), 0);     // (B, kv, g, T)
      at::Tensor out5 = (scores[0] - merged).exp_().unsqueeze(-1) *
                        context_out.to(acc).reshape({rows, kv_heads, groups, length, dim});
      for (size_t j = 0; j < step_v.size(); ++j)
        out5.add_((scores[j + 1] - merged).exp_().unsqueeze(-1) * grouped(step_v[j], acc));
      out = out5.view({rows, heads, length, dim}).to(q.scalar_type());
      lse = merged.view({rows, heads, length}).to(at::kFloat);
    }
    torch::autograd::variable_list saved = {q, k, v, out, lse};
    saved.insert(saved.end(), step_k.begin(), step_k.end());
    saved.insert(saved.end(), step_v.begin(), step_v.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["steps"] = static_cast<int64_t>(step_k.size());
    ctx->saved_data["segments"] = segments;
    ctx->saved_data["cuda_state"] = cuda_state;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const int64_t steps = ctx->saved_data["steps"].toInt();
    const at::Tensor segments = ctx->saved_data["segments"].toTensor();
    const c10::List<at::Tensor> cuda_state = ctx->saved_data["cuda_state"].toTensorList();
    const int64_t rows = q.size(0), heads = q.size(1), length = q.size(2), dim = q.size(3);
    const int64_t kv_heads = k.size(1), groups = heads / kv_heads;
    const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
    const at::ScalarType acc = accumulation_dtype(q);
    const at::Tensor grad_out = grad_outputs[0].to(q.scalar_type());  // (B, h, T, d)

    at::Tensor dq = at::zeros(q.sizes(), q.options());
    at::Tensor dk = at::zeros(k.sizes(), k.options());
    at::Tensor dv = at::zeros(v.sizes(), v.options());
    const auto seg = segments.accessor<int64_t, 2>();
    for (int64_t i = 0; i < segments.size(0); ++i) {
      const int64_t b = seg[i][0], start = seg[i][1], n = seg[i][2];
      auto slice = [&](const at::Tensor& t) { return t.narrow(0, b, 1).narrow(2, start, n); };
      const auto [dq_part, dk_part, dv_part] =
          causal_backward(slice(grad_out), slice(q), slice(k), slice(v), slice(out),
                          lse.narrow(0, b, 1).narrow(2, start, n), scale,
                          q.is_cuda() ? cuda_state.get(2 * i) : at::Tensor(),
                          q.is_cuda() ? cuda_state.get(2 * i + 1) : at::Tensor());
      slice(dq).copy_(dq_part);
      slice(dk).copy_(dk_part);
      slice(dv).copy_(dv_part);
    }
    torch::autograd::variable_list grads = {dq, dk, dv};
    if (steps == 0) {
      grads.push_back(at::Tensor());  // the segments
      return grads;
    }
    // The step keys' analytic terms, per key head's group of query heads.
    const at::Tensor q5 = q.to(acc).reshape({rows, kv_heads, groups, length, dim});
    const at::Tensor dout5 = grad_out.to(acc).reshape({rows, kv_heads, groups, length, dim});
    const at::Tensor merged = lse.to(acc).view({rows, kv_heads, groups, length});
    const at::Tensor d = (dout5 * out.to(acc).reshape({rows, kv_heads, groups, length, dim}))
                             .sum(-1);  // (B, kv, g, T): rowsum(dO * O)
    at::Tensor dq_steps = at::zeros_like(q5);
    std::vector<at::Tensor> dk_steps, dv_steps;
    for (int64_t j = 0; j < steps; ++j) {
      const at::Tensor key = grouped(saved[5 + j], acc), value = grouped(saved[5 + steps + j], acc);
      const at::Tensor p = ((q5 * key).sum(-1).mul_(scale) - merged).exp_();  // (B, kv, g, T)
      const at::Tensor ds = p * ((dout5 * value).sum(-1) - d);
      dq_steps.add_(ds.unsqueeze(-1) * key, scale);
      dk_steps.push_back((ds.unsqueeze(-1) * q5).sum(2).mul_(scale).to(saved[5 + j].scalar_type()));
      dv_steps.push_back((p.unsqueeze(-1) * dout5).sum(2).to(saved[5 + steps + j].scalar_type()));
    }
    grads[0] = (dq.to(acc) + dq_steps.view({rows, heads, length, dim})).to(q.scalar_type());
    grads.insert(grads.end(), dk_steps.begin(), dk_steps.end());
    grads.insert(grads.end(), dv_steps.begin(), dv_steps.end());
    grads.push_back(at::Tensor());  // the segments
    return grads;
  }
};

}  // namespace

at::Tensor fused_ttt_attention(const at::Tensor& q, const at::Tensor& context_k,
                               const at::Tensor& context_v, const at::Tensor& segments,
                               const std::vector<at::Tensor>& step_k,
                               const std::vector<at::Tensor>& step_v) {
  check(segments.defined() && segments.dim() == 2 && segments.size(1) == 3 &&
            q.size(2) == context_k.size(2),
        "[fused_ttt_attention] needs documents as (row, start, length) and as many queries as "
        "context keys; got queries ",
        q.sizes(), " and context ", context_k.sizes());
  // Every (row, position) in exactly one document: the output is written document by document.
  check(segments.numel() > 0 && segments.select(1, 0).max().item<int64_t>() < q.size(0) &&
            segments.select(1, 2).sum().item<int64_t>() == q.size(0) * q.size(2),
        "[fused_ttt_attention] the documents (", segments.size(0),
        ") do not cover the queries' rows and positions ", q.sizes());
  return FusedTttFunction::apply(q, context_k, context_v, at::TensorList(step_k),
                                 at::TensorList(step_v), segments);
}

}  // namespace tandem
