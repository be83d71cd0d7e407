#pragma once
// The `data:` section of a run: the tokenized dataset (cached), its tokenizer, how documents
// are packed into micro-batches, and the function that draws the next micro-batch in sampler
// order. Shared by `tandem train` and `tandem capture` so both see the same documents.
#include <cstdint>
#include <optional>
#include <string>

#include "tandem/core/config.h"
#include "tandem/data/packing.h"
#include "tandem/data/sampler.h"
#include "tandem/data/token_cache.h"
#include "tandem/text/tokenizer.h"

namespace tandem {

struct TrainingData {
  std::optional<Tokenizer> tokenizer;
  std::optional<TokenizedDataset> dataset;
  std::string tokenizer_dir;
  std::string cache_dir;  // "" = the default data cache
  PackingOptions packing;
  int64_t rows = 1;  // micro_batch_rows
};

/// Reads `data.*` (path, format, tokenizer, chat_template, seq_len, packing, ...) and opens the
/// dataset, tokenizing it into the cache on first use.
TrainingData read_training_data(const Config& config);

/// The next micro-batch: documents in sampler order, packed into at most `rows` rows. The
/// sampler advances by exactly the documents packed, so a resumed run sees the same batches.
/// Each PackedDocument records its dataset index.
PackedBatch next_micro_batch(Sampler& sampler, const TrainingData& data);

}  // namespace tandem
