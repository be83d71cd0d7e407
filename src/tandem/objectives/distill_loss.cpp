#include "tandem/objectives/distill_loss.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cmath>

#include "tandem/core/error.h"
#include "tandem/objectives/vocab_head.h"

namespace tandem {

namespace {

void check_inputs(const at::Tensor& student_hidden, const at::Tensor& student_head,
                  const at::Tensor& teacher_hidden, const at::Tensor& teacher_head,
                  const at::Tensor& labels, const at::Tensor& weights,
                  const DistillLossOptions& options) {
  check(student_hidden.dim() == 2 && student_head.dim() == 2 &&
            student_hidden.size(1) == student_head.size(1),
        "[distill] student hidden (N, H) and head (V, H) disagree: ", student_hidden.sizes(),
        " vs ", student_head.sizes());
  check(teacher_hidden.dim() == 2 && teacher_head.dim() == 2 &&
            teacher_hidden.size(1) == teacher_head.size(1) &&
            teacher_hidden.size(0) == student_hidden.size(0),
        "[distill] teacher hidden ", teacher_hidden.sizes(), " and head ", teacher_head.sizes(),
        " do not match the student's ", student_hidden.sizes());
  check(teacher_head.size(0) == student_head.size(0), "[distill] the teacher's vocab (",
        teacher_head.size(0), ") differs from the student's (", student_head.size(0), ")");
  check(labels.dim() == 1 && labels.size(0) == student_hidden.size(0) &&
            weights.sizes() == labels.sizes() && labels.scalar_type() == at::kLong,
        "[distill] labels (int64) and weights must be (N,) with N = ", student_hidden.size(0));
  check(options.temperature > 0, "[distill] temperature must be positive");
  check(options.beta >= 0 && options.beta <= 1, "[distill] JSD beta must be in [0, 1]");
  check(options.hard_label_weight >= 0 && options.hard_label_weight <= 1,
        "[distill] hard_label_weight must be in [0, 1]");
  check(options.chunk_tokens > 0, "[distill] chunk_tokens must be positive");
}

// Logits reduced in fp32 (fp64 for fp64 inputs): (n, V).
at::Tensor head_logits(const at::Tensor& hidden, const at::Tensor& head, bool fp32_head) {
  const at::ScalarType reduce = reduction_dtype(hidden);
  if (fp32_head) return at::linear(hidden.to(reduce), head.to(reduce));
  return at::linear(hidden, head).to(reduce);
}

// KL(p || q) per row from log-probabilities: sum p (log p - log q). (n, V) -> (n,)
at::Tensor kl_rows(const at::Tensor& log_p, const at::Tensor& log_q) {
  return (log_p.exp() * (log_p - log_q)).sum(1);
}

// The per-token loss of the header, from fp32 logits. (n, V), (n, V), (n,) -> (n,)
at::Tensor token_losses(const at::Tensor& student_logits, const at::Tensor& teacher_logits,
                        const at::Tensor& labels, const DistillLossOptions& options) {
  const at::Tensor log_s = at::log_softmax(student_logits, 1);
  const at::Tensor log_t = at::log_softmax(teacher_logits / options.temperature, 1);
  at::Tensor divergence;
  const bool jsd = options.divergence == Divergence::JSD;
  if (options.divergence == Divergence::ForwardKL || (jsd && options.beta == 0.0)) {
    divergence = kl_rows(log_t, log_s);
  } else if (options.divergence == Divergence::ReverseKL || (jsd && options.beta == 1.0)) {
    divergence = kl_rows(log_s, log_t);
  } else {
    const double beta = options.beta;
    const at::Tensor log_m =
        at::logsumexp(at::stack({log_t + std::log(beta), log_s + std::log(1 - beta)}), 0);
    divergence = beta * kl_rows(log_t, log_m) + (1 - beta) * kl_rows(log_s, log_m);
  }
  if (options.hard_label_weight == 0.0) return divergence;
  const at::Tensor ce = -log_s.gather(1, labels.unsqueeze(1)).squeeze(1);
  return (1 - options.hard_label_weight) * divergence + options.hard_label_weight * ce;
}

class FusedDistillation : public torch::autograd::Function<FusedDistillation> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& student_hidden,
                            const at::Tensor& student_head, const at::Tensor& teacher_hidden,
                            const at::Tensor& teacher_head, const at::Tensor& labels,
                            const at::Tensor& weights, DistillLossOptions options) {
    at::NoGradGuard no_grad;
    const at::ScalarType reduce = reduction_dtype(student_hidden);
    const at::Tensor weights_reduced = weights.to(reduce);
    at::Tensor total = at::zeros({}, student_hidden.options().dtype(reduce));
    for (int64_t start = 0; start < student_hidden.size(0); start += options.chunk_tokens) {
      const int64_t n = std::min(options.chunk_tokens, student_hidden.size(0) - start);
      const at::Tensor losses = token_losses(
          head_logits(student_hidden.narrow(0, start, n), student_head, options.fp32_head),
          head_logits(teacher_hidden.narrow(0, start, n), teacher_head, options.fp32_head).to(reduce),
          labels.narrow(0, start, n), options);
      total += (losses * weights_reduced.narrow(0, start, n)).sum();
    }
    ctx->save_for_backward({student_hidden, student_head, teacher_hidden, teacher_head, labels,
                            weights_reduced});
    ctx->saved_data["divergence"] = static_cast<int64_t>(options.divergence);
    ctx->saved_data["beta"] = options.beta;
    ctx->saved_data["temperature"] = options.temperature;
    ctx->saved_data["hard_label_weight"] = options.hard_label_weight;
    ctx->saved_data["chunk_tokens"] = options.chunk_tokens;
    ctx->saved_data["fp32_head"] = options.fp32_head;
    return total;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &hidden = saved[0], &head = saved[1], &teacher_hidden = saved[2],
                     &teacher_head = saved[3], &labels = saved[4], &weights = saved[5];
    DistillLossOptions options;
    options.divergence = static_cast<Divergence>(ctx->saved_data["divergence"].toInt());
    options.beta = ctx->saved_data["beta"].toDouble();
    options.temperature = ctx->saved_data["temperature"].toDouble();
    options.hard_label_weight = ctx->saved_data["hard_label_weight"].toDouble();
    options.chunk_tokens = ctx->saved_data["chunk_tokens"].toInt();
    options.fp32_head = ctx->saved_data["fp32_head"].toBool();
    const at::ScalarType reduce = reduction_dtype(hidden);
    const at::Tensor grad_total = grad_outputs[0].to(reduce);
    const bool want_hidden = ctx->needs_input_grad(0), want_head = ctx->needs_input_grad(1);
    at::Tensor grad_head = want_head ? at::zeros(head.sizes(), head.options().dtype(reduce)) : at::Tensor();
    at::Tensor grad_hidden = want_hidden ? at::empty_like(hidden) : at::Tensor();
    const at::Tensor head_compute = options.fp32_head ? head.to(reduce) : head;
    for (int64_t start = 0; start < hidden.size(0); start += options.chunk_tokens) {
      const int64_t n = std::min(options.chunk_tokens, hidden.size(0) - start);
      const at::Tensor hidden_chunk = hidden.narrow(0, start, n);
      const at::Tensor hidden_compute = options.fp32_head ? hidden_chunk.to(reduce) : hidden_chunk;
      at::Tensor teacher_logits;
      {
        at::NoGradGuard no_grad;
        teacher_logits = head_logits(teacher_hidden.narrow(0, start, n), teacher_head,
                                     options.fp32_head).to(reduce);
      }
      // d loss / d logits by autograd on the recomputed chunk (the formulas above are too many
      // to differentiate by hand without error); the logits themselves carry no graph.
      at::Tensor grad_logits;
      {
        at::AutoGradMode enable(true);
        const at::Tensor logits =
            at::linear(hidden_compute, head_compute).detach().to(reduce).requires_grad_(true);
        const at::Tensor chunk_loss =
            (token_losses(logits, teacher_logits, labels.narrow(0, start, n), options) *
             weights.narrow(0, start, n))
                .sum() *
            grad_total;
        grad_logits = torch::autograd::grad({chunk_loss}, {logits})[0];
      }
      const at::Tensor grad_compute = grad_logits.to(head_compute.scalar_type());
      if (want_hidden) grad_hidden.narrow(0, start, n).copy_(at::mm(grad_compute, head_compute));
      if (want_head) grad_head.add_(at::mm(grad_compute.t(), hidden_compute).to(reduce));
    }
    return {grad_hidden,  want_head ? grad_head.to(head.scalar_type()) : at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

Divergence parse_divergence(const std::string& name) {
  if (name == "forward_kl") return Divergence::ForwardKL;
  if (name == "reverse_kl") return Divergence::ReverseKL;
  if (name == "jsd") return Divergence::JSD;
  throw Error("[distill] unknown divergence '", name, "' (forward_kl, reverse_kl, jsd)");
}

at::Tensor fused_distillation_loss(const at::Tensor& student_hidden, const at::Tensor& student_head,
                                   const at::Tensor& teacher_hidden, const at::Tensor& teacher_head,
                                   const at::Tensor& labels, const at::Tensor& weights,
                                   const DistillLossOptions& options) {
  check_inputs(student_hidden, student_head, teacher_hidden, teacher_head, labels, weights, options);
  return FusedDistillation::apply(student_hidden, student_head, teacher_hidden.detach(),
                                  teacher_head.detach(), safe_targets(labels, weights), weights,
                                  options);
}

at::Tensor unfused_distillation_loss(const at::Tensor& student_hidden,
                                     const at::Tensor& student_head,
                                     const at::Tensor& teacher_hidden,
                                     const at::Tensor& teacher_head, const at::Tensor& labels,
                                     const at::Tensor& weights, const DistillLossOptions& options) {
  check_inputs(student_hidden, student_head, teacher_hidden, teacher_head, labels, weights, options);
  const at::ScalarType reduce = reduction_dtype(student_hidden);
  at::Tensor teacher_logits;
  {
    at::NoGradGuard no_grad;
    teacher_logits = head_logits(teacher_hidden, teacher_head, options.fp32_head).to(reduce);
  }
  const at::Tensor losses =
      token_losses(head_logits(student_hidden, student_head, options.fp32_head), teacher_logits,
                   safe_targets(labels, weights), options);
  return (losses * weights.to(reduce)).sum();
}

}  // namespace tandem
