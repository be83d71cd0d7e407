#include "tandem/eval/acceptance_rule.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "tandem/core/error.h"
#include "tandem/core/host_read.h"

namespace tandem {

AcceptanceRule::AcceptanceRule(const DecodeOptions& options) : temperature_(options.temperature) {
  check(std::isfinite(temperature_) && temperature_ >= 0, "[eval] temperature ", temperature_,
        " must be a finite number >= 0 (0: greedy)");
  if (samples()) generator_ = at::detail::createCPUGenerator(options.seed);
}

void AcceptanceRule::score(const at::Tensor& hidden, const at::Tensor& lm_head,
                           TargetPass& pass) const {
  const at::Tensor logits = at::linear(hidden, lm_head);  // (count, V)
  // Read on the host: verification compares them with the proposal token by token.
  if (samples())
    pass.logits = read_on_host(logits.to(at::kFloat), HostRead::DecodedTokens);
  else
    pass.choices = read_on_host(logits.argmax(-1), HostRead::DecodedTokens);
}

at::Tensor AcceptanceRule::probabilities(const TargetPass& pass, int64_t row) const {
  return at::softmax(pass.logits[row].to(at::kDouble) / temperature_, 0);
}

int64_t AcceptanceRule::draw(const at::Tensor& weights) {
  return at::multinomial(weights, 1, /*replacement=*/false, generator_).item<int64_t>();
}

int64_t AcceptanceRule::choose(const TargetPass& pass, int64_t row) {
  if (!samples()) return pass.choices[row].item<int64_t>();
  return draw(probabilities(pass, row));
}

int64_t AcceptanceRule::accept(const std::vector<int64_t>& proposal, const TargetPass& pass,
                               SpeculativeOutput& output) {
  const int64_t draft_tokens = static_cast<int64_t>(proposal.size());
  int64_t accepted = 0, next = -1;
  if (!samples()) {
    const int64_t* choice = pass.choices.data_ptr<int64_t>();
    while (accepted < draft_tokens && choice[accepted] == proposal[accepted]) ++accepted;
    next = choice[accepted];
  } else {
    for (; accepted < draft_tokens; ++accepted) {
      const at::Tensor p = probabilities(pass, accepted);  // (V,)
      const int64_t x = proposal[accepted];
      const double uniform = at::rand({1}, generator_, at::kDouble).item<double>();
      if (uniform < p[x].item<double>()) continue;
      // Rejected: p(x) > uniform >= 0 failed, so p(x) < 1 and the rest of p has mass to draw.
      at::Tensor residual = p.clone();
      residual[x] = 0.0;
      next = draw(residual);
      break;
    }
    if (accepted == draft_tokens) next = choose(pass, draft_tokens);
  }
  output.accepted.push_back(accepted);
  output.proposed.push_back(draft_tokens);
  output.tokens.insert(output.tokens.end(), proposal.begin(), proposal.begin() + accepted);
  output.tokens.push_back(next);
  return next;
}

}  // namespace tandem
