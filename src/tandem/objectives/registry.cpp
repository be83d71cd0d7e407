// The objectives `training.objective` can name: one line each. Their descriptions (what the CLI
// shows and does for them) live beside them, objectives/<name>.cpp.
#include <ATen/ATen.h>

#include "tandem/core/config.h"
#include "tandem/core/config_schema.h"
#include "tandem/core/error.h"
#include "tandem/models/frozen.h"
#include "tandem/objectives/dflash.h"
#include "tandem/objectives/distill.h"
#include "tandem/objectives/dpo.h"
#include "tandem/objectives/dspark.h"
#include "tandem/objectives/eagle3.h"
#include "tandem/objectives/objective.h"
#include "tandem/objectives/policy.h"
#include "tandem/objectives/sft.h"

namespace tandem {

const std::vector<ObjectiveDescription>& objective_descriptions() {
  static const std::vector<ObjectiveDescription> all = {
      sft_description(),     eagle3_description(), dflash_description(), dspark_description(),
      distill_description(), dpo_description(),    grpo_description(),   gspo_description(),
  };
  return all;
}

std::string objective_names(const std::function<bool(const ObjectiveDescription&)>& has) {
  std::string names;
  for (const ObjectiveDescription& description : objective_descriptions())
    if (has(description)) names += (names.empty() ? "" : ", ") + description.name;
  return names;
}

const ObjectiveDescription& find_objective(const std::string& name, const std::string& where) {
  for (const ObjectiveDescription& description : objective_descriptions())
    if (description.name == name) return description;
  throw Error("[train] ", where, ": unknown objective '", name,
              "' (available: ", objective_names([](const auto&) { return true; }), ")");
}

void DraftDecoder::check_vocab_and_width(const std::string& draft_dir, int64_t vocab_size,
                                         int64_t target_hidden_size, const FrozenModel& target,
                                         const std::string& target_dir) {
  check(vocab_size == target.config().vocab_size, "[eval] ", draft_dir,
        ": the draft is for a vocab of ", vocab_size, ", the target ", target_dir, " has ",
        target.config().vocab_size);
  check(target_hidden_size == target.config().hidden_size, "[eval] ", draft_dir,
        ": the draft reads hidden states of size ", target_hidden_size, ", the target ", target_dir,
        " has ", target.config().hidden_size);
}

SpeculativeOutput DraftDecoder::decode(const FrozenModel& target,
                                       const std::vector<int64_t>& prompt, int64_t draft_tokens,
                                       const DecodeOptions& options) const {
  at::NoGradGuard no_grad;
  const std::unique_ptr<DraftProposer> draft = proposer(target, draft_tokens, options);
  return speculative_decode(target, *draft, prompt, options);
}

const ObjectiveDescription& configured_objective(const Config& config) {
  return find_objective(keys::training::objective.read(config),
                        keys::training::objective.where(config));
}

std::unique_ptr<Objective> make_objective(const Config& config, const RunContext& run) {
  return configured_objective(config).make(config, run);
}

}  // namespace tandem
