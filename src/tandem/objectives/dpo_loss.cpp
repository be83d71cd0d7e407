#include "tandem/objectives/dpo_loss.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <algorithm>
#include <vector>

#include "tandem/core/device.h"
#include "tandem/core/error.h"
#include "tandem/objectives/vocab_head.h"

namespace tandem {

namespace {

// One pair's losses and dL/dsum for its two documents, through dpo_pair_losses (one formula),
// on the device: `sums` (2,) fp64 are the policy's chosen and rejected sums; `reference` and
// `counts` (D,) are the inputs' per-document tensors in fp64.
struct PairCoefficients {
  DpoPairLosses losses;     // (1,) each
  at::Tensor coefficients;  // (2,) fp64 dL/dsum (chosen, rejected); undefined without gradients
};

PairCoefficients pair_coefficients(const at::Tensor& sums, const at::Tensor& reference,
                                   const at::Tensor& counts, int64_t chosen, int64_t rejected,
                                   DpoLossType type, double beta, bool want_grad) {
  at::AutoGradMode enable(true);
  const at::Tensor leaf = sums.detach().requires_grad_(want_grad);
  const DpoPairLogprobs pair{leaf.narrow(0, 0, 1),           leaf.narrow(0, 1, 1),
                             reference.narrow(0, chosen, 1), reference.narrow(0, rejected, 1),
                             counts.narrow(0, chosen, 1),    counts.narrow(0, rejected, 1)};
  PairCoefficients out;
  out.losses = dpo_pair_losses(pair, type, beta);
  if (want_grad) out.coefficients = torch::autograd::grad({out.losses.losses.sum()}, {leaf})[0];
  out.losses.losses = out.losses.losses.detach();
  return out;
}

// The labelled positions of each document, ascending, from the host's document ids (N,).
std::vector<std::vector<int64_t>> positions_by_document(const at::Tensor& document,
                                                        int64_t documents) {
  std::vector<std::vector<int64_t>> positions(static_cast<size_t>(documents));
  const at::Tensor ids = document.contiguous();
  const int64_t* id = ids.data_ptr<int64_t>();
  for (int64_t n = 0; n < ids.numel(); ++n) {
    check(id[n] >= 0 && id[n] < documents, "[dpo] position ", n, " belongs to document ", id[n],
          ", outside the ", documents, " documents");
    positions[static_cast<size_t>(id[n])].push_back(n);
  }
  return positions;
}

class FusedDpoLoss : public torch::autograd::Function<FusedDpoLoss> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& hidden,
                            const at::Tensor& lm_head, DpoHeadInputs in, int64_t type_index,
                            double beta, double scale, int64_t chunk_tokens, bool fp32_head,
                            bool want_hidden, bool want_head, DpoPairLosses* pairs_out) {
    at::NoGradGuard no_grad;
    const DpoLossType type = static_cast<DpoLossType>(type_index);
    const at::ScalarType reduce = reduction_dtype(hidden);
    const bool want_grad = want_hidden || want_head;
    const at::Device device = hidden.device();
    const at::Tensor head = head_operand(lm_head, fp32_head);  // (V, H)
    at::Tensor grad_hidden = want_hidden ? at::zeros_like(hidden) : at::Tensor();
    at::Tensor grad_head =
        want_head ? at::zeros(lm_head.sizes(), lm_head.options().dtype(reduce)) : at::Tensor();
    const std::vector<std::vector<int64_t>> by_document =
        positions_by_document(in.document, in.reference.size(0));
    const at::Tensor chosen_ids = in.chosen.contiguous(), rejected_ids = in.rejected.contiguous();
    const at::Tensor reference = in.reference.to(at::kDouble), counts = in.counts.to(at::kDouble);
    const int64_t pairs = chosen_ids.numel();
    std::vector<at::Tensor> pair_losses, rewards_chosen, rewards_rejected;
    at::Tensor total = at::zeros({}, hidden.options().dtype(at::kDouble));
    for (int64_t p = 0; p < pairs; ++p) {
      const int64_t chosen = chosen_ids.data_ptr<int64_t>()[p];
      const int64_t rejected = rejected_ids.data_ptr<int64_t>()[p];
      // The pair's positions in ascending order, and which side each is on: built on the host.
      const std::vector<int64_t>& chosen_rows = by_document.at(static_cast<size_t>(chosen));
      const std::vector<int64_t>& rejected_rows = by_document.at(static_cast<size_t>(rejected));
      std::vector<int64_t> host_rows(chosen_rows.size() + rejected_rows.size());
      std::merge(chosen_rows.begin(), chosen_rows.end(), rejected_rows.begin(), rejected_rows.end(),
                 host_rows.begin());
      const int64_t n = static_cast<int64_t>(host_rows.size());
      const at::Tensor host_index = at::tensor(host_rows, at::kLong);
      const at::Tensor rows = to_device(host_index, device);  // (n,)
      const at::Tensor is_chosen =
          to_device(in.document.index_select(0, host_index) == chosen, device);     // (n,)
      const at::Tensor pair_labels = in.labels.index_select(0, rows).unsqueeze(1);  // (n, 1)
      // Pass 1: the two sums. Within one chunk the logits are kept for pass 2.
      std::vector<at::Tensor> kept;  // per sub-chunk logits (m, V) when the pair fits one chunk
      at::Tensor sums = at::zeros({2}, hidden.options().dtype(at::kDouble));  // chosen, rejected
      for (int64_t start = 0; start < n; start += chunk_tokens) {
        const int64_t m = std::min(chunk_tokens, n - start);
        const at::Tensor index = rows.narrow(0, start, m);
        at::Tensor logits = at::linear(head_operand(hidden.index_select(0, index), fp32_head), head)
                                .to(reduce);                                // (m, V)
        const at::Tensor lse = at::logsumexp(logits, 1, /*keepdim=*/true);  // (m, 1)
        const at::Tensor logprobs =
            (logits.gather(1, pair_labels.narrow(0, start, m)) - lse).squeeze(1);  // (m,)
        const at::Tensor side = is_chosen.narrow(0, start, m);
        sums = sums + at::stack({at::where(side, logprobs, 0.0).sum(at::kDouble),
                                 at::where(side, 0.0, logprobs).sum(at::kDouble)});
        if (want_grad && n <= chunk_tokens) kept.push_back(logits.sub_(lse).exp_());  // softmax
      }
      const PairCoefficients pair =
          pair_coefficients(sums, reference, counts, chosen, rejected, type, beta, want_grad);
      total = total + pair.losses.losses.sum();
      pair_losses.push_back(pair.losses.losses);
      rewards_chosen.push_back(pair.losses.rewards_chosen);
      rewards_rejected.push_back(pair.losses.rewards_rejected);
      if (!want_grad) continue;
      // Pass 2: dL/dz = c_doc (onehot(label) - softmax(z)) * scale, turned into both gradients.
      for (int64_t start = 0, chunk = 0; start < n; start += chunk_tokens, ++chunk) {
        const int64_t m = std::min(chunk_tokens, n - start);
        const at::Tensor index = rows.narrow(0, start, m);
        const at::Tensor hidden_compute = head_operand(hidden.index_select(0, index), fp32_head);
        at::Tensor grad_logits;
        if (!kept.empty()) {
          grad_logits = kept[static_cast<size_t>(chunk)];
        } else {
          grad_logits = at::linear(hidden_compute, head).to(reduce);
          grad_logits.sub_(at::logsumexp(grad_logits, 1, true)).exp_();
        }
        const at::Tensor coefficient =
            at::where(is_chosen.narrow(0, start, m), pair.coefficients[0], pair.coefficients[1])
                .to(reduce)
                .mul_(scale)
                .unsqueeze(1);  // (m, 1)
        grad_logits.mul_(-coefficient)
            .scatter_add_(1, pair_labels.narrow(0, start, m), coefficient);
        const at::Tensor grad_compute = grad_logits.to(head.scalar_type());
        if (want_hidden)
          grad_hidden.index_copy_(0, index, at::mm(grad_compute, head).to(hidden.scalar_type()));
        if (want_head) grad_head.add_(at::mm(grad_compute.t(), hidden_compute).to(reduce));
      }
    }
    if (pairs_out) {
      pairs_out->losses = at::cat(pair_losses).to(at::kFloat);
      pairs_out->rewards_chosen = at::cat(rewards_chosen).to(at::kFloat);
      pairs_out->rewards_rejected = at::cat(rewards_rejected).to(at::kFloat);
    }
    ctx->save_for_backward(
        {grad_hidden, want_head ? grad_head.to(lm_head.scalar_type()) : grad_head});
    return (total * scale).to(reduce);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& upstream = grad_outputs[0];
    auto scaled = [&](const at::Tensor& grad) {
      return grad.defined() ? grad * upstream.to(grad.scalar_type()) : at::Tensor();
    };
    torch::autograd::variable_list out(11);
    out[0] = scaled(saved[0]);
    out[1] = scaled(saved[1]);
    return out;
  }
};

}  // namespace

at::Tensor fused_dpo_loss(const DpoHeadInputs& inputs, DpoLossType type, double beta, double scale,
                          const FusedLossOptions& options, DpoPairLosses* pairs_out) {
  check(inputs.hidden.dim() == 2 && inputs.lm_head.dim() == 2 &&
            inputs.hidden.size(1) == inputs.lm_head.size(1),
        "[dpo] hidden (N, H) and lm_head (V, H) disagree: ", inputs.hidden.sizes(), " vs ",
        inputs.lm_head.sizes());
  check(inputs.labels.sizes() == inputs.document.sizes() && inputs.labels.dim() == 1 &&
            inputs.labels.size(0) == inputs.hidden.size(0),
        "[dpo] labels and document ids must be (N,) with N = ", inputs.hidden.size(0));
  check(inputs.chosen.sizes() == inputs.rejected.sizes() &&
            inputs.reference.sizes() == inputs.counts.sizes(),
        "[dpo] the pair table and the per-document tensors disagree in size");
  check(options.chunk_tokens > 0, "[dpo] the fused loss needs chunk_tokens > 0");
  check(inputs.document.is_cpu() && inputs.chosen.is_cpu() && inputs.rejected.is_cpu(),
        "[dpo] the fused loss reads the document ids and the pair table on the host");
  // Gradients are formed in forward: decide here (apply() turns grad mode off before forward).
  const bool grad_mode = at::GradMode::is_enabled();
  const bool want_hidden = grad_mode && inputs.hidden.requires_grad();
  const bool want_head = grad_mode && inputs.lm_head.requires_grad();
  DpoHeadInputs constants = inputs;
  constants.hidden = at::Tensor();
  constants.lm_head = at::Tensor();
  return FusedDpoLoss::apply(inputs.hidden, inputs.lm_head, constants, static_cast<int64_t>(type),
                             beta, scale, options.chunk_tokens, options.fp32_head, want_hidden,
                             want_head, pairs_out);
}

}  // namespace tandem
