#include "tandem/core/hash.h"

#include <cstring>
#include <fstream>
#include <vector>

#include "tandem/core/error.h"

namespace tandem {

namespace {

constexpr uint64_t kPrime1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kPrime2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kPrime3 = 0x165667B19E3779F9ULL;
constexpr uint64_t kPrime4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t kPrime5 = 0x27D4EB2F165667C5ULL;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

inline uint64_t read64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

inline uint32_t read32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline uint64_t round(uint64_t acc, uint64_t input) {
  acc += input * kPrime2;
  return rotl(acc, 31) * kPrime1;
}

inline uint64_t merge_round(uint64_t acc, uint64_t lane) {
  acc ^= round(0, lane);
  return acc * kPrime1 + kPrime4;
}

}  // namespace

Hasher::Hasher(uint64_t seed) : seed_(seed) {
  lanes_[0] = seed + kPrime1 + kPrime2;
  lanes_[1] = seed + kPrime2;
  lanes_[2] = seed;
  lanes_[3] = seed - kPrime1;
}

Hasher& Hasher::update(const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  total_ += size;
  if (buffered_ + size < 32) {
    std::memcpy(buffer_ + buffered_, p, size);
    buffered_ += size;
    return *this;
  }
  if (buffered_ > 0) {
    const size_t fill = 32 - buffered_;
    std::memcpy(buffer_ + buffered_, p, fill);
    for (int lane = 0; lane < 4; ++lane)
      lanes_[lane] = round(lanes_[lane], read64(buffer_ + 8 * lane));
    p += fill;
    size -= fill;
    buffered_ = 0;
  }
  for (; size >= 32; p += 32, size -= 32)
    for (int lane = 0; lane < 4; ++lane) lanes_[lane] = round(lanes_[lane], read64(p + 8 * lane));
  std::memcpy(buffer_, p, size);
  buffered_ = size;
  return *this;
}

Hasher& Hasher::update_field(std::string_view text) {
  update_u64(text.size());
  return update(text);
}

uint64_t Hasher::digest() const {
  uint64_t h;
  if (total_ >= 32) {
    h = rotl(lanes_[0], 1) + rotl(lanes_[1], 7) + rotl(lanes_[2], 12) + rotl(lanes_[3], 18);
    for (int lane = 0; lane < 4; ++lane) h = merge_round(h, lanes_[lane]);
  } else {
    h = seed_ + kPrime5;
  }
  h += total_;
  const unsigned char* p = buffer_;
  size_t left = buffered_;
  for (; left >= 8; p += 8, left -= 8) h = rotl(h ^ round(0, read64(p)), 27) * kPrime1 + kPrime4;
  if (left >= 4) {
    h = rotl(h ^ (uint64_t{read32(p)} * kPrime1), 23) * kPrime2 + kPrime3;
    p += 4;
    left -= 4;
  }
  for (; left > 0; ++p, --left) h = rotl(h ^ (*p * kPrime5), 11) * kPrime1;
  h ^= h >> 33;
  h *= kPrime2;
  h ^= h >> 29;
  h *= kPrime3;
  h ^= h >> 32;
  return h;
}

uint64_t xxh64(const void* data, size_t size, uint64_t seed) {
  return Hasher(seed).update(data, size).digest();
}

uint64_t hash_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  check(file.good(), "[hash] ", path, ": cannot open");
  Hasher hasher;
  std::vector<char> chunk(1 << 20);
  while (file) {
    file.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    hasher.update(chunk.data(), static_cast<size_t>(file.gcount()));
  }
  check(file.eof(), "[hash] ", path, ": read error");
  return hasher.digest();
}

std::string hex64(uint64_t value) {
  static const char* digits = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, value >>= 4) out[i] = digits[value & 0xF];
  return out;
}

}  // namespace tandem
