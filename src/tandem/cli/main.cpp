// tandem: train a model next to a frozen one. Dispatches to one subcommand per file in cli/.
#include <iostream>
#include <map>

#include "tandem/cli/commands.h"
#include "tandem/core/error.h"
#include "tandem/core/threads.h"

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
  try {
    tandem::configure_threads(threads);
    for (auto& [name, run] : runners)
      if (root.got_subcommand(name)) return run();
  } catch (const tandem::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
