#include "tandem/eval/regeneration.h"

#include <algorithm>

#include "tandem/core/error.h"
#include "tandem/data/sampler.h"

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

bool Regenerator::start(Conversation& conversation) const {
  if (!has_user_turn(conversation.in)) {
    conversation.out.rejected =
        BadLine(BadInput::no_user_turn, "the conversation has no user message");
    return false;
  }
  return answer_due(conversation);
}

// Copies the conversation's messages up to its next answer into the output; true when an answer
// is due there (a run of answers, skipped, or the end after a user or tool message).
bool Regenerator::answer_due(Conversation& conversation) {
  const std::vector<ChatMessage>& in = conversation.in;
  std::vector<ChatMessage>& messages = conversation.out.messages;
  size_t& next = conversation.next;
  while (next < in.size() && !is_answer(in[next])) messages.push_back(in[next++]);
  if (next < in.size()) {
    while (next < in.size() && is_answer(in[next])) ++next;
    return true;
  }
  return !messages.empty() &&
         (messages.back().role == ChatRole::user || messages.back().role == ChatRole::tool);
}

std::optional<std::vector<int64_t>> Regenerator::prompt(Conversation& conversation) const {
  ChatEncodeOptions with_header;
  with_header.add_generation_prompt = true;
  with_header.tools = conversation.tools;
  std::vector<int32_t> ids;
  try {
    ids = encode_chat(tokenizer_, chat_template_, conversation.out.messages, with_header).ids;
  } catch (const Error& e) {  // the template refused this conversation
    conversation.out.rejected = BadLine(BadInput::template_error, e.what());
    return std::nullopt;
  }
  const int64_t length = static_cast<int64_t>(ids.size());
  if (length + options_.max_new_tokens > max_length_) {
    conversation.out.rejected = BadLine(
        BadInput::too_long, "the prompt of answer " +
                                std::to_string(conversation.out.answer_tokens.size() + 1) + " is " +
                                std::to_string(length) + " tokens: with max_new_tokens " +
                                std::to_string(options_.max_new_tokens) +
                                " it exceeds max_length " + std::to_string(max_length_));
    return std::nullopt;
  }
  return std::vector<int64_t>(ids.begin(), ids.end());
}

bool Regenerator::take_answer(Conversation& conversation, const Generation& answer) const {
  std::vector<int32_t> tokens(answer.tokens.begin(), answer.tokens.end());
  const bool stopped = !tokens.empty() &&
                       std::find(decode_.stop_ids.begin(), decode_.stop_ids.end(), tokens.back()) !=
                           decode_.stop_ids.end();
  conversation.out.answer_tokens.push_back(static_cast<int64_t>(tokens.size()));
  conversation.out.answer_stopped.push_back(stopped);
  if (stopped) tokens.pop_back();
  conversation.out.messages.push_back(
      {ChatRole::assistant, tokenizer_.decode(tokens, /*skip_special_tokens=*/true), {}});
  return answer_due(conversation);
}

Regenerated Regenerator::finish(Conversation& conversation) {
  if (conversation.out.rejected) conversation.out.messages.clear();
  return std::move(conversation.out);
}

std::vector<Regenerated> Regenerator::run(
    const std::vector<std::vector<ChatMessage>>& conversations, at::Generator* generator,
    const std::vector<jinja::Value>& tools) const {
  const size_t count = conversations.size();
  std::vector<Conversation> state(count);
  std::vector<size_t> due;
  for (size_t c = 0; c < count; ++c) {
    state[c].in = conversations[c];
    state[c].tools = c < tools.size() ? tools[c] : jinja::Value();
    if (start(state[c])) due.push_back(c);
  }
  // At each turn, the answers every conversation still needs are generated as one batch.
  while (!due.empty()) {
    std::vector<size_t> batch;
    std::vector<std::vector<int64_t>> prompts;
    for (size_t c : due) {
      if (auto ids = prompt(state[c])) {
        batch.push_back(c);
        prompts.push_back(std::move(*ids));
      }
    }
    std::vector<Generation> answers;
    if (!prompts.empty())
      answers = generate(model_, prompts, decode_, options_.sampling, generator);
    due.clear();
    for (size_t i = 0; i < batch.size(); ++i)
      if (take_answer(state[batch[i]], answers[i])) due.push_back(batch[i]);
  }
  std::vector<Regenerated> out;
  for (Conversation& conversation : state) out.push_back(finish(conversation));
  return out;
}

RegenerationStream::RegenerationStream(const Regenerator& regenerator, int64_t rows)
    : regenerator_(regenerator),
      generator_(regenerator.model(), regenerator.decode_options(), regenerator.options().sampling,
                 rows) {}

void RegenerationStream::add(int64_t key, std::vector<ChatMessage> conversation, jinja::Value tools,
                             uint64_t seed) {
  check(!conversations_.count(key), "[regenerate] conversation ", key, " is already in flight");
  Flight& flight = conversations_[key];
  flight.conversation.in = std::move(conversation);
  flight.conversation.tools = std::move(tools);
  flight.seed = seed;
  if (!regenerator_.start(flight.conversation) || !queue_answer(key, flight)) {
    complete_.emplace_back(key, Regenerator::finish(flight.conversation));
    conversations_.erase(key);
  }
}

bool RegenerationStream::queue_answer(int64_t key, Flight& flight) {
  std::optional<std::vector<int64_t>> ids = regenerator_.prompt(flight.conversation);
  if (!ids) return false;
  const uint64_t answer = flight.conversation.out.answer_tokens.size();
  const int64_t request = generator_.submit(std::move(*ids), stream_seed(flight.seed, answer));
  request_to_key_[request] = key;
  return true;
}

std::vector<std::pair<int64_t, Regenerated>> RegenerationStream::next_complete() {
  while (complete_.empty()) {
    const auto finished = generator_.next_finished();
    if (finished.empty()) break;
    for (const auto& [request, answer] : finished) {
      const int64_t key = request_to_key_.at(request);
      request_to_key_.erase(request);
      Flight& flight = conversations_.at(key);
      if (!regenerator_.take_answer(flight.conversation, answer) || !queue_answer(key, flight)) {
        complete_.emplace_back(key, Regenerator::finish(flight.conversation));
        conversations_.erase(key);
      }
    }
  }
  std::vector<std::pair<int64_t, Regenerated>> out = std::move(complete_);
  complete_.clear();
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

}  // namespace tandem
