#include "tandem/eval/dspark_decode.h"

#include <ATen/ATen.h>

#include "tandem/core/error.h"
#include "tandem/core/host_read.h"

namespace tandem {

DSparkProposer::DSparkProposer(const FrozenModel& target, const DSparkDraftImpl& draft,
                               int64_t draft_tokens, double confidence_threshold)
    : DFlashProposer(target, draft, /*mask_embedding=*/{}, draft_tokens, /*first_slot=*/0),
      dspark_(draft),
      confidence_threshold_(confidence_threshold) {
  check(confidence_threshold >= 0 && confidence_threshold < 1,
        "[eval] --confidence-threshold must be in [0, 1), got ", confidence_threshold);
  check(confidence_threshold == 0 || draft.heads().confidence_head,
        "[eval] --confidence-threshold: this DSpark draft has no confidence head");
}

std::vector<int64_t> DSparkProposer::propose(int64_t bonus) {
  const at::Tensor hidden = block_hidden(bonus).narrow(0, 0, draft_tokens_);  // (k, H)
  // Summed with the Markov bias in fp32, as training sums them.
  const at::Tensor base =
      at::linear(hidden.to(lm_head_.scalar_type()), lm_head_).to(at::kFloat);  // (k, V)
  const bool confidence = confidence_threshold_ > 0;
  // The chain stays on the device; its tokens (and the confidences) are read once at the end.
  at::Tensor prev = at::full({1}, bonus, base.options().dtype(at::kLong));
  std::vector<at::Tensor> tokens, confidences;
  for (int64_t k = 0; k < draft_tokens_; ++k) {
    const at::Tensor code = dspark_.markov_code(prev);  // (1, r)
    at::Tensor logits = base.narrow(0, k, 1);           // (1, V)
    if (code.defined()) logits = logits + dspark_.markov_bias(code).to(logits.scalar_type());
    if (confidence)
      confidences.push_back(dspark_.confidence_logits(hidden.narrow(0, k, 1), code).to(at::kFloat));
    prev = logits.argmax(-1);  // (1,)
    tokens.push_back(prev);
  }
  const at::Tensor chain = read_on_host(at::cat(tokens), HostRead::DecodedTokens);  // (k,)
  int64_t kept = draft_tokens_;
  if (confidence) {
    const at::Tensor accept = read_on_host(at::sigmoid(at::cat(confidences)),
                                           HostRead::DecodedTokens);  // (k,)
    for (int64_t k = 0; k < draft_tokens_; ++k)
      if (accept[k].item<float>() < confidence_threshold_) {
        kept = k;
        break;
      }
  }
  return std::vector<int64_t>(chain.data_ptr<int64_t>(), chain.data_ptr<int64_t>() + kept);
}

}  // namespace tandem
