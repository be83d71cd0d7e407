#include "tandem/cli/config_reference.h"

#include <algorithm>
#include <sstream>

#include "tandem/core/config_schema.h"
#include "tandem/core/error.h"

namespace tandem {

namespace {

bool contains(const std::vector<const KeyGroup*>& groups, const KeyGroup* group) {
  return std::find(groups.begin(), groups.end(), group) != groups.end();
}

// The objectives that read `group`: "all", or their names.
std::string readers(const KeyGroup* group) {
  if (contains(keys::common_groups(), group)) return "all";
  std::vector<std::string> names;
  for (const ObjectiveDescription& objective : objective_descriptions())
    if (contains(objective.keys, group)) names.push_back(objective.name);
  if (names.size() == objective_descriptions().size()) return "all";
  return names.empty() ? "none" : join_names(names);
}

// "integer >= 1", "number in [0, 1)", "constant | cosine": what a value may be, in plain text.
std::string allowed_text(const KeyInfo& key, const std::string& separator, bool code) {
  const auto quoted = [&](const std::string& text) { return code ? "`" + text + "`" : text; };
  if (key.type == "choice") {
    std::string out;
    for (const std::string& choice : key.choices)
      out += (out.empty() ? "" : separator) + quoted(choice);
    return out;
  }
  if (key.type == "integer list") return "integers, each " + key.range;
  if (key.type == "true/false") return quoted("true") + separator + quoted("false");
  return key.range.empty() ? key.type : key.type + " " + key.range;
}

// "name=value", "name (required)", "name (default: how it is decided)".
std::string summary_of(const KeyInfo& key) {
  std::string out = key.name;
  if (key.required)
    out += " (required)";
  else if (key.shown_verbatim && !key.fallback.empty())
    out += "=" + key.fallback;
  else if (!key.shown_verbatim)
    out += " (default: " + key.fallback + ")";
  if (key.type == "choice") out += " (" + allowed_text(key, " | ", false) + ")";
  return out;
}

std::string cell(std::string text) {
  for (size_t at = text.find('|'); at != std::string::npos; at = text.find('|', at + 2))
    text.replace(at, 1, "\\|");
  return text;
}

// The default as a markdown cell (`code`) or plain text.
std::string default_text(const KeyInfo& key, bool code) {
  if (key.required) return "required";
  if (!key.shown_verbatim) return key.fallback;
  if (key.fallback.empty()) return code ? "—" : "none";
  return code ? "`" + key.fallback + "`" : key.fallback;
}

}  // namespace

std::vector<const KeyGroup*> objective_key_groups(const ObjectiveDescription& objective) {
  std::vector<const KeyGroup*> groups = keys::common_groups();
  groups.insert(groups.end(), objective.keys.begin(), objective.keys.end());
  return groups;
}

std::string key_summary(const std::vector<const KeyGroup*>& groups, const std::string& separator) {
  std::vector<std::string> sections;
  for (const KeyGroup* group : groups)
    if (std::find(sections.begin(), sections.end(), group->section()) == sections.end())
      sections.push_back(group->section());
  std::string out;
  for (const std::string& section : sections) {
    std::string listed;
    for (const KeyGroup* group : groups)
      if (group->section() == section)
        for (const KeyInfo* key : group->keys())
          listed += (listed.empty() ? "" : ", ") + summary_of(*key);
    out += (out.empty() ? "" : separator) + section + ": " + listed;
  }
  return out;
}

std::string key_reference(const std::vector<const KeyGroup*>& groups) {
  std::ostringstream out;
  for (const KeyGroup* group : groups)
    for (const KeyInfo* key : group->keys())
      out << "  " << key->path() << "  " << allowed_text(*key, " | ", false) << "; "
          << (key->required ? "required" : "default " + default_text(*key, false)) << ": "
          << key->doc << "\n";
  return out.str();
}

std::vector<std::string> key_sections() {
  std::vector<std::string> sections;
  for (const KeyGroup* group : key_groups())
    if (std::find(sections.begin(), sections.end(), group->section()) == sections.end())
      sections.push_back(group->section());
  return sections;
}

std::string key_table(const std::string& section) {
  std::vector<const KeyGroup*> groups;
  bool every_objective = true;
  for (const KeyGroup* group : key_groups())
    if (group->section() == section) {
      groups.push_back(group);
      every_objective = every_objective && readers(group) == "all";
    }
  check(!groups.empty(), "[config-keys] no config section '", section,
        "' (sections: ", join_names(key_sections()), ")");
  std::ostringstream out;
  out << (every_objective ? "| key | default | allowed | meaning |\n|---|---|---|---|\n"
                          : "| key | objectives | default | allowed | meaning |\n"
                            "|---|---|---|---|---|\n");
  for (const KeyGroup* group : groups)
    for (const KeyInfo* key : group->keys()) {
      out << "| `" << key->name << "` | ";
      if (!every_objective) out << readers(group) << " | ";
      out << cell(default_text(*key, true)) << " | " << cell(allowed_text(*key, ", ", true))
          << " | " << cell(key->doc) << " |\n";
    }
  return out.str();
}

std::string key_table_begin(const std::string& section) {
  return "<!-- config-keys: " + section + " -->";
}

namespace {

// The section a begin marker names, or "" when `line` is not one.
std::string begin_marker_section(const std::string& line) {
  const std::string prefix = "<!-- config-keys: ", suffix = " -->";
  if (line.size() <= prefix.size() + suffix.size() || line.rfind(prefix, 0) != 0 ||
      line.compare(line.size() - suffix.size(), suffix.size(), suffix) != 0)
    return "";
  return line.substr(prefix.size(), line.size() - prefix.size() - suffix.size());
}

}  // namespace

std::string update_key_tables(const std::string& text, const std::string& source) {
  std::istringstream in(text);
  std::string out, line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    out += line + "\n";
    const std::string section = begin_marker_section(line);
    if (section.empty()) continue;
    const std::vector<std::string> sections = key_sections();
    check(std::find(sections.begin(), sections.end(), section) != sections.end(), "[config-keys] ",
          source, ":", number, ": no config section '", section,
          "' (sections: ", join_names(sections), ")");
    out += key_table(section);
    const int begin = number;
    bool closed = false;
    while (!closed && std::getline(in, line)) {
      ++number;
      closed = line == kKeyTableEnd;
    }
    check(closed, "[config-keys] ", source, ":", begin, ": the table of '", section,
          "' has no closing ", kKeyTableEnd);
    out += line + "\n";
  }
  if (!text.empty() && text.back() != '\n') out.pop_back();
  return out;
}

std::vector<std::string> key_tables_in(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> sections;
  for (std::string line; std::getline(in, line);)
    if (!begin_marker_section(line).empty()) sections.push_back(begin_marker_section(line));
  return sections;
}

}  // namespace tandem
