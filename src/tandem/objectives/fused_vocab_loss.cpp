#include "tandem/objectives/fused_vocab_loss.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "tandem/core/error.h"
#include "tandem/objectives/vocab_head.h"

namespace tandem {

namespace {

void check_inputs(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& targets,
                  const at::Tensor& weights) {
  check(hidden.dim() == 2 && lm_head.dim() == 2 && hidden.size(1) == lm_head.size(1),
        "[loss] hidden (N, H) and lm_head (V, H) disagree: ", hidden.sizes(), " vs ",
        lm_head.sizes());
  check(targets.dim() == 1 && targets.size(0) == hidden.size(0) &&
            weights.sizes() == targets.sizes(),
        "[loss] targets and weights must be (N,) with N = ", hidden.size(0), ", got ",
        targets.sizes(), " and ", weights.sizes());
  check(targets.scalar_type() == at::kLong, "[loss] targets must be int64");
}

// Logits of one chunk in the dtype the head computes in: (n, V).
at::Tensor chunk_logits(const at::Tensor& hidden, const at::Tensor& lm_head, bool fp32_head) {
  if (fp32_head && hidden.scalar_type() != at::kDouble)
    return at::linear(hidden.to(at::kFloat), lm_head.to(at::kFloat));
  return at::linear(hidden, lm_head);
}

class FusedLinearCrossEntropy : public torch::autograd::Function<FusedLinearCrossEntropy> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& hidden,
                            const at::Tensor& lm_head, const at::Tensor& targets,
                            const at::Tensor& weights, int64_t chunk_tokens, bool fp32_head) {
    at::NoGradGuard no_grad;
    const at::Tensor safe = safe_targets(targets, weights);
    const at::ScalarType reduce = reduction_dtype(hidden);
    const at::Tensor weights32 = weights.to(reduce);
    at::Tensor total = at::zeros({}, hidden.options().dtype(reduce));
    for (int64_t start = 0; start < hidden.size(0); start += chunk_tokens) {
      const int64_t n = std::min(chunk_tokens, hidden.size(0) - start);
      const at::Tensor logits = chunk_logits(hidden.narrow(0, start, n), lm_head, fp32_head);
      // CE = logsumexp(z) - z[target], reduced in fp32 whatever the head's dtype.
      const at::Tensor logits32 = logits.to(reduce);
      const at::Tensor picked = logits32.gather(1, safe.narrow(0, start, n).unsqueeze(1)).squeeze(1);
      const at::Tensor ce = at::logsumexp(logits32, 1) - picked;
      total += (ce * weights32.narrow(0, start, n)).sum();
    }
    ctx->save_for_backward({hidden, lm_head, safe, weights32});
    ctx->saved_data["chunk_tokens"] = chunk_tokens;
    ctx->saved_data["fp32_head"] = fp32_head;
    return total;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& hidden = saved[0];
    const at::Tensor& lm_head = saved[1];
    const at::Tensor& safe = saved[2];
    const at::Tensor& weights32 = saved[3];
    const int64_t chunk_tokens = ctx->saved_data["chunk_tokens"].toInt();
    const bool fp32_head = ctx->saved_data["fp32_head"].toBool();
    const at::ScalarType reduce = reduction_dtype(hidden);
    const at::Tensor grad_total = grad_outputs[0].to(reduce);

    const bool want_hidden = ctx->needs_input_grad(0);
    const bool want_head = ctx->needs_input_grad(1);
    // The head's gradient accumulates over chunks in fp32, then returns in the weight's dtype.
    at::Tensor grad_head =
        want_head ? at::zeros(lm_head.sizes(), lm_head.options().dtype(reduce)) : at::Tensor();
    at::Tensor grad_hidden = want_hidden ? at::empty_like(hidden) : at::Tensor();
    const bool upcast = fp32_head && reduce != at::kDouble;
    const at::Tensor head_compute = upcast ? lm_head.to(at::kFloat) : lm_head;
    for (int64_t start = 0; start < hidden.size(0); start += chunk_tokens) {
      const int64_t n = std::min(chunk_tokens, hidden.size(0) - start);
      const at::Tensor hidden_chunk = hidden.narrow(0, start, n);
      const at::Tensor hidden_compute = upcast ? hidden_chunk.to(at::kFloat) : hidden_chunk;
      const at::Tensor logits32 = at::linear(hidden_compute, head_compute).to(reduce);
      // d CE / d z = softmax(z) - onehot(target), scaled by the token's weight.
      at::Tensor grad_logits = at::softmax(logits32, 1);
      grad_logits.scatter_add_(1, safe.narrow(0, start, n).unsqueeze(1),
                               at::full({n, 1}, -1.0f, grad_logits.options()));
      grad_logits.mul_((weights32.narrow(0, start, n) * grad_total).unsqueeze(1));
      const at::Tensor grad_compute = grad_logits.to(head_compute.scalar_type());
      if (want_hidden)
        grad_hidden.narrow(0, start, n).copy_(at::mm(grad_compute, head_compute));
      if (want_head) grad_head.add_(at::mm(grad_compute.t(), hidden_compute).to(reduce));
    }
    return {grad_hidden, want_head ? grad_head.to(lm_head.scalar_type()) : at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor fused_linear_cross_entropy(const at::Tensor& hidden, const at::Tensor& lm_head,
                                      const at::Tensor& targets, const at::Tensor& weights,
                                      const FusedLossOptions& options) {
  check_inputs(hidden, lm_head, targets, weights);
  check(options.chunk_tokens > 0, "[loss] chunk_tokens must be positive");
  return FusedLinearCrossEntropy::apply(hidden, lm_head, targets, weights, options.chunk_tokens,
                                        options.fp32_head);
}

at::Tensor unfused_linear_cross_entropy(const at::Tensor& hidden, const at::Tensor& lm_head,
                                        const at::Tensor& targets, const at::Tensor& weights,
                                        bool fp32_head) {
  check_inputs(hidden, lm_head, targets, weights);
  const at::ScalarType reduce = reduction_dtype(hidden);
  const at::Tensor logits32 = chunk_logits(hidden, lm_head, fp32_head).to(reduce);
  const at::Tensor safe = safe_targets(targets, weights);
  const at::Tensor ce = at::logsumexp(logits32, 1) - logits32.gather(1, safe.unsqueeze(1)).squeeze(1);
  return (ce * weights.to(reduce)).sum();
}

}  // namespace tandem
