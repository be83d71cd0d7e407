#pragma once
// Records read one at a time: JSONL (one object per line; memory bounded by the longest line), a
// JSON array of objects (ShareGPT's downloads; streamed element by element, memory bounded by the
// largest element), or a Parquet file (data/parquet_rows.h; a row group at a time), told apart by
// the file's first bytes. And the bad-input
// policy every dataset shares: a bad record is an Error naming file and line, or file, record and
// line for an array (`on_error: fail`), or is skipped and counted by reason (`on_error: skip`).
#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

class ParquetRows;

enum class OnError { fail, skip };

/// "fail" or "skip"; anything else throws.
OnError parse_on_error(std::string_view text);
std::string_view on_error_name(OnError on_error);

/// Why a line was rejected. The names (bad_input_name) are what reports and counts use.
enum class BadInput {
  malformed_json,     // not one JSON object per line, or invalid UTF-8
  wrong_type,         // missing key, wrong JSON type, mismatched lengths, bad value
  unknown_role,       // a role that is not system/user/assistant (or an alias)
  empty,              // no tokens at all
  no_trained_tokens,  // the loss mask selects nothing
  too_long,           // more tokens than max_length
  id_out_of_range,    // a token id outside [0, vocab_size)
  no_user_turn,       // a conversation with no user message (nothing to answer: regenerate)
  template_error,     // the chat template refused the conversation (raise_exception, ...)
};
std::string_view bad_input_name(BadInput reason);

/// Thrown by the parser of one line; the reader turns it into an Error or a count. `always_skip`:
/// skipped and counted even under `on_error: fail` (a record a chosen policy drops, e.g.
/// `data.unknown_roles: skip_conversation`).
class BadLine : public std::runtime_error {
 public:
  BadLine(BadInput reason, const std::string& detail, bool always_skip = false)
      : std::runtime_error(detail), reason(reason), always_skip(always_skip) {}
  BadInput reason;
  bool always_skip;
};

/// Skipped lines per reason, with the first one of each kept for the report.
struct SkipCounts {
  struct Entry {
    int64_t count = 0;
    int64_t first_line = 0;  // 1-based line number of the first such line
    std::string first_detail;
  };
  std::map<std::string, Entry> by_reason;  // keyed by bad_input_name

  void add(BadInput reason, int64_t line, const std::string& detail);
  int64_t total() const;
  /// One line per reason: "  unknown_role: 3 (first: x.jsonl:17: unknown role 'bot')".
  std::string report(const std::string& path) const;
  nlohmann::json to_json() const;
  static SkipCounts from_json(const nlohmann::json& json);
};

/// The kinds of record file JsonlReader reads, told apart by their first bytes.
enum class RecordFile { jsonl, json_array, parquet };
RecordFile record_file_kind(const std::string& path);
/// How record `record` (1-based) of a file is named in errors and sources: "path:7" (JSONL),
/// "path[6]" (JSON array, the 0-based index), "path: row 6" (Parquet).
std::string record_name(const std::string& path, RecordFile kind, int64_t record);

/// Streams the JSON objects of a JSONL file (blank lines are ignored) or of a JSON array file
/// (one whose first character other than whitespace or a UTF-8 byte order mark is '[').
/// "Line" below is the record number: the line in JSONL, the element (1-based) in an array.
class JsonlReader {
 public:
  /// Opens `path`; throws Error("[data] <path>: cannot open") when it can't. `columns`: the
  /// top-level fields a Parquet file is read for (all when empty; JSON files give every field).
  JsonlReader(std::string path, OnError on_error, const std::vector<std::string>& columns = {});
  ~JsonlReader();

  /// Reads the next record holding a JSON object into `value`; false at the end of the file.
  /// Malformed records go through reject() on the way. An array whose brackets do not close, or
  /// with data after its closing bracket, is an Error naming the file and line.
  bool next(nlohmann::json& value);

  /// Moves past records up to `line` (1-based) without parsing them (a resumed job's done ones).
  void skip_through(int64_t line);
  /// Whether the file is a JSON array rather than JSONL.
  bool is_array() const { return array_; }
  /// Whether the file is Parquet (its records are rows).
  bool is_parquet() const { return parquet_ != nullptr; }

  /// Applies the policy to the current line (or to `line`, 1-based, when given): throws
  /// Error("[data] <path>:<line>: <detail>") under fail; counts it under skip and tells the
  /// skip listener.
  void reject(const BadLine& bad, int64_t line = 0);
  /// Called with each line skipped (line number, reason), for callers that log them.
  void set_skip_listener(std::function<void(int64_t, const BadLine&)> listener) {
    skip_listener_ = std::move(listener);
  }

  /// "<path>:<line>" of the current line; for an array "<path>[<index>] (line <n>)", the
  /// element's 0-based index and the line it starts on; for Parquet "<path>: row <index>".
  std::string where() const;
  /// The text of the line the last next() returned.
  const std::string& line_text() const { return buffer_; }
  int64_t line() const { return line_; }
  const std::string& path() const { return path_; }
  OnError on_error() const { return on_error_; }
  const SkipCounts& skipped() const { return skipped_; }

 private:
  std::string path_;
  OnError on_error_;
  std::ifstream file_;
  std::string buffer_;
  int64_t line_ = 0;
  bool array_ = false;
  std::unique_ptr<ParquetRows> parquet_;
  bool array_done_ = false;
  int64_t text_line_ = 1;    // array: the physical line the reader is on
  int64_t record_line_ = 0;  // array: the physical line the current element starts on

  /// Parses buffer_ into `value`; false (after reject()) when it is not one JSON object.
  bool parse_record(nlohmann::json& value);
  /// Array mode: the next element's text into buffer_; false after the closing bracket.
  bool next_element();
  std::string where_record(int64_t record) const;
  SkipCounts skipped_;
  std::function<void(int64_t, const BadLine&)> skip_listener_;
};

}  // namespace tandem
