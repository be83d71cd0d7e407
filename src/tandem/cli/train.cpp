// tandem train CONFIG.yaml [section.key=value ...]: run (or resume) a training job; with
// --dry-run, validate it and print what would run (train/dry_run.h).
#include <iostream>

#include "tandem/cli/commands.h"
#include "tandem/cli/config_reference.h"
#include "tandem/core/config.h"
#include "tandem/core/config_schema.h"
#include "tandem/objectives/description.h"
#include "tandem/train/dry_run.h"
#include "tandem/train/trainer.h"

namespace tandem::cli {

Runner add_train_command(CLI::App& root) {
  auto config_path = std::make_shared<std::string>();
  auto overrides = std::make_shared<std::vector<std::string>>();
  auto dry = std::make_shared<bool>(false);
  auto start_over = std::make_shared<bool>(false);
  CLI::App* command = root.add_subcommand(
      "train",
      "train from a YAML config; resumes from the newest valid checkpoint in training.run_dir. "
      "SIGTERM/SIGINT: finish the step, save, exit 75. A non-finite loss, gradient norm or "
      "trained state: exit 3, nothing non-finite saved (training.on_nonfinite)");
  command->add_option("config", *config_path, "YAML run config (see configs/)")->required();
  command->add_option("overrides", *overrides, "dotted overrides, e.g. training.lr=3e-4");
  command->add_flag("--dry-run", *dry,
                    "validate the config against the checkpoints on disk (headers only) and the "
                    "data, and print what would run: models, dtypes, parameter counts, memory "
                    "per rank, data statistics; trains nothing");
  command->add_flag("--start-over", *start_over,
                    "when training.run_dir holds checkpoints and none can be used (all corrupt "
                    "or unreadable), move them to run_dir/unusable-<time>/ and train from step 0 "
                    "(without it, that is an error and nothing is touched)");
  // The key lists come from the declarations (core/config_schema.h) and the objectives'
  // descriptions (objectives/description.h); `tandem config-keys` prints each key's meaning.
  std::string objectives;
  for (const ObjectiveDescription& objective : objective_descriptions())
    objectives += "\n  " + objective.name + ": " + objective.summary +
                  ".\n    Keys: " + key_summary(objective.keys, "; ") + ".";
  command->footer(
      "Config keys of every objective (key=default; `tandem config-keys` prints each key's "
      "range and meaning; unknown keys are errors):\n  " +
      key_summary(keys::common_groups(), "\n  ") +
      "\nLaunch with torchrun --nproc-per-node=N --no-python tandem train ... or srun "
      "(SLURM_PROCID, SLURM_NTASKS with MASTER_ADDR, MASTER_PORT); training.micro_batches must "
      "be a multiple of the ranks.\nObjectives (training.objective):" +
      objectives);
  return [config_path, overrides, dry, start_over]() {
    const Config config = Config::load(*config_path, *overrides);
    if (*dry) {
      dry_run(config, std::cout);
      return 0;
    }
    install_preemption_handlers();
    TrainResult result;
    try {
      result = train(config, *start_over);
    } catch (const NonFiniteStop& stop) {
      std::cerr << "error: " << stop.what() << "\n";
      return kExitNonFinite;
    }
    if (result.preempted) return kExitPreempted;
    std::cout << "[train] finished at step " << result.final_step << " in " << result.run_dir;
    if (!result.export_dir.empty()) std::cout << "; exported " << result.export_dir;
    std::cout << "\n";
    return 0;
  };
}

}  // namespace tandem::cli
