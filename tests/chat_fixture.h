#pragma once
// The chat-template fixtures (tests/fixtures/chat/<template>.json, from
// tools/make_chat_template_fixtures.py) and the tokenizer each was made with: a tokenizer fixture,
// plus the special tokens the generator appended when no committed tokenizer had them.
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "tandem/text/tokenizer.h"
#include "test_util.h"

namespace tandem::testing {

inline nlohmann::json load_chat_fixture(const std::string& template_name) {
  std::ifstream file(source_path("tests/fixtures/chat/" + template_name + ".json"));
  if (!file.good()) throw std::runtime_error("missing chat fixture " + template_name);
  return nlohmann::json::parse(file);
}

/// The fixture's tokenizer, built once per test binary.
inline const Tokenizer& chat_fixture_tokenizer(const nlohmann::json& fixture) {
  static std::map<std::string, Tokenizer> built;
  const std::string dir = fixture.at("tokenizer").get<std::string>();
  const nlohmann::json& extra = fixture.at("added_special_tokens");
  const std::string key = dir + extra.dump();
  auto it = built.find(key);
  if (it != built.end()) return it->second;
  const std::string path = source_path(dir + "/tokenizer.json");
  if (extra.empty()) return built.emplace(key, Tokenizer::from_file(path)).first->second;
  std::ifstream file(path);
  nlohmann::json config = nlohmann::json::parse(file);
  for (const nlohmann::json& token : extra)
    config["added_tokens"].push_back({{"id", token.at("id")},
                                      {"content", token.at("content")},
                                      {"single_word", false},
                                      {"lstrip", false},
                                      {"rstrip", false},
                                      {"normalized", false},
                                      {"special", true}});
  return built.emplace(key, Tokenizer::from_json(config, path + " + fixture specials"))
      .first->second;
}

/// The Qwen2 tokenizer fixture directory (ChatML special tokens).
inline std::string qwen2_tokenizer_dir() { return source_path("tests/fixtures/tokenizers/qwen2"); }

}  // namespace tandem::testing
