#pragma once
// One exception type for every user-facing failure. Messages start with the component in
// brackets and name the file and what is wrong: Error("[safetensors] ", path, ": ...").
#include <sstream>
#include <stdexcept>
#include <string>

namespace tandem {

class Error : public std::runtime_error {
 public:
  template <typename... Parts>
  explicit Error(const Parts&... parts) : std::runtime_error(concat(parts...)) {}

 private:
  template <typename... Parts>
  static std::string concat(const Parts&... parts) {
    std::ostringstream out;
    (out << ... << parts);
    return out.str();
  }
};

/// Throws Error(parts...) when `condition` is false.
template <typename... Parts>
inline void check(bool condition, const Parts&... parts) {
  if (!condition) throw Error(parts...);
}

}  // namespace tandem
