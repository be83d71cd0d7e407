#pragma once
// A JSONL file that a long job appends to in batches and that survives a kill -9 at any moment:
// each batch is one write followed by fsync, so the file holds whole batches plus, at worst,
// part of the last one; opening it again cuts a trailing partial line (the write the kill
// interrupted) and hands back the complete lines, so the job can skip what is done.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tandem {

class ResumableJsonl {
 public:
  /// Opens `path` (absent: no lines; the first append creates it). Errors name `component` and the
  /// file (a complete line that is not a JSON object means the file is not this job's output).
  ResumableJsonl(std::string path, const char* component);

  /// The complete lines found at open, parsed, in order.
  const std::vector<nlohmann::json>& existing() const { return existing_; }
  /// Removes the existing lines for which `drop` is true (the file is replaced atomically).
  /// Before any append only.
  void drop_existing(const std::function<bool(const nlohmann::json&)>& drop);
  /// Appends `lines` (one JSON object each) in one write and fsyncs it.
  void append(const std::vector<nlohmann::json>& lines);
  /// The same, for lines that keep their keys' order.
  void append_ordered(const std::vector<nlohmann::ordered_json>& lines);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const char* component_;
  std::vector<nlohmann::json> existing_;
  void append_text(const std::string& content);  // whole lines, fsynced
  bool appended_ = false;
};

}  // namespace tandem
