#pragma once
// The `data:` section of a run: the dataset (tokenized and cached, or rollouts held in memory),
// its tokenizer, how documents are packed into micro-batches, and the function that draws the
// next micro-batch in sampler order. Shared by `tandem train`, `tandem capture` and
// `tandem reference-logprobs` so all see the same documents.
//
// The sampler draws RECORDS: one document for most formats, a (chosen, rejected) pair for
// preference data, one sample for rollouts. A record's documents always land in the same
// micro-batch, so a pair's two sides meet in one loss.
//
// Several files (data.path a list or a glob) form one dataset, their records numbered file after
// file; a file of weight w puts each of its records floor(w) times into the sampler's records,
// plus a fixed subset of round(frac(w) x its records) (the first of a permutation seeded by the
// file's cache key), so the sampler's epoch draws them in that proportion. A held-out fraction
// (data.heldout_fraction) leaves records out before anything else (data/heldout_split.h).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tandem/core/config.h"
#include "tandem/data/data_files.h"
#include "tandem/data/datasets.h"
#include "tandem/data/packing.h"
#include "tandem/data/sampler.h"
#include "tandem/data/token_cache.h"
#include "tandem/text/tokenizer.h"
#include "tandem/train/data_cursor.h"

namespace tandem {

/// Bound on data.micro_batch_rows x data.seq_len (tokens per micro-batch), checked before
/// anything is allocated; each of the two has its own range (core/config_schema.cpp).
inline constexpr int64_t kMaxMicroBatchTokens = int64_t{1} << 24;

/// Bound on the sampler's records per epoch that data.path's weights may ask for (each is held
/// in memory), checked before any is made.
inline constexpr int64_t kMaxDrawsPerEpoch = int64_t{1} << 28;

/// What `data:` says, read and checked without opening anything (defaults and ranges:
/// core/config_schema.cpp).
struct DataOptions {
  std::vector<WeightedPath> paths;  // data.path: files or globs, each with a weight
  DataFormat format = DataFormat::conversations;
  PackingOptions packing;  // seq_len, mode, overlong; max_rows = rows; padded: trim_to_longest
  int64_t rows = 0;        // micro_batch_rows
  int64_t lookahead = 0;   // data.packing_lookahead (best_fit): micro-batches' worth of records
  std::string tokenizer_dir;
  DatasetOptions dataset;  // chat_template, max_length, last_turn_only, on_error, vocab_size,
                           // heldout
  std::string cache_dir;   // "" = the default data cache
  std::string validation;  // data.validation: "", "heldout", or a file or glob
  bool scale_rewards_by_std = false;  // rollout only (read only for rollout data)
};

/// Reads `data.*` (but data.capture, a draft's), checking each value and the micro-batch size.
DataOptions read_data_options(const Config& config);

/// A sampler record that is not simply the dataset's record `record`: tokens [begin, end) of a
/// document longer than a micro-batch (data.overlong: split cuts it into parts of at most
/// micro_batch_rows x seq_len tokens, each drawn as its own record).
struct RecordPart {
  int64_t record = 0;
  int64_t begin = 0;
  int64_t end = -1;  // -1: the whole record
};

struct TrainingData {
  std::optional<Tokenizer> tokenizer;
  std::optional<TokenizedDataset> dataset;  // every format but rollout
  std::vector<RolloutSample> rollouts;      // rollout: the whole file, advantages computed
  DataFormat format = DataFormat::conversations;
  std::vector<DataFile> files;  // data.path expanded, in record order
  std::string path;             // the files in one line (describe_files), for messages
  std::string tokenizer_dir;
  std::string cache_dir;  // "" = the default data cache
  PackingOptions packing;
  int64_t rows = 1;       // micro_batch_rows
  int64_t lookahead = 8;  // best_fit: the pool holds at least this many micro-batches' tokens
  // The sampler's records when they differ from the dataset's (empty: one to one): documents
  // longer than a micro-batch split into parts, records that fit no micro-batch left out
  // (data.on_error: skip). Decided when the data is read, before step 1.
  std::vector<RecordPart> parts;
  int64_t split_documents = 0;            // documents cut into several parts
  int64_t skipped_records = 0;            // records that fit no micro-batch, skipped
  std::vector<int64_t> file_records;      // per file: the dataset's records (before weights)
  std::vector<int64_t> file_draws;        // per file: sampler records per epoch (after weights)
  std::vector<int64_t> file_passed_over;  // per file: records on the held-out side, left out

  /// Sampler units: documents (or parts of one), preference pairs or rollout samples.
  int64_t num_records() const;
  /// Documents per record: 2 for preference data, else 1.
  int documents_per_record() const;
  /// Tokens of a sampler record's documents together.
  int64_t record_tokens(int64_t record) const;
  /// The dataset's record behind sampler record `record`, and its token range.
  RecordPart part(int64_t record) const;
  /// Dataset document `index` (for rollouts: the sample's prompt + completion, completion
  /// trained).
  TokenizedDocument document(int64_t index) const;
  /// Tokens of dataset document `index`.
  int64_t document_length(int64_t index) const;
};

/// Reads `data.*` (read_data_options), expands data.path and opens the dataset, tokenizing each
/// file into the cache on first use. Rollout files are read whole; samples
/// without an advantage get one from their group's rewards (data.scale_rewards_by_std). Every
/// record is then checked against a micro-batch (rows x seq_len): data.overlong: error and
/// records too long for one micro-batch fail here, naming the document, or with data.on_error:
/// skip are skipped and counted; overlong: split documents are cut into parts that fit (under
/// best_fit, every document longer than a row into parts of one row each). Last,
/// each file's weight sets how often its records are drawn; `weighted` false reads every record
/// once whatever the weights (a pass over the data, as reference log-probs make).
TrainingData read_training_data(const Config& config, bool weighted = true);

/// data.validation read like the training data (same format, tokenizer, template, packing and
/// checks) with every record once: the named file or glob whole, or (`heldout`) the records
/// data.heldout_fraction leaves out of training. Nothing when data.validation is empty.
std::optional<TrainingData> read_validation_data(const Config& config);

/// The next micro-batch, its documents packed into at most `rows` rows; each PackedDocument
/// records its document index (dataset_index) and sampler epoch.
/// - packed, padded: the longest run of records in sampler order that fits. The sampler advances
///   by exactly the records packed.
/// - best_fit: the pool is first topped up from the sampler until it holds
///   data.packing_lookahead micro-batches' worth of tokens, never past the end of the pool's
///   epoch (an epoch's records are all packed before the next epoch's are drawn). Then the
///   oldest pending record and, trying the rest longest first, every one that still fits
///   (select_best_fit) form the micro-batch. A record waits at most as many micro-batches as the
///   pool holds records.
PackedBatch next_micro_batch(DataCursor& cursor, const TrainingData& data);

/// What next_micro_batch would draw, from the records' lengths alone (no tokens read, no
/// tensors made): the cursor advances exactly as next_micro_batch would advance it.
struct MicroBatchSize {
  int64_t records = 0;    // sampler records packed
  int64_t documents = 0;  // packed documents (PackedBatch::total_documents)
  int64_t tokens = 0;     // real tokens (PackedBatch::num_tokens)
  int64_t rows = 0;       // rows (PackedBatch::rows)
  int64_t length = 0;     // columns (PackedBatch::seq_len)
};
MicroBatchSize next_micro_batch_size(DataCursor& cursor, const TrainingData& data);

/// The next micro-batch of a pass over the records in file order, starting at `next_record`
/// (advanced past the records packed): packed exactly like training batches (reference log-prob
/// caches are computed this way).
PackedBatch next_micro_batch_in_order(int64_t& next_record, const TrainingData& data);

}  // namespace tandem
