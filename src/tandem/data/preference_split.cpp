// split_preference (data/datasets.h): a preference record's prompt and completions in each shape
// hub datasets use: an explicit prompt (its messages removed from completions that repeat them,
// as UltraFeedback-style rows do), or TRL's implicit prompt (what chosen and rejected share).
#include "tandem/data/datasets.h"

namespace tandem {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& detail) { throw BadLine(BadInput::wrong_type, detail); }

// A message as compared across prompt and completions: ShareGPT's from/value read as role/content,
// roles as a template sees them (rendered_role: "human" is "user").
json comparable(const json& message) {
  if (!message.is_object()) return message;
  json out = message;
  if (!out.contains("role") && out.contains("from")) {
    out["role"] = out["from"];
    out.erase("from");
    if (out.contains("value")) {
      out["content"] = out["value"];
      out.erase("value");
    }
  }
  if (out.contains("role") && out["role"].is_string())
    out["role"] = rendered_role(out["role"].get<std::string>());
  return out;
}

bool same_message(const json& a, const json& b) { return comparable(a) == comparable(b); }

// One side of the record as a message list: a list as is, a string as one message of `role`.
json as_list(const json& value, const char* key, const char* role) {
  if (value.is_string()) return json::array({{{"role", role}, {"content", value}}});
  if (!value.is_array()) bad(std::string("'") + key + "' is neither a string nor a message list");
  return value;
}

// Elements [from, to) of a list (json or ordered_json).
template <typename Json>
Json slice(const Json& list, size_t from, size_t to) {
  Json out = Json::array();
  for (size_t i = from; i < to && i < list.size(); ++i) out.push_back(list[i]);
  return out;
}

// The ordered copy of line[key] when the line was parsed keeping key order, else null.
const ordered_json* ordered_field(const ordered_json& ordered, const char* key) {
  return ordered.is_object() && ordered.contains(key) && ordered[key].is_array() ? &ordered[key]
                                                                                 : nullptr;
}

}  // namespace

PreferenceMessages split_preference(const json& line, const ordered_json& ordered,
                                    UnknownRoles unknown_roles) {
  for (const char* key : {"chosen", "rejected"})
    if (!line.contains(key)) bad(std::string("missing key '") + key + "'");
  const json& chosen_value = line["chosen"];
  const json& rejected_value = line["rejected"];
  PreferenceMessages out;
  // Messages [from, to) of `list`, which is line[key] (or stands for it).
  auto parse = [&](const json& list, const char* key, size_t from, size_t to = SIZE_MAX) {
    const ordered_json* ordered_list = ordered_field(ordered, key);
    const ordered_json ordered_part =
        ordered_list ? slice(*ordered_list, from, to) : ordered_json();
    return parse_messages(slice(list, from, to), key, ordered_list ? &ordered_part : nullptr,
                          unknown_roles);
  };

  if (line.contains("prompt")) {
    const json prompt = as_list(line["prompt"], "prompt", "user");
    out.prompt = parse(prompt, "prompt", 0);
    // UltraFeedback-style: a completion that starts with the prompt's messages repeats them.
    for (const char* key : {"chosen", "rejected"}) {
      const json completion = as_list(line[key], key, "assistant");
      size_t from = 0;
      if (completion.size() > prompt.size() && !prompt.empty()) {
        bool repeats = true;
        for (size_t i = 0; i < prompt.size() && repeats; ++i)
          repeats = same_message(completion[i], prompt[i]);
        if (repeats) from = prompt.size();
      }
      (key[0] == 'c' ? out.chosen : out.rejected) =
          line[key].is_string() ? parse(completion, key, 0) : parse(line[key], key, from);
    }
  } else if (chosen_value.is_string() && rejected_value.is_string()) {
    // TRL's implicit prompt of two strings: their shared start, a space before the first
    // difference left to the completions; cut at a character boundary.
    const std::string& chosen = chosen_value.get_ref<const std::string&>();
    const std::string& rejected = rejected_value.get_ref<const std::string&>();
    size_t shared = 0;
    while (shared < chosen.size() && shared < rejected.size() && chosen[shared] == rejected[shared])
      ++shared;
    while (shared > 0 && shared < chosen.size() &&
           (static_cast<unsigned char>(chosen[shared]) & 0xC0) == 0x80)
      --shared;
    if (shared > 0 && chosen[shared - 1] == ' ') --shared;
    if (shared == 0)
      bad("no 'prompt', and 'chosen' and 'rejected' share no text at their start to take as the "
          "prompt");
    if (shared == chosen.size() || shared == rejected.size())
      bad("no 'prompt', and one of 'chosen' and 'rejected' is the start of the other: nothing is "
          "left to prefer");
    out.prompt = {{ChatRole::user, chosen.substr(0, shared), {}}};
    out.chosen = {{ChatRole::assistant, chosen.substr(shared), {}}};
    out.rejected = {{ChatRole::assistant, rejected.substr(shared), {}}};
  } else if (chosen_value.is_array() && rejected_value.is_array()) {
    // TRL's implicit prompt of two conversations: the messages they share from the start.
    size_t shared = 0;
    while (shared < chosen_value.size() && shared < rejected_value.size() &&
           same_message(chosen_value[shared], rejected_value[shared]))
      ++shared;
    if (shared == 0)
      bad("no 'prompt', and 'chosen' and 'rejected' share no message at their start to take as "
          "the prompt");
    if (shared == chosen_value.size() || shared == rejected_value.size())
      bad("no 'prompt', and 'chosen' and 'rejected' differ in no message (one is the start of "
          "the other): nothing is left to prefer");
    out.prompt = parse(chosen_value, "chosen", 0, shared);
    out.chosen = parse(chosen_value, "chosen", shared);
    out.rejected = parse(rejected_value, "rejected", shared);
  } else {
    bad("no 'prompt', and 'chosen' and 'rejected' are not both strings or both message lists");
  }
  if (out.chosen.empty() || out.rejected.empty())
    bad(std::string("'") + (out.chosen.empty() ? "chosen" : "rejected") +
        "' has no message after the prompt");
  return out;
}

}  // namespace tandem
