#pragma once
// One writer per run directory: `tandem train` holds an exclusive lock on run_dir/.lock for as
// long as it runs (rank 0, the only rank that writes there). The kernel releases it when the
// process ends, however it ends, so a killed run never leaves a stale lock behind; a second
// `tandem train` on the same run directory is refused while the first is alive.
#include <string>

namespace tandem {

class RunDirLock {
 public:
  /// Creates `run_dir` if needed and takes the lock; throws Error naming the directory and the
  /// pid that holds it when another process does.
  explicit RunDirLock(const std::string& run_dir);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace tandem
