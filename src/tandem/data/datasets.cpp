#include "tandem/data/datasets.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>

#include "tandem/core/error.h"
#include "tandem/text/jinja_json.h"
#include "tandem/text/tokenizer.h"

namespace tandem {

namespace {

using nlohmann::json;

[[noreturn]] void bad(BadInput reason, const std::string& detail) { throw BadLine(reason, detail); }

const json& required(const json& line, const char* key) {
  const auto it = line.find(key);
  if (it == line.end()) bad(BadInput::wrong_type, std::string("missing key '") + key + "'");
  return *it;
}

// A JSON integer array as token ids; ids beyond int32 are out of any vocabulary.
std::vector<int32_t> parse_ids(const json& value, const char* key) {
  if (!value.is_array()) bad(BadInput::wrong_type, std::string("'") + key + "' is not a list");
  std::vector<int32_t> ids;
  ids.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    const json& item = value[i];
    if (!item.is_number_integer())
      bad(BadInput::wrong_type, std::string("'") + key + "'[" + std::to_string(i) +
                                    "] is not an integer: " + item.dump());
    if (item.is_number_unsigned() ? item.get<uint64_t>() > uint64_t{INT32_MAX}
                                  : (item.get<int64_t>() < 0 || item.get<int64_t>() > INT32_MAX))
      bad(BadInput::id_out_of_range, std::string("'") + key + "'[" + std::to_string(i) +
                                         "] = " + item.dump() + " is not a token id");
    ids.push_back(static_cast<int32_t>(item.get<int64_t>()));
  }
  return ids;
}

// The role a message plays; `spelling` is what templates see when it is not the role's name.
ChatRole parse_role(const std::string& role, std::string& spelling) {
  spelling.clear();
  if (role == "user" || role == "human") return ChatRole::user;
  if (role == "assistant" || role == "gpt" || role == "chatgpt" || role == "bing" ||
      role == "bard")  // ShareGPT's assistant-side names
    return ChatRole::assistant;
  if (role == "system") return ChatRole::system;
  if (role == "tool") return ChatRole::tool;
  if (role == "ipython" || role == "function") {  // Llama 3.1's and the older OpenAI tool roles
    spelling = role;
    return ChatRole::tool;
  }
  if (role == "developer") {  // OpenAI's (and gpt-oss's) system-level instructions
    spelling = role;
    return ChatRole::system;
  }
  bad(BadInput::unknown_role, "unknown role '" + role + "'");
}

}  // namespace

std::string rendered_role(const std::string& role) {
  std::string spelling;
  try {
    const ChatRole parsed = parse_role(role, spelling);
    return spelling.empty() ? std::string(chat_role_name(parsed)) : spelling;
  } catch (const BadLine&) {
    return role;
  }
}

std::vector<ChatMessage> parse_messages(const json& list, const std::string& key,
                                        const nlohmann::ordered_json* ordered_list,
                                        UnknownRoles unknown_roles) {
  if (!list.is_array()) bad(BadInput::wrong_type, "'" + key + "' is not a list of messages");
  std::vector<ChatMessage> messages;
  messages.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const json& message = list[i];
    const std::string where = "'" + key + "'[" + std::to_string(i) + "]";
    if (!message.is_object()) bad(BadInput::wrong_type, where + " is not an object");
    const bool sharegpt = !message.contains("role") && message.contains("from");
    const char* role_key = sharegpt ? "from" : "role";
    const char* content_key = sharegpt ? "value" : "content";
    const auto role = message.find(role_key);
    if (role == message.end() || !role->is_string())
      bad(BadInput::wrong_type, where + " has no string 'role' (or ShareGPT 'from')");
    ChatMessage out;
    std::string spelling;
    try {
      out.role = parse_role(role->get<std::string>(), spelling);
    } catch (const BadLine& e) {
      if (unknown_roles == UnknownRoles::skip_turn) continue;
      throw BadLine(e.reason, where + ": " + e.what() + " (data.unknown_roles can skip it)",
                    unknown_roles == UnknownRoles::skip_conversation);
    }
    if (!spelling.empty()) out.fields.set("role", jinja::Value(spelling));
    // Content: a string; or null / absent (an assistant turn that only calls tools) or a list
    // of parts, which only a Jinja template can render (it gets them as they are).
    const auto content = message.find(content_key);
    const bool has_tool_calls = message.contains("tool_calls");
    if (content != message.end() && content->is_string()) {
      out.content = content->get<std::string>();
    } else if (content != message.end() && content->is_array()) {
      out.fields.set("content", jinja::value_from_json(*content));
    } else if ((content == message.end() || content->is_null()) && has_tool_calls) {
      out.fields.set("content", jinja::Value::none());
    } else {
      bad(BadInput::wrong_type, where + " has no string '" + content_key + "'");
    }
    // Every other field, for Jinja templates: in the line's key order when it is known.
    auto copy_fields = [&](const auto& object) {
      for (const auto& [name, value] : object.items())
        if (name != role_key && name != content_key)
          out.fields.set(name, jinja::value_from_json(value));
    };
    if (ordered_list && i < ordered_list->size() && (*ordered_list)[i].is_object())
      copy_fields((*ordered_list)[i]);
    else
      copy_fields(message);
    messages.push_back(std::move(out));
  }
  return messages;
}

UnknownRoles parse_unknown_roles(std::string_view text) {
  if (text == "error") return UnknownRoles::error;
  if (text == "skip_turn") return UnknownRoles::skip_turn;
  if (text == "skip_conversation") return UnknownRoles::skip_conversation;
  throw Error("[data] unknown_roles must be error, skip_turn or skip_conversation, not '", text,
              "'");
}

DataFormat parse_data_format(std::string_view text) {
  if (text == "conversations") return DataFormat::conversations;
  if (text == "text") return DataFormat::text;
  if (text == "pretokenized") return DataFormat::pretokenized;
  if (text == "preference") return DataFormat::preference;
  if (text == "rollout") return DataFormat::rollout;
  throw Error("[data] unknown data format '", text,
              "' (known: conversations, text, pretokenized, preference, rollout)");
}

std::string_view data_format_name(DataFormat format) {
  switch (format) {
    case DataFormat::conversations:
      return "conversations";
    case DataFormat::text:
      return "text";
    case DataFormat::pretokenized:
      return "pretokenized";
    case DataFormat::preference:
      return "preference";
    case DataFormat::rollout:
      return "rollout";
  }
  return "?";
}

std::vector<std::string> columns_of(DataFormat format) {
  switch (format) {
    case DataFormat::conversations:
      return {"conversations", "messages", "tools"};
    case DataFormat::text:
      return {"text"};
    case DataFormat::pretokenized:
      return {"input_ids", "loss_mask"};
    case DataFormat::preference:
      return {"prompt", "chosen", "rejected", "tools"};
    case DataFormat::rollout:
      return {"prompt_ids", "completion_ids", "old_logprobs", "advantage", "reward", "group_id"};
  }
  return {};
}

std::vector<std::string> columns_to_read(DataFormat format, const DatasetOptions& options) {
  std::vector<std::string> fields = columns_of(format);
  std::map<std::string, std::string> field_of;  // column -> the field read from it
  for (const auto& [field, column] : options.columns) {
    if (std::find(fields.begin(), fields.end(), field) == fields.end()) {
      std::string listed;
      for (const std::string& name : fields) listed += (listed.empty() ? "" : ", ") + name;
      throw Error("[data] data.columns: '", field, "' is not a field the ",
                  data_format_name(format), " format reads (", listed, ")");
    }
    const auto [previous, inserted] = field_of.emplace(column, field);
    check(inserted, "[data] data.columns: '", previous->second, "' and '", field,
          "' are both read from column '", column, "'");
  }
  if (options.heldout.active()) return {};
  for (std::string& name : fields)
    for (const auto& [field, column] : options.columns)
      if (name == field) name = column;
  return fields;
}

namespace {

// Renames the mapped columns of `record` to the fields they stand for (all taken out first, so
// swapped names do not collide); a column the record lacks is left alone.
template <typename Json>
void rename_columns(Json& record, const std::vector<std::pair<std::string, std::string>>& columns) {
  if (columns.empty() || !record.is_object()) return;
  std::vector<std::pair<std::string, Json>> taken;
  for (const auto& [field, column] : columns) {
    const auto found = record.find(column);
    if (found == record.end()) continue;
    taken.emplace_back(field, std::move(*found));
    record.erase(column);
  }
  for (auto& [field, value] : taken) record[field] = std::move(value);
}

}  // namespace

int64_t DatasetOptions::effective_vocab_size() const {
  if (vocab_size > 0) return vocab_size;
  return tokenizer ? tokenizer->vocab_size() : 0;
}

TokenizedDocument RolloutSample::document() const {
  TokenizedDocument out;
  out.ids = prompt_ids;
  out.ids.insert(out.ids.end(), completion_ids.begin(), completion_ids.end());
  out.loss_mask.assign(prompt_ids.size(), 0);
  out.loss_mask.resize(out.ids.size(), 1);
  out.source = source;
  return out;
}

nlohmann::ordered_json ordered_line(std::string_view raw_line) {
  if (raw_line.empty()) return nullptr;
  nlohmann::ordered_json parsed =
      nlohmann::ordered_json::parse(raw_line, nullptr, /*allow_exceptions=*/false);
  return parsed.is_discarded() ? nlohmann::ordered_json() : parsed;
}

std::vector<ChatMessage> parse_conversation(const json& line, const nlohmann::ordered_json& ordered,
                                            UnknownRoles unknown_roles) {
  const char* key = line.contains("conversations") ? "conversations" : "messages";
  if (!line.contains(key)) bad(BadInput::wrong_type, "missing key 'conversations' (or 'messages')");
  const nlohmann::ordered_json* ordered_list =
      ordered.is_object() && ordered.contains(key) ? &ordered[key] : nullptr;
  std::vector<ChatMessage> messages = parse_messages(line[key], key, ordered_list, unknown_roles);
  if (messages.empty()) bad(BadInput::empty, "empty conversation");
  return messages;
}

jinja::Value parse_tools(const json& line, const nlohmann::ordered_json& ordered) {
  const auto tools = line.find("tools");
  if (tools == line.end() || tools->is_null()) return {};
  if (!tools->is_array()) bad(BadInput::wrong_type, "'tools' is not a list of tool definitions");
  if (ordered.is_object() && ordered.contains("tools"))
    return jinja::value_from_json(ordered["tools"]);
  return jinja::value_from_json(*tools);
}

std::vector<int64_t> prompt_of(const TokenizedDocument& document, int64_t fallback_tokens) {
  size_t end = 0;
  while (end < document.ids.size() && !document.loss_mask[end]) ++end;
  if (end == 0 || end == document.ids.size())
    end = std::min(document.ids.size(), static_cast<size_t>(std::max<int64_t>(fallback_tokens, 0)));
  return std::vector<int64_t>(document.ids.begin(), document.ids.begin() + end);
}

void validate_document(const TokenizedDocument& document, const DatasetOptions& options) {
  if (document.ids.empty()) bad(BadInput::empty, "no tokens");
  const int64_t vocab = options.effective_vocab_size();
  if (vocab > 0)
    for (size_t t = 0; t < document.ids.size(); ++t)
      if (document.ids[t] < 0 || document.ids[t] >= vocab)
        bad(BadInput::id_out_of_range,
            "token id " + std::to_string(document.ids[t]) + " at position " + std::to_string(t) +
                " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  if (options.max_length > 0 && static_cast<int64_t>(document.ids.size()) > options.max_length)
    bad(BadInput::too_long, std::to_string(document.ids.size()) + " tokens, more than max_length " +
                                std::to_string(options.max_length));
  bool trained = false;
  for (uint8_t m : document.loss_mask) trained |= m != 0;
  if (!trained) bad(BadInput::no_trained_tokens, "no token is trained (the loss mask is all 0)");
}

DocumentStream::DocumentStream(const std::string& path, DataFormat format,
                               const DatasetOptions& options)
    : format_(format),
      options_(options),
      reader_(path, options.on_error, columns_to_read(format, options)) {
  check(format != DataFormat::rollout, "[data] ", path,
        ": rollout files are read with RolloutStream, not as documents");
  if (format != DataFormat::pretokenized) {
    check(options.tokenizer != nullptr, "[data] ", path, ": the ", data_format_name(format),
          " format needs a tokenizer");
    if (format != DataFormat::text)
      chat_template_ = ChatTemplate::resolve(
          options.chat_template,
          std::filesystem::path(options.tokenizer->path()).parent_path().string(),
          options.template_kwargs);
  }
}

TokenizedDocument DocumentStream::encode(const std::vector<ChatMessage>& messages, bool last_only,
                                         size_t first_trained_message,
                                         const jinja::Value& tools) const {
  RenderedChat rendered;
  try {
    rendered = chat_template_->render(messages, false, tools, last_only);
  } catch (const Error& e) {  // a template's refusal is this line's problem
    bad(BadInput::template_error, e.what());
  }
  // render() gives one span per assistant message: drop those of the untrained messages, then
  // (a turn's reasoning may split its span) the reasoning the loss leaves out.
  size_t untrained = 0;
  for (size_t m = 0; m < first_trained_message && m < messages.size(); ++m)
    untrained += messages[m].role == ChatRole::assistant;
  std::vector<ByteSpan>& spans = rendered.assistant_spans;
  spans.erase(spans.begin(), spans.begin() + std::min(untrained, spans.size()));
  if (last_only && spans.size() > 1) spans.erase(spans.begin(), spans.end() - 1);
  if (!options_.train_reasoning) cut_reasoning(messages, rendered);
  ChatTokens tokens = encode_with_spans(*options_.tokenizer, rendered.text, spans);
  return {std::move(tokens.ids), std::move(tokens.loss_mask), reader_.where()};
}

nlohmann::ordered_json DocumentStream::ordered_record() const {
  nlohmann::ordered_json ordered = ordered_line(reader_.line_text());
  rename_columns(ordered, options_.columns);
  return ordered;
}

std::vector<TokenizedDocument> DocumentStream::parse(const json& line) const {
  std::vector<TokenizedDocument> out;
  if (format_ == DataFormat::conversations) {
    const nlohmann::ordered_json ordered = chat_template_->is_jinja() ? ordered_record() : nullptr;
    out.push_back(encode(parse_conversation(line, ordered, options_.unknown_roles),
                         options_.last_turn_only, 0, parse_tools(line, ordered)));
  } else if (format_ == DataFormat::text) {
    const json& text = required(line, "text");
    if (!text.is_string()) bad(BadInput::wrong_type, "'text' is not a string");
    TokenizedDocument document;
    document.ids = options_.tokenizer->encode(text.get<std::string>(), /*add_special_tokens=*/true);
    document.loss_mask.assign(document.ids.size(), 1);
    document.source = reader_.where();
    out.push_back(std::move(document));
  } else if (format_ == DataFormat::pretokenized) {
    TokenizedDocument document;
    document.ids = parse_ids(required(line, "input_ids"), "input_ids");
    const auto mask = line.find("loss_mask");
    if (mask == line.end()) {
      document.loss_mask.assign(document.ids.size(), 1);
    } else {
      if (!mask->is_array()) bad(BadInput::wrong_type, "'loss_mask' is not a list");
      if (mask->size() != document.ids.size())
        bad(BadInput::wrong_type, "'loss_mask' has " + std::to_string(mask->size()) +
                                      " entries for " + std::to_string(document.ids.size()) +
                                      " input_ids");
      for (const json& m : *mask) {
        if (m.is_boolean()) {
          document.loss_mask.push_back(m.get<bool>());
        } else if (m.is_number_integer() && (m.get<int64_t>() == 0 || m.get<int64_t>() == 1)) {
          document.loss_mask.push_back(static_cast<uint8_t>(m.get<int64_t>()));
        } else {
          bad(BadInput::wrong_type,
              "'loss_mask' holds " + m.dump() + " (expected 0, 1 or a boolean)");
        }
      }
    }
    document.source = reader_.where();
    out.push_back(std::move(document));
  } else {
    const nlohmann::ordered_json ordered = chat_template_->is_jinja() ? ordered_record() : nullptr;
    const jinja::Value tools = parse_tools(line, ordered);
    const PreferenceMessages pair = split_preference(line, ordered, options_.unknown_roles);
    for (const char* key : {"chosen", "rejected"}) {
      std::vector<ChatMessage> messages = pair.prompt;
      for (const ChatMessage& m : key[0] == 'c' ? pair.chosen : pair.rejected)
        messages.push_back(m);
      out.push_back(encode(messages, false, pair.prompt.size(), tools));
      out.back().source += std::string(" (") + key + ")";
    }
  }
  for (const TokenizedDocument& document : out) {
    try {
      validate_document(document, options_);
    } catch (const BadLine& e) {
      if (out.size() == 1) throw;
      const bool chosen = &document == &out[0];
      throw BadLine(e.reason, std::string(chosen ? "chosen: " : "rejected: ") + e.what());
    }
  }
  return out;
}

namespace {

// The next record of `reader` that `options` keep (the other side of a held-out split is passed
// over and counted), its columns renamed to the fields they stand for; false at the end.
bool next_kept_record(JsonlReader& reader, json& line, const DatasetOptions& options,
                      int64_t& passed_over) {
  while (reader.next(line)) {
    if (options.heldout.keeps(reader.line_text())) {
      rename_columns(line, options.columns);
      return true;
    }
    ++passed_over;
  }
  return false;
}

}  // namespace

bool DocumentStream::next(std::vector<TokenizedDocument>& documents) {
  json line;
  while (next_kept_record(reader_, line, options_, passed_over_)) {
    try {
      documents = parse(line);
      return true;
    } catch (const BadLine& bad_line) {
      reader_.reject(bad_line);
    }
  }
  return false;
}

RolloutStream::RolloutStream(const std::string& path, const DatasetOptions& options)
    : options_(options),
      reader_(path, options.on_error, columns_to_read(DataFormat::rollout, options)) {}

bool RolloutStream::next(RolloutSample& sample) {
  json line;
  while (next_kept_record(reader_, line, options_, passed_over_)) {
    try {
      sample = RolloutSample{};
      sample.prompt_ids = parse_ids(required(line, "prompt_ids"), "prompt_ids");
      sample.completion_ids = parse_ids(required(line, "completion_ids"), "completion_ids");
      if (sample.prompt_ids.empty()) bad(BadInput::empty, "empty 'prompt_ids'");
      if (sample.completion_ids.empty()) bad(BadInput::empty, "empty 'completion_ids'");
      const json& logprobs = required(line, "old_logprobs");
      if (!logprobs.is_array() || logprobs.size() != sample.completion_ids.size())
        bad(BadInput::wrong_type,
            "'old_logprobs' must be a list of one number per completion "
            "token (" +
                std::to_string(sample.completion_ids.size()) + ")");
      for (const json& value : logprobs) {
        if (!value.is_number() || !std::isfinite(value.get<double>()))
          bad(BadInput::wrong_type,
              "'old_logprobs' holds " + value.dump() + " (expected a finite number)");
        // A log-probability is at most 0 (a little above it: the sampler's rounding).
        if (value.get<double>() > 1e-3)
          bad(BadInput::wrong_type, "'old_logprobs' holds " + value.dump() +
                                        ", above 0: not a log-probability (log pi_old <= 0)");
        sample.old_logprobs.push_back(value.get<float>());
      }
      const auto number = [&](const char* key) -> std::optional<double> {
        const auto it = line.find(key);
        if (it == line.end() || it->is_null()) return std::nullopt;
        if (!it->is_number() || !std::isfinite(it->get<double>()))
          bad(BadInput::wrong_type, std::string("'") + key + "' is not a finite number");
        return it->get<double>();
      };
      sample.advantage = number("advantage");
      sample.reward = number("reward");
      if (const auto group = line.find("group_id"); group != line.end()) {
        if (group->is_string()) {
          sample.group_id = group->get<std::string>();
        } else if (group->is_number_integer()) {
          sample.group_id = group->dump();
        } else {
          bad(BadInput::wrong_type, "'group_id' is neither a string nor an integer");
        }
      }
      if (!sample.advantage && !(sample.reward && line.contains("group_id")))
        bad(BadInput::wrong_type, "needs 'advantage', or 'reward' and 'group_id'");
      sample.source = reader_.where();
      validate_document(sample.document(), options_);
      return true;
    } catch (const BadLine& bad_line) {
      reader_.reject(bad_line);
    }
  }
  return false;
}

void compute_group_advantages(std::vector<RolloutSample>& samples, bool scale_by_std,
                              double epsilon) {
  std::map<std::string, std::vector<double>> rewards;  // group_id -> rewards of its samples
  for (const RolloutSample& s : samples) {
    if (s.advantage) continue;
    check(s.reward.has_value(), "[data] ", s.source, ": neither 'advantage' nor 'reward'");
    rewards[s.group_id].push_back(*s.reward);
  }
  std::map<std::string, std::pair<double, double>> moments;  // group_id -> (mean, unbiased std)
  for (const auto& [group, values] : rewards) {
    double mean = 0, squares = 0;
    for (double r : values) mean += r;
    mean /= static_cast<double>(values.size());
    for (double r : values) squares += (r - mean) * (r - mean);
    const double std = values.size() > 1 ? std::sqrt(squares / (values.size() - 1)) : 0.0;
    moments[group] = {mean, std};
  }
  for (RolloutSample& s : samples) {
    if (s.advantage) continue;
    if (rewards[s.group_id].size() < 2) {
      s.advantage = 0.0;
      continue;
    }
    const auto [mean, std] = moments[s.group_id];
    s.advantage = scale_by_std ? (*s.reward - mean) / (std + epsilon) : *s.reward - mean;
  }
}

}  // namespace tandem
