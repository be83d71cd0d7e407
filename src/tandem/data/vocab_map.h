#pragma once
// The EAGLE-3 draft vocabulary (docs/eagle3.md): the `draft_vocab_size` target ids seen most often
// among loss-masked training tokens, ascending, as the two tensors engines load:
//   d2t (D,) int64 offsets: target id = i + d2t[i]
//   t2d (V,) bool: whether target id t is in the draft vocabulary
// Selection rule: rank every target id by (count descending, id ascending) and take the first
// D. So ties go to the smaller id, and when fewer than D distinct ids were seen the rest are
// the lowest unseen ids — the same fill as SpecForge (which adds range(D) ids with count 0),
// but with a tie rule that does not depend on the order the data was read in.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/data/document.h"

namespace tandem {

/// Counts of target ids over loss-masked tokens, accumulated document by document.
class TokenCounter {
 public:
  /// Counts over a target vocabulary of `vocab_size` ids.
  explicit TokenCounter(int64_t vocab_size);
  /// Adds the tokens of `document` whose loss_mask is 1; ids outside the vocab throw, naming
  /// document.source.
  void add(const TokenizedDocument& document);
  /// Adds `other`'s counts (e.g. from another thread or rank).
  void merge(const TokenCounter& other);
  /// The counts (V,) int64, a new CPU tensor.
  at::Tensor counts() const;
  /// Loss-masked tokens counted so far.
  int64_t total() const { return total_; }

 private:
  std::vector<int64_t> counts_;  // (V,)
  int64_t total_ = 0;
};

struct VocabMap {
  at::Tensor d2t;  // (D,) int64: target id = i + d2t[i]
  at::Tensor t2d;  // (V,) bool

  /// D.
  int64_t draft_vocab_size() const { return d2t.size(0); }
  /// V.
  int64_t vocab_size() const { return t2d.size(0); }
  /// The target id of each draft id, i + d2t[i]. (D,) int64
  at::Tensor draft_to_target() const;
  /// Throws Error("[vocab_map] <where>: ...") unless d2t and t2d have the dtypes and shapes
  /// above, the target ids are strictly increasing inside [0, V), and t2d is true exactly at them.
  void validate(const std::string& where) const;
};

/// The map of the top-`draft_vocab_size` ids of `counts` (V,) int64, by the rule above.
VocabMap build_vocab_map(const at::Tensor& counts, int64_t draft_vocab_size);

/// The cache key: XXH64 (tandem/core/hash.h) of the length-prefixed fields "tandem-vocab-map-v1"
/// and data_fingerprint, then V and D as u64; 16 hex digits.
/// `data_fingerprint` identifies the training documents (e.g. the tokenized dataset's cache key:
/// input file hashes, tokenizer, chat template, loss-mask options).
std::string vocab_map_key(std::string_view data_fingerprint, int64_t vocab_size,
                          int64_t draft_vocab_size);

/// Writes `map` to `path` (safetensors: d2t, t2d; metadata key, vocab_size, draft_vocab_size).
void save_vocab_map(const std::string& path, const VocabMap& map, const std::string& key);
/// Reads and validates a map written by save_vocab_map; throws if it is malformed or its
/// metadata key is not `key` (pass an empty key to accept any).
VocabMap load_vocab_map(const std::string& path, const std::string& key = "");

struct CachedVocabMap {
  VocabMap map;
  std::string path;         // cache_dir/vocab_map-<key>.safetensors
  bool from_cache = false;  // false: built now (and written)
};
/// The map for (data_fingerprint, V, D): loaded from `cache_dir` when a valid file for that key
/// is there, else built from `count_tokens()` ((V,) int64 counts) and written there. A file that
/// fails validation is rebuilt and replaced.
template <typename CountTokens>
CachedVocabMap cached_vocab_map(const std::string& cache_dir, std::string_view data_fingerprint,
                                int64_t vocab_size, int64_t draft_vocab_size,
                                CountTokens&& count_tokens);

/// cache_dir/vocab_map-<key>.safetensors.
std::string vocab_map_cache_path(const std::string& cache_dir, const std::string& key);
/// Loads `path` into `map` when it exists and validates for `key`, V and D; false otherwise.
bool try_load_vocab_map(const std::string& path, const std::string& key, int64_t vocab_size,
                        int64_t draft_vocab_size, VocabMap& map);
/// Builds the map from `counts` (V,) int64 (checked against `vocab_size`) and writes it to `path`.
VocabMap build_and_save_vocab_map(const std::string& path, const std::string& key,
                                  const at::Tensor& counts, int64_t vocab_size,
                                  int64_t draft_vocab_size);

template <typename CountTokens>
CachedVocabMap cached_vocab_map(const std::string& cache_dir, std::string_view data_fingerprint,
                                int64_t vocab_size, int64_t draft_vocab_size,
                                CountTokens&& count_tokens) {
  const std::string key = vocab_map_key(data_fingerprint, vocab_size, draft_vocab_size);
  CachedVocabMap cached;
  cached.path = vocab_map_cache_path(cache_dir, key);
  cached.from_cache =
      try_load_vocab_map(cached.path, key, vocab_size, draft_vocab_size, cached.map);
  if (!cached.from_cache)
    cached.map =
        build_and_save_vocab_map(cached.path, key, count_tokens(), vocab_size, draft_vocab_size);
  return cached;
}

}  // namespace tandem
