#pragma once
// One function per subcommand: it registers its options on the root app and returns the code
// that runs it after parsing. main.cpp only dispatches.
#include <CLI/CLI.hpp>

#include <functional>

namespace tandem::cli {

using Runner = std::function<int()>;

Runner add_forward_command(CLI::App& root);
Runner add_tokenize_command(CLI::App& root);
Runner add_data_command(CLI::App& root);
Runner add_train_command(CLI::App& root);
Runner add_plot_command(CLI::App& root);
Runner add_export_command(CLI::App& root);
Runner add_eval_command(CLI::App& root);
Runner add_capture_command(CLI::App& root);
Runner add_reference_logprobs_command(CLI::App& root);
Runner add_rollout_command(CLI::App& root);

/// Comma-separated integers ("1,2,3"); `what` names the option in errors.
std::vector<int64_t> parse_int_list(const std::string& text, const std::string& what);

}  // namespace tandem::cli
