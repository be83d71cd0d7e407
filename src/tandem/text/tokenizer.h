#pragma once
// Hugging Face tokenizer.json, native C++: encodes exactly as HF `tokenizers` 0.23 does (ids and
// offsets) and decodes as it does, checked on real and trained files (tests/fixtures/tokenizers).
//
// Two kinds of BPE file are supported. Byte-level (GPT-2, Llama-3, Qwen): pre_tokenizer Split
// steps (regex or literal, all five behaviours, invert) then one ByteLevel (add_prefix_space,
// use_regex), decoder ByteLevel. SentencePiece-style (Llama-2, Mistral, Gemma): no pre-tokenizer,
// Split steps, or Metaspace (replacement, prepend_scheme always/first/never, split); a BPE model
// with byte_fallback (<0xNN> pieces), unk_token and fuse_unk; decoders Replace, ByteFallback,
// Fuse, Strip, Metaspace. Both: model BPE (vocab; merges as ["a", "b"] or "a b"; ignore_merges;
// dropout, continuing_subword_prefix, end_of_word_suffix only when null/off/empty); added_tokens
// (special or not, lstrip, rstrip, single_word, normalized), matched before the model as HF does;
// normalizer null, NFC, NFKC (HF's Unicode 9.0 data, offsets aligned as HF aligns them), Prepend,
// Replace, or a Sequence of them; post_processor ByteLevel (trim_offsets), TemplateProcessing
// (single sequences) or a Sequence of them. Anything else (a Unigram or WordPiece model, other
// normalizers, pre-tokenizers or decoders) is refused at load with an error naming the component
// and its type, never encoded differently. truncation and padding must be null.
//
// Input text must be valid UTF-8: encode() throws an Error naming the byte offset of the first
// invalid sequence (HF's Python API only ever sees valid text, a Python str). Any valid code point
// is fine. Thread-safe: a Tokenizer can be shared; each thread keeps its own BPE cache.
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem {

/// An entry of tokenizer.json's `added_tokens` (matched in the text before the model runs).
struct AddedToken {
  int32_t id;
  std::string content;
  bool special, lstrip, rstrip, single_word, normalized;
};

struct Encoding {
  std::vector<int32_t> ids;
  /// Byte range [begin, end) of each token in the input text ((0, 0) for tokens the
  /// post-processor adds). HF's Python offsets are the same ranges counted in characters.
  std::vector<std::pair<size_t, size_t>> offsets;
};

class Tokenizer {
 public:
  /// Loads a tokenizer.json file.
  static Tokenizer from_file(const std::string& tokenizer_json);
  /// Loads dir/tokenizer.json.
  static Tokenizer from_dir(const std::string& dir);
  /// Builds from an already parsed tokenizer.json; `origin` names it in errors.
  static Tokenizer from_json(const nlohmann::json& config, const std::string& origin);

  /// Token ids of `text`; with `add_special_tokens` the post-processor's tokens too (e.g. BOS).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  /// Token ids and their byte offsets in `text`.
  Encoding encode_with_offsets(std::string_view text, bool add_special_tokens = false) const;
  /// Text of `ids` (invalid UTF-8 from partial byte sequences becomes U+FFFD, as in HF). Throws
  /// for ids that are not in the vocabulary.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  /// Max id + 1 over the vocabulary and the added tokens.
  int64_t vocab_size() const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  /// The token string of `id` (byte-level spelling for model tokens); throws when out of range.
  std::string id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  const std::vector<AddedToken>& added_tokens() const;
  /// The file (or origin) this tokenizer was loaded from.
  const std::string& path() const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace tandem
