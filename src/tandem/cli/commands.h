#pragma once
// One function per subcommand: it registers its options on the root app and returns the code
// that runs it after parsing. main.cpp only dispatches.
#include <c10/core/Device.h>

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
Runner add_regenerate_command(CLI::App& root);
Runner add_config_keys_command(CLI::App& root);

/// Comma-separated integers ("1,2,3"); `what` names the option in errors.
std::vector<int64_t> parse_int_list(const std::string& text, const std::string& what);

/// Adds `--chat-template` (auto | a .jinja file | a built-in name) and `--template-kwargs` (a
/// JSON object) to a subcommand that renders conversations; `note` ends the kwargs' help.
void add_chat_template_options(CLI::App& command, std::string& chat_template,
                               std::string& template_kwargs, const std::string& note = "");

/// Adds `--device` (auto | cpu | cuda | cuda:N, default auto) to a subcommand that runs models.
void add_device_option(CLI::App& command, std::string& device);
/// The device `--device` names (core/device.h: resolve_device, LOCAL_RANK for a plain "cuda").
c10::Device device_from_option(const std::string& device);

}  // namespace tandem::cli
