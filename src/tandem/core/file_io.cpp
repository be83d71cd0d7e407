#include "tandem/core/file_io.h"

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

}  // namespace tandem
