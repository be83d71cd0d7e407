// Parquet through Apache Arrow (data/parquet_rows.h): rows equal what pyarrow reads from the same
// files (tools/make_parquet_fixtures.py), UltraChat- and UltraFeedback-style files read exactly as
// the same records in JSONL across row groups, values JSON cannot hold are bad rows naming their
// column, footers declaring too much are refused before reading, corrupt files are named.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "chat_fixture.h"
#include "read_documents.h"
#include "tandem/core/error.h"
#include "tandem/data/datasets.h"
#include "tandem/data/parquet_rows.h"
#include "tandem/text/tokenizer.h"

namespace {

using tandem::DataFormat;
using tandem::DatasetOptions;
using tandem::OnError;
using tandem::ParquetRows;
using tandem::TokenizedDocument;
using tandem::testing::chatml_options;
using tandem::testing::error_of;
using tandem::testing::read_all;
using tandem::testing::ScratchDir;
using tandem::testing::source_path;

std::string fixture(const std::string& name) {
  return source_path("tests/fixtures/parquet/" + name);
}

#define SKIP_WITHOUT_ARROW()                                                            \
  if (!ParquetRows::available())                                                        \
  GTEST_SKIP() << "this build has no Apache Arrow (TANDEM_PYARROW_DIR unset): Parquet " \
                  "is refused, as Parquet.WithoutArrowAParquetFileIsRefusedSayingSo checks"

TEST(Parquet, RowsEqualWhatPyarrowReads) {
  SKIP_WITHOUT_ARROW();
  std::ifstream in(fixture("types.json"));
  const nlohmann::json expected = nlohmann::json::parse(in);
  ParquetRows rows(fixture("types.parquet"), {});
  EXPECT_EQ(rows.rows(), 3);
  nlohmann::ordered_json row;
  size_t n = 0;
  while (rows.next(row)) {
    ASSERT_LT(n, expected.size());
    EXPECT_EQ(nlohmann::json::parse(row.dump()), expected[n]) << "row " << n << ": " << row.dump();
    if (n == 0) {  // the file's column order
      std::vector<std::string> names;
      for (const auto& [name, value] : row.items()) names.push_back(name);
      EXPECT_EQ(names.front(), "i8");
      EXPECT_EQ(names.back(), "category");
    }
    ++n;
  }
  EXPECT_EQ(n, expected.size());
  // Only the named columns are read, in the file's order.
  ParquetRows some(fixture("types.parquet"), {"text", "i64", "absent"});
  ASSERT_TRUE(some.next(row));
  EXPECT_EQ(row.dump(), R"({"i64":-9223372036854775808,"text":"héllo 😀"})");
}

TEST(Parquet, HubConversationsAndPreferencesReadAsTheirJsonl) {
  SKIP_WITHOUT_ARROW();
  const auto chat =
      read_all(fixture("ultrachat.parquet"), DataFormat::conversations, chatml_options());
  const auto chat_jsonl =
      read_all(fixture("ultrachat.jsonl"), DataFormat::conversations, chatml_options());
  ASSERT_EQ(chat.size(), 5u);  // three row groups
  ASSERT_EQ(chat.size(), chat_jsonl.size());
  for (size_t i = 0; i < chat.size(); ++i) {
    EXPECT_EQ(chat[i].ids, chat_jsonl[i].ids) << i;
    EXPECT_EQ(chat[i].loss_mask, chat_jsonl[i].loss_mask) << i;
  }
  EXPECT_EQ(chat[4].source, fixture("ultrachat.parquet") + ": row 4");
  const auto pref =
      read_all(fixture("ultrafeedback.parquet"), DataFormat::preference, chatml_options());
  const auto pref_jsonl =
      read_all(fixture("ultrafeedback.jsonl"), DataFormat::preference, chatml_options());
  ASSERT_EQ(pref.size(), 6u);
  ASSERT_EQ(pref.size(), pref_jsonl.size());
  for (size_t i = 0; i < pref.size(); ++i) EXPECT_EQ(pref[i].ids, pref_jsonl[i].ids) << i;
}

TEST(Parquet, ValuesJsonCannotHoldAreBadRowsNamingTheColumn) {
  SKIP_WITHOUT_ARROW();
  const std::string path = fixture("bad_values.parquet");
  tandem::JsonlReader fail(path, OnError::fail);
  nlohmann::json value;
  ASSERT_TRUE(fail.next(value));
  const std::string message = error_of([&] { fail.next(value); });
  EXPECT_EQ(message, "[data] " + path +
                         ": row 1: column 'score': a NaN or infinite number, which JSON has not");
  tandem::JsonlReader skip(path, OnError::skip);
  int good = 0;
  while (skip.next(value)) ++good;
  EXPECT_EQ(good, 2);
  EXPECT_EQ(skip.skipped().by_reason.at("wrong_type").count, 3);
  // The conversations format reads only its own columns: every row is good there.
  EXPECT_EQ(read_all(path, DataFormat::conversations, chatml_options()).size(), 5u);
}

TEST(Parquet, FootersDeclaringTooMuchAreRefusedBeforeReading) {
  SKIP_WITHOUT_ARROW();
  const std::string path = fixture("ultrachat.parquet");
  tandem::ParquetLimits small_chunks;
  small_chunks.max_column_chunk_bytes = 16;
  std::string message = error_of([&] { ParquetRows(path, {}, small_chunks); });
  EXPECT_NE(message.find("[data] " + path + ": row group 0, column 'prompt' declares "),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("bytes uncompressed (at most 16 are read)"), std::string::npos) << message;
  tandem::ParquetLimits few_rows;
  few_rows.max_row_group_rows = 1;
  message = error_of([&] { ParquetRows(path, {}, few_rows); });
  EXPECT_EQ(message, "[data] " + path + ": row group 0 declares 2 rows (at most 1 are read)");
}

TEST(Parquet, CorruptOrForeignFilesAreNamed) {
  SKIP_WITHOUT_ARROW();
  ScratchDir dir;
  std::ifstream in(fixture("ultrachat.parquet"), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::vector<std::pair<std::string, std::string>> files = {
      {bytes.substr(0, bytes.size() / 2), "not a readable Parquet file"},
      {"PAR1" + std::string(64, 'x') + "PAR1", "not a readable Parquet file"},
      {bytes.substr(0, bytes.size() - 12) + std::string(8, '\xff') + "PAR1",
       "not a readable Parquet file"},
  };
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string path = dir / ("bad" + std::to_string(i) + ".parquet");
    std::ofstream(path, std::ios::binary) << files[i].first;
    const std::string message =
        error_of([&] { read_all(path, DataFormat::conversations, chatml_options(OnError::skip)); });
    EXPECT_NE(message.find("[data] " + path + ": " + files[i].second), std::string::npos)
        << message;
  }
  const std::string message = error_of(
      [&] { read_all(fixture("types.parquet"), DataFormat::conversations, chatml_options()); });
  EXPECT_NE(message.find("none of the columns this format reads (conversations, messages, tools) "
                         "is in the file (its columns: i8, u64"),
            std::string::npos)
      << message;
}

// A file the fuzzer made (fuzz/fuzz_parquet.cpp): a struct field name that is not UTF-8, which
// once reached the JSON writer and aborted, and a row group whose compressed data is corrupt.
TEST(Parquet, FuzzFoundFileIsABadRowThenANamedError) {
  SKIP_WITHOUT_ARROW();
  const std::string path = fixture("fuzz-invalid-utf8-field-name.parquet");
  EXPECT_EQ(error_of([&] { read_all(path, DataFormat::preference, chatml_options()); }),
            "[data] " + path + ": row 0: column 'chosen': a field name that is not valid UTF-8");
  const std::string message =
      error_of([&] { read_all(path, DataFormat::preference, chatml_options(OnError::skip)); });
  EXPECT_NE(message.find("[data] " + path + ": row group 1 cannot be read: "), std::string::npos)
      << message;
}

TEST(Parquet, WithoutArrowAParquetFileIsRefusedSayingSo) {
  if (ParquetRows::available()) {
    EXPECT_TRUE(tandem::is_parquet_file(fixture("types.parquet")));
    EXPECT_FALSE(tandem::is_parquet_file(fixture("types.json")));
    return;
  }
  const std::string message = error_of([&] { ParquetRows(fixture("types.parquet"), {}); });
  EXPECT_NE(message.find("this build of tandem reads none"), std::string::npos) << message;
}

}  // namespace
