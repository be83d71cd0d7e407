#include "tandem/objectives/verifier.h"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "tandem/core/error.h"
#include "tandem/core/json_file.h"

namespace tandem {

VerifierInfo verifier_of(const std::string& target_path, const std::string& name) {
  VerifierInfo verifier;
  verifier.name_or_path = name.empty() ? target_path : name;
  if (name.empty() && std::filesystem::path(target_path).is_absolute())
    std::cerr << "[export] the speculators config names its verifier by the local path "
              << target_path
              << ": an engine on another machine will not find it; set target.name to the "
                 "target's hub id (or pass it to `tandem export --verifier-name`)\n";
  const std::string path = target_path + "/config.json";
  const nlohmann::json config = read_json_file(path, "export");
  const nlohmann::json architectures = config.value("architectures", nlohmann::json());
  check(architectures.is_array() && !architectures.empty() &&
            std::all_of(architectures.begin(), architectures.end(),
                        [](const nlohmann::json& a) { return a.is_string(); }),
        "[export] ", path,
        ": no `architectures` list of class names; the speculators export records the "
        "verifier's class (e.g. [\"Qwen3ForCausalLM\"]): add it to the target's config.json");
  verifier.architectures = architectures.get<std::vector<std::string>>();
  return verifier;
}

nlohmann::json speculators_config_section(const std::string& algorithm, int64_t speculative_tokens,
                                          const VerifierInfo& verifier) {
  return {{"algorithm", algorithm},
          {"default_proposal_method", "greedy"},
          {"proposal_methods",
           {{{"proposal_type", "greedy"}, {"speculative_tokens", speculative_tokens}}}},
          {"verifier",
           {{"name_or_path", verifier.name_or_path}, {"architectures", verifier.architectures}}}};
}

}  // namespace tandem
