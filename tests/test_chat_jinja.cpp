// Conversations through Jinja chat templates, end to end: the data reader's messages (tool
// calls, tool turns, reasoning, null content, tool definitions) rendered by ChatTemplate, token
// ids and loss masks, against transformers' renderer and HF tokenizers
// (tools/make_chat_jinja_fixtures.py); the demo's own template against the built-in layout it
// replaces; and how data.chat_template resolves.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tandem/core/error.h"
#include "tandem/data/datasets.h"
#include "tandem/text/chat_template.h"
#include "tandem/text/jinja_json.h"
#include "tandem/text/tokenizer.h"
#include "test_util.h"

namespace {

using namespace tandem;
namespace fs = std::filesystem;

nlohmann::ordered_json load_fixture() {
  std::ifstream in(tandem::testing::source_path("tests/fixtures/jinja/chats.json"));
  return nlohmann::ordered_json::parse(in);
}

std::vector<ByteSpan> spans_of(const nlohmann::ordered_json& list) {
  std::vector<ByteSpan> spans;
  for (const auto& span : list) spans.push_back({span[0].get<size_t>(), span[1].get<size_t>()});
  return spans;
}

TEST(ChatJinja, ConversationsRenderTokenizeAndMaskAsTransformersDoes) {
  const nlohmann::ordered_json fixture = load_fixture();
  const Tokenizer tokenizer =
      Tokenizer::from_file(tandem::testing::source_path(fixture["tokenizer"].get<std::string>()));
  int checked = 0, prefix_errors = 0;
  for (const auto& item : fixture["cases"]) {
    const std::string name = item["template"], conversation = item["conversation"];
    const bool agp = item["add_generation_prompt"];
    SCOPED_TRACE(name + " / " + conversation + (agp ? " + generation prompt" : ""));
    jinja::Dict globals;
    for (const auto& [key, value] : fixture["special_tokens"].items())
      globals.set(key, jinja::value_from_json(value));
    for (const auto& [key, value] : item["kwargs"].items())
      globals.set(key, jinja::value_from_json(value));
    const ChatTemplate chat_template = ChatTemplate::from_jinja(
        fixture["templates"][name].get<std::string>(), name, globals, "<|im_end|>");
    // The conversation as a data line, read by the data reader (key order kept).
    const nlohmann::ordered_json line = fixture["conversations"][conversation];
    const std::string raw = line.dump();
    const nlohmann::json parsed = nlohmann::json::parse(raw);
    const nlohmann::ordered_json ordered = ordered_line(raw);
    const std::vector<ChatMessage> messages = parse_conversation(parsed, ordered);
    const jinja::Value tools = parse_tools(parsed, ordered);

    if (item.contains("error")) {  // transformers refused it: so must tandem
      EXPECT_NE(tandem::testing::error_of([&] {
                  chat_template.render_text(messages, agp, tools);
                }).find("[chat template] " + name + ":"),
                std::string::npos)
          << item["error"];
      ++checked;
      continue;
    }
    const bool prefix_error = item.value("prefix_error", false);
    const std::string text = chat_template.render_text(messages, agp, tools);
    EXPECT_EQ(text, item["text"].get<std::string>());
    const Encoding encoding = tokenizer.encode_with_offsets(text, false);
    EXPECT_EQ(encoding.ids, item["ids"].get<std::vector<int32_t>>());
    if (item.contains("spans") && !item["spans"].is_null() && !prefix_error) {
      const RenderedChat rendered = chat_template.render(messages, agp, tools);
      EXPECT_EQ(rendered.assistant_spans, spans_of(item["spans"]));
      EXPECT_EQ(encode_with_spans(tokenizer, rendered.text, rendered.assistant_spans).loss_mask,
                item["mask"].get<std::vector<uint8_t>>());
    }
    if (prefix_error) {
      ++prefix_errors;
      const std::string error = tandem::testing::error_of(
          [&] { chat_template.render(messages, false, tools, /*last_assistant_only=*/false); });
      EXPECT_NE(error.find("cannot find the loss span of message"), std::string::npos) << error;
    }
    if (prefix_error && item["last_spans"].is_null())  // not even the last turn splits
      EXPECT_NE(tandem::testing::error_of([&] {
                  chat_template.render(messages, false, tools, true);
                }).find("cannot find the loss span"),
                std::string::npos);
    if (item.contains("last_spans") && !item["last_spans"].is_null()) {
      const RenderedChat last = chat_template.render(messages, agp, tools, true);
      std::vector<ByteSpan> spans = last.assistant_spans;
      if (spans.size() > 1) spans.erase(spans.begin(), spans.end() - 1);
      EXPECT_EQ(spans, spans_of(item["last_spans"]));
      EXPECT_EQ(encode_with_spans(tokenizer, last.text, spans).loss_mask,
                item["last_mask"].get<std::vector<uint8_t>>());
    }
    ++checked;
  }
  EXPECT_GE(checked, 50);
  EXPECT_GE(prefix_errors, 2);  // Qwen3-style templates rewrite earlier turns
}

// data.train_reasoning: false cuts each turn's reasoning text out of the loss spans and keeps
// the rest of the turn (the think tags, the answer), with generation blocks and by prefixes.
TEST(ChatJinja, ReasoningCanBeLeftOutOfTheLoss) {
  const nlohmann::ordered_json fixture = load_fixture();
  jinja::Dict globals;
  for (const auto& [key, value] : fixture["special_tokens"].items())
    globals.set(key, jinja::value_from_json(value));
  const std::string raw = fixture["conversations"]["reasoning_multi"].dump();
  const std::vector<ChatMessage> messages =
      parse_conversation(nlohmann::json::parse(raw), ordered_line(raw));
  for (const char* name : {"qwen3-style-generation", "qwen3-style"}) {
    SCOPED_TRACE(name);
    const ChatTemplate chat_template = ChatTemplate::from_jinja(
        fixture["templates"][name].get<std::string>(), name, globals, "<|im_end|>");
    const RenderedChat with = chat_template.render(messages, false, {}, true);
    RenderedChat without = chat_template.render(messages, false, {}, true);
    cut_reasoning(messages, without);
    ASSERT_EQ(with.text, without.text);
    ASSERT_EQ(with.assistant_spans.size(), 1u);  // the last turn: its reasoning is written
    const size_t at = with.text.rfind("9 * 9.");
    ASSERT_NE(at, std::string::npos);
    const ByteSpan span = with.assistant_spans.back();
    ASSERT_TRUE(span.begin <= at && at + 6 <= span.end);
    EXPECT_EQ(without.assistant_spans,
              (std::vector<ByteSpan>{{span.begin, at}, {at + 6, span.end}}));
  }
}

TEST(ChatJinja, TheDemoTokenizersOwnTemplateRendersAsTheBuiltInLlama3) {
  const std::string dir = tandem::testing::source_path("data/demo/tokenizer");
  const ChatTemplate own = ChatTemplate::resolve("auto", dir);
  const ChatTemplate builtin = ChatTemplate::from_name("llama3");
  ASSERT_TRUE(own.is_jinja());
  std::ifstream in(tandem::testing::source_path("data/demo/chat.jsonl"));
  std::string raw;
  int lines = 0;
  while (std::getline(in, raw) && lines < 200) {
    const nlohmann::json line = nlohmann::json::parse(raw);
    const std::vector<ChatMessage> messages = parse_conversation(line, ordered_line(raw));
    for (const bool agp : {false, true}) {
      const RenderedChat a = own.render(messages, agp), b = builtin.render(messages, agp);
      ASSERT_EQ(a.text, b.text) << "line " << lines + 1;
      if (!agp) ASSERT_EQ(a.assistant_spans, b.assistant_spans) << "line " << lines + 1;
    }
    ++lines;
  }
  EXPECT_GE(lines, 20);
}

TEST(ChatJinja, ResolveFindsTheTemplateAndRefusesWhatItCannotUse) {
  const fs::path scratch =
      fs::temp_directory_path() / ("tandem-chat-jinja-" + std::to_string(::getpid()));
  fs::create_directories(scratch);
  // A tokenizer directory without a template: the built-in llama3.
  EXPECT_EQ(ChatTemplate::resolve("auto", scratch.string()).name(), "llama3");
  // chat_template.jinja wins over tokenizer_config.json's.
  std::ofstream(scratch / "tokenizer_config.json")
      << R"({"eos_token": {"content": "<|e|>"}, "chat_template": "config {{ messages | length }}"})";
  EXPECT_EQ(ChatTemplate::resolve("auto", scratch.string()).render({{ChatRole::user, "x"}}).text,
            "config 1");
  EXPECT_EQ(ChatTemplate::resolve("auto", scratch.string()).end_of_turn(), "<|e|>");
  std::ofstream(scratch / "chat_template.jinja") << "file {{ eos_token }}{{ flag }}";
  EXPECT_EQ(ChatTemplate::resolve("", scratch.string(), R"({"flag": 7})").render({}).text,
            "file <|e|>7");
  // A .jinja path names the file; kwargs change the fingerprint (the token cache key).
  const std::string path = (scratch / "chat_template.jinja").string();
  EXPECT_NE(ChatTemplate::resolve(path, scratch.string(), R"({"flag": 1})").fingerprint(),
            ChatTemplate::resolve(path, scratch.string(), R"({"flag": 2})").fingerprint());
  // What it refuses, and how it says so.
  EXPECT_NE(tandem::testing::error_of([&] {
              ChatTemplate::resolve("mistral", scratch.string());
            }).find("unknown chat template 'mistral'"),
            std::string::npos);
  EXPECT_NE(tandem::testing::error_of([&] {
              ChatTemplate::resolve("auto", scratch.string(), "[1]");
            }).find("must be a JSON object"),
            std::string::npos);
  EXPECT_NE(tandem::testing::error_of([&] {
              ChatTemplate::resolve("llama3", "", R"({"a": 1})");
            }).find("takes none"),
            std::string::npos);
  EXPECT_NE(tandem::testing::error_of([&] {
              ChatTemplate::resolve("auto", scratch.string(), R"({"messages": []})");
            }).find("cannot set 'messages'"),
            std::string::npos);
  std::ofstream(scratch / "chat_template.jinja") << "{% if %}";
  EXPECT_NE(tandem::testing::error_of([&] {
              ChatTemplate::resolve("auto", scratch.string());
            }).find("chat_template.jinja:1:7: expected an expression"),
            std::string::npos);
  // The built-in layouts refuse what they cannot render instead of dropping it.
  ChatMessage tool{ChatRole::tool, "42", {}};
  EXPECT_NE(tandem::testing::error_of([&] {
              ChatTemplate::from_name("chatml").render({{ChatRole::user, "q"}, tool});
            }).find("has no tool turns"),
            std::string::npos);
  ChatMessage reasoning{ChatRole::assistant, "4", {}};
  reasoning.fields.set("reasoning_content", jinja::Value("add"));
  EXPECT_NE(tandem::testing::error_of([&] {
              ChatTemplate::from_name("llama3").render({{ChatRole::user, "q"}, reasoning});
            }).find("'reasoning_content'"),
            std::string::npos);
  fs::remove_all(scratch);
}

}  // namespace
