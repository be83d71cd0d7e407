#include "tandem/objectives/distill_loss.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cmath>
#include <functional>
#include <utility>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/objectives/vocab_head.h"

namespace tandem {

namespace {

// The student's side, the labels and weights, the options: what every form of the loss checks.
void check_student_inputs(const at::Tensor& student_hidden, const at::Tensor& student_head,
                          const at::Tensor& labels, const at::Tensor& weights,
                          const DistillLossOptions& options) {
  check(student_hidden.dim() == 2 && student_head.dim() == 2 &&
            student_hidden.size(1) == student_head.size(1),
        "[distill] student hidden (N, H) and head (V, H) disagree: ", student_hidden.sizes(),
        " vs ", student_head.sizes());
  check(labels.dim() == 1 && labels.size(0) == student_hidden.size(0) &&
            weights.sizes() == labels.sizes() && labels.scalar_type() == at::kLong,
        "[distill] labels (int64) and weights must be (N,) with N = ", student_hidden.size(0));
  check(options.temperature > 0, "[distill] temperature must be positive");
  check(options.beta >= 0 && options.beta <= 1, "[distill] JSD beta must be in [0, 1]");
  check(options.hard_label_weight >= 0 && options.hard_label_weight <= 1,
        "[distill] hard_label_weight must be in [0, 1]");
  check(options.chunk_tokens >= 0, "[distill] chunk_tokens must be >= 0 (0: no chunking)");
}

// Those, and a teacher given as hidden states and a head.
void check_inputs(const at::Tensor& student_hidden, const at::Tensor& student_head,
                  const at::Tensor& teacher_hidden, const at::Tensor& teacher_head,
                  const at::Tensor& labels, const at::Tensor& weights,
                  const DistillLossOptions& options) {
  check_student_inputs(student_hidden, student_head, labels, weights, options);
  check(teacher_hidden.dim() == 2 && teacher_head.dim() == 2 &&
            teacher_hidden.size(1) == teacher_head.size(1) &&
            teacher_hidden.size(0) == student_hidden.size(0),
        "[distill] teacher hidden ", teacher_hidden.sizes(), " and head ", teacher_head.sizes(),
        " do not match the student's ", student_hidden.sizes());
  check(teacher_head.size(0) == student_head.size(0), "[distill] the teacher's vocab (",
        teacher_head.size(0), ") differs from the student's (", student_head.size(0), ")");
}

// Logits reduced in fp32 (fp64 for fp64 inputs): (n, V).
at::Tensor head_logits(const at::Tensor& hidden, const at::Tensor& head, bool fp32_head) {
  return project_to_vocab(hidden, head, fp32_head).to(reduction_dtype(hidden));
}

// The form the divergence takes: JSD_0 and JSD_1 are the KL endpoints (see the header).
Divergence divergence_form(const DistillLossOptions& options) {
  if (options.divergence != Divergence::JSD) return options.divergence;
  if (options.beta == 0.0) return Divergence::ForwardKL;
  if (options.beta == 1.0) return Divergence::ReverseKL;
  return Divergence::JSD;
}

// KL(p || q) per row from log-probabilities: sum p (log p - log q). (n, V) -> (n,)
at::Tensor kl_rows(const at::Tensor& log_p, const at::Tensor& log_q) {
  return (log_p.exp() * (log_p - log_q)).sum(1);
}

// The per-token loss of the header by plain tensor algebra, from fp32 logits (the unfused
// reference). (n, V), (n, V), (n,) -> (n,)
at::Tensor token_losses(const at::Tensor& student_logits, const at::Tensor& teacher_logits,
                        const at::Tensor& labels, const DistillLossOptions& options) {
  const at::Tensor log_s = at::log_softmax(student_logits, 1);
  const at::Tensor log_t = at::log_softmax(teacher_logits / options.temperature, 1);
  at::Tensor divergence;
  switch (divergence_form(options)) {
    case Divergence::ForwardKL:
      divergence = kl_rows(log_t, log_s);
      break;
    case Divergence::ReverseKL:
      divergence = kl_rows(log_s, log_t);
      break;
    case Divergence::JSD: {
      const double beta = options.beta;
      const at::Tensor log_m =
          at::logsumexp(at::stack({log_t + std::log(beta), log_s + std::log(1 - beta)}), 0);
      divergence = beta * kl_rows(log_t, log_m) + (1 - beta) * kl_rows(log_s, log_m);
      break;
    }
  }
  if (options.hard_label_weight == 0.0) return divergence;
  const at::Tensor ce = -log_s.gather(1, labels.unsqueeze(1)).squeeze(1);
  return (1 - options.hard_label_weight) * divergence + options.hard_label_weight * ce;
}

// In place on g (n, V): p_s * (scale * (g - expected_g) + alpha), with expected_g (n,) =
// sum_v p_s g: the reverse-KL / JSD gradient (scaled by 1 - alpha and JSD's 1 - beta) plus the
// p_s half of the hard-label CE gradient.
at::Tensor softmax_jacobian_product(at::Tensor g, const at::Tensor& expected_g,
                                    const at::Tensor& p_s, double scale, double alpha) {
  g.sub_(expected_g.unsqueeze(1));
  if (scale != 1.0) g.mul_(scale);
  if (alpha != 0.0) g.add_(alpha);
  return g.mul_(p_s);
}

struct ChunkLoss {
  at::Tensor total;        // 0-dim: sum_t weight[t] * loss[t] over the chunk
  at::Tensor grad_logits;  // (n, V): d total / d student logits; undefined unless asked for
};

// One chunk's loss and, with want_grad, its gradient w.r.t. the student's logits z in closed
// form (no autograd graph, no second pass), per row with p_s = softmax(z), w = weight:
//   forward KL   p_s - p_t
//   reverse KL   p_s (g - sum_v p_s g),  g = log p_s - log p_t
//   JSD_beta     p_s (g - sum_v p_s g),  g = (1 - beta)(log p_s - log m)
//   CE           p_s - onehot(label)
//   d loss / dz = w ((1 - alpha) d D / dz + alpha d CE / dz)
// Both (n, V) inputs are consumed and reused in place: at most three (n, V) buffers live at once
// (four for JSD), which is what bounds the fused loss's peak memory.
// student_logits (n, V) reduced dtype, log_t (n, V) teacher log-probabilities, labels (n,),
// weights (n,) reduced dtype.
ChunkLoss chunk_loss(at::Tensor student_logits, at::Tensor log_t, const at::Tensor& labels,
                     const at::Tensor& weights, const DistillLossOptions& options, bool want_grad) {
  const double alpha = options.hard_label_weight;
  at::Tensor log_s = at::log_softmax(student_logits, 1);
  student_logits.reset();
  const at::Tensor ce =
      alpha > 0 ? -log_s.gather(1, labels.unsqueeze(1)).squeeze(1) : at::Tensor();  // (n,)
  at::Tensor divergence;                                                            // (n,)
  at::Tensor grad;  // (1 - alpha) d D / dz + alpha p_s, before the labels and weights
  switch (divergence_form(options)) {
    case Divergence::ForwardKL: {
      at::Tensor log_ratio = at::sub(log_t, log_s);
      const at::Tensor& p_t = log_t.exp_();
      divergence = log_ratio.mul_(p_t).sum(1);
      log_ratio.reset();
      if (want_grad) grad = log_s.exp_().sub_(p_t, 1 - alpha);
      break;
    }
    case Divergence::ReverseKL: {
      at::Tensor log_ratio = at::sub(log_s, log_t);
      const at::Tensor& p_s = log_s.exp_();
      divergence = at::mul_out(log_t, p_s, log_ratio).sum(1);  // log_t's buffer as scratch
      log_t.reset();
      if (want_grad)
        grad = softmax_jacobian_product(std::move(log_ratio), divergence, p_s, 1 - alpha, alpha);
      break;
    }
    case Divergence::JSD: {
      const double beta = options.beta;
      // log m = logaddexp(log p_t + log beta, log p_s + log(1 - beta)), in one buffer.
      at::Tensor log_m = at::add(log_t, std::log(beta) - std::log1p(-beta));
      at::logaddexp_out(log_m, log_m, log_s);
      log_m.add_(std::log1p(-beta));
      at::Tensor log_ratio_s = at::sub(log_s, log_m);
      at::sub_out(log_m, log_t, log_m);  // now log p_t - log m
      const at::Tensor kl_t = log_m.mul_(log_t.exp_()).sum(1);
      log_t.reset();
      const at::Tensor& p_s = log_s.exp_();
      const at::Tensor kl_s = at::mul_out(log_m, p_s, log_ratio_s).sum(1);
      log_m.reset();
      divergence = beta * kl_t + (1 - beta) * kl_s;
      if (want_grad)
        grad = softmax_jacobian_product(std::move(log_ratio_s), kl_s, p_s, (1 - alpha) * (1 - beta),
                                        alpha);
      break;
    }
  }
  const at::Tensor losses = alpha > 0 ? (1 - alpha) * divergence + alpha * ce : divergence;
  ChunkLoss out{(losses * weights).sum(), at::Tensor()};
  if (!want_grad) return out;
  if (alpha > 0)
    grad.scatter_add_(1, labels.unsqueeze(1),
                      at::full({labels.size(0), 1}, -alpha, grad.options()));
  out.grad_logits = grad.mul_(weights.unsqueeze(1));
  return out;
}

// The teacher's log-probabilities of rows [start, start + n): a fresh (n, V) tensor in the
// reduction dtype, which chunk_loss consumes in place.
using TeacherChunk = std::function<at::Tensor(int64_t start, int64_t n, at::ScalarType reduce)>;

// The loss through the student's head, chunk by chunk, against a teacher chunk source (the
// teacher's head over its hidden states, or log-probabilities formed earlier). When the student
// wants gradients they are formed in the same pass (chunk_loss's closed forms, then the head's
// two matmuls) and saved: backward only scales them by the incoming gradient, so no logits are
// ever recomputed.
class FusedDistillation : public torch::autograd::Function<FusedDistillation> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& student_hidden,
                            const at::Tensor& student_head, TeacherChunk teacher_chunk,
                            const at::Tensor& labels, const at::Tensor& weights,
                            DistillLossOptions options, bool want_hidden, bool want_head,
                            at::Tensor* student_argmax) {
    at::NoGradGuard no_grad;
    const at::ScalarType reduce = reduction_dtype(student_hidden);
    const at::Tensor weights_reduced = weights.to(reduce);                  // (N,)
    const at::Tensor head = head_operand(student_head, options.fp32_head);  // (V, H)
    // The head's gradient accumulates over chunks in fp32 and returns in the weight's dtype.
    at::Tensor grad_hidden =
        want_hidden ? at::empty(student_hidden.sizes(), student_hidden.options()) : at::Tensor();
    at::Tensor grad_head =
        want_head ? at::zeros(student_head.sizes(), student_head.options().dtype(reduce))
                  : at::Tensor();
    at::Tensor total = at::zeros({}, student_hidden.options().dtype(reduce));
    std::vector<at::Tensor> argmax_parts;  // (n,) per chunk, when asked for
    for (int64_t start = 0; start < student_hidden.size(0); start += options.chunk_tokens) {
      const int64_t n = std::min(options.chunk_tokens, student_hidden.size(0) - start);
      const at::Tensor hidden =
          head_operand(student_hidden.narrow(0, start, n), options.fp32_head);  // (n, H)
      at::Tensor log_t = teacher_chunk(start, n, reduce);                       // (n, V)
      // Named, then moved: a temporary argument would outlive chunk_loss's release of it.
      at::Tensor student_logits = at::linear(hidden, head).to(reduce);
      if (student_argmax) argmax_parts.push_back(student_logits.argmax(1));
      ChunkLoss chunk =
          chunk_loss(std::move(student_logits), std::move(log_t), labels.narrow(0, start, n),
                     weights_reduced.narrow(0, start, n), options, want_hidden || want_head);
      total += chunk.total;
      if (!chunk.grad_logits.defined()) continue;
      const at::Tensor grad_logits = chunk.grad_logits.to(head.scalar_type());  // (n, V)
      chunk.grad_logits.reset();
      if (want_hidden) {
        at::Tensor grad_rows = grad_hidden.narrow(0, start, n);
        if (grad_rows.scalar_type() == head.scalar_type()) {
          at::mm_out(grad_rows, grad_logits, head);
        } else {
          grad_rows.copy_(at::mm(grad_logits, head));
        }
      }
      if (want_head) {
        if (grad_logits.scalar_type() == reduce) {
          grad_head.addmm_(grad_logits.t(), hidden);
        } else {
          grad_head.add_(at::mm(grad_logits.t(), hidden));
        }
      }
    }
    ctx->save_for_backward(
        {grad_hidden, want_head ? grad_head.to(student_head.scalar_type()) : at::Tensor()});
    if (student_argmax)
      *student_argmax =
          argmax_parts.empty() ? at::empty({0}, labels.options()) : at::cat(argmax_parts);
    return total;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    // One entry per forward argument: hidden and the student head, then seven without.
    return scaled_saved_gradients(ctx->get_saved_variables(), grad_outputs[0], 9);
  }
};

// The unfused loss (full logits, plain autograd) against teacher logits already formed, (N, V)
// in the reduction dtype; the temperature divides them as in token_losses.
at::Tensor unfused_against(const at::Tensor& student_hidden, const at::Tensor& student_head,
                           const at::Tensor& teacher_logits, const at::Tensor& labels,
                           const at::Tensor& weights, const DistillLossOptions& options,
                           at::Tensor* student_argmax) {
  const at::Tensor student_logits = head_logits(student_hidden, student_head, options.fp32_head);
  if (student_argmax) *student_argmax = student_logits.detach().argmax(1);
  const at::Tensor losses =
      token_losses(student_logits, teacher_logits, safe_targets(labels, weights), options);
  return (losses * weights.to(reduction_dtype(student_hidden))).sum();
}

// The fused loss against `teacher_chunk`. Gradients are formed during the forward pass, so
// whether they will be wanted is decided here (Function::apply turns grad mode off before
// forward runs).
at::Tensor apply_fused(const at::Tensor& student_hidden, const at::Tensor& student_head,
                       TeacherChunk teacher_chunk, const at::Tensor& labels,
                       const at::Tensor& weights, const DistillLossOptions& options,
                       at::Tensor* student_argmax) {
  const bool grad_mode = at::GradMode::is_enabled();
  return FusedDistillation::apply(student_hidden, student_head, std::move(teacher_chunk),
                                  safe_targets(labels, weights), weights, options,
                                  grad_mode && student_hidden.requires_grad(),
                                  grad_mode && student_head.requires_grad(), student_argmax);
}

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
                                   const DistillLossOptions& options, at::Tensor* student_argmax) {
  check_inputs(student_hidden, student_head, teacher_hidden, teacher_head, labels, weights,
               options);
  if (options.chunk_tokens == 0)
    return unfused_distillation_loss(student_hidden, student_head, teacher_hidden, teacher_head,
                                     labels, weights, options, student_argmax);
  const at::Tensor hidden = teacher_hidden.detach();
  const at::Tensor head = head_operand(teacher_head.detach(), options.fp32_head);
  TeacherChunk teacher_chunk = [hidden, head, options](int64_t start, int64_t n,
                                                       at::ScalarType reduce) {
    at::Tensor logits =
        at::linear(head_operand(hidden.narrow(0, start, n), options.fp32_head), head).to(reduce);
    return at::log_softmax(logits.div_(options.temperature), 1);
  };
  return apply_fused(student_hidden, student_head, std::move(teacher_chunk), labels, weights,
                     options, student_argmax);
}

at::Tensor fused_distillation_loss_from_log_probs(
    const at::Tensor& student_hidden, const at::Tensor& student_head,
    const at::Tensor& teacher_log_probs, const at::Tensor& teacher_rows, const at::Tensor& labels,
    const at::Tensor& weights, const DistillLossOptions& options, at::Tensor* student_argmax) {
  check(teacher_log_probs.dim() == 2 && teacher_log_probs.size(1) == student_head.size(0),
        "[distill] teacher log-probabilities ", teacher_log_probs.sizes(),
        " must be (M, V) with the student's vocab V = ", student_head.size(0));
  check(teacher_rows.dim() == 1 && teacher_rows.size(0) == student_hidden.size(0) &&
            teacher_rows.scalar_type() == at::kLong,
        "[distill] teacher rows must be (N,) int64 with N = ", student_hidden.size(0), "; got ",
        teacher_rows.sizes());
  check_student_inputs(student_hidden, student_head, labels, weights, options);
  const at::Tensor log_probs = teacher_log_probs.detach();
  if (options.chunk_tokens == 0) {
    DistillLossOptions plain = options;
    plain.temperature = 1.0;  // log-softmax of log-probabilities is themselves
    return unfused_against(
        student_hidden, student_head,
        log_probs.index_select(0, teacher_rows).to(reduction_dtype(student_hidden)), labels,
        weights, plain, student_argmax);
  }
  const at::Tensor rows = teacher_rows.detach();
  TeacherChunk teacher_chunk = [log_probs, rows](int64_t start, int64_t n, at::ScalarType reduce) {
    // index_select copies: chunk_loss may overwrite what it is given.
    return log_probs.index_select(0, rows.narrow(0, start, n)).to(reduce);
  };
  return apply_fused(student_hidden, student_head, std::move(teacher_chunk), labels, weights,
                     options, student_argmax);
}

at::Tensor unfused_distillation_loss(const at::Tensor& student_hidden,
                                     const at::Tensor& student_head,
                                     const at::Tensor& teacher_hidden,
                                     const at::Tensor& teacher_head, const at::Tensor& labels,
                                     const at::Tensor& weights, const DistillLossOptions& options,
                                     at::Tensor* student_argmax) {
  check_inputs(student_hidden, student_head, teacher_hidden, teacher_head, labels, weights,
               options);
  at::Tensor teacher_logits;
  {
    at::NoGradGuard no_grad;
    teacher_logits = head_logits(teacher_hidden, teacher_head, options.fp32_head)
                         .to(reduction_dtype(student_hidden));
  }
  return unfused_against(student_hidden, student_head, teacher_logits, labels, weights, options,
                         student_argmax);
}

}  // namespace tandem
