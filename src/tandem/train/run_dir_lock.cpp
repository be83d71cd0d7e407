#include "tandem/train/run_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "tandem/core/error.h"

namespace tandem {

RunDirLock::RunDirLock(const std::string& run_dir) {
  std::error_code error;
  std::filesystem::create_directories(run_dir, error);
  check(!error, "[train] ", run_dir, ": cannot create the run directory: ", error.message());
  const std::string path = run_dir + "/.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  check(fd_ >= 0, "[train] ", path,
        ": cannot open the run directory's lock: ", std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int code = errno;
    char holder[64] = {0};
    const ssize_t got = ::pread(fd_, holder, sizeof holder - 1, 0);
    ::close(fd_);
    fd_ = -1;
    std::string pid = got > 0 ? std::string(holder, static_cast<size_t>(got)) : "";
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    check(code != EWOULDBLOCK, "[train] ", run_dir, " is being written by another tandem train",
          pid.empty() ? std::string() : " (pid " + pid + ")",
          ": one writer per run directory. Wait for it to finish or stop it (SIGTERM saves "
          "and exits), or give this run another training.run_dir");
    throw Error("[train] ", path, ": cannot lock: ", std::strerror(code));
  }
  // Who holds it, for the message another process prints.
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, pid.data(), pid.size(), 0);
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace tandem
