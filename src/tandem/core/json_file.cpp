#include "tandem/core/json_file.h"

#include <fstream>
#include <sstream>

#include "tandem/core/error.h"
#include "tandem/core/json_parse.h"

namespace tandem {

nlohmann::json read_json_file(const std::string& path, const std::string& component,
                              const std::string& hint) {
  std::ifstream in(path);
  check(in.good(), "[", component, "] ", path, ": cannot open", hint);
  std::stringstream text;
  text << in.rdbuf();
  try {
    return parse_json_text(text.str());  // nesting bounded (core/json_parse.h)
  } catch (const JsonTextError& e) {
    throw Error("[", component, "] ", path, ": invalid JSON: ", e.what());
  }
}

}  // namespace tandem
