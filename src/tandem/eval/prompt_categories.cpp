#include "tandem/eval/prompt_categories.h"

#include <nlohmann/json.hpp>

#include "tandem/core/error.h"
#include "tandem/data/jsonl.h"

namespace tandem {

namespace {

// A record name without the notes a reader or a document may append (" (line 7)" after a JSON
// array element, " (chosen)" after a preference document).
std::string bare_record_name(const std::string& name) { return name.substr(0, name.find(" (")); }

}  // namespace

std::map<std::string, std::string> record_categories(const std::string& path,
                                                     const std::string& field) {
  std::map<std::string, std::string> categories;
  JsonlReader reader(path, OnError::skip);
  nlohmann::json record;
  while (reader.next(record)) {
    const auto found = record.find(field);
    if (found == record.end() || found->is_null()) continue;
    check(found->is_string(), "[eval] ", reader.where(), ": field \"", field,
          "\" must be a string (the prompt's category), got ", found->dump());
    categories[bare_record_name(reader.where())] = found->get<std::string>();
  }
  return categories;
}

std::string category_of(const std::map<std::string, std::string>& categories,
                        const std::string& source) {
  const auto found = categories.find(bare_record_name(source));
  return found == categories.end() ? std::string() : found->second;
}

}  // namespace tandem
