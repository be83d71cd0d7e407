#include <iostream>

#include "tandem/cli/commands.h"
#include "tandem/core/error.h"

namespace tandem::cli {

Runner add_not_built_command(CLI::App& root, const std::string& name,
                             const std::string& description) {
  CLI::App* command = root.add_subcommand(name, description + " [not built yet]");
  command->allow_extras();
  return [name]() {
    std::cerr << "tandem " << name << ": not built yet in this version of tandem; "
              << "`tandem --help` lists what is\n";
    return kExitNotBuilt;
  };
}

}  // namespace tandem::cli
