#include "tandem/eval/regeneration.h"

#include <algorithm>

#include "tandem/core/error.h"

namespace tandem {

namespace {

// An assistant message the model answers with: not one that calls tools (its results follow it
// in the data, so it is kept as the data has it).
bool is_answer(const ChatMessage& message) {
  if (message.role != ChatRole::assistant) return false;
  const jinja::Value* calls = message.fields.find("tool_calls");
  return !calls || !calls->truthy();
}

bool has_user_turn(const std::vector<ChatMessage>& messages) {
  return std::any_of(messages.begin(), messages.end(),
                     [](const ChatMessage& m) { return m.role == ChatRole::user; });
}

}  // namespace

Regenerator::Regenerator(const FrozenModel& model, const Tokenizer& tokenizer,
                         const ChatTemplate& chat_template, const RegenerationOptions& options)
    : model_(model), tokenizer_(tokenizer), chat_template_(chat_template), options_(options) {
  check(options.max_new_tokens >= 1, "[regenerate] max_new_tokens must be >= 1");
  max_length_ =
      options.max_length > 0 ? options.max_length : model.config().max_position_embeddings;
  check(max_length_ > options.max_new_tokens, "[regenerate] max_length ", max_length_,
        " leaves no room for a prompt before max_new_tokens ", options.max_new_tokens);
  decode_.max_new_tokens = options.max_new_tokens;
  decode_.stop_ids = model.config().eos_token_ids;
  if (const auto end_of_turn = tokenizer.token_to_id(chat_template.end_of_turn()))
    if (std::find(decode_.stop_ids.begin(), decode_.stop_ids.end(), *end_of_turn) ==
        decode_.stop_ids.end())
      decode_.stop_ids.push_back(*end_of_turn);
  check(!decode_.stop_ids.empty(),
        "[regenerate] the model has no eos_token_id and the tokenizer "
        "has no ",
        chat_template.end_of_turn(), " token: answers could only end at max_new_tokens");
}

std::vector<Regenerated> Regenerator::run(
    const std::vector<std::vector<ChatMessage>>& conversations, at::Generator* generator,
    const std::vector<jinja::Value>& tools) const {
  const size_t count = conversations.size();
  std::vector<Regenerated> out(count);
  std::vector<size_t> next(count, 0);  // the next input message of each conversation
  // Copies the conversation's messages up to its next answer into the output; true when an
  // answer is due there (a run of answers, skipped, or the end after a user or tool message).
  auto answer_due = [&](size_t c) {
    const std::vector<ChatMessage>& in = conversations[c];
    std::vector<ChatMessage>& messages = out[c].messages;
    while (next[c] < in.size() && !is_answer(in[next[c]])) messages.push_back(in[next[c]++]);
    if (next[c] < in.size()) {
      while (next[c] < in.size() && is_answer(in[next[c]])) ++next[c];
      return true;
    }
    return !messages.empty() &&
           (messages.back().role == ChatRole::user || messages.back().role == ChatRole::tool);
  };
  std::vector<size_t> due;
  for (size_t c = 0; c < count; ++c) {
    if (!has_user_turn(conversations[c]))
      out[c].rejected = BadLine(BadInput::no_user_turn, "the conversation has no user message");
    else if (answer_due(c))
      due.push_back(c);
  }
  ChatEncodeOptions with_header;
  with_header.add_generation_prompt = true;
  while (!due.empty()) {
    std::vector<size_t> batch;
    std::vector<std::vector<int64_t>> prompts;
    for (size_t c : due) {
      std::vector<int32_t> ids;
      try {
        with_header.tools = c < tools.size() ? tools[c] : jinja::Value();
        ids = encode_chat(tokenizer_, chat_template_, out[c].messages, with_header).ids;
      } catch (const Error& e) {  // the template refused this conversation
        out[c].rejected = BadLine(BadInput::template_error, e.what());
        continue;
      }
      const int64_t length = static_cast<int64_t>(ids.size());
      if (length + options_.max_new_tokens > max_length_) {
        out[c].rejected =
            BadLine(BadInput::too_long,
                    "the prompt of answer " + std::to_string(out[c].answer_tokens.size() + 1) +
                        " is " + std::to_string(length) + " tokens: with max_new_tokens " +
                        std::to_string(options_.max_new_tokens) + " it exceeds max_length " +
                        std::to_string(max_length_));
        continue;
      }
      batch.push_back(c);
      prompts.emplace_back(ids.begin(), ids.end());
    }
    std::vector<Generation> answers;
    if (!prompts.empty())
      answers = generate(model_, prompts, decode_, options_.sampling, generator);
    due.clear();
    for (size_t i = 0; i < batch.size(); ++i) {
      const size_t c = batch[i];
      std::vector<int32_t> tokens(answers[i].tokens.begin(), answers[i].tokens.end());
      const bool stopped =
          !tokens.empty() && std::find(decode_.stop_ids.begin(), decode_.stop_ids.end(),
                                       tokens.back()) != decode_.stop_ids.end();
      out[c].answer_tokens.push_back(static_cast<int64_t>(tokens.size()));
      out[c].answer_stopped.push_back(stopped);
      if (stopped) tokens.pop_back();
      out[c].messages.push_back(
          {ChatRole::assistant, tokenizer_.decode(tokens, /*skip_special_tokens=*/true), {}});
      if (answer_due(c)) due.push_back(c);
    }
  }
  for (Regenerated& result : out)
    if (result.rejected) result.messages.clear();
  return out;
}

}  // namespace tandem
