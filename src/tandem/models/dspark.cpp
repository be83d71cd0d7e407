#include "tandem/models/dspark.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "tandem/core/error.h"

namespace tandem {

MarkovHeadImpl::MarkovHeadImpl(int64_t vocab_size, int64_t rank, const at::TensorOptions& options) {
  markov_w1 = register_module("markov_w1", Embedding(vocab_size, rank, options));
  markov_w2 = register_module("markov_w2", Linear(rank, vocab_size, false, options));
}

ConfidenceHeadImpl::ConfidenceHeadImpl(int64_t input_size, const at::TensorOptions& options) {
  proj = register_module("proj", Linear(input_size, 1, true, options));
}

DSparkDraftImpl::DSparkDraftImpl(const DFlashConfig& config, const DSparkHeads& heads,
                                 const at::TensorOptions& options)
    : DFlashDraftImpl(config, options), heads_(heads) {
  check(heads.markov_rank >= 0 && heads.markov_rank <= (1 << 16), "[dspark] markov_rank ",
        heads.markov_rank, " must be in 0..65536");
  if (heads.markov_rank > 0)
    markov_head = register_module("markov_head",
                                  MarkovHead(config.layer.vocab_size, heads.markov_rank, options));
  if (heads.confidence_head)
    confidence_head = register_module(
        "confidence_head", ConfidenceHead(config.layer.hidden_size + heads.markov_rank, options));
}

void init_dspark_heads(DSparkDraftImpl& draft, uint64_t seed) {
  if (draft.heads().init != DSparkHeadInit::FanIn) return;
  at::NoGradGuard no_grad;
  at::Generator generator = at::detail::createCPUGenerator(seed);
  auto draw = [&](at::Tensor& value, bool uniform, double scale) {
    at::Tensor sample = at::empty(value.sizes(), at::kFloat);
    if (uniform)
      sample.uniform_(-scale, scale, generator);
    else
      sample.normal_(0.0, scale, generator);
    value.copy_(sample);
  };
  if (draft.markov_head) {
    draw(draft.markov_head->markov_w1->weight, /*uniform=*/false, 0.01);
    draw(draft.markov_head->markov_w2->weight, /*uniform=*/true,
         1.0 / std::sqrt(static_cast<double>(draft.heads().markov_rank)));
  }
  if (draft.confidence_head) {
    Linear& proj = draft.confidence_head->proj;
    const double bound = 1.0 / std::sqrt(static_cast<double>(proj->weight.size(1)));
    draw(proj->weight, /*uniform=*/true, bound);
    draw(proj->bias, /*uniform=*/true, bound);
  }
}

at::Tensor DSparkDraftImpl::markov_code(const at::Tensor& prev_ids) const {
  if (!markov_head) return {};
  return markov_head->markov_w1->forward(prev_ids);
}

at::Tensor DSparkDraftImpl::markov_bias(const at::Tensor& code) const {
  check(markov_head && code.defined(), "[dspark] the draft has no Markov head (markov_rank 0)");
  return markov_head->markov_w2->forward(code);
}

at::Tensor DSparkDraftImpl::confidence_logits(const at::Tensor& hidden,
                                              const at::Tensor& code) const {
  check(!confidence_head.is_empty(), "[dspark] the draft has no confidence head");
  const at::Tensor input = code.defined() ? at::cat({hidden, code.to(hidden.scalar_type())}, -1)
                                          : hidden;  // (..., H + r)
  return confidence_head->proj->forward(input).squeeze(-1);
}

}  // namespace tandem
