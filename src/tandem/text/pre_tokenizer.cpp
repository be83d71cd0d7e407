#include "tandem/text/pre_tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "tandem/core/error.h"
#include "tandem/text/component_config.h"

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

MetaspaceSettings MetaspaceSettings::read(const nlohmann::json& step, const std::string& where) {
  MetaspaceSettings settings;
  settings.replacement = read_one_character(step, "replacement", where);
  if (step.contains("prepend_scheme") && !step["prepend_scheme"].is_null()) {
    const std::string scheme =
        step["prepend_scheme"].is_string() ? step["prepend_scheme"].get<std::string>() : "";
    if (scheme == "always")
      settings.prepend = kAlways;
    else if (scheme == "first")
      settings.prepend = kFirst;
    else if (scheme == "never")
      settings.prepend = kNever;
    else
      throw Error(where, ".prepend_scheme is ", step["prepend_scheme"].dump(),
                  ", not \"always\", \"first\" or \"never\"");
  }
  if (step.contains("add_prefix_space") && !step["add_prefix_space"].is_null()) {
    const bool add = flag(step, "add_prefix_space", true, where);
    check(add == (settings.prepend != kNever), where, ".add_prefix_space (", add ? "true" : "false",
          ") does not match prepend_scheme (as HF refuses the file)");
  }
  settings.split = flag(step, "split", true, where);
  return settings;
}

PreTokenizer::PreTokenizer(const nlohmann::json& config, const std::string& where) {
  if (config.is_null()) return;  // no pre-tokenizer: the normalized text is one piece
  check(config.is_object(), where, " must be an object");
  const std::string type = component_type(config);
  if (type == "Sequence") {
    check(config.contains("pretokenizers") && config["pretokenizers"].is_array(), where,
          ".pretokenizers must be an array");
    const auto& steps = config["pretokenizers"];
    for (size_t i = 0; i < steps.size(); ++i)
      add_step(steps[i], where + ".pretokenizers[" + std::to_string(i) + "]");
  } else {
    add_step(config, where);
  }
}

void PreTokenizer::add_step(const nlohmann::json& step, const std::string& where) {
  check(step.is_object(), where, " must be an object");
  const std::string type = component_type(step);
  check(!has_byte_level_ && !metaspace_, where, " (", type, ") comes after ",
        has_byte_level_ ? "ByteLevel" : "Metaspace",
        ": only Split steps before one ByteLevel or Metaspace are supported");
  if (type == "Split") {
    std::shared_ptr<const Regex> pattern = read_pattern(step, where, /*allow_empty=*/true);
    check(step.contains("behavior"), where, ".behavior is missing");
    splits_.push_back({std::move(pattern), parse_behavior(step["behavior"], where),
                       flag(step, "invert", false, where)});
  } else if (type == "ByteLevel") {
    has_byte_level_ = true;
    add_prefix_space_ = flag(step, "add_prefix_space", true, where);
    // trim_offsets does nothing in a pre-tokenizer (HF applies it in the post-processor).
    if (flag(step, "use_regex", true, where))
      byte_level_split_ = SplitStep{std::make_shared<Regex>(kGpt2Pattern, false, where),
                                    SplitBehavior::kIsolated, false};
  } else if (type == "Metaspace") {
    metaspace_ = MetaspaceSettings::read(step, where);
    if (metaspace_->split)
      metaspace_split_ = SplitStep{std::make_shared<Regex>(metaspace_->replacement, true, where),
                                   SplitBehavior::kMergedWithNext, false};
  } else {
    throw Error(where, ": pre-tokenizer type '", type,
                "' is not supported (supported: Sequence, Split, ByteLevel, Metaspace)");
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

Segment PreTokenizer::apply_metaspace(const Segment& piece, AlignedText& storage,
                                      std::vector<Match>& words) const {
  const MetaspaceSettings& settings = *metaspace_;
  Segment out = piece;
  TextRanges spaces;
  static const Regex space(" ", /*literal=*/true, "Metaspace");
  space.find_all(piece.text, spaces);
  if (!spaces.empty()) {
    replace_ranges(piece, spaces, settings.replacement, storage);
    out = Segment::of(storage, piece.origin);
  }
  // HF: `first` prepends only to a piece whose original offset is 0 (not after an added token).
  const bool starts_input = !piece.text.empty() && piece.input_range(0, 1).first == 0;
  if (!out.text.empty() && !out.text.starts_with(settings.replacement) &&
      (settings.prepend == MetaspaceSettings::kAlways ||
       (settings.prepend == MetaspaceSettings::kFirst && starts_input))) {
    AlignedText prefixed;
    prepend_aligned(out, settings.replacement, prefixed);
    storage = std::move(prefixed);
    out = Segment::of(storage, piece.origin);
  }
  words.clear();
  if (metaspace_split_)
    metaspace_split_->apply(out.text, 0, words);
  else if (!out.text.empty())
    words.emplace_back(0, out.text.size());
  return out;
}

void PreTokenizer::split_byte_level(std::string_view piece, std::vector<Match>& words) const {
  if (byte_level_split_)
    byte_level_split_->apply(piece, 0, words);
  else if (!piece.empty())
    words.emplace_back(0, piece.size());
}

}  // namespace tandem
