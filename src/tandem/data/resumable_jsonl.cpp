#include "tandem/data/resumable_jsonl.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "tandem/core/error.h"
#include "tandem/core/file_io.h"

namespace tandem {

ResumableJsonl::ResumableJsonl(std::string path, const char* component)
    : path_(std::move(path)), component_(component) {
  std::string content;
  {
    std::ifstream in(path_, std::ios::binary);
    if (in) content.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const size_t complete = content.rfind('\n') == std::string::npos ? 0 : content.rfind('\n') + 1;
  if (complete < content.size()) {  // a write cut by a kill: drop its partial line
    check(::truncate(path_.c_str(), static_cast<off_t>(complete)) == 0, component_, " ", path_,
          ": cannot cut the partial last line: ", std::strerror(errno));
  }
  std::istringstream lines(content.substr(0, complete));
  std::string line;
  int64_t number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (line.empty()) continue;
    nlohmann::json value = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    check(value.is_object(), component_, " ", path_, ":", number,
          ": not a JSON object: this file was not written by this command (choose another output "
          "path, or delete it to start over)");
    existing_.push_back(std::move(value));
  }
}

void ResumableJsonl::drop_existing(const std::function<bool(const nlohmann::json&)>& drop) {
  std::vector<nlohmann::json> kept;
  for (nlohmann::json& value : existing_)
    if (!drop(value)) kept.push_back(std::move(value));
  if (kept.size() == existing_.size()) {
    existing_ = std::move(kept);
    return;
  }
  std::string content;
  for (const nlohmann::json& value : kept) content += value.dump() + "\n";
  replace_file(path_, content, component_);
  existing_ = std::move(kept);
}

void ResumableJsonl::append(const std::vector<nlohmann::json>& lines) {
  std::string content;
  for (const nlohmann::json& value : lines) content += value.dump() + "\n";
  append_text(content);
}

void ResumableJsonl::append_ordered(const std::vector<nlohmann::ordered_json>& lines) {
  std::string content;
  for (const nlohmann::ordered_json& value : lines) content += value.dump() + "\n";
  append_text(content);
}

void ResumableJsonl::append_text(const std::string& content) {
  if (content.empty()) return;
  appended_ = true;
  UniqueFd fd(::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644));
  check(fd.get() >= 0, component_, " ", path_,
        ": cannot open for appending: ", std::strerror(errno));
  write_all(fd.get(), content.data(), content.size(), path_, component_);
  check(::fsync(fd.get()) == 0, component_, " ", path_, ": fsync failed: ", std::strerror(errno));
  check(fd.close(), component_, " ", path_, ": close failed: ", std::strerror(errno));
}

}  // namespace tandem
