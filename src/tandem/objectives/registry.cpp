// The list of objectives `training.objective` can name.
#include "tandem/core/config.h"
#include "tandem/core/error.h"
#include "tandem/objectives/distill.h"
#include "tandem/objectives/eagle3.h"
#include "tandem/objectives/objective.h"
#include "tandem/objectives/sft.h"

namespace tandem {

std::unique_ptr<Objective> make_objective(const Config& config) {
  const Config training = config.section("training");
  const std::string name = training.get_string("objective", "sft");
  if (name == "sft") return std::make_unique<SftObjective>(sft_options(config));
  if (name == "eagle3") return std::make_unique<Eagle3Objective>(eagle3_options(config));
  if (name == "distill") return std::make_unique<DistillObjective>(distill_options(config));
  for (const char* planned : {"dflash", "dpo", "grpo", "gspo"})
    check(name != planned, "[train] ", training.where("objective"), ": objective '", name,
          "' is not built yet in this version of tandem (available: sft, eagle3, distill)");
  throw Error("[train] ", training.where("objective"), ": unknown objective '", name,
              "' (available: sft, eagle3, distill)");
}

}  // namespace tandem
