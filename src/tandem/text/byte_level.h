#pragma once
// GPT-2's byte <-> unicode map: byte-level BPE vocabularies spell every byte as a printable code
// point (space is 'Ġ' U+0120, newline 'Ċ' U+010A), so a token string is a string of such chars.
#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace tandem::byte_level {

/// The code point that stands for `byte` (U+0021..U+00FF for printable Latin-1, else U+0100+n).
char32_t byte_to_char(unsigned char byte);

/// The byte that code point `cp` stands for, or nullopt when `cp` is not a byte-level char.
std::optional<unsigned char> char_to_byte(char32_t cp);

/// `bytes` spelled in byte-level chars (UTF-8).
std::string encode(std::string_view bytes);

/// The raw bytes of a byte-level token string, or nullopt when some char is not a byte-level char.
std::optional<std::string> decode(std::string_view token);

}  // namespace tandem::byte_level
