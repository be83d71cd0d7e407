#pragma once
// The run-config key lists people read, printed from the declarations (core/config_schema.h)
// and the objectives' descriptions (ObjectiveDescription::keys): the short lists of
// `tandem train --help`, the per-key lines of `tandem config-keys`, and docs/training.md's
// tables, which the test suite compares with what is printed here.
#include <string>
#include <vector>

#include "tandem/core/config_key.h"
#include "tandem/objectives/description.h"

namespace tandem {

/// Every objective's key groups, then `objective`'s own.
std::vector<const KeyGroup*> objective_key_groups(const ObjectiveDescription& objective);

/// "section (key=default, key (required), ...)" per section of `groups`, sections in order of
/// first appearance and joined by `separator`: `tandem train --help`.
std::string key_summary(const std::vector<const KeyGroup*>& groups, const std::string& separator);

/// One line per key of `groups`: "  section.key  type range; default: ...; meaning".
std::string key_reference(const std::vector<const KeyGroup*>& groups);

/// The config sections that have keys, in order of first declaration.
std::vector<std::string> key_sections();

/// docs/training.md's markdown table of config section `section`: every key declared in it,
/// and, unless all of them are every objective's, the objectives that read each.
std::string key_table(const std::string& section);

/// The markers around a generated table in docs/training.md.
std::string key_table_begin(const std::string& section);
inline const char* const kKeyTableEnd = "<!-- /config-keys -->";

/// `text` with the lines between each key_table_begin(SECTION) line and the next kKeyTableEnd
/// line replaced by key_table(SECTION). Errors naming `source` for an unknown section or a
/// block left open.
std::string update_key_tables(const std::string& text, const std::string& source);

/// The sections that have a generated table in `text`, in order.
std::vector<std::string> key_tables_in(const std::string& text);

}  // namespace tandem
