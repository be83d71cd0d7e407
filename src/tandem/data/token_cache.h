#pragma once
// Tokenized datasets on disk: a JSONL file is tokenized once into a compact binary cache file,
// keyed by everything that changes its tokens, and every later run maps that file instead of
// tokenizing again. Documents are then read by index (random access for the sampler).
//
// Key: XXH64 over the cache format version, the data format, the input file's content hash, the
// tokenizer.json content hash (formats that tokenize), the chat template, max_length,
// last_turn_only, on_error and the vocabulary size ids are checked against.
// File `<cache dir>/<input stem>-<format>-<key>.tokens`, little-endian:
//
//   header   (80 B)  "TANDMTOK", u32 version, u32 documents_per_record, u64 key,
//                    u64 documents, u64 tokens, u64 trained tokens, u64 index offset,
//                    u64 meta offset, u64 meta size, u64 0
//   documents        per document: u32 ids[T], then its loss mask as bits (LSB first),
//                    zero-padded to 4 bytes
//   index    (24 B per document)  u64 byte offset, u64 line number, u32 T, u32 trained tokens
//   meta             JSON: options, lines read, skipped lines per reason
//   trailer  (24 B)  u64 XXH64(bytes[80, trailer) then header), u64 file size, "TANDMEND"
//
// Written to a temporary name and renamed (atomic); an entry whose size, trailer, key or
// checksum is wrong is reported on stderr and rebuilt. Memory while building is bounded by one
// line plus the index (24 B per document).
#include <cstdint>
#include <string>

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

/// A tokenized conversations, pretokenized or preference file, memory-mapped.
class TokenizedDataset {
 public:
  /// Maps the valid cache entry of `path`, or tokenizes `path` (streaming, under
  /// options.on_error) and writes the entry first. A corrupt entry is rebuilt with a warning.
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
  /// Good lines: documents / documents_per_record.
  int64_t num_records() const { return num_documents_ / documents_per_record_; }
  /// Tokens of document i.
  int64_t length(int64_t i) const;
  /// Trained (loss-mask 1) tokens of document i.
  int64_t trained_length(int64_t i) const;
  /// Document i, its source "file:line" naming the input file.
  TokenizedDocument document(int64_t i) const;
  /// Pair i of a preference file.
  PreferencePair pair(int64_t i) const;

  int64_t num_tokens() const { return num_tokens_; }
  int64_t num_trained_tokens() const { return num_trained_tokens_; }
  /// Non-blank lines of the input (good and skipped).
  int64_t num_lines() const { return num_lines_; }
  const SkipCounts& skipped() const { return skipped_; }
  DataFormat format() const { return format_; }
  /// The cache key: identifies the documents (input file, tokenizer, template, options).
  uint64_t key() const { return key_; }
  const std::string& source_path() const { return source_path_; }

  /// True when this open() found a valid entry and tokenized nothing.
  bool from_cache() const { return from_cache_; }
  /// The cache file ("" when the cache is disabled).
  const std::string& cache_path() const { return cache_path_; }

 private:
  TokenizedDataset() = default;
  struct IndexEntry;
  const IndexEntry& entry(int64_t i) const;
  void unmap();

  std::string source_path_;
  std::string cache_path_;
  DataFormat format_ = DataFormat::conversations;
  uint64_t key_ = 0;
  bool from_cache_ = false;
  const uint8_t* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  int documents_per_record_ = 1;
  RecordFile record_file_ = RecordFile::jsonl;  // how sources name records
  int64_t num_documents_ = 0;
  int64_t num_tokens_ = 0;
  int64_t num_trained_tokens_ = 0;
  int64_t num_lines_ = 0;
  uint64_t index_offset_ = 0;
  SkipCounts skipped_;
};

}  // namespace tandem
