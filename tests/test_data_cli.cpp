// `tandem data inspect|stats|split` run as a user would: the binary on small data files.
#include <gtest/gtest.h>

#include <fstream>

#include "chat_fixture.h"
#include "tandem/data/parquet_rows.h"

namespace {

using tandem::testing::run_command;
using tandem::testing::ScratchDir;
using tandem::testing::tandem_binary;

std::string write_file(const ScratchDir& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir / name, std::ios::binary) << text;
  return dir / name;
}

const char* kConversations =
    R"({"conversations": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there"}]})"
    "\n"
    R"({"conversations": [{"role": "bot", "content": "Hi"}]})"
    "\n"
    R"({"conversations": [{"role": "user", "content": "Count"}, {"role": "assistant", "content": "1 2 3"}, {"role": "user", "content": "More"}, {"role": "assistant", "content": "4 5 6"}]})"
    "\n"
    "{not json\n";

std::string data_command(const ScratchDir& dir, const std::string& subcommand,
                         const std::string& file, const std::string& extra) {
  return tandem_binary() + " data " + subcommand + " --data " + file + " --tokenizer " +
         tandem::testing::qwen2_tokenizer_dir() + " --chat-template chatml --cache-dir " +
         (dir / "cache") + " " + extra;
}

bool contains(const std::string& text, const std::string& piece) {
  return text.find(piece) != std::string::npos;
}

TEST(DataCli, StatsCountsDocumentsTokensAndSkips) {
  ScratchDir dir;
  const std::string file = write_file(dir, "chat.jsonl", kConversations);
  const auto first = run_command(data_command(dir, "stats", file, "--on-error skip"));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_TRUE(
      contains(first.output, "cache       built: " + dir.path() + "/cache/chat-conversations-"))
      << first.output;
  EXPECT_TRUE(contains(first.output, "records     4 (2 good, 2 skipped)")) << first.output;
  EXPECT_TRUE(contains(first.output, "documents   2\n")) << first.output;
  EXPECT_TRUE(contains(first.output, "tokens      ")) << first.output;
  EXPECT_TRUE(contains(first.output, "trained     ")) << first.output;
  EXPECT_TRUE(contains(first.output, "skipped     2\n")) << first.output;
  EXPECT_TRUE(
      contains(first.output,
               "unknown_role: 1 (first: " + file +
                   ":2: 'conversations'[0]: unknown role 'bot' (data.unknown_roles can skip it))"))
      << first.output;
  EXPECT_TRUE(contains(first.output, "malformed_json: 1 (first: " + file + ":4: malformed JSON"))
      << first.output;
  EXPECT_TRUE(contains(first.output, "length histogram (tokens per document)")) << first.output;

  const auto second = run_command(data_command(dir, "stats", file, "--on-error skip"));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_TRUE(contains(second.output, "cache       hit: ")) << second.output;
  // Everything after the cache line is identical.
  EXPECT_EQ(first.output.substr(first.output.find("records")),
            second.output.substr(second.output.find("records")));
}

TEST(DataCli, StatsFailsOnBadInputNamingFileAndLine) {
  ScratchDir dir;
  const std::string file = write_file(dir, "chat.jsonl", kConversations);
  const auto result = run_command(data_command(dir, "stats", file, ""));
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_TRUE(
      contains(result.output, "[data] " + file + ":2: 'conversations'[0]: unknown role 'bot'"))
      << result.output;
}

TEST(DataCli, InspectBracketsTrainedTokensWhenNotATerminal) {
  ScratchDir dir;
  const std::string file = write_file(dir, "chat.jsonl", kConversations);
  const auto result = run_command(data_command(dir, "inspect", file, "--on-error skip --count 2"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "--- record 0 (" + file + ":1): ")) << result.output;
  EXPECT_TRUE(contains(result.output, "--- record 1 (" + file + ":3): ")) << result.output;
  // Prompt text plain, the reply and its end-of-turn token in brackets.
  EXPECT_TRUE(contains(result.output,
                       "<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n[Hello][ "
                       "there][<|im_end|>]\\n"))
      << result.output;
  EXPECT_FALSE(contains(result.output, "\x1b[")) << result.output;

  const auto last =
      run_command(data_command(dir, "inspect", file, "--on-error skip --index 1 --last-turn-only"));
  ASSERT_EQ(last.exit_code, 0) << last.output;
  EXPECT_TRUE(contains(last.output, "assistant\\n1 2 3<|im_end|>")) << last.output;  // untrained
  EXPECT_TRUE(contains(last.output, "[<|im_end|>]")) << last.output;
}

TEST(DataCli, InspectColoursTrainedTokensOnATerminal) {
  ScratchDir dir;
  const std::string file = write_file(dir, "chat.jsonl", kConversations);
  const auto result =
      run_command(data_command(dir, "inspect", file, "--on-error skip --color always"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "\x1b[30;42mHello\x1b[0m")) << result.output;
  EXPECT_FALSE(contains(result.output, "[Hello]")) << result.output;
}

TEST(DataCli, InspectIdsTableAndPretokenized) {
  ScratchDir dir;
  const std::string file = write_file(dir, "ids.jsonl",
                                      R"({"input_ids": [10, 20, 30], "loss_mask": [0, 1, 1]})"
                                      "\n");
  const auto result = run_command(tandem_binary() + " data inspect --format pretokenized --data " +
                                  file + " --no-cache --ids");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "    0      10     0  <10>\n")) << result.output;
  EXPECT_TRUE(contains(result.output, "    2      30     1  <30>\n")) << result.output;
}

TEST(DataCli, RolloutStatsAndHelp) {
  ScratchDir dir;
  const std::string file = write_file(
      dir, "rollouts.jsonl",
      R"({"prompt_ids": [1, 2], "completion_ids": [3, 4, 5], "old_logprobs": [-1, -1, -1], "reward": 1, "group_id": 0})"
      "\n");
  const auto stats = run_command(tandem_binary() + " data stats --format rollout --data " + file);
  ASSERT_EQ(stats.exit_code, 0) << stats.output;
  EXPECT_TRUE(contains(stats.output, "tokens      5 ")) << stats.output;
  EXPECT_TRUE(contains(stats.output, "trained     3 ")) << stats.output;

  const auto help = run_command(tandem_binary() + " data --help");
  EXPECT_EQ(help.exit_code, 0) << help.output;
  EXPECT_TRUE(contains(help.output, "inspect") && contains(help.output, "stats")) << help.output;
}

}  // namespace

// `tandem data split` and `stats` on the hub formats, run as a user would.
namespace {

TEST(DataCli, SplitAndStatsReadArraysAndParquet) {
  ScratchDir dir;
  const std::string array = write_file(
      dir, "sharegpt.json",
      R"([{"conversations": [{"from": "human", "value": "Hi"}, {"from": "bard", "value": "Yo"}]}])");
  const auto array_stats = run_command(data_command(dir, "stats", array, "--no-cache"));
  ASSERT_EQ(array_stats.exit_code, 0) << array_stats.output;
  EXPECT_TRUE(contains(array_stats.output, "documents   1")) << array_stats.output;

  const std::string parquet =
      tandem::testing::source_path("tests/fixtures/parquet/ultrachat.parquet");
  if (!tandem::ParquetRows::available()) {  // a build without Arrow says so, naming the file
    const auto refused = run_command(data_command(dir, "stats", parquet, "--no-cache"));
    EXPECT_NE(refused.exit_code, 0);
    EXPECT_TRUE(contains(refused.output, "this build of tandem reads none")) << refused.output;
    return;
  }
  const std::string split = tandem_binary() + " data split --data " + parquet +
                            " --heldout-fraction 0.4 --seed 3 --train " + (dir / "train.jsonl") +
                            " --heldout " + (dir / "heldout.jsonl");
  const auto result = run_command(split);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "train    " + (dir / "train.jsonl") + ": ")) << result.output;
  // Run again: the outputs exist and are never written over.
  const auto again = run_command(split);
  EXPECT_NE(again.exit_code, 0);
  EXPECT_TRUE(contains(again.output, "exists; tandem does not write over it")) << again.output;
  // The two parts hold the five rows between them, readable by stats.
  int64_t rows = 0;
  for (const char* part : {"train.jsonl", "heldout.jsonl"}) {
    std::ifstream in(dir / part);
    for (std::string line; std::getline(in, line);) ++rows;
  }
  EXPECT_EQ(rows, 5);
  const auto stats = run_command(data_command(dir, "stats", parquet, "--no-cache"));
  ASSERT_EQ(stats.exit_code, 0) << stats.output;
  EXPECT_TRUE(contains(stats.output, "documents   5")) << stats.output;
}

}  // namespace
