#pragma once
// What the dataset tests read with: the Qwen2 tokenizer fixture with the built-in chatml layout,
// and every document a DocumentStream yields from a data file.
#include <string>
#include <vector>

#include "chat_fixture.h"
#include "tandem/data/datasets.h"
#include "tandem/text/tokenizer.h"

namespace tandem::testing {

/// The Qwen2 tokenizer fixture (ChatML special tokens), loaded once.
inline const Tokenizer& qwen2_tokenizer() {
  static const Tokenizer tokenizer = Tokenizer::from_dir(qwen2_tokenizer_dir());
  return tokenizer;
}

/// Dataset options rendering with that tokenizer and the built-in chatml layout.
inline DatasetOptions chatml_options(OnError on_error = OnError::fail,
                                     UnknownRoles unknown_roles = UnknownRoles::error) {
  DatasetOptions options;
  options.tokenizer = &qwen2_tokenizer();
  options.chat_template = "chatml";
  options.on_error = on_error;
  options.unknown_roles = unknown_roles;
  return options;
}

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
