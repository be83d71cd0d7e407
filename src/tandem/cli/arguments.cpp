#include <sstream>

#include "tandem/cli/commands.h"
#include "tandem/core/error.h"

namespace tandem::cli {

std::vector<int64_t> parse_int_list(const std::string& text, const std::string& what) {
  std::vector<int64_t> out;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    size_t used = 0;
    int64_t value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    check(used > 0 && used == item.size(), "[cli] ", what, ": '", item,
          "' is not an integer (expected a comma-separated list like 1,2,3)");
    out.push_back(value);
  }
  check(!out.empty(), "[cli] ", what, ": empty list");
  return out;
}

}  // namespace tandem::cli
