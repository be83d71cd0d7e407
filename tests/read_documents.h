#pragma once
// Every document a DocumentStream yields from a data file, for the dataset tests.
#include <string>
#include <vector>

#include "tandem/data/datasets.h"

namespace tandem::testing {

inline std::vector<TokenizedDocument> read_all(const std::string& path, DataFormat format,
                                               const DatasetOptions& options,
                                               SkipCounts* skipped = nullptr) {
  DocumentStream stream(path, format, options);
  std::vector<TokenizedDocument> all, record;
  while (stream.next(record)) all.insert(all.end(), record.begin(), record.end());
  if (skipped) *skipped = stream.skipped();
  return all;
}

}  // namespace tandem::testing
