#pragma once
// Distillation losses (docs/distillation.md) through both LM heads, chunked over tokens: each
// chunk's student and teacher logits are formed, reduced and dropped, so neither side's
// (tokens, vocab) logits exist for the whole batch. The student's gradients are formed in the
// same pass, in closed form (Liger's fused linear losses), and backward only scales them: no
// logits are recomputed.
//
//   p_t = softmax(teacher_logits / temperature)      (temperature on the teacher only)
//   p_s = softmax(student_logits)
//   forward KL  KL(p_t || p_s)        reverse KL  KL(p_s || p_t)
//   JSD_beta = beta KL(p_t || m) + (1 - beta) KL(p_s || m),  m = beta p_t + (1 - beta) p_s,
//              with JSD_0 := forward KL and JSD_1 := reverse KL (the generalised-JSD endpoints)
//   per token: (1 - alpha) D + alpha CE(student, label)   (alpha = hard_label_weight)
// The result is sum_t weight[t] * per-token loss (weights = loss_mask / loss tokens of the step).
#include <ATen/core/Tensor.h>

#include <string>

namespace tandem {

enum class Divergence { ForwardKL, ReverseKL, JSD };

/// "forward_kl" | "reverse_kl" | "jsd"; throws naming the accepted values.
Divergence parse_divergence(const std::string& name);

struct DistillLossOptions {
  Divergence divergence = Divergence::ForwardKL;
  double beta = 0.5;               // JSD only
  double temperature = 1.0;        // divides the teacher's logits
  double hard_label_weight = 0.0;  // alpha: mix with cross-entropy on the labels
  int64_t chunk_tokens = 1024;
  bool fp32_head = false;  // both projections with input and weight upcast to fp32
};

/// student_hidden (N, H), student_head (V, H), teacher_hidden (N, Ht), teacher_head (V, Ht),
/// labels (N,) int64, weights (N,) float. Differentiable w.r.t. the student's hidden and head
/// (gradients in their own dtypes); the teacher never gets one. Returns a 0-dim fp32 tensor.
/// The gradients' matmuls run here whenever grad mode is on and the student requires grad: take
/// a value only (metrics, evaluation) under at::NoGradGuard. With `student_argmax`, it also
/// receives the argmax of the student's logits per row, (N,) int64 (accuracy metrics without
/// another pass over the head).
at::Tensor fused_distillation_loss(const at::Tensor& student_hidden, const at::Tensor& student_head,
                                   const at::Tensor& teacher_hidden, const at::Tensor& teacher_head,
                                   const at::Tensor& labels, const at::Tensor& weights,
                                   const DistillLossOptions& options,
                                   at::Tensor* student_argmax = nullptr);

/// The same against a teacher whose log-probabilities were formed before (temperature applied):
/// teacher_log_probs (M, V), row teacher_rows[t] (int64, (N,)) being token t's. For a teacher
/// read by several losses: EAGLE-3's unroll steps read one per micro-batch, shifted per step.
/// The temperature option is not applied again.
at::Tensor fused_distillation_loss_from_log_probs(
    const at::Tensor& student_hidden, const at::Tensor& student_head,
    const at::Tensor& teacher_log_probs, const at::Tensor& teacher_rows, const at::Tensor& labels,
    const at::Tensor& weights, const DistillLossOptions& options,
    at::Tensor* student_argmax = nullptr);

/// The same with full logits and plain autograd: the reference and the memory benchmark's
/// "unfused" side.
at::Tensor unfused_distillation_loss(const at::Tensor& student_hidden,
                                     const at::Tensor& student_head,
                                     const at::Tensor& teacher_hidden,
                                     const at::Tensor& teacher_head, const at::Tensor& labels,
                                     const at::Tensor& weights, const DistillLossOptions& options,
                                     at::Tensor* student_argmax = nullptr);

}  // namespace tandem
