#pragma once
// tokenizer.json's `decoder`: token strings back to text, as HF tokenizers 0.23 does it. Steps:
// ByteLevel (byte-level spelling back to bytes, lossy UTF-8), Replace ("▁" back to " "),
// ByteFallback (runs of <0xNN> pieces back to UTF-8, one U+FFFD per byte of an invalid run),
// Fuse (all tokens into one), Strip (a character off each token's ends), Metaspace; one step or a
// Sequence. null joins the tokens with spaces, as HF does. Other types are refused by name.
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "tandem/text/regex.h"

namespace tandem {

class TokenDecoder {
 public:
  /// Reads `decoder` of a tokenizer.json; `where` prefixes errors.
  TokenDecoder(const nlohmann::json& config, const std::string& where);

  /// The text of `tokens` (each a token's string: vocab spelling or added-token content).
  std::string decode(std::vector<std::string> tokens) const;

 private:
  struct Step {
    enum Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind;
    std::string text;                      // Replace: content; Strip: the character; Metaspace:
                                           // the replacement
    std::shared_ptr<const Regex> pattern;  // Replace: a literal string or a regex
    size_t start = 0, stop = 0;            // Strip
    bool prepends = true;                  // Metaspace: prepend_scheme is not "never"
  };
  void add_step(const nlohmann::json& step, const std::string& where);
  static void apply(const Step& step, std::vector<std::string>& tokens);

  bool null_ = true;
  std::vector<Step> steps_;
};

/// The byte of a ByteFallback piece ("<0x41>" is 0x41), or -1 when `token` is not one.
int byte_fallback_value(std::string_view token);

}  // namespace tandem
