#include "tandem/data/jsonl.h"

#include <sstream>

#include "tandem/core/error.h"
#include "tandem/core/json_parse.h"
#include "tandem/data/parquet_rows.h"

namespace tandem {

OnError parse_on_error(std::string_view text) {
  if (text == "fail") return OnError::fail;
  if (text == "skip") return OnError::skip;
  throw Error("[data] on_error must be 'fail' or 'skip', not '", text, "'");
}

std::string_view on_error_name(OnError on_error) {
  return on_error == OnError::fail ? "fail" : "skip";
}

std::string_view bad_input_name(BadInput reason) {
  switch (reason) {
    case BadInput::malformed_json:
      return "malformed_json";
    case BadInput::wrong_type:
      return "wrong_type";
    case BadInput::unknown_role:
      return "unknown_role";
    case BadInput::empty:
      return "empty";
    case BadInput::no_trained_tokens:
      return "no_trained_tokens";
    case BadInput::too_long:
      return "too_long";
    case BadInput::id_out_of_range:
      return "id_out_of_range";
    case BadInput::no_user_turn:
      return "no_user_turn";
    case BadInput::template_error:
      return "template_error";
  }
  return "unknown";
}

void SkipCounts::add(BadInput reason, int64_t line, const std::string& detail) {
  Entry& entry = by_reason[std::string(bad_input_name(reason))];
  if (entry.count++ == 0) {
    entry.first_line = line;
    entry.first_detail = detail;
  }
}

int64_t SkipCounts::total() const {
  int64_t sum = 0;
  for (const auto& [reason, entry] : by_reason) sum += entry.count;
  return sum;
}

std::string SkipCounts::report(const std::string& path) const {
  std::ostringstream out;
  for (const auto& [reason, entry] : by_reason)
    out << "  " << reason << ": " << entry.count << " (first: " << path << ":" << entry.first_line
        << ": " << entry.first_detail << ")\n";
  return out.str();
}

nlohmann::json SkipCounts::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [reason, entry] : by_reason)
    out[reason] = {{"count", entry.count},
                   {"first_line", entry.first_line},
                   {"first_detail", entry.first_detail}};
  return out;
}

SkipCounts SkipCounts::from_json(const nlohmann::json& json) {
  SkipCounts out;
  for (const auto& [reason, entry] : json.items())
    out.by_reason[reason] = {entry.at("count").get<int64_t>(),
                             entry.at("first_line").get<int64_t>(),
                             entry.at("first_detail").get<std::string>()};
  return out;
}

JsonlReader::JsonlReader(std::string path, OnError on_error,
                         const std::vector<std::string>& columns)
    : path_(std::move(path)), on_error_(on_error), file_(path_, std::ios::binary) {
  check(file_.is_open(), "[data] ", path_, ": cannot open");
  const RecordFile kind = record_file_kind(path_);
  if (kind == RecordFile::parquet) {
    parquet_ = std::make_unique<ParquetRows>(path_, columns);
  } else if (kind == RecordFile::json_array) {
    array_ = true;  // read on from just after the '['
    for (int c = file_.rdbuf()->sbumpc(); c != EOF && c != '['; c = file_.rdbuf()->sbumpc())
      text_line_ += c == '\n';
  }
}

bool JsonlReader::next_element() {
  // Skips whitespace and one separating comma, then copies one value, tracking strings and
  // nesting, up to the comma or bracket that ends it at depth 0.
  std::streambuf* in = file_.rdbuf();
  buffer_.clear();
  bool separator = false;
  int c;
  while ((c = in->sgetc()) != EOF) {
    if (c == '\n') ++text_line_;
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || (c == ',' && !separator && line_ > 0)) {
      separator = separator || c == ',';
      in->sbumpc();
      continue;
    }
    break;
  }
  check(c != EOF, "[data] ", path_, ": the JSON array is not closed (no ']' by line ", text_line_,
        ")");
  if (c == ']') {
    in->sbumpc();
    while ((c = in->sbumpc()) != EOF) {
      if (c == '\n') ++text_line_;
      check(c == ' ' || c == '\t' || c == '\r' || c == '\n', "[data] ", path_, ": line ",
            text_line_, ": data after the JSON array's closing ']'");
    }
    return false;
  }
  check(line_ == 0 || separator, "[data] ", path_, ": line ", text_line_,
        ": the JSON array's elements must be separated by commas");
  record_line_ = text_line_;
  // A value ends where its closing bracket or quote brings it back to depth 0, or, for a bare
  // number or literal, before whitespace, a comma or the array's ']'.
  int depth = 0;
  bool in_string = false, escaped = false;
  while ((c = in->sgetc()) != EOF) {
    if (!in_string && depth == 0 && !buffer_.empty() &&
        (c == ',' || c == ']' || c == ' ' || c == '\t' || c == '\r' || c == '\n'))
      break;
    in->sbumpc();
    buffer_ += static_cast<char>(c);
    if (c == '\n') ++text_line_;
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
        if (depth == 0) break;  // a bare string
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth <= 0) break;  // the value closed (or an unbalanced bracket: its parse names it)
    }
  }
  return true;
}

JsonlReader::~JsonlReader() = default;

bool JsonlReader::parse_record(nlohmann::json& value) {
  try {
    value = parse_json_text(buffer_);  // nesting bounded, overflowing numbers caught
  } catch (const JsonTextError& e) {
    reject(BadLine(BadInput::malformed_json, std::string("malformed JSON: ") + e.what()));
    return false;
  }
  if (!value.is_object()) {
    reject(BadLine(BadInput::malformed_json,
                   std::string("expected a JSON object, got ") + value.type_name()));
    return false;
  }
  return true;
}

bool JsonlReader::next(nlohmann::json& value) {
  if (parquet_) {
    while (true) {
      nlohmann::ordered_json row;
      bool more = false;
      try {
        ++line_;
        more = parquet_->next(row);
      } catch (const BadLine& bad) {
        reject(bad);
        continue;
      }
      if (!more) {
        --line_;
        return false;
      }
      try {
        buffer_ = row.dump();  // the row's text, in the file's column order (line_text)
        value = nlohmann::json(row);
      } catch (const nlohmann::json::exception& e) {  // ParquetRows checks its text; a backstop
        reject(
            BadLine(BadInput::malformed_json, std::string("not expressible as JSON: ") + e.what()));
        continue;
      }
      return true;
    }
  }
  if (array_) {
    while (!array_done_ && next_element()) {
      ++line_;
      if (parse_record(value)) return true;
    }
    array_done_ = true;
    return false;
  }
  while (std::getline(file_, buffer_)) {
    ++line_;
    if (!buffer_.empty() && buffer_.back() == '\r') buffer_.pop_back();
    if (buffer_.find_first_not_of(" \t") == std::string::npos) continue;  // blank line
    if (parse_record(value)) return true;
  }
  check(file_.eof(), "[data] ", path_, ": read error after line ", line_);
  return false;
}

void JsonlReader::skip_through(int64_t line) {
  if (parquet_) {
    nlohmann::ordered_json row;
    while (line_ < line) {
      ++line_;
      try {
        if (!parquet_->next(row)) {
          --line_;
          return;
        }
      } catch (const BadLine&) {
      }
    }
    return;
  }
  if (array_) {
    while (line_ < line && !array_done_) {
      if (next_element())
        ++line_;
      else
        array_done_ = true;
    }
    return;
  }
  while (line_ < line && std::getline(file_, buffer_)) ++line_;
}

void JsonlReader::reject(const BadLine& bad, int64_t line) {
  if (line == 0) line = line_;
  if (on_error_ == OnError::fail && !bad.always_skip)
    throw Error("[data] ", where_record(line), ": ", bad.what());
  skipped_.add(bad.reason, line, bad.what());
  if (skip_listener_) skip_listener_(line, bad);
}

RecordFile record_file_kind(const std::string& path) {
  if (is_parquet_file(path)) return RecordFile::parquet;
  // A JSON array when the first character after a UTF-8 byte order mark and whitespace is '['.
  std::ifstream in(path, std::ios::binary);
  std::string head(4096, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  size_t i = head.starts_with("\xEF\xBB\xBF") ? 3 : 0;
  while (i < head.size() &&
         (head[i] == ' ' || head[i] == '\t' || head[i] == '\r' || head[i] == '\n'))
    ++i;
  return i < head.size() && head[i] == '[' ? RecordFile::json_array : RecordFile::jsonl;
}

std::string record_name(const std::string& path, RecordFile kind, int64_t record) {
  switch (kind) {
    case RecordFile::parquet:
      return path + ": row " + std::to_string(record - 1);
    case RecordFile::json_array:
      return path + "[" + std::to_string(record - 1) + "]";
    case RecordFile::jsonl:
      break;
  }
  return path + ":" + std::to_string(record);
}

std::string JsonlReader::where_record(int64_t record) const {
  if (parquet_) return record_name(path_, RecordFile::parquet, record);
  if (!array_) return record_name(path_, RecordFile::jsonl, record);
  std::string out = record_name(path_, RecordFile::json_array, record);
  if (record == line_) out += " (line " + std::to_string(record_line_) + ")";
  return out;
}

std::string JsonlReader::where() const { return where_record(line_); }

}  // namespace tandem
