#pragma once
// XXH64 (Yann Collet's xxHash, 64-bit variant, written from its specification): the fast
// non-cryptographic hash behind cache keys and cache checksums.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tandem {

/// Streaming XXH64: update() any number of times, digest() at any point.
class Hasher {
 public:
  explicit Hasher(uint64_t seed = 0);
  Hasher& update(const void* data, size_t size);
  Hasher& update(std::string_view text) { return update(text.data(), text.size()); }
  /// Hashes the value's bytes (little-endian layout on every supported machine).
  Hasher& update_u64(uint64_t value) { return update(&value, sizeof(value)); }
  /// A length-prefixed string, so that ("ab","c") and ("a","bc") differ.
  Hasher& update_field(std::string_view text);
  uint64_t digest() const;

 private:
  uint64_t lanes_[4];
  uint64_t seed_;
  uint64_t total_ = 0;
  unsigned char buffer_[32];
  size_t buffered_ = 0;
};

/// XXH64 of `size` bytes.
uint64_t xxh64(const void* data, size_t size, uint64_t seed = 0);

/// XXH64 of a file's content, read in chunks; throws Error("[hash] <path>: ...") when unreadable.
uint64_t hash_file(const std::string& path);

/// 16 lowercase hex digits.
std::string hex64(uint64_t value);

}  // namespace tandem
