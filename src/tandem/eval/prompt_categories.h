#pragma once
// Per-category τ in `tandem eval`: a held-out record may name its category in a string field
// (`"category": "math"`, the field set by --category-field); each prompt's category is found by
// the record name its document carries (TokenizedDocument::source: "file:line", "file[i]",
// "file: row i").
#include <map>
#include <string>

namespace tandem {

/// The string field `field` of every record of the JSONL, JSON array or Parquet file `path`
/// that has one, keyed by record name (record_name in data/jsonl.h). A record whose field is not
/// a string is an error naming the file, the record and the field.
std::map<std::string, std::string> record_categories(const std::string& path,
                                                     const std::string& field);

/// The category of the document whose source is `source`, or "" when its record has none.
std::string category_of(const std::map<std::string, std::string>& categories,
                        const std::string& source);

}  // namespace tandem
