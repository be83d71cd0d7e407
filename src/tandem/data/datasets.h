#pragma once
// The JSONL dataset formats (docs/data.md), streamed one line at a time:
//
//   conversations  {"id": ..., "conversations": [{"role": "system|user|assistant|tool",
//                  "content": "..."}, ...]}; also "messages" for the list, and ShareGPT's
//                  {"from": "human|gpt|system", "value": ...} (aliases human -> user;
//                  gpt, chatgpt, bing, bard -> assistant). Rendered with a chat template,
//                  tokenized whole; the loss mask covers assistant content + end-of-turn
//                  (text/chat_template.h). Other roles follow DatasetOptions::unknown_roles.
//   text           {"text": "..."}: plain text for pre-training, tokenized with the tokenizer's
//                  special tokens (e.g. a leading BOS); the loss covers every token.
//   pretokenized   {"input_ids": [...], "loss_mask": [...]} (loss_mask optional: all ones;
//                  values 0/1 or booleans).
//   preference     {"prompt", "chosen", "rejected"}: each a string or a message list. A string
//                  prompt is one user message and a string completion one assistant message;
//                  prompt+chosen and prompt+rejected are rendered and tokenized whole, the loss
//                  covering the completion's assistant messages only. Without "prompt" (TRL's
//                  implicit prompt) the prompt is what chosen and rejected share from their
//                  start; completions that repeat the prompt's messages (UltraFeedback-style
//                  rows) have them removed, so the prompt is rendered once
//                  (split_preference).
//   rollout        {"prompt_ids": [...], "completion_ids": [...], "old_logprobs": [...]} plus
//                  "advantage", or "reward" and "group_id" (string or integer).
//
// Every document is checked: empty, no trained token, longer than max_length, or an id outside
// [0, vocab_size) is a bad line, handled by `on_error` (data/jsonl.h).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tandem/data/document.h"
#include "tandem/data/heldout_split.h"
#include "tandem/data/jsonl.h"
#include "tandem/text/chat_template.h"

namespace tandem {

class Tokenizer;

enum class DataFormat { conversations, text, pretokenized, preference, rollout };

/// What a message whose role tandem does not know does to its conversation: the record is bad
/// (`error`, then `on_error` decides), the message is left out (`skip_turn`), or the record is
/// skipped and counted whatever `on_error` says (`skip_conversation`).
enum class UnknownRoles { error, skip_turn, skip_conversation };

/// The fields a format reads: the columns read from a Parquet file (by name; others are left
/// unread).
std::vector<std::string> columns_of(DataFormat format);

/// "error", "skip_turn" or "skip_conversation"; anything else throws.
UnknownRoles parse_unknown_roles(std::string_view text);

/// "conversations", "text", "pretokenized", "preference" or "rollout"; anything else throws.
DataFormat parse_data_format(std::string_view text);
std::string_view data_format_name(DataFormat format);

struct DatasetOptions {
  const Tokenizer* tokenizer = nullptr;  // required by conversations and preference
  std::string chat_template = "auto";    // ChatTemplate::resolve: auto, a .jinja path, a name
  std::string template_kwargs;           // a JSON object for Jinja templates ("" for none)
  int64_t max_length = 0;                // longest document in tokens; 0: no limit
  bool last_turn_only = false;           // conversations: train the last assistant turn only
  bool train_reasoning = true;           // conversations: the loss covers reasoning text
  UnknownRoles unknown_roles = UnknownRoles::error;
  OnError on_error = OnError::fail;
  int64_t vocab_size = 0;  // ids must lie in [0, vocab_size); 0: the tokenizer's, else unchecked
  HeldoutOptions heldout;  // records on the other side of a held-out split are passed over
  // Fields read from other keys or Parquet columns (data.columns): (field, column) pairs, each
  // field one the format reads (columns_of).
  std::vector<std::pair<std::string, std::string>> columns;

  /// vocab_size, else the tokenizer's vocab size, else 0 (no range check).
  int64_t effective_vocab_size() const;
};

/// The keys (and Parquet columns) a reader of `format` with `options` reads: columns_of(format)
/// with options.columns' renames, or every column while a held-out split hashes whole records
/// (empty). Throws Error naming data.columns when it maps a field the format does not read, or
/// two fields to one column.
std::vector<std::string> columns_to_read(DataFormat format, const DatasetOptions& options);

/// A preference pair: both documents share the prompt; the loss covers the completion only.
struct PreferencePair {
  TokenizedDocument chosen;
  TokenizedDocument rejected;
};

/// One RL rollout: a prompt, one sampled completion and the sampler's log-probabilities.
struct RolloutSample {
  std::vector<int32_t> prompt_ids;      // (P,)
  std::vector<int32_t> completion_ids;  // (C,)
  std::vector<float> old_logprobs;      // (C,) log π_old of each completion token
  std::optional<double> advantage;      // given, or computed by compute_group_advantages
  std::optional<double> reward;
  std::string group_id;  // samples of one prompt share it; "" when absent
  std::string source;    // "file:line"

  /// prompt_ids + completion_ids with the loss mask on the completion.
  TokenizedDocument document() const;
};

/// A line's text parsed keeping its objects' key order (Python's json module keeps it, and
/// templates write it back with tojson); null when `raw_line` is empty or not JSON.
nlohmann::ordered_json ordered_line(std::string_view raw_line);

/// The messages of one conversations line; throws BadLine (unknown_role, wrong_type, empty).
/// Each message's fields besides role and content go to Jinja templates in the key order of
/// `ordered` (ordered_line of the same line) when given, else in the JSON library's (sorted)
/// order.
std::vector<ChatMessage> parse_conversation(const nlohmann::json& line,
                                            const nlohmann::ordered_json& ordered = nullptr,
                                            UnknownRoles unknown_roles = UnknownRoles::error);

/// The role name a template sees for a message's role: aliases resolved ("human" is "user",
/// "gpt" "assistant"), spellings kept ("developer"), an unknown role as it is.
std::string rendered_role(const std::string& role);

/// The messages of a JSON message list (OpenAI's role/content or ShareGPT's from/value; `key`
/// names it in errors), each one's other fields in the key order of `ordered_list` when given.
/// Throws BadLine (unknown_role, wrong_type).
std::vector<ChatMessage> parse_messages(const nlohmann::json& list, const std::string& key,
                                        const nlohmann::ordered_json* ordered_list,
                                        UnknownRoles unknown_roles);

/// A preference record's prompt and its two completions, as messages.
struct PreferenceMessages {
  std::vector<ChatMessage> prompt, chosen, rejected;
};

/// The prompt and completions of a preference line: "prompt" given (a string is one user
/// message, a string completion one assistant message), and completions that start with the
/// prompt's messages (UltraFeedback-style) have those removed; or, without "prompt", the
/// longest run of messages chosen and rejected share from their start (strings: their shared
/// text, backed off to a word start as TRL does). Throws BadLine (wrong_type) naming what is
/// wrong: no shared prompt, one completion repeating the prompt and the other not, an empty
/// completion.
PreferenceMessages split_preference(const nlohmann::json& line,
                                    const nlohmann::ordered_json& ordered = nullptr,
                                    UnknownRoles unknown_roles = UnknownRoles::error);

/// The line's `tools` (tool definitions for the template), undefined when absent, in the key
/// order of `ordered` when given; throws BadLine when it is not a list.
jinja::Value parse_tools(const nlohmann::json& line,
                         const nlohmann::ordered_json& ordered = nullptr);

/// The prompt of a document: the tokens before its first trained token (for a conversation: up
/// to and including the assistant header); for a document trained from its start or not at
/// all, its first `fallback_tokens` tokens. (prompt length,)
std::vector<int64_t> prompt_of(const TokenizedDocument& document, int64_t fallback_tokens);

/// Checks one document against the options (empty, id range, max_length, no trained token);
/// throws BadLine.
void validate_document(const TokenizedDocument& document, const DatasetOptions& options);

/// Streams the documents of a conversations, pretokenized or preference file. A preference
/// line yields two documents: chosen then rejected.
class DocumentStream {
 public:
  DocumentStream(const std::string& path, DataFormat format, const DatasetOptions& options);

  /// The documents of the next good line (1, or 2 for preference); false at the end.
  bool next(std::vector<TokenizedDocument>& documents);
  /// Documents per line: 2 for preference, else 1.
  int documents_per_record() const { return format_ == DataFormat::preference ? 2 : 1; }
  /// Line number (1-based) of the line the last next() returned.
  int64_t line() const { return reader_.line(); }
  const SkipCounts& skipped() const { return reader_.skipped(); }
  /// Records passed over as the other side of options.heldout (not bad, not counted as skipped).
  int64_t passed_over() const { return passed_over_; }

 private:
  std::vector<TokenizedDocument> parse(const nlohmann::json& line) const;
  /// The current record parsed keeping key order, its columns renamed (for Jinja templates).
  nlohmann::ordered_json ordered_record() const;
  TokenizedDocument encode(const std::vector<ChatMessage>& messages, bool last_only,
                           size_t first_trained_message, const jinja::Value& tools) const;

  DataFormat format_;
  DatasetOptions options_;
  std::optional<ChatTemplate> chat_template_;
  JsonlReader reader_;
  int64_t passed_over_ = 0;
};

/// Streams a rollout file.
class RolloutStream {
 public:
  RolloutStream(const std::string& path, const DatasetOptions& options);
  /// The next good sample; false at the end.
  bool next(RolloutSample& sample);
  const SkipCounts& skipped() const { return reader_.skipped(); }
  /// Records passed over as the other side of options.heldout.
  int64_t passed_over() const { return passed_over_; }

 private:
  DatasetOptions options_;
  JsonlReader reader_;
  int64_t passed_over_ = 0;
};

/// GRPO advantages for the samples without one: A = (r − mean_g r) / (std_g r + epsilon) over
/// each group_id (std unbiased, as TRL; without `scale_by_std`, Dr. GRPO's A = r − mean_g r).
/// A one-sample group gets A = 0. Throws when a sample has neither advantage nor reward.
void compute_group_advantages(std::vector<RolloutSample>& samples, bool scale_by_std = true,
                              double epsilon = 1e-4);

}  // namespace tandem
