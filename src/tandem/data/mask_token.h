#pragma once
// The DFlash mask token (docs/dflash.md): the id that fills the block_size-1 positions after each
// anchor. Resolution order, first match wins:
//   1. Config    — an explicit `mask_token_id`, validated 0 <= id < target vocab_size.
//   2. Tokenizer — the tokenizer's own mask token: `declared_mask_token` (tokenizer_config's
//                  "mask_token") if set, else the lowest-id added token that is "mask" in any
//                  case inside a `<|...|>`, `<...>` or `[...]` wrapper (`<|MASK|>`, `<mask>`,
//                  `[MASK]`; a bare "mask" is not one). If its id is exactly vocab_size (a
//                  tokenizer saved after an earlier growth) it is reused under rule 5.
//   3. Reserved  — an added special token the target has a row for but never emits: the
//                  lowest-id token named `<|reserved_special_token_N|>` (Llama 3) or
//                  `<|reserved_N|>`. Lowest id, because a tokenizer file that repurposes a
//                  reserved id renames it (Llama 3.1's <|eom_id|>, <|python_tag|>), so any name
//                  still reserved is unused in that release.
//   4. PaddingRow — the target's embedding has rows past the tokenizer (vocab_size > tokenizer
//                  size, e.g. Qwen2.5: 151936 rows for 151665 ids): id = tokenizer size, the
//                  first padding row, named `<|MASK|>` (the name the export's dflash_config
//                  records; the tokenizer files are copied unchanged).
//   5. Grown     — none of the above: `<|MASK|>` gets id = vocab_size and the embedding one new
//                  row (grow_embedding). Last resort: serving engines want the id < vocab_size.
// Growth never touches the frozen target: grow_embedding returns a new (V+1, H) tensor whose
// first V rows are bit-identical copies. The lm_head is NOT grown (tied or not): the mask token
// is only ever an input, never a label, so logits stay V wide and a tied model keeps using its
// original (V, H) matrix as lm_head.
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem {

/// Which rule of the resolution order chose the mask token.
enum class MaskTokenRule { Config, Tokenizer, Reserved, PaddingRow, Grown };
/// "config" | "tokenizer" | "reserved" | "padding_row" | "grown".
const char* mask_token_rule_name(MaskTokenRule rule);

/// The tokenizer facts the resolution needs (see tokenizer_vocab below to fill it).
struct TokenizerVocab {
  struct Token {
    int64_t id;
    std::string content;
    bool special;
  };
  int64_t size = 0;                                // one past the largest id the tokenizer knows
  std::vector<Token> added_tokens;                 // added / special tokens
  std::optional<std::string> declared_mask_token;  // tokenizer_config.json "mask_token", if any
};

/// A TokenizerVocab from any tokenizer with `vocab_size()` and `added_tokens()` (each with
/// `id`, `content`, `special`), such as tandem::Tokenizer.
template <typename TokenizerLike>
TokenizerVocab tokenizer_vocab(const TokenizerLike& tokenizer) {
  TokenizerVocab vocab;
  vocab.size = static_cast<int64_t>(tokenizer.vocab_size());
  for (const auto& token : tokenizer.added_tokens()) {
    vocab.added_tokens.push_back({static_cast<int64_t>(token.id), std::string(token.content),
                                  static_cast<bool>(token.special)});
    vocab.size = std::max(vocab.size, static_cast<int64_t>(token.id) + 1);
  }
  return vocab;
}

struct MaskTokenChoice {
  int64_t id = -1;
  MaskTokenRule rule = MaskTokenRule::Config;
  std::string content;  // the token's text ("<|MASK|>" when new); Config: the added token's, or ""
  bool add_to_tokenizer = false;  // PaddingRow / Grown with no such token yet: the exporter adds
                                  // `content` to the tokenizer files at `id`
  bool grow_embedding = false;    // Grown: the draft's input embedding is grow_embedding(...)
  std::string serving_note;       // for the exporter's README / log; empty unless Grown
};

/// The `<|MASK|>` text used when a token has to be added.
inline constexpr const char* kAddedMaskToken = "<|MASK|>";

/// Resolves the mask token for a target with `target_vocab_size` embedding rows; throws
/// Error("[mask_token] ...") for a config id out of range or a tokenizer larger than the target.
MaskTokenChoice resolve_mask_token(std::optional<int64_t> config_id, int64_t target_vocab_size,
                                   const TokenizerVocab& tokenizer);

/// The new row's initial value: the mean of all rows of `embedding` (V, H), accumulated in fp32,
/// returned in the embedding's dtype and device. (H,)
at::Tensor mean_embedding_row(const at::Tensor& embedding);

/// A new (V+1, H) tensor: `embedding` (V, H) copied bit for bit, then `row` (H,). `embedding` is
/// not modified (it is typically the frozen target's).
at::Tensor grow_embedding(const at::Tensor& embedding, const at::Tensor& row);

}  // namespace tandem
