#pragma once
// Tokenized datasets on disk: each input file is tokenized once into a compact binary cache file,
// keyed by everything that changes its tokens, and every later run maps that file instead of
// tokenizing again. Documents are then read by index (random access for the sampler), the
// documents of several input files numbered one after the other.
//
// Key: XXH64 over the cache format version, the data format, the input file's content hash, the
// tokenizer.json content hash (formats that tokenize), the chat template, max_length,
// last_turn_only, on_error, the vocabulary size ids are checked against, the column renames
// (data.columns) and the held-out split (fraction, seed, side) when they are set.
// File `<cache dir>/<input stem>-<format>-<key>.tokens`, little-endian:
//
//   header   (80 B)  "TANDMTOK", u32 version, u32 documents_per_record, u64 key,
//                    u64 documents, u64 tokens, u64 trained tokens, u64 index offset,
//                    u64 meta offset, u64 meta size, u64 0
//   documents        per document: u32 ids[T], then its loss mask as bits (LSB first),
//                    zero-padded to 4 bytes
//   index    (24 B per document)  u64 byte offset, u64 line number, u32 T, u32 trained tokens
//   meta             JSON: options, records read, skipped records per reason, held-out records
//   trailer  (24 B)  u64 XXH64(bytes[80, trailer) then header), u64 file size, "TANDMEND"
//
// Written to a temporary name and renamed (atomic); an entry whose size, trailer, key or
// checksum is wrong is reported on stderr and rebuilt. Memory while building is bounded by one
// line plus the index (24 B per document).
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tandem/data/datasets.h"

namespace tandem {

struct CacheOptions {
  bool enabled = true;  // false: tokenize into an unnamed temporary file, every run
  std::string dir;      // "": default_data_cache_dir()
};

/// $TANDEM_CACHE/data, else $HOME/.cache/tandem/data.
std::string default_data_cache_dir();

/// The cache key of `path` read as `format` with `options` (hashes the input file).
uint64_t token_cache_key(const std::string& path, DataFormat format, const DatasetOptions& options);

/// One input file's part of a TokenizedDataset.
struct TokenizedFile {
  std::string path;
  std::string cache_path;      // "" when the cache is disabled
  bool from_cache = false;     // its entry was valid: nothing was tokenized
  uint64_t key = 0;            // token_cache_key of the file
  int64_t first_document = 0;  // its documents are first_document .. first_document + documents - 1
  int64_t documents = 0;
  int64_t tokens = 0;
  int64_t trained_tokens = 0;
  int64_t lines = 0;        // records read: good and skipped (held-out ones not included)
  int64_t passed_over = 0;  // records on the other side of options.heldout
  SkipCounts skipped;
};

/// A tokenized conversations, pretokenized or preference dataset of one or more input files,
/// each memory-mapped from its own cache entry; documents are numbered file after file in the
/// order given.
class TokenizedDataset {
 public:
  /// Maps the valid cache entry of each of `paths`, or tokenizes the file (streaming, under
  /// options.on_error) and writes its entry first. A corrupt entry is rebuilt with a warning.
  static TokenizedDataset open(const std::vector<std::string>& paths, DataFormat format,
                               const DatasetOptions& options, const CacheOptions& cache = {});
  /// One input file.
  static TokenizedDataset open(const std::string& path, DataFormat format,
                               const DatasetOptions& options, const CacheOptions& cache = {});

  TokenizedDataset(TokenizedDataset&& other) noexcept;
  TokenizedDataset& operator=(TokenizedDataset&& other) noexcept;
  TokenizedDataset(const TokenizedDataset&) = delete;
  TokenizedDataset& operator=(const TokenizedDataset&) = delete;
  ~TokenizedDataset();

  /// Documents (for preference: 2 per pair, chosen at 2i, rejected at 2i+1).
  int64_t size() const { return num_documents_; }
  int documents_per_record() const { return documents_per_record_; }
  /// Good records: documents / documents_per_record.
  int64_t num_records() const { return num_documents_ / documents_per_record_; }
  /// Tokens of document i.
  int64_t length(int64_t i) const;
  /// Trained (loss-mask 1) tokens of document i.
  int64_t trained_length(int64_t i) const;
  /// Document i, its source naming its input file and record ("file:line").
  TokenizedDocument document(int64_t i) const;
  /// Pair i of a preference dataset.
  PreferencePair pair(int64_t i) const;

  int64_t num_tokens() const { return num_tokens_; }
  int64_t num_trained_tokens() const { return num_trained_tokens_; }
  DataFormat format() const { return format_; }
  /// The cache key: identifies the documents (input files, tokenizer, template, options). For
  /// one file, the file's own key.
  uint64_t key() const { return key_; }
  /// The input files in one line ("a.jsonl", "a.jsonl + b.parquet"), for messages.
  const std::string& source_path() const { return source_path_; }

  /// The input files, in document order.
  const std::vector<TokenizedFile>& files() const { return files_; }
  /// The index in files() of the file holding document i.
  int file_of(int64_t i) const;

 private:
  TokenizedDataset() = default;
  struct IndexEntry;
  struct Mapping;
  /// Maps the valid cache entry of `path` (tokenizing it first when there is none), filling
  /// `file` and `mapping`; a corrupt entry found in the cache is removed and rebuilt.
  static void open_file(const std::string& path, DataFormat format, const DatasetOptions& options,
                        const CacheOptions& cache, TokenizedFile& file, Mapping& mapping,
                        uint32_t& documents_per_record);
  /// The file holding document i, and i's index within it.
  std::pair<const Mapping*, int64_t> locate(int64_t i) const;
  const IndexEntry& entry(int64_t i) const;

  std::string source_path_;
  DataFormat format_ = DataFormat::conversations;
  uint64_t key_ = 0;
  int documents_per_record_ = 1;
  int64_t num_documents_ = 0;
  int64_t num_tokens_ = 0;
  int64_t num_trained_tokens_ = 0;
  std::vector<TokenizedFile> files_;
  std::vector<std::unique_ptr<Mapping>> mappings_;  // one per file
};

}  // namespace tandem
