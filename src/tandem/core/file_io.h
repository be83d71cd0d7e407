#pragma once
// Small POSIX file helpers shared by every writer that must not lose data (safetensors files,
// checkpoints): an fd closed on destruction and a write loop that retries short writes.
// Torch-free, so the safetensors layer and its fuzzer can use it.
#include <cstddef>
#include <string>
#include <utility>

namespace tandem {

/// A file descriptor closed on destruction.
class UniqueFd {
 public:
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();
  int get() const { return fd_; }
  /// Closes now and reports whether close succeeded (it can report deferred write errors).
  bool close();

 private:
  int fd_;
};

/// Writes all `size` bytes to `fd`, retrying short writes and EINTR; any other failure (ENOSPC,
/// EFBIG, EIO) throws Error(component, " ", path, ": write failed: <reason>").
void write_all(int fd, const void* bytes, size_t size, const std::string& path,
               const char* component);

/// Writes `content` to a temporary file next to `path`, fsyncs it and renames it over `path`:
/// readers see the old file or the new one, never a mix. Errors name `component` and the path.
void replace_file(const std::string& path, const std::string& content, const char* component);

}  // namespace tandem
