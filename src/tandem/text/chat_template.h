#pragma once
// Chat templates rendered natively, byte for byte what the published Jinja templates produce
// through transformers' apply_chat_template, plus the byte spans the loss covers.
//
//   llama3  Meta-Llama-3-8B-Instruct: `<|begin_of_text|>` (the template's bos_token) before the
//           first message, `<|start_header_id|>{role}<|end_header_id|>\n\n{content|trim}<|eot_id|>`
//           per message, no default system prompt.
//   chatml  Qwen2.5-Instruct: `<|im_start|>{role}\n{content}<|im_end|>\n` per message; when the
//           first message is not a system message the template puts
//           "You are Qwen, created by Alibaba Cloud. You are a helpful assistant." first.
//   qwen2   Qwen2-Instruct: the same ChatML layout with the default system prompt
//           "You are a helpful assistant.".
//   chatml-plain  ChatML with no default system prompt (the template in the Qwen2 tokenizer
//           fixture's tokenizer_config.json).
//
// The loss covers each assistant message's content plus its end-of-turn token (`<|eot_id|>`,
// `<|im_end|>`), as SpecForge and TRL's assistant masks do: the model must learn to stop. The
// role header and the newline after `<|im_end|>` are not covered.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem {

class Tokenizer;

enum class ChatRole { system, user, assistant };

/// "system", "user", "assistant".
std::string_view chat_role_name(ChatRole role);

struct ChatMessage {
  ChatRole role;
  std::string content;  // UTF-8
};

/// A half-open byte range [begin, end) of a rendered text.
struct ByteSpan {
  size_t begin = 0;
  size_t end = 0;
  bool operator==(const ByteSpan&) const = default;
};

struct RenderedChat {
  std::string text;
  /// One span per assistant message, in order: its content and end-of-turn token.
  std::vector<ByteSpan> assistant_spans;
};

class ChatTemplate {
 public:
  /// "llama3", "chatml", "qwen2" or "chatml-plain"; anything else throws naming the known ones.
  static ChatTemplate from_name(std::string_view name);
  /// Every name from_name accepts.
  static std::vector<std::string> names();

  const std::string& name() const { return name_; }
  /// The text that ends every turn: "<|eot_id|>" or "<|im_end|>".
  const std::string& end_of_turn() const { return end_of_turn_; }
  /// The system prompt the template inserts when the conversation has none ("" if none).
  const std::string& default_system_prompt() const { return default_system_; }

  /// Renders `messages` as the reference template does; `add_generation_prompt` appends the
  /// assistant header a generation continues from.
  RenderedChat render(const std::vector<ChatMessage>& messages,
                      bool add_generation_prompt = false) const;

 private:
  enum class Layout { llama3, chatml };
  ChatTemplate(std::string name, Layout layout, std::string default_system, bool system_on_empty);

  std::string name_;
  Layout layout_;
  std::string default_system_;
  bool system_on_empty_;  // Qwen2.5 writes its default system block even with no messages
  std::string end_of_turn_;
};

struct ChatTokens {
  std::vector<int32_t> ids;        // (T,)
  std::vector<uint8_t> loss_mask;  // (T,) 1 on assistant content and end-of-turn tokens
};

struct ChatEncodeOptions {
  bool add_generation_prompt = false;
  /// Only the last assistant message is trained (every earlier one is context).
  bool last_assistant_only = false;
};

/// Renders and tokenizes a whole conversation in one pass (pieces tokenized apart would split
/// BPE merges differently) and marks the tokens lying wholly inside an assistant span.
ChatTokens encode_chat(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                       const std::vector<ChatMessage>& messages,
                       const ChatEncodeOptions& options = {});

/// Tokenizes `text` whole and marks the tokens whose byte range lies inside one of `spans`.
ChatTokens encode_with_spans(const Tokenizer& tokenizer, std::string_view text,
                             const std::vector<ByteSpan>& spans);

/// 1 for each token whose byte range [begin, end) lies inside one of `spans` (sorted, disjoint);
/// a token straddling a span boundary is not trained.
std::vector<uint8_t> mask_tokens_in_spans(const std::vector<std::pair<size_t, size_t>>& offsets,
                                          const std::vector<ByteSpan>& spans);

/// Python's str.strip() (Jinja's `trim`) on UTF-8: removes leading and trailing code points
/// that Python counts as whitespace.
std::string_view python_strip(std::string_view text);

}  // namespace tandem
