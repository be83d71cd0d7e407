#include "tandem/eval/greedy_check.h"

#include <algorithm>

namespace tandem {

std::optional<GreedyMismatch> first_divergence(int64_t document,
                                               const std::vector<int64_t>& speculative,
                                               const std::vector<int64_t>& greedy) {
  if (speculative == greedy) return std::nullopt;
  const size_t common = std::min(speculative.size(), greedy.size());
  size_t position = 0;
  while (position < common && speculative[position] == greedy[position]) ++position;
  GreedyMismatch mismatch;
  mismatch.document = document;
  mismatch.position = static_cast<int64_t>(position);
  if (position < speculative.size()) mismatch.speculative_token = speculative[position];
  if (position < greedy.size()) mismatch.greedy_token = greedy[position];
  return mismatch;
}

bool greedy_mismatch_fails(c10::ScalarType dtype, bool strict) {
  return strict || dtype == c10::ScalarType::Float || dtype == c10::ScalarType::Double;
}

}  // namespace tandem
