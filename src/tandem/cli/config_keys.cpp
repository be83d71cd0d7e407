// tandem config-keys: every run-config key with its type, range, default and meaning, printed
// from the declarations (core/config_schema.h). --markdown prints docs/training.md's tables;
// --update FILE refreshes the tables between FILE's config-keys markers (the test suite fails
// while docs/training.md's differ from these).
#include <fstream>
#include <iostream>
#include <sstream>

#include "tandem/cli/commands.h"
#include "tandem/cli/config_reference.h"
#include "tandem/core/config_schema.h"
#include "tandem/core/error.h"
#include "tandem/core/file_io.h"
#include "tandem/objectives/description.h"

namespace tandem::cli {

Runner add_config_keys_command(CLI::App& root) {
  struct Options {
    std::string objective, update;
    bool markdown = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = root.add_subcommand(
      "config-keys",
      "print every run-config key: its type, range, default and meaning (every objective's "
      "keys, then each objective's own)");
  command->add_option("--objective", options->objective,
                      "only the keys `training.objective: NAME` reads");
  command->add_flag("--markdown", options->markdown,
                    "print docs/training.md's key tables (markdown, between their markers)");
  command->add_option("--update", options->update,
                      "rewrite the key tables between FILE's config-keys markers "
                      "(e.g. docs/training.md)");
  return [options]() {
    if (!options->update.empty()) {
      std::ifstream in(options->update);
      check(in.good(), "[config-keys] ", options->update, ": cannot open");
      std::stringstream text;
      text << in.rdbuf();
      const std::string updated = update_key_tables(text.str(), options->update);
      if (updated != text.str()) replace_file(options->update, updated, "[config-keys]");
      std::cout << "[config-keys] " << options->update << ": " << key_tables_in(updated).size()
                << " tables " << (updated == text.str() ? "already up to date" : "updated") << "\n";
    } else if (options->markdown) {
      for (const std::string& section : key_sections())
        std::cout << key_table_begin(section) << "\n"
                  << key_table(section) << kKeyTableEnd << "\n\n";
    } else if (!options->objective.empty()) {
      std::cout << key_reference(
          objective_key_groups(find_objective(options->objective, "--objective")));
    } else {
      std::cout << "Every objective:\n" << key_reference(keys::common_groups());
      for (const ObjectiveDescription& objective : objective_descriptions())
        std::cout << objective.name << " (training.objective: " << objective.name << "):\n"
                  << key_reference(objective.keys);
    }
    return 0;
  };
}

}  // namespace tandem::cli
