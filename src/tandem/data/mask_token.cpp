#include "tandem/data/mask_token.h"

#include <ATen/ATen.h>

#include <cctype>
#include <string_view>

#include "tandem/core/error.h"

namespace tandem {
namespace {

/// `content` without its `<|...|>`, `<...>` or `[...]` wrapper; empty when it has none.
std::string_view unwrap(std::string_view content) {
  for (const auto& [open, close] :
       {std::pair<std::string_view, std::string_view>{"<|", "|>"}, {"<", ">"}, {"[", "]"}}) {
    if (content.size() >= open.size() + close.size() && content.starts_with(open) &&
        content.ends_with(close))
      return content.substr(open.size(), content.size() - open.size() - close.size());
  }
  return {};
}

/// Whether `content` names a mask token: "mask" in any case inside a wrapper.
bool is_mask_name(std::string_view content) {
  const std::string_view name = unwrap(content);
  if (name.size() != 4) return false;
  for (size_t i = 0; i < 4; ++i)
    if (std::tolower(static_cast<unsigned char>(name[i])) != "mask"[i]) return false;
  return true;
}

/// Whether `content` is `<|reserved_special_token_N|>` or `<|reserved_N|>` with N decimal.
bool is_reserved_name(std::string_view content) {
  for (std::string_view prefix : {"<|reserved_special_token_", "<|reserved_"}) {
    if (!content.starts_with(prefix) || !content.ends_with("|>")) continue;
    const std::string_view digits =
        content.substr(prefix.size(), content.size() - prefix.size() - 2);
    if (digits.empty()) continue;
    bool all_digits = true;
    for (char c : digits) all_digits = all_digits && std::isdigit(static_cast<unsigned char>(c));
    if (all_digits) return true;
  }
  return false;
}

/// The lowest-id added token satisfying `matches`, or nullptr.
template <typename Predicate>
const TokenizerVocab::Token* lowest(const TokenizerVocab& tokenizer, Predicate matches) {
  const TokenizerVocab::Token* best = nullptr;
  for (const auto& token : tokenizer.added_tokens)
    if (matches(token) && (!best || token.id < best->id)) best = &token;
  return best;
}

/// The choice for rule Grown at id `vocab_size`, reusing `content` if the tokenizer has it.
MaskTokenChoice grown(int64_t vocab_size, std::string content, bool add_to_tokenizer) {
  MaskTokenChoice choice;
  choice.id = vocab_size;
  choice.rule = MaskTokenRule::Grown;
  choice.content = std::move(content);
  choice.add_to_tokenizer = add_to_tokenizer;
  choice.grow_embedding = true;
  choice.serving_note = "mask_token_id " + std::to_string(vocab_size) + " >= target vocab_size " +
                        std::to_string(vocab_size) +
                        ": SGLang rejects it; vLLM needs the separate mask embedding file "
                        "(the grown row, exported beside the draft)";
  return choice;
}

}  // namespace

const char* mask_token_rule_name(MaskTokenRule rule) {
  switch (rule) {
    case MaskTokenRule::Config:
      return "config";
    case MaskTokenRule::Tokenizer:
      return "tokenizer";
    case MaskTokenRule::Reserved:
      return "reserved";
    case MaskTokenRule::PaddingRow:
      return "padding_row";
    case MaskTokenRule::Grown:
      return "grown";
  }
  return "unknown";
}

MaskTokenChoice resolve_mask_token(std::optional<int64_t> config_id, int64_t target_vocab_size,
                                   const TokenizerVocab& tokenizer) {
  check(target_vocab_size > 0, "[mask_token] target vocab_size must be positive, got ",
        target_vocab_size);
  MaskTokenChoice choice;
  // 1. Config.
  if (config_id) {
    check(*config_id >= 0 && *config_id < target_vocab_size, "[mask_token] mask_token_id ",
          *config_id, " is outside the target vocab 0..", target_vocab_size - 1,
          " (leave it unset to let tandem pick or grow one)");
    choice.id = *config_id;
    choice.rule = MaskTokenRule::Config;
    for (const auto& token : tokenizer.added_tokens)
      if (token.id == *config_id) choice.content = token.content;
    return choice;
  }
  // 2. The tokenizer's mask token.
  const TokenizerVocab::Token* mask = nullptr;
  if (tokenizer.declared_mask_token) {
    mask = lowest(tokenizer, [&](const auto& token) {
      return token.content == *tokenizer.declared_mask_token;
    });
    check(mask != nullptr, "[mask_token] the tokenizer declares mask token '",
          *tokenizer.declared_mask_token, "' but has no such added token");
  } else {
    mask = lowest(tokenizer, [](const auto& token) { return is_mask_name(token.content); });
  }
  if (mask && mask->id < target_vocab_size) {
    choice.id = mask->id;
    choice.rule = MaskTokenRule::Tokenizer;
    choice.content = mask->content;
    return choice;
  }
  if (mask) {
    // A mask token one past the target's rows: a tokenizer saved after an earlier growth.
    check(mask->id == target_vocab_size && tokenizer.size == target_vocab_size + 1,
          "[mask_token] the tokenizer's mask token '", mask->content, "' has id ", mask->id,
          " and the tokenizer ", tokenizer.size, " ids, for a target with ", target_vocab_size,
          " embedding rows");
    return grown(target_vocab_size, mask->content, /*add_to_tokenizer=*/false);
  }
  check(tokenizer.size <= target_vocab_size, "[mask_token] the tokenizer has ", tokenizer.size,
        " ids but the target only ", target_vocab_size, " embedding rows");
  // 3. A reserved special token.
  if (const auto* reserved = lowest(tokenizer, [&](const auto& token) {
        return token.id < target_vocab_size && is_reserved_name(token.content);
      })) {
    choice.id = reserved->id;
    choice.rule = MaskTokenRule::Reserved;
    choice.content = reserved->content;
    return choice;
  }
  // 4. The first padding row of the embedding.
  if (tokenizer.size < target_vocab_size) {
    choice.id = tokenizer.size;
    choice.rule = MaskTokenRule::PaddingRow;
    choice.content = kAddedMaskToken;
    choice.add_to_tokenizer = true;
    return choice;
  }
  // 5. Grow.
  return grown(target_vocab_size, kAddedMaskToken, /*add_to_tokenizer=*/true);
}

at::Tensor mean_embedding_row(const at::Tensor& embedding) {
  check(embedding.dim() == 2 && embedding.size(0) > 0,
        "[mask_token] embedding must be (V, H), got ", embedding.sizes());
  return embedding.to(at::kFloat).mean(0).to(embedding.scalar_type());
}

at::Tensor grow_embedding(const at::Tensor& embedding, const at::Tensor& row) {
  check(embedding.dim() == 2, "[mask_token] embedding must be (V, H), got ", embedding.sizes());
  check(row.dim() == 1 && row.size(0) == embedding.size(1), "[mask_token] new row has shape ",
        row.sizes(), ", the embedding's rows have ", embedding.size(1));
  at::Tensor larger = at::empty({embedding.size(0) + 1, embedding.size(1)}, embedding.options());
  larger.narrow(0, 0, embedding.size(0)).copy_(embedding);
  larger[embedding.size(0)].copy_(row);
  return larger;
}

}  // namespace tandem
