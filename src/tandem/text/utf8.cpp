#include "tandem/text/utf8.h"

namespace tandem::utf8 {

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {

// Length of the valid prefix of the sequence starting at s[0] (Unicode Table 3-7), and whether
// that prefix is a complete code point. `available` bytes can be read.
struct SequenceCheck {
  size_t valid_prefix;
  bool complete;
};

SequenceCheck check_sequence(const unsigned char* s, size_t available) {
  const unsigned char lead = s[0];
  if (lead < 0x80) return {1, true};
  size_t length;
  unsigned char low = 0x80, high = 0xBF;  // allowed range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return {0, false};
  }
  size_t i = 1;
  for (; i < length; ++i) {
    if (i >= available) return {i, false};
    const unsigned char lo = i == 1 ? low : 0x80, hi = i == 1 ? high : 0xBF;
    if (s[i] < lo || s[i] > hi) return {i, false};
  }
  return {length, true};
}

}  // namespace

std::optional<size_t> find_invalid(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    if (s[pos] < 0x80) {
      ++pos;
      continue;
    }
    const SequenceCheck check = check_sequence(s + pos, text.size() - pos);
    if (!check.complete) return pos;
    pos += check.valid_prefix;
  }
  return std::nullopt;
}

std::string decode_lossy(std::string_view bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const SequenceCheck check = check_sequence(s + pos, bytes.size() - pos);
    if (check.complete) {
      out.append(bytes.data() + pos, check.valid_prefix);
      pos += check.valid_prefix;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD for the maximal invalid subpart
      pos += check.valid_prefix == 0 ? 1 : check.valid_prefix;
    }
  }
  return out;
}

bool is_whitespace(char32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

}  // namespace tandem::utf8
