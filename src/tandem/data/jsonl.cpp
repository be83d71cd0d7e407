#include "tandem/data/jsonl.h"

#include <sstream>

#include "tandem/core/error.h"
#include "tandem/core/json_parse.h"

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

JsonlReader::JsonlReader(std::string path, OnError on_error)
    : path_(std::move(path)), on_error_(on_error), file_(path_, std::ios::binary) {
  check(file_.is_open(), "[data] ", path_, ": cannot open");
}

bool JsonlReader::next(nlohmann::json& value) {
  while (std::getline(file_, buffer_)) {
    ++line_;
    if (!buffer_.empty() && buffer_.back() == '\r') buffer_.pop_back();
    if (buffer_.find_first_not_of(" \t") == std::string::npos) continue;  // blank line
    try {
      value = parse_json_text(buffer_);  // nesting bounded, overflowing numbers caught
    } catch (const JsonTextError& e) {
      reject(BadLine(BadInput::malformed_json, std::string("malformed JSON: ") + e.what()));
      continue;
    }
    if (!value.is_object()) {
      reject(BadLine(BadInput::malformed_json,
                     std::string("expected a JSON object, got ") + value.type_name()));
      continue;
    }
    return true;
  }
  check(file_.eof(), "[data] ", path_, ": read error after line ", line_);
  return false;
}

void JsonlReader::skip_through(int64_t line) {
  while (line_ < line && std::getline(file_, buffer_)) ++line_;
}

void JsonlReader::reject(const BadLine& bad, int64_t line) {
  if (line == 0) line = line_;
  if (on_error_ == OnError::fail) throw Error("[data] ", path_, ":", line, ": ", bad.what());
  skipped_.add(bad.reason, line, bad.what());
  if (skip_listener_) skip_listener_(line, bad);
}

std::string JsonlReader::where() const { return path_ + ":" + std::to_string(line_); }

}  // namespace tandem
