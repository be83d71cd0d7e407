// Data as hubs ship it: ShareGPT JSON arrays (streamed, their errors naming file, record and
// line), ShareGPT's role aliases and the unknown-role policy, and preference records in every
// common shape (explicit prompt, TRL's implicit prompt, UltraFeedback-style repeated prompts),
// each checked against the record written in the plain JSONL shape it stands for.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "chat_fixture.h"
#include "read_documents.h"
#include "tandem/core/error.h"
#include "tandem/data/datasets.h"
#include "tandem/data/heldout_split.h"
#include "tandem/text/tokenizer.h"

namespace {

using tandem::DataFormat;
using tandem::DatasetOptions;
using tandem::OnError;
using tandem::TokenizedDocument;
using tandem::UnknownRoles;
using tandem::testing::chatml_options;
using tandem::testing::error_of;
using tandem::testing::read_all;
using tandem::testing::ScratchDir;

std::string write_file(const ScratchDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir / name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

void expect_same_documents(const std::vector<TokenizedDocument>& actual,
                           const std::vector<TokenizedDocument>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_EQ(actual[i].ids, expected[i].ids) << "document " << i;
    EXPECT_EQ(actual[i].loss_mask, expected[i].loss_mask) << "document " << i;
  }
}

// ---------------------------------------------------------------------------------------------
// ShareGPT JSON arrays and roles

TEST(HubData, ShareGptArrayEqualsTheSameRecordsAsJsonl) {
  ScratchDir dir;
  // As downloaded: a byte order mark, a pretty-printed array, every assistant-side alias.
  const std::string array = write_file(dir, "sharegpt.json",
                                       "\xEF\xBB\xBF"
                                       R"(
[
  {"id": "a", "conversations": [
    {"from": "system", "value": "Be brief."},
    {"from": "human", "value": "Hi, [1] and {2}?"},
    {"from": "gpt", "value": "Hello \"there\" ]"}]},
  {"id": "b", "conversations": [{"from": "human", "value": "Q1"}, {"from": "chatgpt", "value": "A1"},
                                {"from": "human", "value": "Q2"}, {"from": "bing", "value": "A2"}]},
  {"id": "c", "conversations": [{"from": "human", "value": "Q"}, {"from": "bard", "value": "A"}]}
]
)");
  const std::string jsonl = write_file(
      dir, "plain.jsonl",
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi, [1] and {2}?"}, {"role": "assistant", "content": "Hello \"there\" ]"}]})"
      "\n"
      R"({"messages": [{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1"}, {"role": "user", "content": "Q2"}, {"role": "assistant", "content": "A2"}]})"
      "\n"
      R"({"messages": [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}]})"
      "\n");
  const auto from_array = read_all(array, DataFormat::conversations, chatml_options());
  expect_same_documents(from_array, read_all(jsonl, DataFormat::conversations, chatml_options()));
  ASSERT_EQ(from_array.size(), 3u);
  EXPECT_EQ(from_array[0].source, array + "[0] (line 3)");
  EXPECT_EQ(from_array[2].source, array + "[2] (line 9)");
}

TEST(HubData, ArrayErrorsNameFileRecordAndLine) {
  ScratchDir dir;
  const std::string good =
      R"({"conversations": [{"from": "human", "value": "Q"}, {"from": "gpt", "value": "A"}]})";
  const std::string path = write_file(
      dir, "bad.json",
      "[\n" + good + ",\n{\"conversations\": 7},\n" + good + ",\n{oops},\n" + good + "\n]\n");
  // fail: the first bad record, by index and line.
  const std::string message =
      error_of([&] { read_all(path, DataFormat::conversations, chatml_options()); });
  EXPECT_NE(message.find("[data] " + path + "[1] (line 3): "), std::string::npos) << message;
  // skip: counted by reason, the good records kept.
  tandem::SkipCounts skipped;
  const auto documents =
      read_all(path, DataFormat::conversations, chatml_options(OnError::skip), &skipped);
  EXPECT_EQ(documents.size(), 3u);
  EXPECT_EQ(skipped.by_reason.at("wrong_type").count, 1);
  EXPECT_EQ(skipped.by_reason.at("malformed_json").count, 1);
  EXPECT_EQ(skipped.by_reason.at("malformed_json").first_line, 4);  // the 4th record
  // Broken structure is an error for the whole file under either policy: never a silent stop.
  const std::vector<std::pair<std::string, std::string>> broken = {
      {"[\n" + good + ",\n" + good, "the JSON array is not closed"},
      {"[" + good + "]\n{\"extra\": 1}", "line 2: data after the JSON array's closing ']'"},
      {"[" + good + "\n" + good + "]", "line 2: the JSON array's elements must be separated"},
  };
  for (const auto& [text, expected] : broken) {
    const std::string file = write_file(dir, "broken.json", text);
    const std::string error =
        error_of([&] { read_all(file, DataFormat::conversations, chatml_options(OnError::skip)); });
    EXPECT_NE(error.find("[data] " + file + ": "), std::string::npos) << text << " -> " << error;
    EXPECT_NE(error.find(expected), std::string::npos) << error;
  }
}

TEST(HubData, UnknownRolesErrorSkipTheTurnOrTheConversation) {
  ScratchDir dir;
  const std::string path = write_file(
      dir, "roles.jsonl",
      R"({"conversations": [{"from": "human", "value": "Q"}, {"from": "narrator", "value": "aside"}, {"from": "gpt", "value": "A"}]})"
      "\n"
      R"({"conversations": [{"from": "human", "value": "Q2"}, {"from": "gpt", "value": "A2"}]})"
      "\n");
  // error: a bad line, so on_error decides.
  const std::string message =
      error_of([&] { read_all(path, DataFormat::conversations, chatml_options()); });
  EXPECT_NE(message.find(path + ":1: 'conversations'[1]: unknown role 'narrator'"),
            std::string::npos)
      << message;
  // skip_turn: the line is the conversation without that message.
  const std::string without = write_file(
      dir, "without.jsonl",
      R"({"conversations": [{"from": "human", "value": "Q"}, {"from": "gpt", "value": "A"}]})"
      "\n"
      R"({"conversations": [{"from": "human", "value": "Q2"}, {"from": "gpt", "value": "A2"}]})"
      "\n");
  expect_same_documents(read_all(path, DataFormat::conversations,
                                 chatml_options(OnError::fail, UnknownRoles::skip_turn)),
                        read_all(without, DataFormat::conversations, chatml_options()));
  // skip_conversation: skipped and counted even under on_error: fail.
  tandem::SkipCounts skipped;
  const auto kept =
      read_all(path, DataFormat::conversations,
               chatml_options(OnError::fail, UnknownRoles::skip_conversation), &skipped);
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].source, path + ":2");
  EXPECT_EQ(skipped.by_reason.at("unknown_role").count, 1);
  EXPECT_EQ(skipped.by_reason.at("unknown_role").first_line, 1);
  EXPECT_EQ(tandem::parse_unknown_roles("skip_turn"), UnknownRoles::skip_turn);
  EXPECT_NE(error_of([] { tandem::parse_unknown_roles("drop"); }).find("not 'drop'"),
            std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Preference shapes

TEST(HubData, ImplicitPromptEqualsTheExplicitOne) {
  ScratchDir dir;
  // TRL's implicit prompt: conversations sharing their first messages, and two strings sharing
  // "The sky is" (the space before the first difference goes to the completions).
  const std::string implicit = write_file(
      dir, "implicit.jsonl",
      R"({"chosen": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}, {"role": "assistant", "content": "Good."}], "rejected": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}, {"role": "assistant", "content": "Bad."}]})"
      "\n"
      R"({"chosen": "The sky is blue.", "rejected": "The sky is green."})"
      "\n");
  const std::string explicit_prompt = write_file(
      dir, "explicit.jsonl",
      R"({"prompt": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}], "chosen": [{"role": "assistant", "content": "Good."}], "rejected": [{"role": "assistant", "content": "Bad."}]})"
      "\n"
      R"({"prompt": "The sky is", "chosen": " blue.", "rejected": " green."})"
      "\n");
  expect_same_documents(read_all(implicit, DataFormat::preference, chatml_options()),
                        read_all(explicit_prompt, DataFormat::preference, chatml_options()));
}

TEST(HubData, UltraFeedbackRowsRenderThePromptOnce) {
  ScratchDir dir;
  const std::string repeated = write_file(
      dir, "ultrafeedback.jsonl",
      R"({"prompt": "Name a prime.", "chosen": [{"role": "user", "content": "Name a prime."}, {"role": "assistant", "content": "7"}], "rejected": [{"role": "user", "content": "Name a prime."}, {"role": "assistant", "content": "8"}], "score_chosen": 9.0})"
      "\n"
      R"({"prompt": [{"from": "human", "value": "Hi"}], "chosen": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}], "rejected": "Go away"})"
      "\n");
  const std::string once =
      write_file(dir, "once.jsonl",
                 R"({"prompt": "Name a prime.", "chosen": "7", "rejected": "8"})"
                 "\n"
                 R"({"prompt": "Hi", "chosen": "Hello", "rejected": "Go away"})"
                 "\n");
  expect_same_documents(read_all(repeated, DataFormat::preference, chatml_options()),
                        read_all(once, DataFormat::preference, chatml_options()));
}

TEST(HubData, PreferenceRecordsWithoutAPromptToFindAreNamed) {
  ScratchDir dir;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"chosen": [{"role": "user", "content": "A"}, {"role": "assistant", "content": "x"}], "rejected": [{"role": "user", "content": "B"}, {"role": "assistant", "content": "y"}]})",
       "share no message at their start"},
      {R"({"chosen": [{"role": "user", "content": "A"}, {"role": "assistant", "content": "x"}], "rejected": [{"role": "user", "content": "A"}, {"role": "assistant", "content": "x"}]})",
       "differ in no message"},
      {R"({"chosen": "Yes.", "rejected": "No."})", "share no text at their start"},
      {R"({"chosen": "Same", "rejected": "Same and more"})",
       "one of 'chosen' and 'rejected' is the start of the other"},
      {R"({"chosen": "text", "rejected": [{"role": "assistant", "content": "x"}]})",
       "not both strings or both message lists"},
  };
  for (const auto& [line, expected] : cases) {
    const std::string path = write_file(dir, "pref.jsonl", line + "\n");
    const std::string message =
        error_of([&] { read_all(path, DataFormat::preference, chatml_options()); });
    EXPECT_NE(message.find("[data] " + path + ":1: "), std::string::npos) << message;
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  }
}

// ---------------------------------------------------------------------------------------------
// Held-out split

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(HubData, HeldOutSplitIsDeterministicAndDependsOnTheRecordAlone) {
  ScratchDir dir;
  std::string jsonl, array = "[\n";
  std::vector<std::string> records;
  for (int i = 0; i < 400; ++i) {
    records.push_back(R"({"id":)" + std::to_string(i) +
                      R"(,"messages":[{"role":"user","content":"q)" + std::to_string(i) +
                      R"("}]})");
    jsonl += records.back() + "\n";
    array += std::string(i ? ",\n  " : "  ") + records.back();
  }
  array += "\n]\n";
  const std::string in = write_file(dir, "all.jsonl", jsonl);
  const auto counts =
      tandem::split_records(in, 0.1, 7, dir / "train.jsonl", dir / "heldout.jsonl", OnError::fail);
  const auto train = lines_of(dir / "train.jsonl"), heldout = lines_of(dir / "heldout.jsonl");
  EXPECT_EQ(counts.train, static_cast<int64_t>(train.size()));
  EXPECT_EQ(counts.heldout, static_cast<int64_t>(heldout.size()));
  EXPECT_EQ(train.size() + heldout.size(), records.size());
  // Each record is on the side its own hash says, in the input's order on each side.
  std::vector<std::string> expected_train, expected_heldout;
  for (const std::string& record : records)
    (tandem::is_heldout(record, 7, 0.1) ? expected_heldout : expected_train).push_back(record);
  EXPECT_EQ(train, expected_train);
  EXPECT_EQ(heldout, expected_heldout);
  // About a tenth (a binomial(400, 0.1) outside [16, 64] has probability below 1e-5).
  EXPECT_GE(heldout.size(), 16u);
  EXPECT_LE(heldout.size(), 64u);
  // The same records as a pretty-printed JSON array, reversed: the same records held out.
  std::string reversed = "[";
  for (size_t i = records.size(); i-- > 0;) reversed += records[i] + (i ? ",\n" : "]");
  tandem::split_records(write_file(dir, "reversed.json", reversed), 0.1, 7, dir / "train2.jsonl",
                        dir / "heldout2.jsonl", OnError::fail);
  auto heldout2 = lines_of(dir / "heldout2.jsonl");
  std::reverse(heldout2.begin(), heldout2.end());
  EXPECT_EQ(heldout2, heldout);
  // Another seed, another split.
  tandem::split_records(in, 0.1, 8, dir / "train3.jsonl", dir / "heldout3.jsonl", OnError::fail);
  EXPECT_NE(lines_of(dir / "heldout3.jsonl"), heldout);
}

TEST(HubData, HeldOutSplitNeverWritesOverAFileAndLeavesNothingOnFailure) {
  ScratchDir dir;
  const std::string in = write_file(dir, "in.jsonl", "{\"a\": 1}\n{broken\n{\"a\": 2}\n");
  const std::string kept = write_file(dir, "train.jsonl", "precious\n");
  std::string message = error_of(
      [&] { tandem::split_records(in, 0.5, 0, kept, dir / "heldout.jsonl", OnError::fail); });
  EXPECT_NE(message.find(kept + " exists; tandem does not write over it"), std::string::npos)
      << message;
  EXPECT_EQ(lines_of(kept), std::vector<std::string>{"precious"});
  message = error_of(
      [&] { tandem::split_records(in, 0.5, 0, dir / "t.jsonl", dir / "h.jsonl", OnError::fail); });
  EXPECT_NE(message.find("[data] " + in + ":2: malformed JSON"), std::string::npos) << message;
  EXPECT_FALSE(std::filesystem::exists(dir / "t.jsonl"));
  EXPECT_FALSE(std::filesystem::exists(dir / "h.jsonl"));
  for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
    EXPECT_EQ(entry.path().string().find(".tmp-"), std::string::npos) << entry.path();
  const auto counts =
      tandem::split_records(in, 0.5, 0, dir / "t.jsonl", dir / "h.jsonl", OnError::skip);
  EXPECT_EQ(counts.train + counts.heldout, 2);
  EXPECT_EQ(counts.skipped.total(), 1);
  EXPECT_NE(error_of([&] {
              tandem::split_records(in, 1.0, 0, dir / "x.jsonl", dir / "y.jsonl", OnError::skip);
            }).find("must lie in (0, 1)"),
            std::string::npos);
}

}  // namespace
