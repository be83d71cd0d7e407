#pragma once
// UTF-8 helpers for the tokenizer: decoding one code point, validation with the offending byte
// offset, Rust's lossy decoding (what HF's ByteLevel decoder does with invalid bytes), and the
// whitespace definition HF uses (Unicode White_Space).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tandem::utf8 {

/// Length of the UTF-8 sequence that starts with lead byte `lead` (1 for continuation bytes).
inline size_t sequence_length(unsigned char lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

inline bool is_continuation(unsigned char byte) { return (byte & 0xC0) == 0x80; }

/// Decodes the code point at `text[pos]` of valid UTF-8 and advances `pos` past it.
inline char32_t next(std::string_view text, size_t& pos) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data()) + pos;
  if (s[0] < 0x80) {
    pos += 1;
    return s[0];
  }
  if (s[0] < 0xE0) {
    pos += 2;
    return (char32_t(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
  }
  if (s[0] < 0xF0) {
    pos += 3;
    return (char32_t(s[0] & 0x0F) << 12) | (char32_t(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
  }
  pos += 4;
  return (char32_t(s[0] & 0x07) << 18) | (char32_t(s[1] & 0x3F) << 12) |
         (char32_t(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
}

/// Number of bytes of the UTF-8 encoding of `cp`.
inline size_t encoded_length(char32_t cp) {
  return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

/// Appends the UTF-8 encoding of `cp` to `out`.
void append(std::string& out, char32_t cp);

/// Byte offset of the first invalid UTF-8 sequence in `text`, or nullopt when all of it is valid
/// (overlongs, surrogates and code points past U+10FFFF are invalid).
std::optional<size_t> find_invalid(std::string_view text);

/// Rust's String::from_utf8_lossy: each maximal invalid subpart becomes one U+FFFD.
std::string decode_lossy(std::string_view bytes);

/// Unicode White_Space (Rust's char::is_whitespace, Rust regex's \s).
bool is_whitespace(char32_t cp);

/// Python's str.isspace(): White_Space plus the separators U+001C..U+001F (what str.strip()
/// and Jinja's `trim` remove).
inline bool is_python_space(char32_t cp) { return is_whitespace(cp) || (cp >= 0x1C && cp <= 0x1F); }

}  // namespace tandem::utf8
