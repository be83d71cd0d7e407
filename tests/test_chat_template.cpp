// Chat templates against transformers' apply_chat_template with the real Jinja templates
// (fixtures from tools/make_chat_template_fixtures.py), and loss masks against masks computed
// independently in Python.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "chat_fixture.h"
#include "tandem/core/error.h"
#include "tandem/text/chat_template.h"
#include "tandem/text/tokenizer.h"

namespace {

using nlohmann::json;
using tandem::ByteSpan;
using tandem::ChatMessage;
using tandem::ChatRole;
using tandem::ChatTemplate;

json load_fixture(const std::string& name) { return tandem::testing::load_chat_fixture(name); }

const tandem::Tokenizer& fixture_tokenizer(const json& fixture) {
  return tandem::testing::chat_fixture_tokenizer(fixture);
}

std::vector<ChatMessage> messages_of(const json& list) {
  std::vector<ChatMessage> out;
  for (const json& m : list) {
    const std::string role = m.at("role");
    out.push_back({role == "system" ? ChatRole::system
                   : role == "user" ? ChatRole::user
                                    : ChatRole::assistant,
                   m.at("content")});
  }
  return out;
}

class ChatTemplateFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateFixture, TextEqualsReferenceTemplate) {
  const json fixture = load_fixture(GetParam());
  const ChatTemplate chat_template = ChatTemplate::from_name(GetParam());
  int index = 0;
  for (const json& c : fixture.at("cases")) {
    const auto rendered =
        chat_template.render(messages_of(c.at("messages")), c.at("add_generation_prompt"));
    EXPECT_EQ(rendered.text, c.at("text").get<std::string>()) << GetParam() << " case " << index;
    std::vector<ByteSpan> expected;
    for (const json& s : c.at("assistant_spans")) expected.push_back({s[0], s[1]});
    EXPECT_EQ(rendered.assistant_spans, expected) << GetParam() << " case " << index;
    ++index;
  }
  EXPECT_GE(index, 16);
}

TEST_P(ChatTemplateFixture, TokensAndMasksEqualReference) {
  const json fixture = load_fixture(GetParam());
  const ChatTemplate chat_template = ChatTemplate::from_name(GetParam());
  const tandem::Tokenizer& tokenizer = fixture_tokenizer(fixture);
  int index = 0;
  for (const json& c : fixture.at("cases")) {
    const auto messages = messages_of(c.at("messages"));
    const bool generation = c.at("add_generation_prompt");
    const auto all = tandem::encode_chat(tokenizer, chat_template, messages, {generation, false});
    EXPECT_EQ(all.ids, c.at("ids").get<std::vector<int32_t>>()) << GetParam() << " case " << index;
    EXPECT_EQ(all.loss_mask, c.at("loss_mask").get<std::vector<uint8_t>>())
        << GetParam() << " case " << index;
    const auto last = tandem::encode_chat(tokenizer, chat_template, messages, {generation, true});
    EXPECT_EQ(last.ids, all.ids);
    EXPECT_EQ(last.loss_mask, c.at("loss_mask_last_turn").get<std::vector<uint8_t>>())
        << GetParam() << " case " << index;
    ++index;
  }
}

// The mask is exactly each assistant message's content tokens plus its end-of-turn token:
// decoding the trained tokens of a turn gives back content + end-of-turn.
TEST_P(ChatTemplateFixture, MaskCoversAssistantContentAndEndOfTurn) {
  const json fixture = load_fixture(GetParam());
  const ChatTemplate chat_template = ChatTemplate::from_name(GetParam());
  const tandem::Tokenizer& tokenizer = fixture_tokenizer(fixture);
  const int32_t end_of_turn = tokenizer.token_to_id(chat_template.end_of_turn()).value();
  for (const json& c : fixture.at("cases")) {
    const auto messages = messages_of(c.at("messages"));
    const auto tokens = tandem::encode_chat(tokenizer, chat_template, messages);
    // Split the trained tokens into runs ending at an end-of-turn token.
    std::vector<std::string> trained_turns;
    std::vector<int32_t> run;
    for (size_t t = 0; t < tokens.ids.size(); ++t) {
      if (!tokens.loss_mask[t]) {
        EXPECT_TRUE(run.empty()) << "a trained run ends without " << chat_template.end_of_turn();
        continue;
      }
      run.push_back(tokens.ids[t]);
      if (tokens.ids[t] == end_of_turn) {
        trained_turns.push_back(tokenizer.decode(run));
        run.clear();
      }
    }
    std::vector<std::string> expected;
    for (const ChatMessage& m : messages)
      if (m.role == ChatRole::assistant) {
        const std::string content =
            GetParam() == "llama3" ? std::string(tandem::python_strip(m.content)) : m.content;
        expected.push_back(content + chat_template.end_of_turn());
      }
    // A content starting with whitespace that BPE merges with the header's newline loses that
    // token (it straddles the span start): the run is then a suffix missing only whitespace.
    ASSERT_EQ(trained_turns.size(), expected.size()) << c.at("text").get<std::string>();
    for (size_t i = 0; i < expected.size(); ++i) {
      ASSERT_TRUE(expected[i].ends_with(trained_turns[i]))
          << "trained '" << trained_turns[i] << "' is not the end of '" << expected[i] << "'";
      const std::string missing =
          expected[i].substr(0, expected[i].size() - trained_turns[i].size());
      EXPECT_EQ(missing.find_first_not_of(" \n"), std::string::npos)
          << "untrained: '" << missing << "'";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Templates, ChatTemplateFixture,
                         ::testing::Values("llama3", "chatml", "qwen2", "chatml-plain"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(ChatTemplate, DefaultSystemPrompts) {
  const std::vector<ChatMessage> chat = {{ChatRole::user, "hi"}, {ChatRole::assistant, "yo"}};
  EXPECT_EQ(ChatTemplate::from_name("chatml").render(chat).text,
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
            "yo<|im_end|>\n");
  EXPECT_EQ(ChatTemplate::from_name("llama3").render(chat, true).text,
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nyo<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(ChatTemplate::from_name("qwen2").default_system_prompt(),
            "You are a helpful assistant.");
}

TEST(ChatTemplate, UnknownNameIsAnError) {
  try {
    ChatTemplate::from_name("vicuna");
    FAIL() << "no error";
  } catch (const tandem::Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown chat template 'vicuna'"), std::string::npos);
  }
}

TEST(ChatTemplate, PythonStripMatchesStrSplit) {
  EXPECT_EQ(tandem::python_strip("  a b \n"), "a b");
  EXPECT_EQ(tandem::python_strip("\u3000\u00a0x\u2028\u0085"), "x");
  EXPECT_EQ(tandem::python_strip("\x1c\x1fx\t\v\f\r"), "x");
  EXPECT_EQ(tandem::python_strip("\u200bx"), "\u200bx");  // zero-width space is not whitespace
  EXPECT_EQ(tandem::python_strip(" \n "), "");
  EXPECT_EQ(tandem::python_strip("é"), "é");
}

TEST(ChatTemplate, MaskTakesOnlyTokensWhollyInsideSpans) {
  const std::vector<std::pair<size_t, size_t>> offsets = {{0, 3}, {3, 5}, {5, 8}, {8, 9}, {9, 12}};
  EXPECT_EQ(tandem::mask_tokens_in_spans(offsets, {{4, 9}}),
            (std::vector<uint8_t>{0, 0, 1, 1, 0}));  // [3,5) straddles the start
  EXPECT_EQ(tandem::mask_tokens_in_spans(offsets, {{0, 3}, {8, 12}}),
            (std::vector<uint8_t>{1, 0, 0, 1, 1}));
  EXPECT_EQ(tandem::mask_tokens_in_spans(offsets, {}), (std::vector<uint8_t>(5, 0)));
}

}  // namespace
