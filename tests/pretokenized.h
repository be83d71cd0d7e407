#pragma once
// Tests that need fixture documents as a real dataset (offline captures read by dataset index):
// the documents written as pretokenized JSONL and opened through the token cache.
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tandem/data/token_cache.h"

namespace tandem::testing {

/// Writes `documents` to DIR/docs.jsonl and opens it with its cache in DIR/cache.
inline TokenizedDataset pretokenized_dataset(const std::string& dir,
                                             const std::vector<TokenizedDocument>& documents) {
  {
    std::ofstream out(dir + "/docs.jsonl");
    for (const auto& document : documents) {
      nlohmann::json line;
      line["input_ids"] = document.ids;
      line["loss_mask"] = document.loss_mask;
      out << line.dump() << "\n";
    }
  }
  CacheOptions cache;
  cache.dir = dir + "/cache";
  return TokenizedDataset::open(dir + "/docs.jsonl", DataFormat::pretokenized, {}, cache);
}

}  // namespace tandem::testing
