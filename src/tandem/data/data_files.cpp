#include "tandem/data/data_files.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "tandem/core/error.h"

namespace tandem {

bool is_glob(const std::string& path) { return path.find_first_of("*?[") != std::string::npos; }

namespace {

// The regular files matching `pattern`, sorted by name.
std::vector<std::string> glob_files(const std::string& pattern, const std::string& entry) {
  glob_t found{};
  const int status = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &found);
  std::vector<std::string> paths;
  if (status == 0)
    for (size_t i = 0; i < found.gl_pathc; ++i) paths.emplace_back(found.gl_pathv[i]);
  ::globfree(&found);
  check(status == 0 || status == GLOB_NOMATCH, "[data] ", entry,
        ": cannot read the directories of ", pattern,
        status == GLOB_NOSPACE ? " (out of memory)" : " (read error)");
  std::erase_if(paths, [](const std::string& p) { return !std::filesystem::is_regular_file(p); });
  std::sort(paths.begin(), paths.end());
  check(!paths.empty(), "[data] ", entry, ": '", pattern, "' matches no file");
  return paths;
}

}  // namespace

std::vector<DataFile> expand_data_files(const std::vector<WeightedPath>& entries,
                                        const std::string& where) {
  check(!entries.empty(), "[data] ", where, ": no data file given");
  std::vector<DataFile> files;
  std::set<std::string> seen;  // canonical paths
  for (size_t i = 0; i < entries.size(); ++i) {
    const WeightedPath& entry = entries[i];
    const std::string name = entries.size() == 1 ? where : where + "[" + std::to_string(i) + "]";
    std::vector<std::string> paths;
    if (is_glob(entry.path) && !std::filesystem::exists(entry.path)) {
      paths = glob_files(entry.path, name);
    } else {
      check(std::filesystem::exists(entry.path), "[data] ", name, ": ", entry.path,
            " does not exist");
      check(std::filesystem::is_regular_file(entry.path), "[data] ", name, ": ", entry.path,
            " is not a file");
      paths = {entry.path};
    }
    for (const std::string& path : paths) {
      std::error_code error;
      const std::string canonical = std::filesystem::canonical(path, error).string();
      check(seen.insert(error ? path : canonical).second, "[data] ", name, ": ", path,
            " is named twice; give it once with a weight instead (weight: 2 draws its records "
            "twice per epoch)");
      files.push_back({path, entry.weight});
    }
  }
  return files;
}

std::vector<std::string> paths_of(const std::vector<DataFile>& files) {
  std::vector<std::string> paths;
  for (const DataFile& file : files) paths.push_back(file.path);
  return paths;
}

std::string describe_files(const std::vector<std::string>& paths) {
  if (paths.empty()) return "(no file)";
  std::string out = paths[0];
  if (paths.size() > 1) out += " + " + paths[1];
  if (paths.size() > 2) out += " (+ " + std::to_string(paths.size() - 2) + " more)";
  return out;
}

}  // namespace tandem
