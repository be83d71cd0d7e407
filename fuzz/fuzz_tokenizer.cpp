// libFuzzer target for tokenizer.json and the tokenizer built from it. The first byte picks the
// mode: 0, the rest is a tokenizer.json (loaded, then a fixed text encoded and decoded); 2, 3, 4,
// the rest is text for the SentencePiece-style fixtures (Llama-2, Mistral v0.3, Gemma layouts:
// normalizers, Metaspace, byte fallback, their decoders); else the rest is text for the demo
// tokenizer (data/demo/tokenizer, or $TANDEM_FUZZ_TOKENIZER). Valid UTF-8 must come back unchanged
// from encode + decode where the layout makes that exact: the demo's byte-level BPE, and the
// Llama-2 and Gemma layouts (whose byte fallback covers every character) without added tokens.
// A tandem::Error is the expected answer to bad input; anything else is a bug.
#include <cstdint>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "demo_tokenizer.h"
#include "tandem/core/error.h"
#include "tandem/core/json_parse.h"
#include "tandem/text/tokenizer.h"

namespace {

void round_trip(const tandem::Tokenizer& tokenizer, const std::string& text, bool must_match) {
  const std::vector<int32_t> ids = tokenizer.encode(text);
  for (int32_t id : ids)
    if (id < 0 || id >= tokenizer.vocab_size()) __builtin_trap();  // an id outside the vocab
  const std::string back = tokenizer.decode(ids);
  if (must_match && back != text) __builtin_trap();
}

const tandem::Tokenizer& fixture(const char* name) {
  static std::map<std::string, tandem::Tokenizer> loaded;
  auto it = loaded.find(name);
  if (it == loaded.end())
    it = loaded
             .emplace(name,
                      tandem::Tokenizer::from_dir(std::string("tests/fixtures/tokenizers/") + name))
             .first;
  return it->second;
}

// Exact round trips need no added token's text (they may match and decode differently: "<s>",
// "<bos>", the normalized "word") and no "▁" in the input (it decodes as a space).
bool exact_for_sentencepiece(const std::string& text) {
  return text.find('<') == std::string::npos && text.find("word") == std::string::npos &&
         text.find("\xe2\x96\x81") == std::string::npos;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (data[0] == 0) {
      const tandem::Tokenizer tokenizer =
          tandem::Tokenizer::from_json(tandem::parse_json_text(rest), "<fuzz tokenizer.json>");
      round_trip(tokenizer, "Hello, world! 123 \xc3\xa9t\xc3\xa9", false);
    } else if (data[0] == 2) {
      round_trip(fixture("llama2"), rest, exact_for_sentencepiece(rest));
    } else if (data[0] == 3) {
      round_trip(fixture("mistral-v0.3"), rest, false);  // Strip drops a leading space
    } else if (data[0] == 4) {
      round_trip(fixture("gemma"), rest, exact_for_sentencepiece(rest));
    } else {
      // Added tokens (<|...|>) may strip the spaces around them: exact only without them.
      round_trip(demo_tokenizer(), rest, rest.find("<|") == std::string::npos);
    }
  } catch (const tandem::Error&) {
  } catch (const tandem::JsonTextError&) {
  }
  return 0;
}
