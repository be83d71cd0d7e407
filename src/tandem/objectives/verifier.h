#pragma once
// The target a draft was trained against, as the speculators format names it (its
// `speculators_config.verifier`): EAGLE-3's and DSpark's exports record it.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tandem {

/// The target as an engine's config names it: where to find it and which class loads it.
struct VerifierInfo {
  std::string name_or_path;                // target.name, else target.path as given
  std::vector<std::string> architectures;  // the target's config.json `architectures`
};
/// The verifier of a draft trained against `target_path`: `name` when set, else the path as
/// given (a warning on stderr when that path is absolute: an engine on another machine will not
/// find it); the architectures from `target_path`/config.json (an error naming the file when it
/// has none). Read once, when the objective is built.
VerifierInfo verifier_of(const std::string& target_path, const std::string& name);

/// A speculators config's `speculators_config`: the algorithm, one greedy proposal method of
/// `speculative_tokens` tokens, and the verifier.
nlohmann::json speculators_config_section(const std::string& algorithm, int64_t speculative_tokens,
                                          const VerifierInfo& verifier);

}  // namespace tandem
