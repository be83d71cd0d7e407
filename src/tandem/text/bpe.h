#pragma once
// The BPE model of a tokenizer.json: vocab, ranked merges, HF's merge order (lowest rank first,
// leftmost among equals), `ignore_merges`, and a per-thread cache of pre-token results. Two kinds:
// byte-level (after a ByteLevel pre-tokenizer: words are raw bytes, every byte has a token) and
// SentencePiece-style (words are characters; a character missing from the vocab becomes its
// <0xNN> byte pieces with `byte_fallback`, else `unk_token`, consecutive unknowns fused into one
// with `fuse_unk`, or is dropped when there is no unk_token, as HF does).
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tandem {

/// Hash for std::string keyed maps that are looked up with std::string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename Value>
using StringMap = std::unordered_map<std::string, Value, StringHash, std::equal_to<>>;

/// Token ids a tokenizer.json may use: below 2^24 (and dense enough, bpe.cpp).
inline constexpr int64_t kMaxTokenId = int64_t{1} << 24;

class BpeModel {
 public:
  /// Reads `model` (type BPE); `where` prefixes errors ("[tokenizer] <path>: model").
  /// `byte_level`: the pre-tokenizer ends in ByteLevel.
  BpeModel(const nlohmann::json& model, const std::string& where, bool byte_level);

  /// Appends the tokens of one pre-token, given as raw bytes (byte-level) or UTF-8 text
  /// (SentencePiece-style): their ids and, when `lengths` is not null, how many bytes of `bytes`
  /// each covers (an unknown character that is dropped covers none, and shifts the offsets of
  /// the tokens after it, as in HF).
  void tokenize(std::string_view bytes, std::vector<int32_t>& ids,
                std::vector<uint32_t>* lengths) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  /// The vocab string of `id`, or null when no vocab entry has it.
  const std::string* id_to_token(int32_t id) const;
  /// Number of vocab entries (HF's model vocab size).
  size_t size() const { return vocab_.size(); }
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }

 private:
  struct MergeTarget {
    uint32_t rank;
    int32_t id;
  };
  // Open-addressing map from a pair of ids (left << 32 | right) to its merge.
  struct MergeTable {
    std::vector<uint64_t> keys;  // kEmpty where free
    std::vector<MergeTarget> values;
    uint64_t mask = 0;
    void build(const std::vector<std::pair<uint64_t, MergeTarget>>& merges);
    const MergeTarget* find(uint64_t key) const;
  };
  struct CacheEntry {
    std::vector<int32_t> ids;
    std::vector<uint32_t> lengths;
  };
  using Cache = StringMap<CacheEntry>;

  void merge_word(std::string_view bytes, CacheEntry& out) const;
  /// The symbols a SentencePiece-style word starts from: (id, bytes covered) per character.
  void character_symbols(std::string_view text,
                         std::vector<std::pair<int32_t, uint32_t>>& out) const;
  Cache& thread_cache() const;

  StringMap<int32_t> vocab_;              // byte-level token string -> id
  std::vector<std::string> id_to_token_;  // id -> token string ("" for holes)
  std::vector<bool> has_id_;
  StringMap<int32_t> bytes_to_id_;  // raw bytes of every byte-level token -> id
  int32_t byte_ids_[256];           // byte-level: the token of each byte; else <0xNN> or -1
  MergeTable merges_;
  bool byte_level_;
  bool ignore_merges_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  int32_t unk_id_ = -1;  // -1: no unk_token
  uint64_t cache_key_;
};

}  // namespace tandem
