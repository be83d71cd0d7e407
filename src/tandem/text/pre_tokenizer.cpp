#include "tandem/text/pre_tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "tandem/core/error.h"

namespace tandem {

namespace {

// GPT-2's pre-tokenization regex, as HF's ByteLevel pre-tokenizer uses it.
constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

SplitBehavior parse_behavior(const nlohmann::json& value, const std::string& where) {
  const std::string name = value.is_string() ? value.get<std::string>() : value.dump();
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  throw Error(where, ".behavior '", name, "' is not a Split behavior");
}

bool flag(const nlohmann::json& step, const char* field, bool fallback, const std::string& where) {
  if (!step.contains(field) || step[field].is_null()) return fallback;
  check(step[field].is_boolean(), where, ".", field, " must be a boolean");
  return step[field].get<bool>();
}

}  // namespace

void SplitStep::apply(std::string_view text, size_t base, std::vector<Match>& parts) const {
  if (text.empty()) return;
  // HF Pattern::find_matches: matches and the gaps between them, in order, flagged.
  thread_local std::vector<Match> found;
  thread_local std::vector<std::pair<Match, bool>> flagged, merged;
  found.clear();
  flagged.clear();
  merged.clear();
  regex->find_all(text, found);
  size_t previous = 0;
  for (const Match& m : found) {
    if (previous != m.first) flagged.push_back({{previous, m.first}, invert});
    flagged.push_back({m, !invert});
    previous = m.second;
  }
  if (previous != text.size()) flagged.push_back({{previous, text.size()}, invert});

  // HF NormalizedString::split: the pieces and whether each is removed.
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const auto& [range, is_match] : flagged) merged.push_back({range, false});
      break;
    case SplitBehavior::kRemoved:
      merged = flagged;
      break;
    case SplitBehavior::kContiguous:
      for (const auto& [range, is_match] : flagged) {
        if (is_match == previous_match && !merged.empty())
          merged.back().first.second = range.second;
        else
          merged.push_back({range, false});
        previous_match = is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const auto& [range, is_match] : flagged) {
        if (is_match && !previous_match && !merged.empty())
          merged.back().first.second = range.second;
        else
          merged.push_back({range, false});
        previous_match = is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = flagged.rbegin(); it != flagged.rend(); ++it) {
        if (it->second && !previous_match && !merged.empty())
          merged.back().first.first = it->first.first;
        else
          merged.push_back({it->first, false});
        previous_match = it->second;
      }
      std::reverse(merged.begin(), merged.end());
      break;
  }
  for (const auto& [range, removed] : merged)
    if (!removed && range.first != range.second)
      parts.emplace_back(base + range.first, base + range.second);
}

PreTokenizer::PreTokenizer(const nlohmann::json& config, const std::string& where) {
  check(!config.is_null(), where,
        " is null: tandem implements byte-level BPE, which needs a ByteLevel pre-tokenizer");
  check(config.is_object(), where, " must be an object");
  const std::string type = config.value("type", std::string());
  if (type == "Sequence") {
    check(config.contains("pretokenizers") && config["pretokenizers"].is_array(), where,
          ".pretokenizers must be an array");
    const auto& steps = config["pretokenizers"];
    for (size_t i = 0; i < steps.size(); ++i)
      add_step(steps[i], where + ".pretokenizers[" + std::to_string(i) + "]");
  } else {
    add_step(config, where);
  }
  check(has_byte_level_, where,
        " has no ByteLevel step: tandem implements byte-level BPE, which needs one");
}

void PreTokenizer::add_step(const nlohmann::json& step, const std::string& where) {
  check(step.is_object(), where, " must be an object");
  const std::string type = step.value("type", std::string());
  check(!has_byte_level_, where, " (", type,
        ") comes after ByteLevel: only Split steps before one ByteLevel are supported");
  if (type == "Split") {
    check(step.contains("pattern") && step["pattern"].is_object(), where,
          ".pattern must be {\"Regex\": ...} or {\"String\": ...}");
    const auto& pattern = step["pattern"];
    const bool literal = pattern.contains("String");
    const char* key = literal ? "String" : "Regex";
    check(pattern.contains(key) && pattern[key].is_string(), where,
          ".pattern must be {\"Regex\": ...} or {\"String\": ...}");
    check(step.contains("behavior"), where, ".behavior is missing");
    splits_.push_back({std::make_shared<Regex>(pattern[key].get<std::string>(), literal, where),
                       parse_behavior(step["behavior"], where),
                       flag(step, "invert", false, where)});
  } else if (type == "ByteLevel") {
    has_byte_level_ = true;
    add_prefix_space_ = flag(step, "add_prefix_space", true, where);
    // trim_offsets does nothing in a pre-tokenizer (HF applies it in the post-processor).
    if (flag(step, "use_regex", true, where))
      byte_level_split_ = SplitStep{std::make_shared<Regex>(kGpt2Pattern, false, where),
                                    SplitBehavior::kIsolated, false};
  } else {
    throw Error(where, ": pre-tokenizer type '", type,
                "' is not supported (supported: Sequence, Split, ByteLevel)");
  }
}

void PreTokenizer::split(std::string_view text, std::vector<Match>& pieces) const {
  pieces.assign(1, Match{0, text.size()});
  if (splits_.empty()) return;
  std::vector<Match> next;
  for (const SplitStep& step : splits_) {
    next.clear();
    for (const Match& piece : pieces)
      step.apply(text.substr(piece.first, piece.second - piece.first), piece.first, next);
    pieces.swap(next);
  }
}

void PreTokenizer::split_byte_level(std::string_view piece, std::vector<Match>& words) const {
  if (byte_level_split_)
    byte_level_split_->apply(piece, 0, words);
  else if (!piece.empty())
    words.emplace_back(0, piece.size());
}

}  // namespace tandem
