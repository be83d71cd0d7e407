#include "tandem/text/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "tandem/core/error.h"
#include "tandem/core/json_parse.h"
#include "tandem/text/added_vocabulary.h"
#include "tandem/text/bpe.h"
#include "tandem/text/component_config.h"
#include "tandem/text/normalizer_sequence.h"
#include "tandem/text/pre_tokenizer.h"
#include "tandem/text/segment.h"
#include "tandem/text/token_decoder.h"
#include "tandem/text/utf8.h"

namespace tandem {

namespace {

using nlohmann::json;

bool json_flag(const json& object, const char* field, bool fallback, const std::string& where) {
  if (!object.contains(field) || object[field].is_null()) return fallback;
  check(object[field].is_boolean(), where, ".", field, " must be a boolean");
  return object[field].get<bool>();
}

// Leading and trailing chars of a token string that HF's ByteLevel offset trimming counts:
// 'Ġ' (the byte-level space) or Unicode whitespace.
using EdgeSpaces = std::pair<uint32_t, uint32_t>;

EdgeSpaces count_edge_spaces(std::string_view token) {
  auto is_space = [](char32_t cp) { return cp == 0x120 || utf8::is_whitespace(cp); };
  std::vector<char32_t> chars;
  for (size_t pos = 0; pos < token.size();) chars.push_back(utf8::next(token, pos));
  size_t leading = 0, trailing = 0;
  while (leading < chars.size() && is_space(chars[leading])) ++leading;
  while (trailing < chars.size() && is_space(chars[chars.size() - 1 - trailing])) ++trailing;
  return {static_cast<uint32_t>(leading), static_cast<uint32_t>(trailing)};
}

// Tokens before post-processing, with what the post-processor needs.
struct TokenStream {
  bool want_offsets = false;
  bool want_spaces = false;
  std::vector<int32_t> ids;
  std::vector<std::pair<size_t, size_t>> offsets;
  std::vector<EdgeSpaces> spaces;  // see count_edge_spaces

  void add(int32_t id, std::pair<size_t, size_t> offset, EdgeSpaces edge) {
    ids.push_back(id);
    if (want_offsets) offsets.push_back(offset);
    if (want_spaces) spaces.push_back(edge);
  }
};

struct TemplatePiece {
  bool is_sequence;
  std::vector<int32_t> ids;         // special token ids
  std::vector<std::string> tokens;  // their strings
};

struct PostStep {
  enum Kind { kByteLevel, kTemplate } kind;
  bool trim_offsets = false;
  bool add_prefix_space = false;
  std::vector<TemplatePiece> single;
};

}  // namespace

struct Tokenizer::Impl {
  std::string path;
  NormalizerSequence normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<BpeModel> model;

  std::vector<AddedToken> added;  // by increasing id, as HF resolved them
  std::unordered_map<int32_t, size_t> added_by_id;
  StringMap<int32_t> added_by_content;
  std::unordered_map<int32_t, std::string> added_text;  // id -> normalized content when it differs
  std::unordered_set<std::string, StringHash, std::equal_to<>> special_contents;
  AddedTokenMatcher raw_matcher, normalized_matcher;

  std::vector<PostStep> post_steps;
  bool trims = false;                  // some ByteLevel post step trims offsets
  std::vector<EdgeSpaces> edge_table;  // per id, filled when `trims`
  std::unique_ptr<TokenDecoder> decoder;

  std::string where(const std::string& field) const { return "[tokenizer] " + path + ": " + field; }

  void load(const json& config);
  void load_added_tokens(const json& config);
  void load_post_processor(const json& config, const std::string& field);

  const std::string* token_string(int32_t id) const;
  EdgeSpaces edge_spaces(int32_t id) const;
  void encode(std::string_view text, bool add_special_tokens, TokenStream& stream) const;
  void encode_gap(std::string_view text, size_t begin, size_t end, TokenStream& stream) const;
  void encode_words(const Segment& segment, TokenStream& stream) const;
  void encode_piece(const Segment& piece, std::string_view word_text, size_t word_begin,
                    TokenStream& stream) const;
  void post_process(std::string_view text, bool add_special_tokens, TokenStream& stream) const;
};

// ---------------------------------------------------------------------------------------------
// Loading

void Tokenizer::Impl::load(const json& config) {
  check(config.is_object(), where("the top level must be a JSON object"));
  if (config.contains("version") && !config["version"].is_null())
    check(config["version"] == "1.0", where("version "), config["version"].dump(), " is not 1.0");
  for (const char* field : {"truncation", "padding"})
    check(!config.contains(field) || config[field].is_null(), where(field),
          " is set; tandem does not implement truncation or padding in the tokenizer (set it to "
          "null)");
  check(config.contains("model"), where("model is missing"));
  normalizer = NormalizerSequence(config.value("normalizer", json()), where("normalizer"));
  pre_tokenizer =
      std::make_unique<PreTokenizer>(config.value("pre_tokenizer", json()), where("pre_tokenizer"));
  model = std::make_unique<BpeModel>(config["model"], where("model"), pre_tokenizer->byte_level());
  load_added_tokens(config.value("added_tokens", json::array()));
  load_post_processor(config.value("post_processor", json()), "post_processor");
  decoder = std::make_unique<TokenDecoder>(config.value("decoder", json()), where("decoder"));
  if (trims) {
    int64_t size = model->max_id() + 1;
    for (const AddedToken& token : added) size = std::max<int64_t>(size, token.id + int64_t{1});
    edge_table.resize(static_cast<size_t>(size));
    for (int32_t id = 0; id < static_cast<int32_t>(size); ++id)
      if (const std::string* token = token_string(id)) edge_table[id] = count_edge_spaces(*token);
  }
}

void Tokenizer::Impl::load_added_tokens(const json& config) {
  check(config.is_array(), where("added_tokens must be an array"));
  // HF's AddedVocabulary::add_tokens: a token already in the vocab keeps that id; others get ids
  // from the model's vocab size on (the file's `id` is only checked, not used).
  std::map<int32_t, AddedToken> by_id;
  int32_t next_id = static_cast<int32_t>(model->size());
  for (size_t i = 0; i < config.size(); ++i) {
    const json& entry = config[i];
    const std::string field = "added_tokens[" + std::to_string(i) + "]";
    check(entry.is_object() && entry.contains("content") && entry["content"].is_string(),
          where(field), " must be an object with a string 'content'");
    AddedToken token;
    token.content = entry["content"].get<std::string>();
    token.special = json_flag(entry, "special", false, where(field));
    token.lstrip = json_flag(entry, "lstrip", false, where(field));
    token.rstrip = json_flag(entry, "rstrip", false, where(field));
    token.single_word = json_flag(entry, "single_word", false, where(field));
    token.normalized = json_flag(entry, "normalized", !token.special, where(field));
    if (token.content.empty()) continue;
    const auto known = added_by_content.find(token.content);
    if (known != added_by_content.end()) {
      token.id = known->second;
    } else if (auto id = model->token_to_id(token.content)) {
      token.id = *id;
    } else {
      token.id = next_id++;
    }
    added_by_content[token.content] = token.id;
    if (token.special) special_contents.insert(token.content);
    by_id[token.id] = token;
  }

  std::vector<const AddedToken*> raw_tokens, normalized_tokens;
  std::vector<std::string> raw_patterns, normalized_patterns;
  for (auto& [id, token] : by_id) {
    added_by_id[id] = added.size();
    added.push_back(token);
  }
  for (const AddedToken& token : added) {
    if (token.normalized) {
      std::string pattern = normalizer.apply(token.content);
      if (pattern != token.content) added_text[token.id] = pattern;
      normalized_tokens.push_back(&token);
      normalized_patterns.push_back(std::move(pattern));
    } else {
      raw_tokens.push_back(&token);
      raw_patterns.push_back(token.content);
    }
  }
  if (!raw_tokens.empty()) raw_matcher = AddedTokenMatcher(raw_tokens, raw_patterns);
  if (!normalized_tokens.empty())
    normalized_matcher = AddedTokenMatcher(normalized_tokens, normalized_patterns);
}

void Tokenizer::Impl::load_post_processor(const json& config, const std::string& field) {
  if (config.is_null()) return;
  const std::string type = component_type(config);
  if (type == "Sequence") {
    check(config.contains("processors") && config["processors"].is_array(),
          where(field + ".processors must be an array"));
    for (size_t i = 0; i < config["processors"].size(); ++i)
      load_post_processor(config["processors"][i],
                          field + ".processors[" + std::to_string(i) + "]");
    return;
  }
  PostStep step;
  if (type == "ByteLevel") {
    step.kind = PostStep::kByteLevel;
    step.trim_offsets = json_flag(config, "trim_offsets", true, where(field));
    step.add_prefix_space = json_flag(config, "add_prefix_space", true, where(field));
    trims = trims || step.trim_offsets;
  } else if (type == "TemplateProcessing") {
    step.kind = PostStep::kTemplate;
    check(config.contains("single") && config["single"].is_array(),
          where(field + ".single must be an array"));
    const json specials = config.value("special_tokens", json::object());
    for (const json& piece : config["single"]) {
      TemplatePiece out;
      if (piece.contains("Sequence")) {
        const std::string id = piece["Sequence"].value("id", std::string("A"));
        check(id == "A", where(field), ".single refers to sequence '", id,
              "': a single-sequence template can only hold A");
        out.is_sequence = true;
      } else if (piece.contains("SpecialToken")) {
        const std::string name = piece["SpecialToken"].value("id", std::string());
        check(specials.contains(name), where(field), ".single uses special token '", name,
              "', which is not in special_tokens");
        const json& special = specials[name];
        check(special.contains("ids") && special["ids"].is_array(), where(field),
              ".special_tokens['", name, "'].ids must be an array");
        out.is_sequence = false;
        out.ids = special["ids"].get<std::vector<int32_t>>();
        out.tokens = special.value("tokens", std::vector<std::string>(out.ids.size(), name));
        check(out.tokens.size() == out.ids.size(), where(field), ".special_tokens['", name,
              "']: ids and tokens differ in length");
      } else {
        throw Error(where(field), ".single: piece ", piece.dump(),
                    " is neither {\"Sequence\": ...} nor {\"SpecialToken\": ...}");
      }
      step.single.push_back(std::move(out));
    }
  } else {
    throw Error(where(field), ": post-processor type '", type,
                "' is not supported (supported: ByteLevel, TemplateProcessing, Sequence)");
  }
  post_steps.push_back(std::move(step));
}

// ---------------------------------------------------------------------------------------------
// Encoding

const std::string* Tokenizer::Impl::token_string(int32_t id) const {
  if (const auto it = added_text.find(id); it != added_text.end()) return &it->second;
  if (const auto it = added_by_id.find(id); it != added_by_id.end())
    return &added[it->second].content;
  return model->id_to_token(id);
}

EdgeSpaces Tokenizer::Impl::edge_spaces(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < edge_table.size() ? edge_table[id] : EdgeSpaces{};
}

void Tokenizer::Impl::encode(std::string_view text, bool add_special_tokens,
                             TokenStream& stream) const {
  if (const auto bad = utf8::find_invalid(text))
    throw Error("[tokenizer] ", path, ": input text is not valid UTF-8 (byte offset ", *bad, ")");
  // HF AddedVocabulary::extract_and_normalize, first pass: tokens matched on the raw text.
  std::vector<AddedMatch> matches;
  raw_matcher.find(text, matches);
  size_t position = 0;
  for (const AddedMatch& m : matches) {
    if (position < m.begin) encode_gap(text, position, m.begin, stream);
    stream.add(m.id, {m.begin, m.end},
               stream.want_spaces ? count_edge_spaces(text.substr(m.begin, m.end - m.begin))
                                  : EdgeSpaces{});
    position = m.end;
  }
  if (position < text.size()) encode_gap(text, position, text.size(), stream);
  post_process(text, add_special_tokens, stream);
}

void Tokenizer::Impl::encode_gap(std::string_view text, size_t begin, size_t end,
                                 TokenStream& stream) const {
  AlignedText normalized;
  const Segment segment =
      normalizer.apply(Segment{text.substr(begin, end - begin), nullptr, begin}, normalized);
  // Second pass: tokens matched on the normalized text.
  std::vector<AddedMatch> matches;
  normalized_matcher.find(segment.text, matches);
  size_t position = 0;
  for (const AddedMatch& m : matches) {
    if (position < m.begin) encode_words(segment.sub(position, m.begin), stream);
    const std::string_view value = segment.text.substr(m.begin, m.end - m.begin);
    stream.add(m.id, segment.input_range(m.begin, m.end),
               stream.want_spaces ? count_edge_spaces(value) : EdgeSpaces{});
    position = m.end;
  }
  if (position < segment.text.size())
    encode_words(segment.sub(position, segment.text.size()), stream);
}

void Tokenizer::Impl::encode_words(const Segment& segment, TokenStream& stream) const {
  std::vector<Match> pieces, words;
  pre_tokenizer->split(segment.text, pieces);
  AlignedText edited;
  for (const auto& [piece_begin, piece_end] : pieces) {
    if (piece_begin == piece_end) continue;
    Segment piece = segment.sub(piece_begin, piece_end);
    words.clear();
    if (pre_tokenizer->metaspace()) {
      piece = pre_tokenizer->apply_metaspace(piece, edited, words);
    } else if (pre_tokenizer->byte_level()) {
      if (pre_tokenizer->add_prefix_space() && piece.text[0] != ' ') {
        prepend_aligned(piece, " ", edited);  // HF: the space takes the first character's place
        piece = Segment::of(edited, piece.origin);
      }
      pre_tokenizer->split_byte_level(piece.text, words);
    } else {
      words.emplace_back(0, piece.text.size());  // no pre-tokenizer step: the piece is the word
    }
    for (const auto& [word_begin, word_end] : words)
      encode_piece(piece, piece.text.substr(word_begin, word_end - word_begin), word_begin, stream);
  }
}

// The model's tokens of one word (bytes [word_begin, +word_text.size()) of `piece`).
void Tokenizer::Impl::encode_piece(const Segment& piece, std::string_view word_text,
                                   size_t word_begin, TokenStream& stream) const {
  thread_local std::vector<uint32_t> lengths;
  const size_t first = stream.ids.size();
  lengths.clear();
  model->tokenize(word_text, stream.ids, stream.want_offsets ? &lengths : nullptr);
  if (stream.want_offsets) {
    size_t position = word_begin;
    for (uint32_t length : lengths) {
      stream.offsets.push_back(piece.input_range(position, position + length));
      position += length;
    }
  }
  if (stream.want_spaces)
    for (size_t i = first; i < stream.ids.size(); ++i)
      stream.spaces.push_back(edge_spaces(stream.ids[i]));
}

void Tokenizer::Impl::post_process(std::string_view text, bool add_special_tokens,
                                   TokenStream& stream) const {
  for (const PostStep& step : post_steps) {
    if (step.kind == PostStep::kByteLevel) {
      if (!step.trim_offsets || !stream.want_offsets) continue;
      // HF's process_offsets works on Python char offsets: move by characters of the input.
      for (size_t i = 0; i < stream.ids.size(); ++i) {
        auto& [begin, end] = stream.offsets[i];
        size_t leading = stream.spaces[i].first;
        const size_t trailing = stream.spaces[i].second;
        if (leading > 0) {
          if ((i == 0 || begin == 0) && step.add_prefix_space && leading == 1) leading = 0;
          for (size_t n = 0; n < leading && begin < end; ++n)
            begin += utf8::sequence_length(static_cast<unsigned char>(text[begin]));
          begin = std::min(begin, end);
        }
        if (trailing > 0) {
          size_t moved = end, n = 0;
          for (; n < trailing && moved > 0; ++n) {
            --moved;
            while (moved > 0 && utf8::is_continuation(static_cast<unsigned char>(text[moved])))
              --moved;
          }
          if (n == trailing) end = std::max(moved, begin);
        }
      }
      continue;
    }
    if (!add_special_tokens) continue;
    TokenStream out;
    out.want_offsets = stream.want_offsets;
    out.want_spaces = stream.want_spaces;
    for (const TemplatePiece& piece : step.single) {
      if (piece.is_sequence) {
        out.ids.insert(out.ids.end(), stream.ids.begin(), stream.ids.end());
        out.offsets.insert(out.offsets.end(), stream.offsets.begin(), stream.offsets.end());
        out.spaces.insert(out.spaces.end(), stream.spaces.begin(), stream.spaces.end());
        continue;
      }
      for (size_t k = 0; k < piece.ids.size(); ++k)
        out.add(piece.ids[k], {0, 0},
                out.want_spaces ? count_edge_spaces(piece.tokens[k]) : EdgeSpaces{});
    }
    stream = std::move(out);
  }
}

// ---------------------------------------------------------------------------------------------
// Public API

Tokenizer Tokenizer::from_json(const nlohmann::json& config, const std::string& origin) {
  auto impl = std::make_shared<Impl>();
  impl->path = origin;
  impl->load(config);
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_file(const std::string& tokenizer_json) {
  std::ifstream in(tokenizer_json, std::ios::binary);
  check(in.good(), "[tokenizer] ", tokenizer_json, ": cannot open the file");
  std::stringstream buffer;
  buffer << in.rdbuf();
  json config;
  try {
    config = parse_json_text(buffer.str());  // nesting bounded (core/json_parse.h)
  } catch (const JsonTextError& e) {
    throw Error("[tokenizer] ", tokenizer_json, ": not valid JSON: ", e.what());
  }
  return from_json(config, tokenizer_json);
}

Tokenizer Tokenizer::from_dir(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "tokenizer.json").string();
  check(std::filesystem::exists(path), "[tokenizer] ", dir,
        ": no tokenizer.json in this directory");
  return from_file(path);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  TokenStream stream;
  impl_->encode(text, add_special_tokens, stream);
  return std::move(stream.ids);
}

Encoding Tokenizer::encode_with_offsets(std::string_view text, bool add_special_tokens) const {
  TokenStream stream;
  stream.want_offsets = true;
  stream.want_spaces = impl_->trims;
  impl_->encode(text, add_special_tokens, stream);
  return Encoding{std::move(stream.ids), std::move(stream.offsets)};
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string* token = impl_->token_string(id);
    check(token != nullptr, "[tokenizer] ", impl_->path, ": cannot decode id ", id,
          ": not in the vocabulary (size ", vocab_size(), ")");
    if (skip_special_tokens && impl_->special_contents.count(*token)) continue;
    tokens.push_back(*token);
  }
  return impl_->decoder->decode(std::move(tokens));
}

int64_t Tokenizer::vocab_size() const {
  int64_t size = impl_->model->max_id() + 1;
  for (const AddedToken& token : impl_->added)
    size = std::max<int64_t>(size, token.id + int64_t{1});
  return size;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const auto it = impl_->added_by_content.find(token); it != impl_->added_by_content.end())
    return it->second;
  return impl_->model->token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  const std::string* token = impl_->token_string(id);
  check(token != nullptr, "[tokenizer] ", impl_->path, ": id ", id,
        " is not in the vocabulary (size ", vocab_size(), ")");
  return *token;
}

bool Tokenizer::is_special(int32_t id) const {
  const std::string* token = impl_->token_string(id);
  return token && impl_->special_contents.count(*token) > 0;
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }

const std::string& Tokenizer::path() const { return impl_->path; }

}  // namespace tandem
