#pragma once
// The files `data.path` names: each entry a file or a glob (`data/*.parquet`,
// `shards/part-?.jsonl`) with a weight, expanded into the list of files in the order given (a
// glob's matches sorted by name, each taking the glob's weight). A glob that matches nothing, a
// file that does not exist, and a file named twice are errors naming the entry: a typo never
// silently trains on less data, and a file's share is set by its weight, not by listing it again.
#include <string>
#include <vector>

#include "tandem/core/config.h"

namespace tandem {

struct DataFile {
  std::string path;
  double weight = 1.0;  // times each of its records is drawn per epoch (a fraction: a subset)
};

/// Whether `path` holds glob characters (`*`, `?`, `[`).
bool is_glob(const std::string& path);

/// Expands `entries` (see above); `where` names the setting in errors ("run.yaml: data.path").
std::vector<DataFile> expand_data_files(const std::vector<WeightedPath>& entries,
                                        const std::string& where);

/// The paths of `files`, in order.
std::vector<std::string> paths_of(const std::vector<DataFile>& files);

/// "a.jsonl", or "a.jsonl + b.parquet (+ 3 more)": the files in one line, for messages.
std::string describe_files(const std::vector<std::string>& paths);

}  // namespace tandem
