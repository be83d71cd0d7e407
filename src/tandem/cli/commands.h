#pragma once
// One function per subcommand: it registers its options on the root app and returns the code
// that runs it after parsing. main.cpp only dispatches.
#include <CLI/CLI.hpp>

#include <functional>

namespace tandem::cli {

using Runner = std::function<int()>;

/// Exit code for a feature this build does not have yet.
constexpr int kExitNotBuilt = 3;

Runner add_forward_command(CLI::App& root);
Runner add_tokenize_command(CLI::App& root);
Runner add_data_command(CLI::App& root);
Runner add_train_command(CLI::App& root);
Runner add_plot_command(CLI::App& root);

/// Registers a subcommand that exists in the product's surface but is not built yet: it says so
/// and exits with kExitNotBuilt.
Runner add_not_built_command(CLI::App& root, const std::string& name,
                             const std::string& description);

/// Comma-separated integers ("1,2,3"); `what` names the option in errors.
std::vector<int64_t> parse_int_list(const std::string& text, const std::string& what);

}  // namespace tandem::cli
