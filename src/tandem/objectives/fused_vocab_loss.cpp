#include "tandem/objectives/fused_vocab_loss.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "tandem/core/error.h"
#include "tandem/objectives/vocab_head.h"

namespace tandem {

namespace {

void check_inputs(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& labels) {
  check(hidden.dim() == 2 && lm_head.dim() == 2 && hidden.size(1) == lm_head.size(1),
        "[loss] hidden (N, H) and lm_head (V, H) disagree: ", hidden.sizes(), " vs ",
        lm_head.sizes());
  check(labels.dim() == 1 && labels.size(0) == hidden.size(0),
        "[loss] labels must be (N,) with N = ", hidden.size(0), ", got ", labels.sizes());
  check(labels.scalar_type() == at::kLong, "[loss] labels must be int64");
}

class FusedTokenLogprobs : public torch::autograd::Function<FusedTokenLogprobs> {
 public:
  // Returns {logprobs (N,), entropy (N,)}; the entropy is only filled when `with_entropy`.
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& hidden, const at::Tensor& lm_head,
                                                const at::Tensor& labels, int64_t chunk_tokens,
                                                bool fp32_head, bool with_entropy) {
    at::NoGradGuard no_grad;
    const at::ScalarType reduce = reduction_dtype(hidden);
    const int64_t tokens = hidden.size(0);
    at::Tensor logprobs = at::empty({tokens}, hidden.options().dtype(reduce));
    at::Tensor log_normalizer = at::empty({tokens}, hidden.options().dtype(reduce));
    at::Tensor entropy = with_entropy ? at::empty({tokens}, hidden.options().dtype(reduce))
                                      : at::zeros({0}, hidden.options().dtype(reduce));
    for (int64_t start = 0; start < tokens; start += chunk_tokens) {
      const int64_t n = std::min(chunk_tokens, tokens - start);
      const at::Tensor logits =
          project_to_vocab(hidden.narrow(0, start, n), lm_head, fp32_head).to(reduce);  // (n, V)
      const at::Tensor lse = at::logsumexp(logits, 1);                                  // (n,)
      log_normalizer.narrow(0, start, n).copy_(lse);
      logprobs.narrow(0, start, n)
          .copy_(logits.gather(1, labels.narrow(0, start, n).unsqueeze(1)).squeeze(1) - lse);
      // H = lse - sum_v p_v z_v
      if (with_entropy)
        entropy.narrow(0, start, n).copy_(lse - (at::softmax(logits, 1) * logits).sum(1));
    }
    ctx->save_for_backward({hidden, lm_head, labels, log_normalizer});
    ctx->saved_data["chunk_tokens"] = chunk_tokens;
    ctx->saved_data["fp32_head"] = fp32_head;
    ctx->mark_non_differentiable({entropy});
    return {logprobs, entropy};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &hidden = saved[0], &lm_head = saved[1], &labels = saved[2],
                     &log_normalizer = saved[3];
    const int64_t chunk_tokens = ctx->saved_data["chunk_tokens"].toInt();
    const bool fp32_head = ctx->saved_data["fp32_head"].toBool();
    const at::ScalarType reduce = reduction_dtype(hidden);
    const at::Tensor grad_logprobs =
        grad_outputs[0].defined() ? grad_outputs[0].to(reduce)
                                  : at::zeros({hidden.size(0)}, hidden.options().dtype(reduce));
    const bool want_hidden = ctx->needs_input_grad(0), want_head = ctx->needs_input_grad(1);
    // The head's gradient accumulates over chunks in fp32, then returns in the weight's dtype.
    at::Tensor grad_head =
        want_head ? at::zeros(lm_head.sizes(), lm_head.options().dtype(reduce)) : at::Tensor();
    at::Tensor grad_hidden = want_hidden ? at::empty_like(hidden) : at::Tensor();
    const at::ScalarType compute = head_compute_dtype(hidden, fp32_head);
    const at::Tensor head_compute = lm_head.to(compute);
    for (int64_t start = 0; start < hidden.size(0); start += chunk_tokens) {
      const int64_t n = std::min(chunk_tokens, hidden.size(0) - start);
      const at::Tensor hidden_compute = hidden.narrow(0, start, n).to(compute);
      const at::Tensor g = grad_logprobs.narrow(0, start, n).unsqueeze(1);  // (n, 1)
      // d logp[y] / d z = onehot(y) - softmax(z); softmax = exp(z - lse) formed in place.
      at::Tensor grad_logits = at::linear(hidden_compute, head_compute).to(reduce);  // (n, V)
      grad_logits.sub_(log_normalizer.narrow(0, start, n).unsqueeze(1)).exp_().mul_(-g);
      grad_logits.scatter_add_(1, labels.narrow(0, start, n).unsqueeze(1), g);
      const at::Tensor grad_compute = grad_logits.to(compute);
      if (want_hidden) grad_hidden.narrow(0, start, n).copy_(at::mm(grad_compute, head_compute));
      if (want_head) grad_head.add_(at::mm(grad_compute.t(), hidden_compute).to(reduce));
    }
    return {grad_hidden,  want_head ? grad_head.to(lm_head.scalar_type()) : at::Tensor(),
            at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor fused_token_logprobs(const at::Tensor& hidden, const at::Tensor& lm_head,
                                const at::Tensor& labels, const FusedLossOptions& options,
                                at::Tensor* entropy) {
  check_inputs(hidden, lm_head, labels);
  check(options.chunk_tokens >= 0, "[loss] chunk_tokens must be >= 0 (0: no chunking)");
  if (options.chunk_tokens == 0) {  // the plain path: full logits, autograd through them
    const at::Tensor logits =
        project_to_vocab(hidden, lm_head, options.fp32_head).to(reduction_dtype(hidden));
    const at::Tensor log_probs = at::log_softmax(logits, 1);
    if (entropy) *entropy = -(log_probs.exp() * log_probs).sum(1).detach();
    return log_probs.gather(1, labels.unsqueeze(1)).squeeze(1);
  }
  auto outputs = FusedTokenLogprobs::apply(hidden, lm_head, labels, options.chunk_tokens,
                                           options.fp32_head, entropy != nullptr);
  if (entropy) *entropy = outputs[1];
  return outputs[0];
}

at::Tensor unfused_token_logprobs(const at::Tensor& hidden, const at::Tensor& lm_head,
                                  const at::Tensor& labels, bool fp32_head) {
  FusedLossOptions options;
  options.chunk_tokens = 0;
  options.fp32_head = fp32_head;
  return fused_token_logprobs(hidden, lm_head, labels, options);
}

namespace {

void check_weights(const at::Tensor& targets, const at::Tensor& weights) {
  check(weights.sizes() == targets.sizes(), "[loss] targets and weights must be (N,), got ",
        targets.sizes(), " and ", weights.sizes());
}

}  // namespace

at::Tensor fused_linear_cross_entropy(const at::Tensor& hidden, const at::Tensor& lm_head,
                                      const at::Tensor& targets, const at::Tensor& weights,
                                      const FusedLossOptions& options) {
  check_weights(targets, weights);
  const at::Tensor logprobs =
      fused_token_logprobs(hidden, lm_head, safe_targets(targets, weights), options);
  return -(logprobs * weights.to(logprobs.scalar_type())).sum();
}

at::Tensor unfused_linear_cross_entropy(const at::Tensor& hidden, const at::Tensor& lm_head,
                                        const at::Tensor& targets, const at::Tensor& weights,
                                        bool fp32_head) {
  check_weights(targets, weights);
  const at::Tensor logprobs =
      unfused_token_logprobs(hidden, lm_head, safe_targets(targets, weights), fp32_head);
  return -(logprobs * weights.to(logprobs.scalar_type())).sum();
}

}  // namespace tandem
