#pragma once
// Chat templates: the model's own Jinja template (text/jinja.h) as transformers'
// apply_chat_template renders it, or one of four built-in layouts kept as a fallback, plus the
// byte spans the loss covers.
//
// A Jinja template gets what transformers passes: `messages` (each message's role, content and
// every other field the data gives it: tool_calls, reasoning_content, name, ...), `tools`,
// `add_generation_prompt`, the special tokens of tokenizer_config.json (bos_token, eos_token,
// unk_token, sep_token, pad_token, cls_token, mask_token, additional_special_tokens) and extra
// kwargs (enable_thinking, ...). Its loss spans are its
// `{% generation %}` blocks when it has them; otherwise each assistant message's span is found by
// rendering: [the conversation before it with the generation prompt, the conversation through
// it), less the whitespace the template writes after the turn. Both renderings must be prefixes
// of the whole conversation's; a template that rewrites earlier turns (Qwen3 drops the
// reasoning of turns before the last user message) cannot be split that way, and the error
// names the turn.
//
// The built-in layouts:
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
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tandem/text/jinja_value.h"

namespace tandem {

class Tokenizer;
namespace jinja {
class Template;
}

enum class ChatRole { system, user, assistant, tool };

/// "system", "user", "assistant", "tool".
std::string_view chat_role_name(ChatRole role);

struct ChatMessage {
  ChatRole role;
  std::string content;  // UTF-8
  /// Every other field of the message as the data gives it (tool_calls, reasoning_content,
  /// name, tool_call_id, ...; content when it is not a string), for Jinja templates; the role's
  /// own spelling when the data names it differently (ShareGPT's "gpt" is role "assistant").
  jinja::Dict fields;
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
  /// A Jinja template; `origin` names it in errors; `globals` are the special tokens and kwargs
  /// every render gets; `end_of_turn` the text a turn ends with (the tokenizer's eos_token).
  static ChatTemplate from_jinja(const std::string& source, const std::string& origin,
                                 jinja::Dict globals, std::string end_of_turn);
  /// What data.chat_template names: "auto" (or "") is the tokenizer directory's own template
  /// (chat_template.jinja, else tokenizer_config.json's chat_template; "llama3" when it has
  /// none); a path to a .jinja file; or a built-in name. `kwargs` (a JSON object's text, "" for
  /// none) go to Jinja templates beside the special tokens of the tokenizer directory.
  static ChatTemplate resolve(const std::string& spec, const std::string& tokenizer_dir,
                              const std::string& kwargs = "");

  /// The built-in name, or the Jinja template's origin.
  const std::string& name() const { return name_; }
  bool is_jinja() const { return jinja_ != nullptr; }
  /// What identifies the rendering (for caches): the name, or a hash of the Jinja source, its
  /// globals and kwargs.
  const std::string& fingerprint() const { return fingerprint_; }
  /// The text that ends every turn: "<|eot_id|>", "<|im_end|>", or a Jinja template's
  /// tokenizer eos_token ("" if none).
  const std::string& end_of_turn() const { return end_of_turn_; }
  /// The system prompt the template inserts when the conversation has none ("" if none).
  const std::string& default_system_prompt() const { return default_system_; }

  /// Renders `messages` as the reference template does; `add_generation_prompt` appends the
  /// assistant header a generation continues from; `tools` (a list, or undefined) goes to
  /// Jinja templates. `last_assistant_only`: only the last assistant message's span. A Jinja
  /// template without {% generation %} blocks gives spans only without the generation prompt.
  RenderedChat render(const std::vector<ChatMessage>& messages, bool add_generation_prompt = false,
                      const jinja::Value& tools = {}, bool last_assistant_only = false) const;
  /// The text alone (no loss spans looked for).
  std::string render_text(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                          const jinja::Value& tools = {}) const;

 private:
  enum class Layout { llama3, chatml, jinja };
  ChatTemplate(std::string name, Layout layout, std::string default_system, bool system_on_empty);
  RenderedChat render_jinja(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                            const jinja::Value& tools, bool last_assistant_only) const;
  std::string render_jinja_text(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt, const jinja::Value& tools,
                                std::vector<std::pair<size_t, size_t>>* generation) const;

  std::string name_;
  Layout layout_;
  std::string default_system_;
  bool system_on_empty_;  // Qwen2.5 writes its default system block even with no messages
  std::string end_of_turn_;
  std::string fingerprint_;
  std::shared_ptr<const jinja::Template> jinja_;
  jinja::Dict globals_;  // special tokens and kwargs
};

struct ChatTokens {
  std::vector<int32_t> ids;        // (T,)
  std::vector<uint8_t> loss_mask;  // (T,) 1 on assistant content and end-of-turn tokens
};

struct ChatEncodeOptions {
  bool add_generation_prompt = false;
  /// Only the last assistant message is trained (every earlier one is context).
  bool last_assistant_only = false;
  jinja::Value tools;  // the conversation's tool definitions (Jinja templates)
};

/// Renders and tokenizes a whole conversation in one pass (pieces tokenized apart would split
/// BPE merges differently) and marks the tokens lying wholly inside an assistant span.
ChatTokens encode_chat(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                       const std::vector<ChatMessage>& messages,
                       const ChatEncodeOptions& options = {});

/// Removes from `rendered`'s spans each assistant message's reasoning text (reasoning_content,
/// thinking or reasoning, stripped as templates write it) where the template wrote it inside a
/// span (data.train_reasoning: false). Apply it after choosing which messages' spans to keep:
/// it can split a span in two.
void cut_reasoning(const std::vector<ChatMessage>& messages, RenderedChat& rendered);

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
