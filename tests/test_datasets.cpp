// Datasets: the four JSONL formats, the bad-input policy (fail names file:line, skip counts by
// reason), and the token cache (hit on a second run, rebuilt when corrupt).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "chat_fixture.h"
#include "read_documents.h"
#include "tandem/core/error.h"
#include "tandem/core/hash.h"
#include "tandem/data/datasets.h"
#include "tandem/data/token_cache.h"
#include "tandem/text/tokenizer.h"

namespace {

using tandem::testing::chatml_options;
using tandem::testing::error_of;
using tandem::testing::qwen2_tokenizer;
using tandem::testing::read_all;

using tandem::BadInput;
using tandem::ChatMessage;
using tandem::ChatRole;
using tandem::DataFormat;
using tandem::DatasetOptions;
using tandem::OnError;
using tandem::TokenizedDataset;
using tandem::TokenizedDocument;
using tandem::testing::ScratchDir;

std::string write_lines(const ScratchDir& dir, const std::string& name,
                        const std::vector<std::string>& lines) {
  const std::string path = dir / name;
  std::ofstream file(path, std::ios::binary);
  for (const std::string& line : lines) file << line << "\n";
  return path;
}

const char* kGood =
    R"({"id": 1, "conversations": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Goodbye."}]})";

TEST(Hash, Xxh64MatchesReferenceVectors) {
  EXPECT_EQ(tandem::xxh64("", 0), 0xef46db3751d8e999ULL);
  EXPECT_EQ(tandem::xxh64("abc", 3), 0x44bc2cf5ad770999ULL);
  std::string text;
  for (int i = 0; i < 20; ++i) text += "tandem";
  EXPECT_EQ(tandem::xxh64(text.data(), text.size()), 0x2c57308bfa4f2c70ULL);
  for (size_t split = 0; split <= text.size(); split += 7) {  // streaming == one shot
    tandem::Hasher hasher;
    hasher.update(text.substr(0, split)).update(text.substr(split));
    EXPECT_EQ(hasher.digest(), 0x2c57308bfa4f2c70ULL) << split;
  }
  EXPECT_EQ(tandem::hex64(0xef46db3751d8e999ULL), "ef46db3751d8e999");
}

TEST(Datasets, ConversationsTokenizeLikeTheChatTemplate) {
  ScratchDir dir;
  const std::string path = write_lines(dir, "chat.jsonl", {kGood, "", kGood});
  const auto documents = read_all(path, DataFormat::conversations, chatml_options());
  ASSERT_EQ(documents.size(), 2u);
  const std::vector<ChatMessage> messages = {{ChatRole::system, "Be brief."},
                                             {ChatRole::user, "Hi"},
                                             {ChatRole::assistant, "Hello!"},
                                             {ChatRole::user, "Bye"},
                                             {ChatRole::assistant, "Goodbye."}};
  const auto expected =
      tandem::encode_chat(qwen2_tokenizer(), tandem::ChatTemplate::from_name("chatml"), messages);
  EXPECT_EQ(documents[0].ids, expected.ids);
  EXPECT_EQ(documents[0].loss_mask, expected.loss_mask);
  EXPECT_EQ(documents[0].source, path + ":1");
  EXPECT_EQ(documents[1].source, path + ":3");  // the blank line 2 is ignored

  DatasetOptions last = chatml_options();
  last.last_turn_only = true;
  const auto last_turn = read_all(path, DataFormat::conversations, last);
  const auto expected_last = tandem::encode_chat(
      qwen2_tokenizer(), tandem::ChatTemplate::from_name("chatml"), messages, {false, true});
  EXPECT_EQ(last_turn[0].loss_mask, expected_last.loss_mask);
  EXPECT_LT(std::count(expected_last.loss_mask.begin(), expected_last.loss_mask.end(), 1),
            std::count(expected.loss_mask.begin(), expected.loss_mask.end(), 1));
}

TEST(Datasets, MessagesKeyAndShareGptAliases) {
  ScratchDir dir;
  const std::string path = write_lines(
      dir, "chat.jsonl",
      {R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]})",
       R"({"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Yo"}]})"});
  const auto documents = read_all(path, DataFormat::conversations, chatml_options());
  ASSERT_EQ(documents.size(), 2u);
  EXPECT_EQ(documents[0].ids, documents[1].ids);
  EXPECT_EQ(documents[0].loss_mask, documents[1].loss_mask);
}

std::string repeat(const std::string& piece, int times) {
  std::string out;
  for (int i = 0; i < times; ++i) out += piece;
  return out;
}

struct BadCase {
  std::string line;
  DataFormat format;
  BadInput reason;
  std::string message;  // expected in the error, after "[data] <path>:<line>: "
};

std::vector<BadCase> bad_cases() {
  return {
      {R"({"conversations": [{"role": "user", "content": "Hi")", DataFormat::conversations,
       BadInput::malformed_json, "malformed JSON: parse error"},
      {R"([1, 2])", DataFormat::conversations, BadInput::malformed_json,
       "expected a JSON object, got array"},
      // A number no double holds: a malformed line like any other, named and skippable.
      {R"({"input_ids": [1e400], "loss_mask": [1]})", DataFormat::pretokenized,
       BadInput::malformed_json, "malformed JSON: number overflow parsing '1e400'"},
      // Nesting that would overflow the stack when the value is copied: refused while parsing.
      {"{\"conversations\": " + repeat("[", 5000) + repeat("]", 5000) + "}",
       DataFormat::conversations, BadInput::malformed_json,
       "malformed JSON: nests deeper than 64 levels"},
      {R"({"conversations": [{"role": "bot", "content": "Hi"}]})", DataFormat::conversations,
       BadInput::unknown_role, "unknown role 'bot'"},
      {R"({"conversations": [{"role": "user", "content": 7}]})", DataFormat::conversations,
       BadInput::wrong_type, "'conversations'[0] has no string 'content'"},
      {R"({"text": "hello"})", DataFormat::conversations, BadInput::wrong_type,
       "missing key 'conversations' (or 'messages')"},
      {R"({"conversations": []})", DataFormat::conversations, BadInput::empty,
       "empty conversation"},
      {R"({"conversations": [{"role": "user", "content": "Hi"}]})", DataFormat::conversations,
       BadInput::no_trained_tokens, "no token is trained"},
      {R"({"conversations": [{"role": "user", "content": ")" + repeat(" word", 600) +
           R"("}, {"role": "assistant", "content": "ok"}]})",
       DataFormat::conversations, BadInput::too_long, "more than max_length 512"},
      {R"({"input_ids": [1, 2, 999999], "loss_mask": [0, 1, 1]})", DataFormat::pretokenized,
       BadInput::id_out_of_range, "token id 999999 at position 2 is outside the vocabulary"},
      {R"({"input_ids": [1, -2], "loss_mask": [0, 1]})", DataFormat::pretokenized,
       BadInput::id_out_of_range, "'input_ids'[1] = -2 is not a token id"},
      {R"({"input_ids": [1, 2], "loss_mask": [1]})", DataFormat::pretokenized, BadInput::wrong_type,
       "'loss_mask' has 1 entries for 2 input_ids"},
      {R"({"input_ids": [1, 2.5]})", DataFormat::pretokenized, BadInput::wrong_type,
       "'input_ids'[1] is not an integer: 2.5"},
      {R"({"input_ids": [], "loss_mask": []})", DataFormat::pretokenized, BadInput::empty,
       "no tokens"},
      {R"({"input_ids": [1, 2], "loss_mask": [0, 0]})", DataFormat::pretokenized,
       BadInput::no_trained_tokens, "no token is trained"},
      {R"({"prompt": "Hi", "chosen": "Yo", "rejected": 3})", DataFormat::preference,
       BadInput::wrong_type, "'rejected' is neither a string nor a message list"},
      {R"({"prompt": "Hi", "chosen": [{"role": "robot", "content": "x"}], "rejected": "No"})",
       DataFormat::preference, BadInput::unknown_role, "unknown role 'robot'"},
  };
}

DatasetOptions options_for(DataFormat format, OnError on_error) {
  DatasetOptions options = chatml_options(on_error);
  options.max_length = 512;
  options.vocab_size = format == DataFormat::pretokenized ? 1000 : 0;
  return options;
}

TEST(Datasets, EachBadInputFailsNamingFileAndLine) {
  ScratchDir dir;
  for (const BadCase& c : bad_cases()) {
    const std::string good = c.format == DataFormat::pretokenized ? R"({"input_ids": [5, 6]})"
                             : c.format == DataFormat::preference
                                 ? R"({"prompt": "Hi", "chosen": "Yes", "rejected": "No"})"
                                 : kGood;
    const std::string path = write_lines(dir, "bad.jsonl", {good, good, c.line, good});
    const std::string message =
        error_of([&] { read_all(path, c.format, options_for(c.format, OnError::fail)); });
    EXPECT_TRUE(message.starts_with("[data] " + path + ":3: ") &&
                message.find(c.message) != std::string::npos)
        << "line " << c.line.substr(0, 100) << "\n  gave: " << message;
  }
}

TEST(Datasets, SkipCountsEachBadInputByReason) {
  ScratchDir dir;
  for (DataFormat format :
       {DataFormat::conversations, DataFormat::pretokenized, DataFormat::preference}) {
    std::vector<std::string> lines;
    std::map<std::string, int64_t> expected;
    for (const BadCase& c : bad_cases()) {
      if (c.format != format) continue;
      lines.push_back(c.line);
      ++expected[std::string(tandem::bad_input_name(c.reason))];
    }
    lines.push_back(format == DataFormat::pretokenized ? R"({"input_ids": [5, 6]})"
                    : format == DataFormat::preference
                        ? R"({"prompt": "Hi", "chosen": "Yes", "rejected": "No"})"
                        : kGood);
    const std::string path = write_lines(dir, "mixed.jsonl", lines);
    tandem::SkipCounts skipped;
    const auto documents = read_all(path, format, options_for(format, OnError::skip), &skipped);
    EXPECT_EQ(documents.size(), format == DataFormat::preference ? 2u : 1u);
    std::map<std::string, int64_t> counted;
    for (const auto& [reason, entry] : skipped.by_reason) counted[reason] = entry.count;
    EXPECT_EQ(counted, expected) << tandem::data_format_name(format);
    EXPECT_EQ(skipped.total(), static_cast<int64_t>(lines.size()) - 1);
  }
}

TEST(Datasets, PretokenizedMaskDefaultsAndBooleans) {
  ScratchDir dir;
  const std::string path =
      write_lines(dir, "ids.jsonl",
                  {R"({"input_ids": [3, 4, 5]})",
                   R"({"input_ids": [3, 4, 5], "loss_mask": [false, true, true]})"});
  DatasetOptions options;  // no tokenizer, no vocab size: no range check
  const auto documents = read_all(path, DataFormat::pretokenized, options);
  ASSERT_EQ(documents.size(), 2u);
  EXPECT_EQ(documents[0].ids, (std::vector<int32_t>{3, 4, 5}));
  EXPECT_EQ(documents[0].loss_mask, (std::vector<uint8_t>{1, 1, 1}));
  EXPECT_EQ(documents[1].loss_mask, (std::vector<uint8_t>{0, 1, 1}));
}

TEST(Datasets, PreferenceTrainsTheCompletionOnly) {
  ScratchDir dir;
  const std::string path = write_lines(
      dir, "pref.jsonl",
      {R"({"prompt": "Capital of France?", "chosen": "Paris.", "rejected": "Lyon."})",
       R"({"prompt": [{"role": "system", "content": "Be exact."}, {"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "Two."}, {"role": "user", "content": "2+2?"}], "chosen": [{"role": "assistant", "content": "Four."}], "rejected": [{"role": "assistant", "content": "Five."}]})"});
  const auto documents = read_all(path, DataFormat::preference, chatml_options());
  ASSERT_EQ(documents.size(), 4u);
  const auto& tokenizer = qwen2_tokenizer();
  const auto chat = tandem::ChatTemplate::from_name("chatml");
  const auto check_pair = [&](size_t i, std::vector<ChatMessage> prompt, const std::string& chosen,
                              const std::string& rejected) {
    for (int k = 0; k < 2; ++k) {
      auto messages = prompt;
      messages.push_back({ChatRole::assistant, k == 0 ? chosen : rejected});
      const auto expected = tandem::encode_chat(tokenizer, chat, messages, {false, true});
      EXPECT_EQ(documents[i + k].ids, expected.ids);
      EXPECT_EQ(documents[i + k].loss_mask, expected.loss_mask);  // last turn = the completion
      std::vector<int32_t> trained;
      for (size_t t = 0; t < expected.ids.size(); ++t)
        if (documents[i + k].loss_mask[t]) trained.push_back(documents[i + k].ids[t]);
      EXPECT_EQ(tokenizer.decode(trained), (k == 0 ? chosen : rejected) + "<|im_end|>");
    }
    EXPECT_EQ(documents[i].source, path + ":" + std::to_string(i / 2 + 1) + " (chosen)");
    EXPECT_EQ(documents[i + 1].source, path + ":" + std::to_string(i / 2 + 1) + " (rejected)");
  };
  check_pair(0, {{ChatRole::user, "Capital of France?"}}, "Paris.", "Lyon.");
  check_pair(2,
             {{ChatRole::system, "Be exact."},
              {ChatRole::user, "1+1?"},
              {ChatRole::assistant, "Two."},
              {ChatRole::user, "2+2?"}},
             "Four.", "Five.");
}

TEST(Datasets, RolloutsParseAndGroupAdvantages) {
  ScratchDir dir;
  const std::string path = write_lines(
      dir, "rollouts.jsonl",
      {R"({"prompt_ids": [1, 2], "completion_ids": [3, 4, 5], "old_logprobs": [-0.5, -1.0, -0.25], "advantage": 0.75})",
       R"({"prompt_ids": [1, 2], "completion_ids": [6], "old_logprobs": [-2], "reward": 1.0, "group_id": "q1"})",
       R"({"prompt_ids": [1, 2], "completion_ids": [7], "old_logprobs": [-3], "reward": 0.0, "group_id": "q1"})",
       R"({"prompt_ids": [9], "completion_ids": [8], "old_logprobs": [-1], "reward": 5.0, "group_id": 7})",
       R"({"prompt_ids": [1], "completion_ids": [3, 4], "old_logprobs": [-1], "advantage": 1})",
       R"({"prompt_ids": [1], "completion_ids": [3], "old_logprobs": [-1], "reward": 1})",
       R"({"prompt_ids": [1], "completion_ids": [3], "old_logprobs": [0.7], "advantage": 1})"});
  DatasetOptions options;
  options.on_error = OnError::skip;
  tandem::RolloutStream stream(path, options);
  std::vector<tandem::RolloutSample> samples;
  tandem::RolloutSample sample;
  while (stream.next(sample)) samples.push_back(sample);
  ASSERT_EQ(samples.size(), 4u);
  EXPECT_EQ(stream.skipped().by_reason.at("wrong_type").count, 3);
  EXPECT_EQ(samples[0].completion_ids, (std::vector<int32_t>{3, 4, 5}));
  EXPECT_EQ(samples[0].old_logprobs, (std::vector<float>{-0.5f, -1.0f, -0.25f}));
  EXPECT_EQ(*samples[0].advantage, 0.75);
  EXPECT_EQ(samples[3].group_id, "7");
  const TokenizedDocument document = samples[0].document();
  EXPECT_EQ(document.ids, (std::vector<int32_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(document.loss_mask, (std::vector<uint8_t>{0, 0, 1, 1, 1}));

  tandem::compute_group_advantages(samples);
  // Group q1: rewards {1, 0}, mean 0.5, unbiased std sqrt(0.5).
  EXPECT_NEAR(*samples[1].advantage, 0.5 / (std::sqrt(0.5) + 1e-4), 1e-12);
  EXPECT_NEAR(*samples[2].advantage, -0.5 / (std::sqrt(0.5) + 1e-4), 1e-12);
  EXPECT_EQ(*samples[3].advantage, 0.0);   // a group of one
  EXPECT_EQ(*samples[0].advantage, 0.75);  // given, kept

  options.on_error = OnError::fail;
  EXPECT_EQ(error_of([&] {
              tandem::RolloutStream failing(path, options);
              while (failing.next(sample)) {
              }
            }),
            "[data] " + path +
                ":5: 'old_logprobs' must be a list of one number per completion token (2)");
  const std::string positive = write_lines(
      dir, "positive.jsonl",
      {R"({"prompt_ids": [1], "completion_ids": [3], "old_logprobs": [0.7], "advantage": 1})"});
  EXPECT_EQ(error_of([&] {
              tandem::RolloutStream failing(positive, options);
              while (failing.next(sample)) {
              }
            }),
            "[data] " + positive +
                ":1: 'old_logprobs' holds 0.7, above 0: not a log-probability (log pi_old <= 0)");
}

TEST(TokenCache, SecondOpenReadsTheCache) {
  ScratchDir dir;
  const std::string path =
      write_lines(dir, "chat.jsonl",
                  {kGood, R"({"conversations": [{"role": "bot", "content": "Hi"}]})", kGood});
  const tandem::CacheOptions cache{true, dir / "cache"};
  const DatasetOptions options = chatml_options(OnError::skip);
  const auto expected = read_all(path, DataFormat::conversations, options);

  TokenizedDataset first = TokenizedDataset::open(path, DataFormat::conversations, options, cache);
  EXPECT_FALSE(first.files()[0].from_cache);
  ASSERT_TRUE(std::filesystem::exists(first.files()[0].cache_path));
  const auto written = std::filesystem::last_write_time(first.files()[0].cache_path);
  TokenizedDataset second = TokenizedDataset::open(path, DataFormat::conversations, options, cache);
  EXPECT_TRUE(second.files()[0].from_cache);
  EXPECT_EQ(second.files()[0].cache_path, first.files()[0].cache_path);
  EXPECT_EQ(std::filesystem::last_write_time(second.files()[0].cache_path), written);

  for (const TokenizedDataset* dataset : {&first, &second}) {
    ASSERT_EQ(dataset->size(), 2);
    EXPECT_EQ(dataset->files()[0].lines, 3);
    EXPECT_EQ(dataset->files()[0].skipped.by_reason.at("unknown_role").count, 1);
    EXPECT_EQ(dataset->files()[0].skipped.by_reason.at("unknown_role").first_line, 2);
    int64_t tokens = 0, trained = 0;
    for (int64_t i = 0; i < dataset->size(); ++i) {
      const TokenizedDocument document = dataset->document(i);
      EXPECT_EQ(document.ids, expected[i].ids);
      EXPECT_EQ(document.loss_mask, expected[i].loss_mask);
      EXPECT_EQ(document.source, expected[i].source);
      EXPECT_EQ(dataset->length(i), static_cast<int64_t>(document.ids.size()));
      tokens += dataset->length(i);
      trained += dataset->trained_length(i);
    }
    EXPECT_EQ(dataset->num_tokens(), tokens);
    EXPECT_EQ(dataset->num_trained_tokens(), trained);
  }

  // Any option that changes tokens changes the key; so does the file's content.
  DatasetOptions other = options;
  other.last_turn_only = true;
  EXPECT_NE(
      TokenizedDataset::open(path, DataFormat::conversations, other, cache).files()[0].cache_path,
      first.files()[0].cache_path);
  other = options;
  other.chat_template = "qwen2";
  EXPECT_NE(tandem::token_cache_key(path, DataFormat::conversations, other),
            tandem::token_cache_key(path, DataFormat::conversations, options));
  other = options;
  other.on_error = OnError::fail;
  EXPECT_NE(tandem::token_cache_key(path, DataFormat::conversations, other),
            tandem::token_cache_key(path, DataFormat::conversations, options));
  const uint64_t key = tandem::token_cache_key(path, DataFormat::conversations, options);
  write_lines(dir, "chat.jsonl", {kGood});
  EXPECT_NE(tandem::token_cache_key(path, DataFormat::conversations, options), key);
  EXPECT_FALSE(TokenizedDataset::open(path, DataFormat::conversations, options, cache)
                   .files()[0]
                   .from_cache);
}

TEST(TokenCache, CorruptOrTruncatedCacheIsRebuilt) {
  ScratchDir dir;
  const std::string path = write_lines(dir, "chat.jsonl", {kGood, kGood, kGood});
  const tandem::CacheOptions cache{true, dir / "cache"};
  const DatasetOptions options = chatml_options();
  std::string cache_path;
  std::vector<int32_t> ids;
  {
    auto dataset = TokenizedDataset::open(path, DataFormat::conversations, options, cache);
    cache_path = dataset.files()[0].cache_path;
    ids = dataset.document(2).ids;
  }
  const auto size = std::filesystem::file_size(cache_path);
  for (const std::string damage : {"flip", "truncate", "empty"}) {
    if (damage == "flip") {
      std::fstream file(cache_path, std::ios::in | std::ios::out | std::ios::binary);
      file.seekp(100);
      file.put('\x7f');
    } else {
      std::filesystem::resize_file(cache_path, damage == "truncate" ? size - 10 : 0);
    }
    ::testing::internal::CaptureStderr();
    auto dataset = TokenizedDataset::open(path, DataFormat::conversations, options, cache);
    const std::string warning = ::testing::internal::GetCapturedStderr();
    EXPECT_FALSE(dataset.files()[0].from_cache) << damage;
    EXPECT_NE(warning.find("token cache " + cache_path + " is corrupt"), std::string::npos)
        << damage << ": " << warning;
    EXPECT_EQ(dataset.document(2).ids, ids);
    EXPECT_EQ(std::filesystem::file_size(cache_path), size);
    EXPECT_TRUE(TokenizedDataset::open(path, DataFormat::conversations, options, cache)
                    .files()[0]
                    .from_cache);
  }
  // No temporary file is left behind.
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir / "cache"))
    files += !!entry.exists();
  EXPECT_EQ(files, 1);
}

TEST(TokenCache, PreferencePairsAndDisabledCache) {
  ScratchDir dir;
  const std::string path = write_lines(
      dir, "pref.jsonl", {R"({"prompt": "Hi", "chosen": "Hello.", "rejected": "Go away."})"});
  const auto expected = read_all(path, DataFormat::preference, chatml_options());
  auto dataset =
      TokenizedDataset::open(path, DataFormat::preference, chatml_options(), {false, ""});
  EXPECT_EQ(dataset.files()[0].cache_path, "");
  EXPECT_EQ(dataset.num_records(), 1);
  const auto pair = dataset.pair(0);
  EXPECT_EQ(pair.chosen.ids, expected[0].ids);
  EXPECT_EQ(pair.rejected.loss_mask, expected[1].loss_mask);
  EXPECT_EQ(pair.rejected.source, path + ":1 (rejected)");
}

TEST(TokenCache, FailPolicyWritesNoCache) {
  ScratchDir dir;
  const std::string path = write_lines(
      dir, "chat.jsonl", {kGood, R"({"conversations": [{"role": "bot", "content": "Hi"}]})"});
  const tandem::CacheOptions cache{true, dir / "cache"};
  EXPECT_EQ(error_of([&] {
              TokenizedDataset::open(path, DataFormat::conversations, chatml_options(), cache);
            }),
            "[data] " + path +
                ":2: 'conversations'[0]: unknown role 'bot' (data.unknown_roles can skip it)");
  EXPECT_TRUE(std::filesystem::is_empty(dir / "cache"));
}

}  // namespace
