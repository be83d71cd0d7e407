// The native tokenizer.json implementation against HF `tokenizers`: ids, offsets and decodes of a
// fixed text set on real tokenizer files (Qwen2, Anthropic's legacy byte-level BPE), a trained
// tiny one, SentencePiece-style files laid out as Llama-2's, Mistral's (v0.1, v0.3) and Gemma's
// and patched variants (tools/make_tokenizer_fixtures.py); Unicode classes against HF's regex
// engine; errors; the CLI.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "tandem/core/error.h"
#include "tandem/text/normalizer.h"
#include "tandem/text/regex.h"
#include "tandem/text/token_decoder.h"
#include "tandem/text/tokenizer.h"
#include "tandem/text/utf8.h"
#include "test_util.h"

namespace {

using tandem::testing::error_of;

using nlohmann::json;
using tandem::Tokenizer;
using tandem::testing::ScratchDir;
using tandem::testing::source_path;

std::string fixture_dir() { return source_path("tests/fixtures/tokenizers"); }

json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return json::parse(in);
}

// The parsed tokenizer.json of a real or generated fixture, or of a variant (a merge patch on one).
const json& fixture_config(const std::string& name) {
  static std::map<std::string, json> cache;
  if (auto it = cache.find(name); it != cache.end()) return it->second;
  const std::string file = fixture_dir() + "/" + name + "/tokenizer.json";
  json config;
  if (std::ifstream(file).good()) {
    config = read_json(file);
  } else {
    const json variants = read_json(fixture_dir() + "/variants.json");
    const json& variant = variants.at(name);
    config = fixture_config(variant.at("base").get<std::string>());
    config.merge_patch(variant.at("patch"));
  }
  return cache.emplace(name, std::move(config)).first->second;
}

const Tokenizer& fixture(const std::string& name) {
  static std::map<std::string, Tokenizer> cache;
  if (auto it = cache.find(name); it != cache.end()) return it->second;
  return cache.emplace(name, Tokenizer::from_json(fixture_config(name), name)).first->second;
}

std::string printable(const std::string& text) {
  return json(text).dump();  // escaped, valid on any terminal
}

std::vector<std::pair<size_t, size_t>> offsets_of(const json& list) {
  std::vector<std::pair<size_t, size_t>> out;
  for (const json& pair : list) out.emplace_back(pair[0].get<size_t>(), pair[1].get<size_t>());
  return out;
}

// ---------------------------------------------------------------------------------------------
// Parity with HF tokenizers

class Parity : public ::testing::TestWithParam<std::string> {};

// GetParam() names an expected/*.json file; "NAME-unicode" holds random normalization strings for
// tokenizer NAME.
TEST_P(Parity, IdsOffsetsAndDecodeMatchHuggingFace) {
  const std::string stem = GetParam();
  const json expected = read_json(fixture_dir() + "/expected/" + stem + ".json");
  const std::string name = expected.at("fixture").get<std::string>();
  const Tokenizer& tokenizer = fixture(name);
  ASSERT_GT(expected.at("cases").size(), 50u);
  for (const json& c : expected.at("cases")) {
    const std::string text = c.at("text").get<std::string>();
    SCOPED_TRACE(name + " text " + printable(text));
    const auto ids = c.at("ids").get<std::vector<int32_t>>();
    const auto ids_special = c.at("ids_special").get<std::vector<int32_t>>();
    EXPECT_EQ(tokenizer.encode(text), ids);
    EXPECT_EQ(tokenizer.encode(text, true), ids_special);
    const tandem::Encoding plain = tokenizer.encode_with_offsets(text);
    EXPECT_EQ(plain.ids, ids);
    EXPECT_EQ(plain.offsets, offsets_of(c.at("offsets")));
    const tandem::Encoding special = tokenizer.encode_with_offsets(text, true);
    EXPECT_EQ(special.ids, ids_special);
    EXPECT_EQ(special.offsets, offsets_of(c.at("offsets_special")));
    EXPECT_EQ(tokenizer.decode(ids), c.at("decoded").get<std::string>());
    EXPECT_EQ(tokenizer.decode(ids_special, true),
              c.at("decoded_special_skipped").get<std::string>());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Tokenizers, Parity,
    ::testing::Values("qwen2", "anthropic", "qwen2-unicode", "anthropic-unicode", "tiny",
                      "qwen2-llama3", "anthropic-added", "qwen2-nfkc-specials",
                      "tiny-split-removed", "tiny-split-merged-previous", "tiny-split-merged-next",
                      "tiny-split-contiguous-invert", "tiny-split-removed-invert", "llama2",
                      "mistral-v0.1", "mistral-v0.3", "gemma", "mistral-v0.3-metaspace-decoder",
                      "llama2-metaspace-split", "llama2-metaspace-never", "llama2-unk-fused",
                      "llama2-unk-unfused", "gemma-regex-replace"),
    [](const ::testing::TestParamInfo<std::string>& info) {
      std::string name = info.param;
      for (char& c : name)
        if (c == '-' || c == '.') c = '_';
      return name;
    });

// Without Removed splits or stripping added tokens nothing is lost: decode(encode(x)) is x after
// the tokenizer's normalizer, for every text (special tokens included, which decode as themselves).
TEST(Tokenizer, DecodeInvertsEncode) {
  const json texts = read_json(fixture_dir() + "/texts.json");
  const std::vector<std::pair<const char*, std::optional<tandem::NormalForm>>> tokenizers = {
      {"qwen2", tandem::NormalForm::kNFC},
      {"anthropic", tandem::NormalForm::kNFKC},
      {"qwen2-llama3", std::nullopt}};
  for (const auto& [name, form] : tokenizers) {
    const Tokenizer& tokenizer = fixture(name);
    for (const json& t : texts) {
      const std::string text = t.get<std::string>();
      const std::string normalized = form ? tandem::normalize_string(*form, text) : text;
      EXPECT_EQ(tokenizer.decode(tokenizer.encode(text)), normalized)
          << name << " " << printable(text);
      EXPECT_EQ(tokenizer.decode(tokenizer.encode(text, true)),
                std::string(name) == "qwen2-llama3" ? "<|endoftext|>" + text : normalized)
          << name << " " << printable(text);
    }
  }
}

// ByteFallback and Strip on hand-made token lists: a run of byte pieces that is valid UTF-8
// becomes its text; an invalid run one U+FFFD per byte (valid bytes in it included), as HF 0.23.
TEST(TokenizerDecoders, ByteFallbackAndStripByHand) {
  const tandem::TokenDecoder decoder(
      json::parse(R"({"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"},
                     {"type": "Strip", "content": " ", "start": 2, "stop": 1}]})"),
      "hand");
  EXPECT_EQ(decoder.decode({"<0x20>", "<0xE2>", "<0x98>", "<0x83>", "a "}), "\u2603a");
  EXPECT_EQ(decoder.decode({"x", "<0xE2>", "<0x98>", "b", "<0x41>"}), "x\ufffd\ufffdbA");
  EXPECT_EQ(decoder.decode({"<0x4>", "<0xzz>", "<0x+A>"}), "<0x4><0xzz>\n");
  EXPECT_EQ(tandem::byte_fallback_value("<0x0A>"), 10);
  EXPECT_EQ(tandem::byte_fallback_value("<0x0a>"), 10);
  EXPECT_EQ(tandem::byte_fallback_value("<0x0A"), -1);
  // Metaspace's legacy spelling: add_prefix_space with prepend_scheme never keeps every space.
  const tandem::TokenDecoder legacy(
      json::parse(R"({"type": "Metaspace", "replacement": "_", "add_prefix_space": false,
                     "prepend_scheme": "never"})"),
      "hand");
  EXPECT_EQ(legacy.decode({"_a_b", "_c"}), " a b c");
  const tandem::TokenDecoder null_decoder(json(), "hand");
  EXPECT_EQ(null_decoder.decode({"a", "b"}), "a b");
}

// Pair-form merges ([["a","b"]]) and legacy ones ("a b") are the same model.
TEST(Tokenizer, LegacyAndPairMergesAgree) {
  json legacy = fixture_config("tiny");
  ASSERT_TRUE(legacy["model"]["merges"][0].is_array());
  for (json& merge : legacy["model"]["merges"])
    merge = merge[0].get<std::string>() + " " + merge[1].get<std::string>();
  const Tokenizer from_legacy = Tokenizer::from_json(legacy, "tiny-legacy");
  const json texts = read_json(fixture_dir() + "/texts.json");
  for (const json& t : texts)
    EXPECT_EQ(from_legacy.encode(t.get<std::string>()),
              fixture("tiny").encode(t.get<std::string>()));
}

TEST(Tokenizer, VocabularyQueries) {
  const Tokenizer& qwen = fixture("qwen2");
  EXPECT_EQ(qwen.vocab_size(), 151646);
  EXPECT_EQ(qwen.token_to_id("<|im_start|>"), 151644);
  EXPECT_EQ(qwen.token_to_id("Hello"), 9707);
  EXPECT_EQ(qwen.token_to_id("no such token here"), std::nullopt);
  EXPECT_EQ(qwen.id_to_token(151645), "<|im_end|>");
  EXPECT_EQ(qwen.id_to_token(9707), "Hello");
  EXPECT_EQ(qwen.id_to_token(220), "\xC4\xA0");  // 'Ġ', the byte-level space
  EXPECT_THROW(qwen.id_to_token(151646), tandem::Error);
  EXPECT_THROW(qwen.id_to_token(-1), tandem::Error);
  EXPECT_TRUE(qwen.is_special(151643));
  EXPECT_FALSE(qwen.is_special(9707));
  ASSERT_EQ(qwen.added_tokens().size(), 3u);
  EXPECT_EQ(qwen.added_tokens()[1].content, "<|im_start|>");
  EXPECT_TRUE(qwen.added_tokens()[1].special);
  EXPECT_EQ(qwen.path(), "qwen2");

  // New added tokens get ids after the vocabulary, as HF assigns them.
  const Tokenizer& added = fixture("anthropic-added");
  EXPECT_EQ(added.token_to_id("<mask>"), 65000);
  EXPECT_EQ(added.id_to_token(*added.token_to_id("\xEF\xAC\x81x")), "fix");  // NFKC form
  EXPECT_FALSE(added.is_special(*added.token_to_id("word")));
}

TEST(Tokenizer, LoadsFromFileAndDirectory) {
  const std::string dir = fixture_dir() + "/tiny";
  const Tokenizer from_dir = Tokenizer::from_dir(dir);
  EXPECT_EQ(from_dir.path(), dir + "/tokenizer.json");
  EXPECT_EQ(Tokenizer::from_file(dir + "/tokenizer.json").encode("Hello there"),
            from_dir.encode("Hello there"));
}

TEST(Tokenizer, LongRunsAndManyThreads) {
  const Tokenizer& qwen = fixture("qwen2");
  // A megabyte of spaces exercises the regex engine's stack (\s+(?!\S) backtracks over it).
  const std::string spaces(1 << 20, ' ');
  EXPECT_EQ(qwen.decode(qwen.encode(spaces + "x")), spaces + "x");
  std::string mixed;
  for (int i = 0; i < 2000; ++i)
    mixed += "word" + std::to_string(i) + " \xE4\xB8\x96\xE7\x95\x8C\n";
  const auto expected = qwen.encode(mixed);
  std::vector<std::vector<int32_t>> results(4);
  std::vector<std::thread> threads;
  for (auto& result : results) threads.emplace_back([&] { result = qwen.encode(mixed); });
  for (auto& thread : threads) thread.join();
  for (const auto& result : results) EXPECT_EQ(result, expected);
}

// ---------------------------------------------------------------------------------------------
// Unicode classes: PCRE2 with tandem's widening matches exactly what HF's Oniguruma matches.

TEST(Tokenizer, RegexClassesMatchHuggingFaceRegexEngine) {
  const json classes = read_json(fixture_dir() + "/unicode_classes.json").at("classes");
  std::string all;
  std::vector<size_t> offsets;  // byte offset of each code point in `all`
  std::vector<char32_t> code_points;
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp < 0xE000) continue;
    offsets.push_back(all.size());
    code_points.push_back(cp);
    tandem::utf8::append(all, cp);
  }
  for (const auto& [pattern, ranges] : classes.items()) {
    std::set<char32_t> expected;
    for (const json& range : ranges)
      for (char32_t cp = range[0].get<char32_t>(); cp <= range[1].get<char32_t>(); ++cp)
        expected.insert(cp);
    const tandem::Regex regex(pattern, false, "test");
    std::vector<tandem::Match> matches;
    regex.find_all(all, matches);
    std::set<char32_t> actual;
    for (const auto& [begin, end] : matches) {
      auto it = std::lower_bound(offsets.begin(), offsets.end(), begin);
      for (; it != offsets.end() && *it < end; ++it)
        actual.insert(code_points[it - offsets.begin()]);
    }
    std::vector<char32_t> missing, extra;
    std::set_difference(expected.begin(), expected.end(), actual.begin(), actual.end(),
                        std::back_inserter(missing));
    std::set_difference(actual.begin(), actual.end(), expected.begin(), expected.end(),
                        std::back_inserter(extra));
    EXPECT_TRUE(missing.empty()) << pattern << ": " << missing.size() << " missing, first U+"
                                 << std::hex << (missing.empty() ? 0 : missing[0]);
    EXPECT_TRUE(extra.empty()) << pattern << ": " << extra.size() << " extra, first U+" << std::hex
                               << (extra.empty() ? 0 : extra[0]);
  }
}

// ---------------------------------------------------------------------------------------------
// Errors

std::string patched_error(const json& patch) {
  json config = fixture_config("tiny");
  config.merge_patch(patch);
  return error_of([&] { Tokenizer::from_json(config, "patched.json"); });
}

// A pre_tokenizer nesting Sequence tens of thousands deep used to overflow the stack while the
// JSON was copied: it is refused while parsing, naming the file.
TEST(TokenizerErrors, DeepNestingIsAnErrorNotACrash) {
  ScratchDir dir;
  std::string nested;
  for (int i = 0; i < 50000; ++i) nested += R"({"type": "Sequence", "pretokenizers": [)";
  nested += "{}";
  for (int i = 0; i < 50000; ++i) nested += "]}";
  std::ofstream(dir / "tokenizer.json")
      << R"({"model": {"type": "BPE"}, "pre_tokenizer": )" << nested << "}";
  const std::string message = error_of([&] { Tokenizer::from_dir(dir.path()); });
  EXPECT_NE(message.find("[tokenizer] " + (dir / "tokenizer.json") +
                         ": not valid JSON: nests deeper than 64 levels"),
            std::string::npos)
      << message.substr(0, 300);
}

TEST(TokenizerErrors, MalformedJsonNamesTheFile) {
  ScratchDir dir;
  std::ofstream(dir / "tokenizer.json") << "{\"model\": {\"type\": \"BPE\", ";
  const std::string message = error_of([&] { Tokenizer::from_dir(dir.path()); });
  EXPECT_NE(message.find("[tokenizer] " + (dir / "tokenizer.json") + ": not valid JSON"),
            std::string::npos)
      << message;
  EXPECT_NE(error_of([&] { Tokenizer::from_dir(dir / "missing"); }).find("no tokenizer.json"),
            std::string::npos);
}

TEST(TokenizerErrors, UnsupportedComponentsAreNamed) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {R"({"model": {"type": "WordPiece"}})", "model.type 'WordPiece' is not supported"},
      {R"({"model": {"type": "Unigram"}})",
       "model.type 'Unigram' is not supported (only BPE is: SentencePiece Unigram models"},
      {R"({"model": {"byte_fallback": true}})",
       "model.byte_fallback is true after a ByteLevel pre-tokenizer"},
      {R"({"pre_tokenizer": {"type": "Metaspace", "replacement": "_", "split": false},
          "model": {"unk_token": "<nope>"}})",
       "model.unk_token '<nope>' is not in the vocab"},
      {R"({"model": {"dropout": 0.25}})", "model.dropout = 0.25 is not supported"},
      {R"({"model": {"continuing_subword_prefix": "##"}})", "model.continuing_subword_prefix"},
      {R"({"model": {"end_of_word_suffix": "</w>"}})", "model.end_of_word_suffix"},
      {R"({"pre_tokenizer": {"type": "Metaspace", "replacement": "_", "prepend_scheme": "x"}})",
       "pre_tokenizer.prepend_scheme is \"x\", not \"always\", \"first\" or \"never\""},
      {R"({"pre_tokenizer": {"type": "Metaspace", "replacement": "_", "add_prefix_space": false}})",
       "pre_tokenizer.add_prefix_space (false) does not match prepend_scheme"},
      {R"({"pre_tokenizer": {"type": "Metaspace", "replacement": "ab"}})",
       "pre_tokenizer.replacement must be one character"},
      {R"({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Whitespace"}]}})",
       "pre_tokenizer.pretokenizers[0]: pre-tokenizer type 'Whitespace' is not supported"},
      {R"({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
          {"type": "Split", "pattern": {"Regex": "("}, "behavior": "Isolated"},
          {"type": "ByteLevel"}]}})",
       "pattern '(' does not compile"},
      {R"({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
          {"type": "Metaspace", "replacement": "_"},
          {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Isolated"}]}})",
       "pre_tokenizer.pretokenizers[1] (Split) comes after Metaspace"},
      {R"({"normalizer": {"type": "Lowercase"}})", "normalizer type 'Lowercase' is not supported"},
      {R"({"normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend",
          "prepend": "_"}, {"type": "Precompiled", "precompiled_charsmap": "AA"}]}})",
       "normalizer.normalizers[1]: normalizer type 'Precompiled' is not supported"},
      {R"({"normalizer": {"type": "Replace", "pattern": {"String": ""}, "content": "_"}})",
       "normalizer.pattern.String is empty"},
      {R"({"decoder": {"type": "WordPiece"}})", "decoder type 'WordPiece' is not supported"},
      {R"({"decoder": {"type": "Strip", "content": "ab", "start": 1}})",
       "decoder.content must be one character"},
      {R"({"decoder": {"type": "Metaspace", "replacement": "_", "add_prefix_space": false}})",
       "decoder.add_prefix_space (false) does not match prepend_scheme"},
      {R"({"decoder": {"type": "Metaspace", "replacement": "_", "prepend_scheme": 3}})",
       "decoder.prepend_scheme is 3, not \"always\", \"first\" or \"never\""},
      {R"({"post_processor": {"type": "BertProcessing"}})",
       "post-processor type 'BertProcessing' is not supported"},
      {R"({"truncation": {"max_length": 8}})", "truncation is set"},
  };
  for (const auto& [patch, expected] : cases) {
    const std::string message = patched_error(json::parse(patch));
    EXPECT_NE(message.find("[tokenizer] patched.json: "), std::string::npos) << message;
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  }
}

TEST(TokenizerErrors, MergesMustReferToVocabTokens) {
  json config = fixture_config("tiny");
  config["model"]["merges"].push_back(json::array({"zzz-not-a-token", "a"}));
  const std::string message = error_of([&] { Tokenizer::from_json(config, "bad-merges.json"); });
  EXPECT_NE(message.find("bad-merges.json: model.merges["), std::string::npos) << message;
  EXPECT_NE(message.find("'zzz-not-a-token', which is not in the vocab"), std::string::npos)
      << message;
  config = fixture_config("tiny");
  config["model"]["merges"].push_back("a b c");
  EXPECT_NE(error_of([&] { Tokenizer::from_json(config, "x"); }).find("not two tokens"),
            std::string::npos);
}

// The id table is sized from the largest vocab id: a sparse id is refused before it allocates
// (3e8 used to take 9.8 GB; 2^31 - 1 overflowed max_id + 1), naming the file.
TEST(TokenizerErrors, AVocabIdFarAboveTheVocabularyIsRefused) {
  for (const int64_t id : {int64_t{300000000}, int64_t{2147483647}, int64_t{16777216}}) {
    json config = fixture_config("tiny");
    config["model"]["vocab"]["zzz-far-away"] = id;
    const std::string message = error_of([&] { Tokenizer::from_json(config, "sparse.json"); });
    EXPECT_NE(message.find("sparse.json: model.vocab: the largest id is " + std::to_string(id)),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("the id table would be mostly empty"), std::string::npos) << message;
  }
}

TEST(TokenizerErrors, InvalidUtf8InputNamesTheByteOffset) {
  const Tokenizer& tokenizer = fixture("tiny");
  for (const auto& [text, offset] :
       std::vector<std::pair<std::string, size_t>>{{"abc\xFF", 3},
                                                   {"\xC3", 0},
                                                   {"ok \xE2\x82", 3},
                                                   {"\xED\xA0\x80", 0},
                                                   {"\xC0\xAF", 0},
                                                   {"a\xF4\x90\x80\x80", 1}}) {
    const std::string message = error_of([&] { tokenizer.encode(text); });
    EXPECT_NE(message.find("not valid UTF-8 (byte offset " + std::to_string(offset) + ")"),
              std::string::npos)
        << message;
  }
}

TEST(TokenizerErrors, DecodeRejectsUnknownIds) {
  const Tokenizer& tokenizer = fixture("qwen2");
  const std::string message = error_of([&] { tokenizer.decode({9707, 151646}); });
  EXPECT_NE(message.find("[tokenizer] qwen2: cannot decode id 151646"), std::string::npos)
      << message;
  EXPECT_THROW(tokenizer.decode({-5}), tandem::Error);
  // Partial UTF-8 from a lone byte token decodes to U+FFFD, as in HF.
  EXPECT_EQ(tokenizer.decode({*tokenizer.token_to_id("\xC3\xA5")}), "\xEF\xBF\xBD");
}

// ---------------------------------------------------------------------------------------------
// CLI

TEST(TokenizeCli, EncodesAndDecodes) {
  using tandem::testing::run_command;
  using tandem::testing::tandem_binary;
  if (!std::filesystem::exists(tandem_binary())) GTEST_SKIP() << "no tandem binary in this build";
  const std::string dir = fixture_dir() + "/qwen2";
  auto result = run_command(tandem_binary() + " tokenize --tokenizer " + dir +
                            " --text 'Hello world<|im_end|>' --json");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const json out = json::parse(result.output);
  EXPECT_EQ(out.at("ids"), json(fixture("qwen2").encode("Hello world<|im_end|>")));
  result = run_command(tandem_binary() + " tokenize --tokenizer " + dir + " --decode 9707,1879");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(result.output, "Hello world\n");
  result = run_command(tandem_binary() + " tokenize --tokenizer " + dir + " --decode 999999999");
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("cannot decode id 999999999"), std::string::npos) << result.output;
}
}  // namespace
