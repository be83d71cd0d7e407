#include "tandem/objectives/dspark_loss.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <algorithm>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/objectives/vocab_head.h"

namespace tandem {

namespace {

void check_inputs(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& code,
                  const at::Tensor& markov_w2, const at::Tensor& teacher_hidden,
                  const at::Tensor& labels, const at::Tensor& weights) {
  check(hidden.dim() == 2 && lm_head.dim() == 2 && hidden.size(1) == lm_head.size(1),
        "[dspark] hidden (N, H) and lm_head (V, H) disagree: ", hidden.sizes(), " vs ",
        lm_head.sizes());
  check(teacher_hidden.sizes() == hidden.sizes(), "[dspark] the target's hidden states ",
        teacher_hidden.sizes(), " must match the draft's ", hidden.sizes());
  check(code.defined() == markov_w2.defined(),
        "[dspark] the Markov code and markov_w2 come together");
  if (code.defined())
    check(code.dim() == 2 && code.size(0) == hidden.size(0) && markov_w2.dim() == 2 &&
              markov_w2.size(0) == lm_head.size(0) && markov_w2.size(1) == code.size(1),
          "[dspark] Markov code (N, r) and markov_w2 (V, r) expected, got ", code.sizes(), " and ",
          markov_w2.sizes(), " for N = ", hidden.size(0), ", V = ", lm_head.size(0));
  check(labels.dim() == 1 && labels.size(0) == hidden.size(0) &&
            weights.sizes() == labels.sizes() && labels.scalar_type() == at::kLong,
        "[dspark] labels (int64) and weights must be (N,) with N = ", hidden.size(0));
}

struct ChunkParts {
  at::Tensor total;          // 0-dim: sum_t w_t (a CE_t + b L1_t)
  at::Tensor cross_entropy;  // (n,)
  at::Tensor l1;             // (n,)
  at::Tensor grad_logits;    // (n, V): d total / d z; undefined unless asked for
};

// One chunk from its draft logits z and target logits u (both (n, V), reduction dtype, consumed
// in place): the header's losses and, with want_grad, their gradient w.r.t. z.
ChunkParts chunk_parts(at::Tensor z, at::Tensor u, const at::Tensor& labels,
                       const at::Tensor& weights, const DSparkLossWeights& loss_weights,
                       bool want_grad) {
  at::Tensor p = at::log_softmax(z, 1);
  z.reset();
  ChunkParts out;
  out.cross_entropy = -p.gather(1, labels.unsqueeze(1)).squeeze(1);
  p.exp_();
  at::Tensor sign = at::softmax(u, 1);  // q, then sign(p - q)
  u.reset();
  at::sub_out(sign, p, sign);
  out.l1 = sign.abs().sum(1);
  out.total =
      ((loss_weights.cross_entropy * out.cross_entropy + loss_weights.l1 * out.l1) * weights).sum();
  if (!want_grad) return out;
  sign.sign_();
  const at::Tensor expected_sign = (sign * p).sum(1, /*keepdim=*/true);  // (n, 1)
  // g = a (p - onehot) + b p (s - <s, p>) = p (a + b (s - <s, p>)) - a onehot
  at::Tensor grad = sign.sub_(expected_sign).mul_(loss_weights.l1).add_(loss_weights.cross_entropy);
  grad.mul_(p);
  p.reset();
  grad.scatter_add_(1, labels.unsqueeze(1),
                    at::full({labels.size(0), 1}, -loss_weights.cross_entropy, grad.options()));
  out.grad_logits = grad.mul_(weights.unsqueeze(1));
  return out;
}

// The loss chunk by chunk; the gradients are formed in the same pass and saved, backward only
// scales them by the incoming gradient.
class FusedDSparkLoss : public torch::autograd::Function<FusedDSparkLoss> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& hidden,
                            const at::Tensor& code, const at::Tensor& markov_w2,
                            const at::Tensor& lm_head, const at::Tensor& teacher_hidden,
                            const at::Tensor& labels, const at::Tensor& weights,
                            DSparkLossWeights loss_weights, FusedLossOptions options, bool markov,
                            bool want_hidden, bool want_markov, DSparkVocabLoss* parts) {
    at::NoGradGuard no_grad;
    const at::ScalarType reduce = reduction_dtype(hidden);
    const at::Tensor head = head_operand(lm_head, options.fp32_head);  // (V, H)
    const at::Tensor w2 = markov ? head_operand(markov_w2, options.fp32_head) : at::Tensor();
    const at::Tensor weights_reduced = weights.to(reduce);
    at::Tensor grad_hidden =
        want_hidden ? at::empty(hidden.sizes(), hidden.options()) : at::Tensor();
    at::Tensor grad_code = want_markov ? at::empty(code.sizes(), code.options()) : at::Tensor();
    at::Tensor grad_w2 = want_markov
                             ? at::zeros(markov_w2.sizes(), markov_w2.options().dtype(reduce))
                             : at::Tensor();
    at::Tensor total = at::zeros({}, hidden.options().dtype(reduce));
    std::vector<at::Tensor> ce_parts, l1_parts, argmax_parts;
    const int64_t rows = hidden.size(0);
    const int64_t chunk =
        options.chunk_tokens > 0 ? options.chunk_tokens : std::max<int64_t>(rows, 1);
    for (int64_t start = 0; start < rows; start += chunk) {
      const int64_t n = std::min(chunk, rows - start);
      const at::Tensor h = head_operand(hidden.narrow(0, start, n), options.fp32_head);  // (n, H)
      const at::Tensor e =
          markov ? head_operand(code.narrow(0, start, n), options.fp32_head) : at::Tensor();
      at::Tensor z = at::linear(h, head).to(reduce);  // (n, V)
      if (markov) z.add_(at::linear(e, w2).to(reduce));
      argmax_parts.push_back(z.argmax(1));
      at::Tensor u =
          at::linear(head_operand(teacher_hidden.narrow(0, start, n), options.fp32_head), head)
              .to(reduce);
      ChunkParts part = chunk_parts(std::move(z), std::move(u), labels.narrow(0, start, n),
                                    weights_reduced.narrow(0, start, n), loss_weights,
                                    want_hidden || want_markov);
      total += part.total;
      ce_parts.push_back(part.cross_entropy);
      l1_parts.push_back(part.l1);
      if (!part.grad_logits.defined()) continue;
      // Each matmul in its operands' dtype: the head's (the target's) and the Markov head's (the
      // draft's) may differ.
      if (want_hidden)
        grad_hidden.narrow(0, start, n)
            .copy_(at::mm(part.grad_logits.to(head.scalar_type()), head));
      if (want_markov) {
        const at::Tensor g = part.grad_logits.to(w2.scalar_type());  // (n, V)
        grad_code.narrow(0, start, n).copy_(at::mm(g, w2));
        grad_w2.add_(at::mm(g.t(), e).to(reduce));
      }
      part.grad_logits.reset();
    }
    ctx->save_for_backward(
        {grad_hidden, grad_code, want_markov ? grad_w2.to(markov_w2.scalar_type()) : at::Tensor()});
    const auto joined = [&](const std::vector<at::Tensor>& list, const at::TensorOptions& like) {
      return list.empty() ? at::empty({0}, like) : at::cat(list);
    };
    parts->cross_entropy = joined(ce_parts, hidden.options().dtype(reduce));
    parts->l1 = joined(l1_parts, hidden.options().dtype(reduce));
    parts->argmax = joined(argmax_parts, labels.options());
    return total;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    // One entry per forward argument: the three differentiable tensors, then ten without.
    return scaled_saved_gradients(ctx->get_saved_variables(), grad_outputs[0], 13);
  }
};

}  // namespace

DSparkVocabLoss fused_dspark_loss(const at::Tensor& hidden, const at::Tensor& lm_head,
                                  const at::Tensor& code, const at::Tensor& markov_w2,
                                  const at::Tensor& teacher_hidden, const at::Tensor& labels,
                                  const at::Tensor& weights, const DSparkLossWeights& loss_weights,
                                  const FusedLossOptions& options) {
  check_inputs(hidden, lm_head, code, markov_w2, teacher_hidden, labels, weights);
  check(options.chunk_tokens >= 0, "[dspark] chunk_tokens must be >= 0 (0: no chunking)");
  if (options.chunk_tokens == 0)
    return unfused_dspark_loss(hidden, lm_head, code, markov_w2, teacher_hidden, labels, weights,
                               loss_weights, options.fp32_head);
  const bool grad_mode = at::GradMode::is_enabled();
  const bool want_markov =
      grad_mode && code.defined() && (code.requires_grad() || markov_w2.requires_grad());
  DSparkVocabLoss out;
  // Autograd functions take defined tensors only: without a Markov head, empty stand-ins.
  const bool markov = code.defined();
  const at::Tensor none = at::empty({0}, hidden.options());
  out.loss = FusedDSparkLoss::apply(hidden, markov ? code : none, markov ? markov_w2 : none,
                                    lm_head.detach(), teacher_hidden.detach(),
                                    safe_targets(labels, weights), weights, loss_weights, options,
                                    markov, grad_mode && hidden.requires_grad(), want_markov, &out);
  return out;
}

DSparkVocabLoss unfused_dspark_loss(const at::Tensor& hidden, const at::Tensor& lm_head,
                                    const at::Tensor& code, const at::Tensor& markov_w2,
                                    const at::Tensor& teacher_hidden, const at::Tensor& labels,
                                    const at::Tensor& weights,
                                    const DSparkLossWeights& loss_weights, bool fp32_head) {
  check_inputs(hidden, lm_head, code, markov_w2, teacher_hidden, labels, weights);
  const at::ScalarType reduce = reduction_dtype(hidden);
  at::Tensor z = project_to_vocab(hidden, lm_head.detach(), fp32_head).to(reduce);  // (N, V)
  if (code.defined()) z = z + project_to_vocab(code, markov_w2, fp32_head).to(reduce);
  at::Tensor u;
  {
    at::NoGradGuard no_grad;
    u = project_to_vocab(teacher_hidden.detach(), lm_head.detach(), fp32_head).to(reduce);
  }
  const at::Tensor log_p = at::log_softmax(z, 1);
  const at::Tensor cross_entropy =
      -log_p.gather(1, safe_targets(labels, weights).unsqueeze(1)).squeeze(1);
  const at::Tensor l1 = (log_p.exp() - at::softmax(u, 1)).abs().sum(1);
  DSparkVocabLoss out;
  out.loss =
      ((loss_weights.cross_entropy * cross_entropy + loss_weights.l1 * l1) * weights.to(reduce))
          .sum();
  out.cross_entropy = cross_entropy.detach();
  out.l1 = l1.detach();
  out.argmax = z.detach().argmax(1);
  return out;
}

}  // namespace tandem
