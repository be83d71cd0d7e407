#include "tandem/text/chat_template.h"

#include <algorithm>

#include "tandem/core/error.h"
#include "tandem/text/tokenizer.h"

namespace tandem {

namespace {

// Code points Python's str.isspace() accepts (what Jinja's `trim` strips).
bool is_python_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

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
  }
  return "?";
}

std::string_view python_strip(std::string_view text) {
  size_t begin = 0;
  while (begin < text.size()) {
    uint32_t c;
    const size_t length = decode_at(text, begin, c);
    if (!is_python_space(c)) break;
    begin += length;
  }
  size_t end = text.size();
  while (end > begin) {
    size_t start = end - 1;  // back to the lead byte of the last code point
    while (start > begin && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80 && end - start < 4)
      --start;
    uint32_t c;
    if (decode_at(text, start, c) != end - start || !is_python_space(c)) break;
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
  if (name == "llama3") return ChatTemplate("llama3", Layout::llama3, "", false);
  if (name == "chatml") return ChatTemplate("chatml", Layout::chatml, kQwen25System, true);
  if (name == "qwen2") return ChatTemplate("qwen2", Layout::chatml, kQwen2System, false);
  if (name == "chatml-plain") return ChatTemplate("chatml-plain", Layout::chatml, "", false);
  throw Error("[chat] unknown chat template '", name,
              "' (known: llama3, chatml, qwen2, chatml-plain)");
}

RenderedChat ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt) const {
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
  RenderedChat rendered = chat_template.render(messages, options.add_generation_prompt);
  std::vector<ByteSpan>& spans = rendered.assistant_spans;
  if (options.last_assistant_only && spans.size() > 1) spans.erase(spans.begin(), spans.end() - 1);
  // The templates write BOS themselves: no special tokens added here.
  return encode_with_spans(tokenizer, rendered.text, spans);
}

}  // namespace tandem
