// libFuzzer target for tokenizer.json and the tokenizer built from it. The first byte picks the
// mode: 0, the rest is a tokenizer.json (loaded, then a fixed text encoded and decoded); else
// the rest is text for the demo tokenizer (data/demo/tokenizer, or $TANDEM_FUZZ_TOKENIZER), which
// must come back unchanged from encode + decode when it is valid UTF-8 (byte-level BPE, no
// normalizer). A tandem::Error is the expected answer to bad input; anything else is a bug.
#include <cstdint>
#include <cstdlib>
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (data[0] == 0) {
      const tandem::Tokenizer tokenizer =
          tandem::Tokenizer::from_json(tandem::parse_json_text(rest), "<fuzz tokenizer.json>");
      round_trip(tokenizer, "Hello, world! 123 \xc3\xa9t\xc3\xa9", false);
    } else {
      // Added tokens (<|...|>) may strip the spaces around them: exact only without them.
      round_trip(demo_tokenizer(), rest, rest.find("<|") == std::string::npos);
    }
  } catch (const tandem::Error&) {
  } catch (const tandem::JsonTextError&) {
  }
  return 0;
}
