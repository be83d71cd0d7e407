#include "tandem/text/byte_level.h"

#include "tandem/text/utf8.h"

namespace tandem::byte_level {

namespace {

struct Tables {
  std::array<char32_t, 256> byte_to_char{};
  std::array<int16_t, 512> char_to_byte{};  // every byte-level char is below U+0200

  Tables() {
    char_to_byte.fill(-1);
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp = printable(b) ? char32_t(b) : char32_t(256 + next++);
      byte_to_char[b] = cp;
      char_to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables instance;
  return instance;
}

}  // namespace

char32_t byte_to_char(unsigned char byte) { return tables().byte_to_char[byte]; }

std::optional<unsigned char> char_to_byte(char32_t cp) {
  if (cp >= 512 || tables().char_to_byte[cp] < 0) return std::nullopt;
  return static_cast<unsigned char>(tables().char_to_byte[cp]);
}

std::string encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) utf8::append(out, byte_to_char(b));
  return out;
}

std::optional<std::string> decode(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  for (size_t pos = 0; pos < token.size();) {
    const auto byte = char_to_byte(utf8::next(token, pos));
    if (!byte) return std::nullopt;
    out += static_cast<char>(*byte);
  }
  return out;
}

}  // namespace tandem::byte_level
