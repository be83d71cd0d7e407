#include "tandem/text/chat_template.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "tandem/core/error.h"
#include "tandem/core/hash.h"
#include "tandem/core/json_parse.h"
#include "tandem/text/jinja.h"
#include "tandem/text/jinja_json.h"
#include "tandem/text/tokenizer.h"
#include "tandem/text/utf8.h"

namespace tandem {

namespace {

// Decodes the code point starting at text[i]; returns its byte length (1 for an invalid byte,
// which then counts as a non-space code point).
size_t decode_at(std::string_view text, size_t i, uint32_t& code_point) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  const uint8_t lead = byte(i);
  size_t length = lead < 0x80           ? 1
                  : (lead >> 5) == 0x6  ? 2
                  : (lead >> 4) == 0xE  ? 3
                  : (lead >> 3) == 0x1E ? 4
                                        : 0;
  if (length == 0 || i + length > text.size()) {
    code_point = 0xFFFFFFFF;
    return 1;
  }
  code_point = length == 1 ? lead : lead & (0x7F >> length);
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) {
      code_point = 0xFFFFFFFF;
      return 1;
    }
    code_point = (code_point << 6) | (byte(i + k) & 0x3F);
  }
  return length;
}

const char* kLlama3Bos = "<|begin_of_text|>";
const char* kQwen25System = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
const char* kQwen2System = "You are a helpful assistant.";

}  // namespace

std::string_view chat_role_name(ChatRole role) {
  switch (role) {
    case ChatRole::system:
      return "system";
    case ChatRole::user:
      return "user";
    case ChatRole::assistant:
      return "assistant";
    case ChatRole::tool:
      return "tool";
  }
  return "?";
}

std::string_view python_strip(std::string_view text) {
  size_t begin = 0;
  while (begin < text.size()) {
    uint32_t c;
    const size_t length = decode_at(text, begin, c);
    if (!utf8::is_python_space(c)) break;
    begin += length;
  }
  size_t end = text.size();
  while (end > begin) {
    size_t start = end - 1;  // back to the lead byte of the last code point
    while (start > begin && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80 && end - start < 4)
      --start;
    uint32_t c;
    if (decode_at(text, start, c) != end - start || !utf8::is_python_space(c)) break;
    end = start;
  }
  return text.substr(begin, end - begin);
}

ChatTemplate::ChatTemplate(std::string name, Layout layout, std::string default_system,
                           bool system_on_empty)
    : name_(std::move(name)),
      layout_(layout),
      default_system_(std::move(default_system)),
      system_on_empty_(system_on_empty),
      end_of_turn_(layout == Layout::llama3 ? "<|eot_id|>" : "<|im_end|>") {}

std::vector<std::string> ChatTemplate::names() {
  return {"llama3", "chatml", "qwen2", "chatml-plain"};
}

ChatTemplate ChatTemplate::from_name(std::string_view name) {
  ChatTemplate out = [&] {
    if (name == "llama3") return ChatTemplate("llama3", Layout::llama3, "", false);
    if (name == "chatml") return ChatTemplate("chatml", Layout::chatml, kQwen25System, true);
    if (name == "qwen2") return ChatTemplate("qwen2", Layout::chatml, kQwen2System, false);
    if (name == "chatml-plain") return ChatTemplate("chatml-plain", Layout::chatml, "", false);
    throw Error("[chat] unknown chat template '", name,
                "' (known: auto, a path to a .jinja file, llama3, chatml, qwen2, chatml-plain)");
  }();
  out.fingerprint_ = out.name_;
  return out;
}

ChatTemplate ChatTemplate::from_jinja(const std::string& source, const std::string& origin,
                                      jinja::Dict globals, std::string end_of_turn) {
  ChatTemplate out(origin, Layout::jinja, "", false);
  out.jinja_ = std::make_shared<const jinja::Template>(source, origin);
  out.globals_ = std::move(globals);
  out.end_of_turn_ = std::move(end_of_turn);
  Hasher hasher;
  hasher.update_field("jinja").update_field(source);
  for (const auto& [key, value] : out.globals_.items)
    hasher.update_field(key).update_field(jinja::to_repr(value));
  out.fingerprint_ = "jinja:" + hex64(hasher.digest());
  return out;
}

namespace {

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  check(static_cast<bool>(in), "[chat] cannot read ", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A special token of tokenizer_config.json: a string, or an AddedToken object's "content".
std::optional<std::string> special_token(const nlohmann::json& config, const char* key) {
  const auto found = config.find(key);
  if (found == config.end()) return std::nullopt;
  if (found->is_string()) return found->get<std::string>();
  if (found->is_object() && found->contains("content") && (*found)["content"].is_string())
    return (*found)["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

ChatTemplate ChatTemplate::resolve(const std::string& spec, const std::string& tokenizer_dir,
                                   const std::string& kwargs) {
  const bool is_file = spec.size() > 6 && spec.compare(spec.size() - 6, 6, ".jinja") == 0;
  if (!spec.empty() && spec != "auto" && !is_file) {
    check(kwargs.empty(), "[chat] template kwargs apply to Jinja templates; the built-in '", spec,
          "' takes none");
    return from_name(spec);
  }
  // The tokenizer directory's special tokens, and its template.
  namespace fs = std::filesystem;
  const fs::path dir(tokenizer_dir);
  nlohmann::json config = nlohmann::json::object();
  const fs::path config_path = dir / "tokenizer_config.json";
  if (!tokenizer_dir.empty() && fs::exists(config_path)) {
    try {
      config = parse_json_text(read_text(config_path));
    } catch (const JsonTextError& e) {
      throw Error("[chat] ", config_path.string(), ": ", e.what());
    }
    check(config.is_object(), "[chat] ", config_path.string(), ": not a JSON object");
  }
  // The special tokens transformers passes (its special_tokens_map).
  jinja::Dict globals;
  for (const char* key :
       {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"})
    if (const auto token = special_token(config, key)) globals.set(key, jinja::Value(*token));
  if (const auto extra = config.find("additional_special_tokens");
      extra != config.end() && extra->is_array()) {
    std::vector<jinja::Value> tokens;
    for (const auto& item : *extra) {
      nlohmann::json holder = {{"token", item}};
      if (const auto token = special_token(holder, "token")) tokens.emplace_back(*token);
    }
    globals.set("additional_special_tokens", jinja::Value::list(std::move(tokens)));
  }
  if (!kwargs.empty()) {
    nlohmann::ordered_json parsed;
    try {
      parse_json_text(kwargs);  // nesting bounded
      parsed = nlohmann::ordered_json::parse(kwargs);
    } catch (const std::exception& e) {
      throw Error("[chat] template kwargs '", kwargs, "': not JSON: ", e.what());
    }
    check(parsed.is_object(), "[chat] template kwargs must be a JSON object, e.g. ",
          "{\"enable_thinking\": false}; got '", kwargs, "'");
    for (const auto& [key, value] : parsed.items()) {
      check(key != "messages" && key != "tools" && key != "add_generation_prompt",
            "[chat] template kwargs cannot set '", key, "': the conversation sets it");
      globals.set(key, jinja::value_from_json(value));
    }
  }
  const std::string eos = special_token(config, "eos_token").value_or("");
  if (is_file) return from_jinja(read_text(spec), spec, std::move(globals), eos);
  const fs::path jinja_file = dir / "chat_template.jinja";
  if (!tokenizer_dir.empty() && fs::exists(jinja_file))
    return from_jinja(read_text(jinja_file), jinja_file.string(), std::move(globals), eos);
  const auto found = config.find("chat_template");
  if (found != config.end() && found->is_string())
    return from_jinja(found->get<std::string>(), config_path.string(), std::move(globals), eos);
  if (found != config.end() && found->is_array()) {
    // Several named templates: the one named "default" is what apply_chat_template uses.
    for (const auto& entry : *found)
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string())
        return from_jinja(entry["template"].get<std::string>(), config_path.string() + " (default)",
                          std::move(globals), eos);
    throw Error("[chat] ", config_path.string(),
                ": chat_template lists named templates but none is named 'default'; name one "
                "with data.chat_template (a .jinja file)");
  }
  check(found == config.end() || found->is_null(), "[chat] ", config_path.string(),
        ": chat_template is neither a string nor a list of named templates");
  check(kwargs.empty(), "[chat] template kwargs given, but ",
        tokenizer_dir.empty() ? std::string("no tokenizer directory") : tokenizer_dir,
        " has no chat template (chat_template.jinja or tokenizer_config.json)");
  return from_name("llama3");
}

RenderedChat ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt, const jinja::Value& tools,
                                  bool last_assistant_only) const {
  if (layout_ == Layout::jinja)
    return render_jinja(messages, add_generation_prompt, tools, last_assistant_only);
  // The built-in layouts know string contents of system, user and assistant messages only.
  const char* use_own = "; use the model's own template (data.chat_template: auto)";
  check(tools.is_undefined() || tools.is_none(), "[chat] the built-in template '", name_,
        "' cannot render tool definitions", use_own);
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    check(message.role != ChatRole::tool, "[chat] the built-in template '", name_,
          "' has no tool turns (message ", i, ")", use_own);
    for (const char* field : {"role", "content", "tool_calls", "reasoning_content"})
      check(!message.fields.find(field), "[chat] the built-in template '", name_,
            "' cannot render message ", i, "'s '", field, "' as the data gives it", use_own);
  }
  RenderedChat out;
  std::string& text = out.text;
  const auto append_turn = [&](ChatRole role, std::string_view content) {
    if (layout_ == Layout::llama3) {
      text.append("<|start_header_id|>")
          .append(chat_role_name(role))
          .append("<|end_header_id|>\n\n");
      content = python_strip(content);  // the template's `message['content'] | trim`
    } else {
      text.append("<|im_start|>").append(chat_role_name(role)).append("\n");
    }
    const size_t content_begin = text.size();
    text.append(content).append(end_of_turn_);
    if (role == ChatRole::assistant) out.assistant_spans.push_back({content_begin, text.size()});
    if (layout_ == Layout::chatml) text.push_back('\n');
  };

  if (layout_ == Layout::llama3) {
    if (!messages.empty()) text.append(kLlama3Bos);
  } else {
    // Qwen2.5 writes its system block before the loop, even for an empty conversation; Qwen2
    // writes the default inside the loop, on the first message.
    const bool has_system = !messages.empty() && messages[0].role == ChatRole::system;
    if (!has_system && !default_system_.empty() && (system_on_empty_ || !messages.empty()))
      append_turn(ChatRole::system, default_system_);
  }
  for (const ChatMessage& message : messages) append_turn(message.role, message.content);

  if (add_generation_prompt)
    text.append(layout_ == Layout::llama3 ? "<|start_header_id|>assistant<|end_header_id|>\n\n"
                                          : "<|im_start|>assistant\n");
  return out;
}

namespace {

// A message as transformers hands it to a template: its fields, with the reasoning under both
// names templates read (reasoning_content, and thinking for gpt-oss-style templates) whichever
// of reasoning_content, thinking or reasoning the data used; `thinking` first, as transformers
// orders it.
jinja::Value message_value(const ChatMessage& message) {
  const jinja::Value* reasoning = nullptr;
  for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
    const jinja::Value* found = message.fields.find(key);
    if (found && !found->is_none() && !found->is_undefined()) {
      reasoning = found;
      break;
    }
  }
  jinja::Dict dict;
  if (reasoning) dict.set("thinking", *reasoning);
  dict.set("role", jinja::Value(std::string(chat_role_name(message.role))));
  dict.set("content", jinja::Value(message.content));
  for (const auto& [key, value] : message.fields.items) dict.set(key, value);
  if (reasoning) dict.set("reasoning_content", *reasoning);
  return jinja::Value::dict(std::move(dict));
}

}  // namespace

std::string ChatTemplate::render_jinja_text(
    const std::vector<ChatMessage>& messages, bool add_generation_prompt, const jinja::Value& tools,
    std::vector<std::pair<size_t, size_t>>* generation) const {
  jinja::Dict variables = globals_;
  std::vector<jinja::Value> list;
  list.reserve(messages.size());
  for (const ChatMessage& message : messages) list.push_back(message_value(message));
  variables.set("messages", jinja::Value::list(std::move(list)));
  variables.set("tools", tools.is_undefined() ? jinja::Value::none() : tools);
  variables.set("documents", jinja::Value::none());
  variables.set("add_generation_prompt", jinja::Value(add_generation_prompt));
  jinja::Rendered rendered = jinja_->render(variables);
  if (generation) *generation = std::move(rendered.generation_spans);
  return std::move(rendered.text);
}

RenderedChat ChatTemplate::render_jinja(const std::vector<ChatMessage>& messages,
                                        bool add_generation_prompt, const jinja::Value& tools,
                                        bool last_assistant_only) const {
  RenderedChat out;
  std::vector<std::pair<size_t, size_t>> generation;
  out.text = render_jinja_text(messages, add_generation_prompt, tools, &generation);
  if (jinja_->has_generation()) {
    for (const auto& [begin, end] : generation)
      if (end > begin) out.assistant_spans.push_back({begin, end});
    if (last_assistant_only && out.assistant_spans.size() > 1)
      out.assistant_spans.erase(out.assistant_spans.begin(), out.assistant_spans.end() - 1);
    return out;
  }
  if (add_generation_prompt) return out;  // a prompt: nothing of it is trained
  // No {% generation %}: each assistant message's span from renderings of the conversation up
  // to it and through it, which must both be prefixes of the whole.
  size_t last = messages.size();
  for (size_t i = 0; i < messages.size(); ++i)
    if (messages[i].role == ChatRole::assistant) last = i;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role != ChatRole::assistant || (last_assistant_only && i != last)) continue;
    const std::vector<ChatMessage> before(messages.begin(), messages.begin() + i);
    const std::vector<ChatMessage> through(messages.begin(), messages.begin() + i + 1);
    const std::string head = render_jinja_text(before, true, tools, nullptr);
    const std::string upto = render_jinja_text(through, false, tools, nullptr);
    const bool prefixes =
        out.text.compare(0, upto.size(), upto) == 0 && upto.compare(0, head.size(), head) == 0;
    check(prefixes, "[chat] ", name_, ": cannot find the loss span of message ", i,
          " (assistant): the template renders the conversation up to it differently from the "
          "whole conversation (it rewrites earlier turns, as Qwen3's drops the reasoning of turns "
          "before the last user message). Train on the last turn only (data.last_turn_only), or "
          "use a template with {% generation %} blocks");
    size_t end = upto.size();
    while (end > head.size() && (upto[end - 1] == '\n' || upto[end - 1] == ' ')) --end;
    if (end > head.size()) out.assistant_spans.push_back({head.size(), end});
  }
  return out;
}

void cut_reasoning(const std::vector<ChatMessage>& messages, RenderedChat& rendered) {
  // Each assistant message's reasoning (as templates write it: stripped of surrounding
  // whitespace), found in order in the text, is removed from the spans it lies in.
  size_t from = 0;
  for (const ChatMessage& message : messages) {
    if (message.role != ChatRole::assistant) continue;
    const jinja::Value* reasoning = nullptr;
    for (const char* key : {"reasoning_content", "thinking", "reasoning"})
      if (const jinja::Value* found = message.fields.find(key); found && found->is_string()) {
        reasoning = found;
        break;
      }
    if (!reasoning) continue;
    const std::string_view text = python_strip(reasoning->as_string());
    if (text.empty()) continue;
    const size_t at = rendered.text.find(text, from);
    if (at == std::string::npos) continue;  // the template did not write it (an earlier turn)
    const size_t end = at + text.size();
    std::vector<ByteSpan> kept;
    for (const ByteSpan& span : rendered.assistant_spans) {
      if (span.end <= at || span.begin >= end) {
        kept.push_back(span);
        continue;
      }
      if (span.begin < at) kept.push_back({span.begin, at});
      if (end < span.end) kept.push_back({end, span.end});
    }
    rendered.assistant_spans = std::move(kept);
    from = end;
  }
}

std::string ChatTemplate::render_text(const std::vector<ChatMessage>& messages,
                                      bool add_generation_prompt, const jinja::Value& tools) const {
  if (layout_ == Layout::jinja)
    return render_jinja_text(messages, add_generation_prompt, tools, nullptr);
  return render(messages, add_generation_prompt, tools).text;
}

std::vector<uint8_t> mask_tokens_in_spans(const std::vector<std::pair<size_t, size_t>>& offsets,
                                          const std::vector<ByteSpan>& spans) {
  std::vector<uint8_t> mask(offsets.size(), 0);
  for (size_t t = 0; t < offsets.size(); ++t) {
    const auto [begin, end] = offsets[t];
    // The last span starting at or before the token is the only one that can hold it.
    auto after = std::upper_bound(spans.begin(), spans.end(), begin,
                                  [](size_t b, const ByteSpan& span) { return b < span.begin; });
    if (after == spans.begin()) continue;
    mask[t] = end <= std::prev(after)->end;
  }
  return mask;
}

ChatTokens encode_with_spans(const Tokenizer& tokenizer, std::string_view text,
                             const std::vector<ByteSpan>& spans) {
  Encoding encoding = tokenizer.encode_with_offsets(text, /*add_special_tokens=*/false);
  return {std::move(encoding.ids), mask_tokens_in_spans(encoding.offsets, spans)};
}

ChatTokens encode_chat(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                       const std::vector<ChatMessage>& messages, const ChatEncodeOptions& options) {
  RenderedChat rendered = chat_template.render(messages, options.add_generation_prompt,
                                               options.tools, options.last_assistant_only);
  std::vector<ByteSpan>& spans = rendered.assistant_spans;
  if (options.last_assistant_only && spans.size() > 1) spans.erase(spans.begin(), spans.end() - 1);
  // The templates write BOS themselves: no special tokens added here.
  return encode_with_spans(tokenizer, rendered.text, spans);
}

}  // namespace tandem
