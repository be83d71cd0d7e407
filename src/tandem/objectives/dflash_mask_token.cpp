#include "tandem/objectives/dflash_mask_token.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "tandem/core/error.h"
#include "tandem/core/json_file.h"
#include "tandem/text/tokenizer.h"

namespace tandem {

namespace {

// The tokenizer facts mask-token resolution needs, from `dir`/tokenizer.json and, when present,
// the `mask_token` its tokenizer_config.json declares (a string or {"content": ...}).
TokenizerVocab read_tokenizer_vocab(const std::string& dir) {
  TokenizerVocab vocab = tokenizer_vocab(Tokenizer::from_dir(dir));
  const std::string config_path = dir + "/tokenizer_config.json";
  if (std::filesystem::exists(config_path)) {
    const nlohmann::json config = read_json_file(config_path, "dflash");
    if (config.contains("mask_token") && !config["mask_token"].is_null()) {
      const nlohmann::json& mask = config["mask_token"];
      vocab.declared_mask_token =
          mask.is_string() ? mask.get<std::string>() : mask.at("content").get<std::string>();
    }
  }
  return vocab;
}

}  // namespace

MaskTokenChoice resolve_dflash_mask_token(std::optional<int64_t> mask_token_id,
                                          const std::string& tokenizer_dir,
                                          const std::string& target_path, int64_t vocab_size) {
  if (mask_token_id) return resolve_mask_token(mask_token_id, vocab_size, {});
  std::string dir = tokenizer_dir;
  if (dir.empty() && std::filesystem::exists(target_path + "/tokenizer.json")) dir = target_path;
  check(!dir.empty(),
        "[dflash] no mask token: set draft.mask_token_id, or data.tokenizer so one "
        "can be chosen from the tokenizer (",
        target_path, " has no tokenizer.json)");
  return resolve_mask_token(std::nullopt, vocab_size, read_tokenizer_vocab(dir));
}

}  // namespace tandem
