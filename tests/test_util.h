#pragma once
// Shared helpers for the test suite: fixture paths, scratch directories, running the binary.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "tandem/core/error.h"

namespace tandem::testing {

// The checkout and the built binary (the generated test_paths.cpp in the build directory).
extern const char* const kSourceDir;
extern const char* const kTandemBinary;

inline std::string source_path(const std::string& relative) {
  return std::string(kSourceDir) + "/" + relative;
}

inline std::string model_fixture(const std::string& name) {
  return source_path("tests/fixtures/models/" + name);
}

/// A fresh directory under the system temp dir, removed when the object dies.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tandem-test-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  /// Writes `text` as the file `name` here and returns its path.
  std::string write(const std::string& name, const std::string& text) const {
    const std::string path = *this / name;
    std::ofstream(path) << text;
    return path;
  }

 private:
  std::string path_;
};

struct CommandResult {
  int exit_code;
  std::string output;  // stdout and stderr together
};

/// Runs `command` through the shell and captures its output and exit code.
inline CommandResult run_command(const std::string& command) {
  CommandResult result{-1, ""};
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return result;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

inline std::string tandem_binary() { return kTandemBinary; }

/// The message of the tandem::Error that `action` throws, or "(no error)".
inline std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const tandem::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace tandem::testing
