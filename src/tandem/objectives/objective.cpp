#include "tandem/objectives/objective.h"

#include <ATen/ATen.h>

#include "tandem/core/error.h"

namespace tandem {

void StepTotals::add(const StepTotals& other) {
  loss_tokens += other.loss_tokens;
  documents += other.documents;
  if (unroll_tokens.empty()) unroll_tokens.assign(other.unroll_tokens.size(), 0);
  check(unroll_tokens.size() == other.unroll_tokens.size(), "[train] step totals of ",
        unroll_tokens.size(), " and ", other.unroll_tokens.size(), " unroll steps cannot be added");
  for (size_t i = 0; i < unroll_tokens.size(); ++i) unroll_tokens[i] += other.unroll_tokens[i];
}

}  // namespace tandem

namespace tandem {

void ObjectiveOutput::add_metric(const std::string& name, const at::Tensor& value) {
  check(value.numel() == 1, "[objective] metric '", name, "' is not a single value");
  metrics.emplace_back(name, value.detach().reshape({}));
}

void ObjectiveOutput::add_metric(const std::string& name, double value) {
  metrics.emplace_back(name, at::scalar_tensor(value, at::kDouble));
}

std::map<std::string, double> ObjectiveOutput::metric_values() const {
  std::map<std::string, double> values;
  for (const auto& [name, value] : metrics) values[name] = value.item<double>();
  return values;
}

const TokenizedDataset& DataContext::documents(const std::string& objective) const {
  check(dataset != nullptr, "[", objective,
        "] trains on documents (conversations, text, "
        "pretokenized or preference data), not on rollouts: set data.format accordingly");
  return *dataset;
}

}  // namespace tandem
