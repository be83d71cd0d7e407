#pragma once
// A deterministic held-out split of a data file (`tandem data split`): each record goes to the
// held-out part when a hash of the seed and the record's canonical JSON text (compact, keys in
// the file's order) falls below the fraction, so a record's side depends on nothing but itself
// and the seed: not on its position, the file's other records, or whether it came from JSONL, a
// JSON array or a Parquet row. Both parts are written as JSONL.
#include <cstdint>
#include <string>
#include <string_view>

#include "tandem/data/jsonl.h"

namespace tandem {

/// Whether a record with this canonical text is held out: XXH64(seed, text) / 2^64 < fraction.
bool is_heldout(std::string_view canonical_record, uint64_t seed, double fraction);

/// A record's canonical text from its text as read (JsonlReader::line_text): compact JSON, keys
/// in the file's order.
std::string canonical_record(std::string_view record_text);

/// Which records a reader keeps when a held-out fraction is set (`data.heldout_fraction`): the
/// training side (records not held out) or the held-out side, exactly the two files
/// `tandem data split` writes with the same fraction and seed.
struct HeldoutOptions {
  double fraction = 0;  // 0: every record is kept
  uint64_t seed = 0;
  bool keep_heldout = false;  // false: the training side; true: the held-out side

  bool active() const { return fraction > 0; }
  /// Whether the record read as `record_text` is kept.
  bool keeps(std::string_view record_text) const;
};

struct SplitCounts {
  int64_t train = 0;
  int64_t heldout = 0;
  SkipCounts skipped;  // bad records (on_error: skip), in neither part
};

/// Splits the records of `path` (JSONL, JSON array or Parquet) into `train_path` and
/// `heldout_path`. `fraction` in (0, 1). Refuses to write over an existing file; both parts are
/// written to temporary files and renamed into place once complete, so a failed split leaves
/// nothing behind. Throws Error naming the file on bad input under `on_error: fail`.
SplitCounts split_records(const std::string& path, double fraction, uint64_t seed,
                          const std::string& train_path, const std::string& heldout_path,
                          OnError on_error);

}  // namespace tandem
