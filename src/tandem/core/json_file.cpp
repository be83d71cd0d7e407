#include "tandem/core/json_file.h"

#include <fstream>

#include "tandem/core/error.h"

namespace tandem {

nlohmann::json read_json_file(const std::string& path, const std::string& component,
                              const std::string& hint) {
  std::ifstream in(path);
  check(in.good(), "[", component, "] ", path, ": cannot open", hint);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error("[", component, "] ", path, ": invalid JSON: ", e.what());
  }
}

}  // namespace tandem
