// Several data files as one dataset: `data.path` lists and globs (expanded in order, errors
// naming the entry), one token cache entry per file, per-file weights applied to the sampler's
// records, and the held-out split inside training (the same records `tandem data split` writes).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "read_documents.h"
#include "tandem/core/config.h"
#include "tandem/core/error.h"
#include "tandem/data/data_files.h"
#include "tandem/data/heldout_split.h"
#include "tandem/data/parquet_rows.h"
#include "tandem/data/token_cache.h"
#include "tandem/train/training_data.h"

namespace {

using tandem::Config;
using tandem::DataFile;
using tandem::DataFormat;
using tandem::OnError;
using tandem::TokenizedDataset;
using tandem::WeightedPath;
using tandem::testing::chatml_options;
using tandem::testing::error_of;
using tandem::testing::ScratchDir;
using tandem::testing::source_path;

bool contains(const std::string& text, const std::string& piece) {
  return text.find(piece) != std::string::npos;
}

std::string write_file(const ScratchDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir / name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// `count` pretokenized documents whose first id is `first`, `first` + 1, ... (so a document
// names itself), each `length` tokens long.
std::string pretokenized_file(const ScratchDir& dir, const std::string& name, int first, int count,
                              int length = 4) {
  std::string text;
  for (int i = 0; i < count; ++i) {
    text += "{\"input_ids\": [" + std::to_string(first + i);
    for (int t = 1; t < length; ++t) text += ", 1";
    text += "]}\n";
  }
  return write_file(dir, name, text);
}

TEST(DataFiles, GlobsExpandSortedInTheOrderGivenWithTheirWeights) {
  ScratchDir dir;
  write_file(dir, "b.jsonl", "{}\n");
  write_file(dir, "a.jsonl", "{}\n");
  const std::string c = write_file(dir, "c.json", "[]\n");
  std::filesystem::create_directory(dir / "d.jsonl");  // a directory matching the glob is left out
  const std::vector<DataFile> files =
      tandem::expand_data_files({{c, 1.0}, {dir / "*.jsonl", 2.5}}, "run.yaml: data.path");
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0].path, c);
  EXPECT_EQ(files[1].path, dir / "a.jsonl");
  EXPECT_EQ(files[2].path, dir / "b.jsonl");
  EXPECT_EQ(files[0].weight, 1.0);
  EXPECT_EQ(files[1].weight, 2.5);
  EXPECT_EQ(files[2].weight, 2.5);
  EXPECT_EQ(tandem::describe_files(tandem::paths_of(files)),
            c + " + " + (dir / "a.jsonl") + " (+ 1 more)");
}

TEST(DataFiles, MissingFilesEmptyGlobsAndRepeatsAreErrorsNamingTheEntry) {
  ScratchDir dir;
  const std::string a = write_file(dir, "a.jsonl", "{}\n");
  const auto expand = [](std::vector<WeightedPath> entries) {
    return error_of([&] { tandem::expand_data_files(entries, "run.yaml: data.path"); });
  };
  EXPECT_TRUE(contains(expand({{a, 1}, {dir / "gone.jsonl", 1}}),
                       "run.yaml: data.path[1]: " + (dir / "gone.jsonl") + " does not exist"));
  EXPECT_TRUE(contains(expand({{dir / "*.parquet", 1}}),
                       "run.yaml: data.path: '" + (dir / "*.parquet") + "' matches no file"));
  EXPECT_TRUE(contains(expand({{a, 1}, {dir / "*.jsonl", 1}}), a + " is named twice"));
  EXPECT_TRUE(contains(expand({{dir.path(), 1}}), " is not a file"));
}

TEST(DataFiles, ConfigReadsAPathAListAndWeightedEntries) {
  const auto read = [](const std::string& yaml) {
    return Config::parse(yaml, "run.yaml").get_path_list("data.path");
  };
  EXPECT_EQ(read("data: {path: a.jsonl}"), (std::vector<WeightedPath>{{"a.jsonl", 1.0}}));
  EXPECT_EQ(read("data:\n  path:\n    - a.jsonl\n    - {path: 'b/*.parquet', weight: 0.5}\n"),
            (std::vector<WeightedPath>{{"a.jsonl", 1.0}, {"b/*.parquet", 0.5}}));
  const auto error = [&](const std::string& yaml) { return error_of([&] { read(yaml); }); };
  EXPECT_TRUE(contains(error("data: {path: []}"), "run.yaml: data.path: an empty list"));
  EXPECT_TRUE(contains(error("data: {path: [{path: a, weigth: 2}]}"),
                       "run.yaml: data.path[0]: unknown field 'weigth'"));
  EXPECT_TRUE(contains(error("data: {path: [a, {path: b, weight: 0}]}"),
                       "run.yaml: data.path[1]: weight must be a finite number > 0, got 0"));
  EXPECT_TRUE(contains(error("data: {path: [{path: b, weight: many}]}"),
                       "run.yaml: data.path[0]: weight must be a number"));
  EXPECT_TRUE(contains(error("data: {path: [{weight: 2}]}"), "data.path[0]: needs a path"));
  EXPECT_TRUE(contains(error("data: {path: [[a]]}"), "data.path[0]: expected a path or"));
}

TEST(DataFiles, SeveralFilesAreOneDatasetEachWithItsOwnCacheEntry) {
  ScratchDir dir;
  tandem::CacheOptions cache;
  cache.dir = dir / "cache";
  const std::string jsonl = source_path("tests/fixtures/parquet/ultrachat.jsonl");
  const std::string parquet = source_path("tests/fixtures/parquet/ultrachat.parquet");
  if (!tandem::ParquetRows::available()) GTEST_SKIP() << "this build reads no Parquet (no Arrow)";
  const auto options = chatml_options();
  const TokenizedDataset alone =
      TokenizedDataset::open(jsonl, DataFormat::conversations, options, cache);
  const TokenizedDataset both =
      TokenizedDataset::open({jsonl, parquet}, DataFormat::conversations, options, cache);
  ASSERT_EQ(both.files().size(), 2u);
  EXPECT_TRUE(both.files()[0].from_cache);  // the entry `alone` wrote
  EXPECT_FALSE(both.files()[1].from_cache);
  EXPECT_EQ(both.files()[0].key, alone.key());
  EXPECT_NE(both.key(), alone.key());
  EXPECT_EQ(both.size(), 2 * alone.size());  // the same records in both files
  EXPECT_EQ(both.files()[1].first_document, alone.size());
  EXPECT_EQ(both.num_tokens(), 2 * alone.num_tokens());
  EXPECT_EQ(both.source_path(), jsonl + " + " + parquet);
  for (int64_t i = 0; i < alone.size(); ++i) {
    const auto first = both.document(i), second = both.document(alone.size() + i);
    EXPECT_EQ(first.ids, alone.document(i).ids);
    EXPECT_EQ(second.ids, first.ids);
    EXPECT_EQ(first.source, alone.document(i).source);
    EXPECT_EQ(second.source, parquet + ": row " + std::to_string(i));
    EXPECT_EQ(both.file_of(i), 0);
    EXPECT_EQ(both.file_of(alone.size() + i), 1);
  }
  // Reversed, the dataset is another one.
  EXPECT_NE(
      TokenizedDataset::open({parquet, jsonl}, DataFormat::conversations, options, cache).key(),
      both.key());
}

TEST(DataFiles, HeldOutSidesAreTheRecordsTandemDataSplitWrites) {
  ScratchDir dir;
  // 40 ShareGPT conversations as a JSON array.
  std::string array = "[\n";
  for (int i = 0; i < 40; ++i)
    array += std::string(i ? ",\n" : "") + R"({"id": )" + std::to_string(i) +
             R"(, "conversations": [{"from": "human", "value": "Question )" + std::to_string(i) +
             R"("}, {"from": "gpt", "value": "Answer )" + std::to_string(i * 7) + R"("}]})";
  const std::string path = write_file(dir, "sharegpt.json", array + "\n]\n");
  const tandem::SplitCounts counts = tandem::split_records(path, 0.25, 3, dir / "train.jsonl",
                                                           dir / "heldout.jsonl", OnError::fail);
  ASSERT_GT(counts.heldout, 0);
  ASSERT_GT(counts.train, 0);

  tandem::CacheOptions cache;
  cache.dir = dir / "cache";
  auto options = chatml_options();
  const auto side = [&](bool heldout) {
    auto with = options;
    with.heldout = {0.25, 3, heldout};
    return TokenizedDataset::open(path, DataFormat::conversations, with, cache);
  };
  const TokenizedDataset train = side(false), heldout = side(true);
  const TokenizedDataset train_file =
      TokenizedDataset::open(dir / "train.jsonl", DataFormat::conversations, options, cache);
  const TokenizedDataset heldout_file =
      TokenizedDataset::open(dir / "heldout.jsonl", DataFormat::conversations, options, cache);
  ASSERT_EQ(train.size(), counts.train);
  ASSERT_EQ(heldout.size(), counts.heldout);
  EXPECT_EQ(train.files()[0].passed_over, counts.heldout);
  EXPECT_EQ(heldout.files()[0].passed_over, counts.train);
  for (int64_t i = 0; i < train.size(); ++i)
    EXPECT_EQ(train.document(i).ids, train_file.document(i).ids);
  for (int64_t i = 0; i < heldout.size(); ++i)
    EXPECT_EQ(heldout.document(i).ids, heldout_file.document(i).ids);
  // Each side has its own cache entry, and the whole file a third.
  const TokenizedDataset whole =
      TokenizedDataset::open(path, DataFormat::conversations, options, cache);
  EXPECT_EQ(whole.size(), 40);
  EXPECT_NE(train.key(), heldout.key());
  EXPECT_NE(train.key(), whole.key());
  EXPECT_NE(train.files()[0].cache_path, heldout.files()[0].cache_path);
}

// read_training_data on `files`, pretokenized, seq_len 8 and 1 row, every other key default.
tandem::TrainingData training_data(const ScratchDir& dir, const std::string& path_yaml,
                                   const std::string& extra = "") {
  const Config config = Config::parse(
      "data:\n  path: " + path_yaml +
          "\n  format: pretokenized\n  seq_len: 8\n  cache_dir: " + (dir / "cache") + "\n" + extra,
      "run.yaml");
  return tandem::read_training_data(config);
}

// How often each dataset record is a sampler record (parts drawn whole count once each).
std::map<int64_t, int> draws_per_record(const tandem::TrainingData& data) {
  std::map<int64_t, int> draws;
  for (int64_t r = 0; r < data.num_records(); ++r)
    if (data.part(r).begin == 0) ++draws[data.part(r).record];
  return draws;
}

TEST(DataFiles, WeightsDrawEachFilesRecordsThatManyTimesPerEpoch) {
  ScratchDir dir;
  pretokenized_file(dir, "a.jsonl", 10, 6);
  pretokenized_file(dir, "b.jsonl", 100, 10);
  const std::string files = "[{path: " + (dir / "a.jsonl") +
                            ", weight: 2}, {path: " + (dir / "b.jsonl") + ", weight: 0.5}]";
  const tandem::TrainingData data = training_data(dir, files);
  ASSERT_EQ(data.file_records, (std::vector<int64_t>{6, 10}));
  EXPECT_EQ(data.file_draws, (std::vector<int64_t>{12, 5}));
  EXPECT_EQ(data.num_records(), 17);
  const std::map<int64_t, int> draws = draws_per_record(data);
  for (int64_t r = 0; r < 6; ++r) EXPECT_EQ(draws.at(r), 2) << r;
  int from_b = 0;
  for (int64_t r = 6; r < 16; ++r) from_b += draws.count(r) ? draws.at(r) : 0;
  EXPECT_EQ(from_b, 5);  // five distinct records of b, once each
  for (const auto& [record, count] : draws)
    if (record >= 6) EXPECT_EQ(count, 1);
  // The document behind each draw is its file's: a's ids start 10.., b's 100...
  for (int64_t r = 0; r < data.num_records(); ++r) {
    const auto document = data.document(data.part(r).record);
    EXPECT_EQ(document.ids[0] >= 100, data.part(r).record >= 6);
  }
  // Deterministic: read again, the same draws in the same order.
  const tandem::TrainingData again = training_data(dir, files);
  ASSERT_EQ(again.num_records(), data.num_records());
  for (int64_t r = 0; r < data.num_records(); ++r)
    EXPECT_EQ(again.part(r).record, data.part(r).record);
  // Unweighted, the sampler's records are the dataset's, one to one.
  const tandem::TrainingData plain =
      training_data(dir, "[" + (dir / "a.jsonl") + ", " + (dir / "b.jsonl") + "]");
  EXPECT_TRUE(plain.parts.empty());
  EXPECT_EQ(plain.file_draws, (std::vector<int64_t>{6, 10}));
  // A weight that draws nothing of a file is an error naming it.
  EXPECT_TRUE(contains(error_of([&] {
                         training_data(dir, "[" + (dir / "a.jsonl") + ", {path: " +
                                                (dir / "b.jsonl") + ", weight: 0.01}]");
                       }),
                       (dir / "b.jsonl") + ": weight 0.01 draws none of its 10 records"));
  // Weights asking for more records than memory should hold are refused before any is made.
  EXPECT_TRUE(contains(
      error_of([&] { training_data(dir, "[{path: " + (dir / "a.jsonl") + ", weight: 1.0e9}]"); }),
      "records per epoch, above the bound of 268435456"));
}

TEST(DataFiles, AWeightedDocumentSplitIntoPartsIsDrawnWhole) {
  ScratchDir dir;
  pretokenized_file(dir, "long.jsonl", 10, 1, 20);  // 20 tokens: 3 parts of a 8-token batch
  pretokenized_file(dir, "short.jsonl", 50, 2);
  const tandem::TrainingData data = training_data(
      dir, "[{path: " + (dir / "long.jsonl") + ", weight: 2}, " + (dir / "short.jsonl") + "]");
  EXPECT_EQ(data.split_documents, 1);
  EXPECT_EQ(data.file_draws, (std::vector<int64_t>{6, 2}));
  std::vector<std::pair<int64_t, int64_t>> parts;  // (record, begin) of the long document
  for (int64_t r = 0; r < data.num_records(); ++r)
    if (data.part(r).record == 0) parts.push_back({0, data.part(r).begin});
  EXPECT_EQ(parts, (std::vector<std::pair<int64_t, int64_t>>{
                       {0, 0}, {0, 8}, {0, 16}, {0, 0}, {0, 8}, {0, 16}}));
}

TEST(DataFiles, TrainingLeavesTheHeldOutRecordsOut) {
  ScratchDir dir;
  pretokenized_file(dir, "a.jsonl", 10, 50);
  const tandem::SplitCounts counts = tandem::split_records(
      dir / "a.jsonl", 0.2, 9, dir / "train.jsonl", dir / "heldout.jsonl", OnError::fail);
  const tandem::TrainingData data =
      training_data(dir, dir / "a.jsonl", "  heldout_fraction: 0.2\n  heldout_seed: 9\n");
  EXPECT_EQ(data.num_records(), counts.train);
  EXPECT_EQ(data.file_passed_over, (std::vector<int64_t>{counts.heldout}));
  // The training records are exactly the split's train file, in order.
  std::ifstream train(dir / "train.jsonl");
  std::string line;
  for (int64_t r = 0; std::getline(train, line); ++r)
    EXPECT_TRUE(contains(line, "[" + std::to_string(data.document(r).ids[0]) + ",")) << line;
}

TEST(DataFiles, ColumnsReadAFieldFromAnotherKeyOrParquetColumn) {
  ScratchDir dir;
  const std::string messages =
      R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}])";
  const std::string plain = write_file(dir, "plain.jsonl", "{\"messages\": " + messages + "}\n");
  // lmsys-style `conversation`, and a record whose own `messages` is not the conversation.
  const std::string renamed =
      write_file(dir, "renamed.jsonl",
                 "{\"conversation\": " + messages +
                     "}\n{\"messages\": \"junk\", \"conversation\": " + messages + "}\n");
  auto options = chatml_options();
  const auto expected = tandem::testing::read_all(plain, DataFormat::conversations, options);
  EXPECT_NE(
      error_of([&] { tandem::testing::read_all(renamed, DataFormat::conversations, options); }),
      "");
  options.columns = {{"messages", "conversation"}};
  const auto read = tandem::testing::read_all(renamed, DataFormat::conversations, options);
  ASSERT_EQ(read.size(), 2u);
  EXPECT_EQ(read[0].ids, expected[0].ids);
  EXPECT_EQ(read[1].ids, expected[0].ids);
  // The cache keys on the renames.
  tandem::CacheOptions cache;
  cache.dir = dir / "cache";
  auto other = options;
  other.columns = {{"conversations", "conversation"}};
  EXPECT_NE(tandem::token_cache_key(renamed, DataFormat::conversations, options),
            tandem::token_cache_key(renamed, DataFormat::conversations, other));
  // A field the format does not read, or one column for two fields, is refused by name.
  other.columns = {{"prompt", "question"}};
  EXPECT_TRUE(contains(
      error_of([&] { tandem::DocumentStream(renamed, DataFormat::conversations, other); }),
      "data.columns: 'prompt' is not a field the conversations format reads (conversations, "
      "messages, tools)"));
  other.columns = {{"messages", "c"}, {"conversations", "c"}};
  EXPECT_TRUE(
      contains(error_of([&] { tandem::DocumentStream(renamed, DataFormat::conversations, other); }),
               "'messages' and 'conversations' are both read from column 'c'"));

  // Parquet: only the mapped column is read; a text document per row from `category`.
  if (!tandem::ParquetRows::available()) GTEST_SKIP() << "this build reads no Parquet (no Arrow)";
  const std::string types = source_path("tests/fixtures/parquet/types.parquet");
  auto text = chatml_options(OnError::skip);
  text.columns = {{"text", "category"}};
  tandem::SkipCounts skipped;
  const auto rows = tandem::testing::read_all(types, DataFormat::text, text, &skipped);
  std::ifstream json_file(source_path("tests/fixtures/parquet/types.json"));
  const nlohmann::json pylist = nlohmann::json::parse(json_file);
  size_t next = 0;
  for (size_t row = 0; row < pylist.size(); ++row) {
    if (!pylist[row]["category"].is_string()) continue;
    ASSERT_LT(next, rows.size());
    EXPECT_EQ(rows[next].ids, tandem::testing::qwen2_tokenizer().encode(
                                  pylist[row]["category"].get<std::string>(), true));
    EXPECT_EQ(rows[next].source, types + ": row " + std::to_string(row));
    ++next;
  }
  EXPECT_EQ(next, rows.size());
  EXPECT_GT(rows.size(), 0u);
}

TEST(DataFiles, EmptyFilesAndPreferencePairsAcrossFiles) {
  ScratchDir dir;
  pretokenized_file(dir, "a.jsonl", 10, 2);
  write_file(dir, "empty.jsonl", "");
  pretokenized_file(dir, "b.jsonl", 20, 3);
  // An empty file in the middle holds no document and draws nothing, whatever its weight.
  const tandem::TrainingData data =
      training_data(dir, "[" + (dir / "a.jsonl") + ", {path: " + (dir / "empty.jsonl") +
                             ", weight: 3}, {path: " + (dir / "b.jsonl") + ", weight: 2}]");
  EXPECT_EQ(data.file_records, (std::vector<int64_t>{2, 0, 3}));
  EXPECT_EQ(data.file_draws, (std::vector<int64_t>{2, 0, 6}));
  const TokenizedDataset& dataset = *data.dataset;
  EXPECT_EQ(dataset.file_of(1), 0);
  EXPECT_EQ(dataset.file_of(2), 2);
  EXPECT_EQ(dataset.document(2).ids[0], 20);
  EXPECT_EQ(dataset.document(2).source, (dir / "b.jsonl") + ":1");

  // Preference pairs keep their sides in the second file too.
  if (!tandem::ParquetRows::available()) GTEST_SKIP() << "this build reads no Parquet (no Arrow)";
  const std::string jsonl = source_path("tests/fixtures/parquet/ultrafeedback.jsonl");
  const std::string parquet = source_path("tests/fixtures/parquet/ultrafeedback.parquet");
  tandem::CacheOptions cache;
  cache.dir = dir / "cache";
  const TokenizedDataset one =
      TokenizedDataset::open(jsonl, DataFormat::preference, chatml_options(), cache);
  const TokenizedDataset both =
      TokenizedDataset::open({jsonl, parquet}, DataFormat::preference, chatml_options(), cache);
  ASSERT_EQ(both.num_records(), 2 * one.num_records());
  for (int64_t r = 0; r < one.num_records(); ++r) {
    const tandem::PreferencePair pair = both.pair(one.num_records() + r);
    EXPECT_EQ(pair.chosen.ids, one.pair(r).chosen.ids);
    EXPECT_EQ(pair.rejected.ids, one.pair(r).rejected.ids);
    EXPECT_EQ(pair.chosen.source, parquet + ": row " + std::to_string(r) + " (chosen)");
    EXPECT_EQ(pair.rejected.source, parquet + ": row " + std::to_string(r) + " (rejected)");
  }
}

TEST(DataFiles, AHeldOutParquetFileWithRenamedColumnsHashesWholeRows) {
  if (!tandem::ParquetRows::available()) GTEST_SKIP() << "this build reads no Parquet (no Arrow)";
  ScratchDir dir;
  const std::string types = source_path("tests/fixtures/parquet/types.parquet");
  const tandem::SplitCounts counts = tandem::split_records(types, 0.5, 1, dir / "train.jsonl",
                                                           dir / "heldout.jsonl", OnError::skip);
  ASSERT_GT(counts.heldout, 0);
  ASSERT_GT(counts.train, 0);
  for (const bool heldout : {false, true}) {
    auto options = chatml_options(OnError::skip);
    options.columns = {{"text", "category"}};
    const auto from_split = tandem::testing::read_all(
        dir / (heldout ? "heldout.jsonl" : "train.jsonl"), DataFormat::text, options);
    options.heldout = {0.5, 1, heldout};
    const auto side = tandem::testing::read_all(types, DataFormat::text, options);
    ASSERT_EQ(side.size(), from_split.size()) << heldout;
    for (size_t i = 0; i < side.size(); ++i) EXPECT_EQ(side[i].ids, from_split[i].ids);
  }
}

TEST(DataFiles, ConfigColumnsRenameForTraining) {
  ScratchDir dir;
  write_file(dir, "ids.jsonl", "{\"ids\": [5, 6, 7], \"mask\": [0, 1, 1]}\n");
  const Config config =
      Config::parse("data:\n  path: " + (dir / "ids.jsonl") +
                        "\n  format: pretokenized\n  seq_len: 8\n  cache_dir: " + (dir / "cache") +
                        "\n  columns: {input_ids: ids, loss_mask: mask}\n",
                    "run.yaml");
  const tandem::TrainingData data = tandem::read_training_data(config);
  config.check_all_used();  // the mapping's entries count as read
  ASSERT_EQ(data.num_records(), 1);
  EXPECT_EQ(data.document(0).ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(data.document(0).loss_mask, (std::vector<uint8_t>{0, 1, 1}));
  EXPECT_TRUE(contains(error_of([&] {
                         Config::parse("data: {columns: {input_ids: [a]}}", "run.yaml")
                             .get_string_map("data.columns");
                       }),
                       "run.yaml: data.columns.input_ids: expected a non-empty string"));
}

}  // namespace
