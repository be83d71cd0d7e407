// tandem: train a model next to a frozen one. Dispatches to one subcommand per file in cli/.
#include <iostream>
#include <map>

#include "tandem/cli/commands.h"
#include "tandem/core/error.h"
#include "tandem/core/threads.h"
#include "tandem/dist/launch.h"

int main(int argc, char** argv) {
  CLI::App root{
      "tandem: train a model in tandem with a frozen one (EAGLE-3/DFlash drafts, distillation, "
      "DPO, GRPO/GSPO)"};
  root.require_subcommand(1);
  int threads = 0;
  root.add_option("--threads", threads,
                  "intra-op CPU threads (default: $TANDEM_THREADS or the usable cores)");

  std::map<std::string, tandem::cli::Runner> runners;
  runners["forward"] = tandem::cli::add_forward_command(root);
  runners["tokenize"] = tandem::cli::add_tokenize_command(root);
  runners["data"] = tandem::cli::add_data_command(root);
  runners["train"] = tandem::cli::add_train_command(root);
  runners["plot"] = tandem::cli::add_plot_command(root);
  runners["export"] = tandem::cli::add_export_command(root);
  runners["eval"] = tandem::cli::add_eval_command(root);
  runners["capture"] = tandem::cli::add_capture_command(root);
  runners["reference-logprobs"] = tandem::cli::add_reference_logprobs_command(root);
  runners["rollout"] = tandem::cli::add_rollout_command(root);
  runners["regenerate"] = tandem::cli::add_regenerate_command(root);
  runners["config-keys"] = tandem::cli::add_config_keys_command(root);

  try {
    root.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return root.exit(e);
  }
  // Under a launcher, each rank's error names the rank: torchrun prints every rank's output.
  std::string error_prefix = "error: ";
  try {
    const tandem::dist::LaunchEnv launch = tandem::dist::read_launch_env();
    if (launch.world_size > 1)
      error_prefix = "error (rank " + std::to_string(launch.rank) + " of " +
                     std::to_string(launch.world_size) + "): ";
  } catch (const std::exception&) {
    // A malformed launch environment is reported by the command that reads it.
  }
  try {
    tandem::configure_threads(threads);
    for (auto& [name, run] : runners)
      if (root.got_subcommand(name)) return run();
  } catch (const std::exception& e) {
    std::cerr << (error_prefix + e.what() + "\n");  // one write: ranks' lines do not interleave
    return 1;
  }
  return 0;
}
