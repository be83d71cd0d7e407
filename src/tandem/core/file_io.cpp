#include "tandem/core/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "tandem/core/error.h"

namespace tandem {

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

bool UniqueFd::close() { return ::close(std::exchange(fd_, -1)) == 0; }

void write_all(int fd, const void* bytes, size_t size, const std::string& path,
               const char* component) {
  const auto* cursor = static_cast<const uint8_t*>(bytes);
  while (size > 0) {
    const ssize_t written = ::write(fd, cursor, size);
    if (written < 0 && errno == EINTR) continue;
    if (written < 0) throw Error(component, " ", path, ": write failed: ", std::strerror(errno));
    if (written == 0)
      throw Error(component, " ", path, ": write failed: wrote 0 of ", size, " bytes");
    cursor += written;
    size -= static_cast<size_t>(written);
  }
}

void replace_file(const std::string& path, const std::string& content, const char* component) {
  const std::string temp = path + ".tmp";
  {
    UniqueFd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    check(fd.get() >= 0, component, " ", temp, ": cannot open for writing: ", std::strerror(errno));
    try {
      write_all(fd.get(), content.data(), content.size(), temp, component);
      check(::fsync(fd.get()) == 0 && fd.close(), component, " ", temp,
            ": write failed: ", std::strerror(errno));
    } catch (...) {
      ::unlink(temp.c_str());
      throw;
    }
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    throw Error(component, " ", path, ": cannot replace: ", std::strerror(error));
  }
}

}  // namespace tandem
