// The list of objectives `training.objective` can name.
#include "tandem/core/config.h"
#include "tandem/core/error.h"
#include "tandem/objectives/dflash.h"
#include "tandem/objectives/distill.h"
#include "tandem/objectives/dpo.h"
#include "tandem/objectives/eagle3.h"
#include "tandem/objectives/objective.h"
#include "tandem/objectives/policy.h"
#include "tandem/objectives/sft.h"

namespace tandem {

constexpr const char* kAvailable = "sft, eagle3, dflash, distill, dpo, grpo, gspo";

std::unique_ptr<Objective> make_objective(const Config& config, const RunContext& run) {
  const Config training = config.section("training");
  const std::string name = training.get_string("objective", "sft");
  if (name == "sft") return std::make_unique<SftObjective>(sft_options(config, run));
  if (name == "eagle3") return std::make_unique<Eagle3Objective>(eagle3_options(config, run));
  if (name == "dflash") return std::make_unique<DFlashObjective>(dflash_options(config, run));
  if (name == "distill") return std::make_unique<DistillObjective>(distill_options(config, run));
  if (name == "dpo") return std::make_unique<DpoObjective>(dpo_options(config, run));
  if (name == "grpo" || name == "gspo")
    return std::make_unique<PolicyObjective>(policy_options(config, name, run));
  throw Error("[train] ", training.where("objective"), ": unknown objective '", name,
              "' (available: ", kAvailable, ")");
}

}  // namespace tandem
