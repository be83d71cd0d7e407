#pragma once
// The tokenizer the fuzz targets encode with: data/demo/tokenizer (the fuzzers run from the
// repository root), or the directory in $TANDEM_FUZZ_TOKENIZER. Loaded once per process.
#include <cstdlib>

#include "tandem/text/tokenizer.h"

inline const tandem::Tokenizer& demo_tokenizer() {
  static const tandem::Tokenizer tokenizer = [] {
    const char* dir = std::getenv("TANDEM_FUZZ_TOKENIZER");
    return tandem::Tokenizer::from_dir(dir ? dir : "data/demo/tokenizer");
  }();
  return tokenizer;
}
