#pragma once
// The safetensors format with no torch dependency: header validation, read-only mmap, and an
// atomic writer. Layout: u64 little-endian header length N, N bytes of JSON, the data buffer.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tandem::safetensors {

enum class Dtype {
  BOOL,
  U8,
  I8,
  I16,
  U16,
  F16,
  BF16,
  I32,
  U32,
  F32,
  F64,
  I64,
  U64,
  F8_E4M3,
  F8_E5M2
};

/// Bytes per element of `dtype`.
size_t dtype_size(Dtype dtype);
/// The safetensors spelling of `dtype` ("BF16", "F8_E4M3", ...).
const char* dtype_name(Dtype dtype);
/// The Dtype spelled `name`, or nullopt for an unknown spelling.
std::optional<Dtype> parse_dtype(std::string_view name);

/// One tensor's entry in the header.
struct TensorInfo {
  std::string name;
  Dtype dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;  // byte offsets into the data buffer, [begin, end)

  /// Number of elements: product of `shape` (1 for a scalar).
  int64_t numel() const;
  /// Bytes of data: end - begin.
  uint64_t nbytes() const;
};

/// A validated header.
struct Header {
  std::vector<TensorInfo> tensors;  // in ascending offset order
  std::map<std::string, std::string> metadata;
  uint64_t data_start;  // file offset of the data buffer: 8 + N
};

/// Parses and validates the whole file layout in `bytes` (`file_size` bytes); every problem
/// throws tandem::Error("[safetensors] <path>: ...").
Header parse_header(const uint8_t* bytes, size_t file_size, const std::string& path);

/// A read-only memory-mapped safetensors file with a validated header.
class File {
 public:
  /// Maps `path` and validates its header.
  static File open(const std::string& path);

  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();

  /// The validated header.
  const Header& header() const { return header_; }
  /// Whether a tensor named `name` is in the file.
  bool contains(const std::string& name) const;
  /// The entry of tensor `name`; throws naming the file and tensor when missing.
  const TensorInfo& info(const std::string& name) const;
  /// Start of `tensor`'s bytes in the mapping (info.nbytes() bytes, not aligned).
  const uint8_t* data(const TensorInfo& tensor) const;
  /// The path the file was opened from.
  const std::string& path() const { return path_; }

 private:
  File() = default;
  void unmap();

  std::string path_;
  const uint8_t* mapping_ = nullptr;
  size_t mapping_size_ = 0;  // bytes, the file size
  Header header_;
  std::unordered_map<std::string, size_t> index_;  // name -> position in header_.tensors
};

/// One tensor for write_file; `data` holds `nbytes` bytes in row-major order.
struct TensorToWrite {
  std::string name;
  Dtype dtype;
  std::vector<int64_t> shape;
  const void* data;
  size_t nbytes;
};

/// Writes `tensors` (in the given order) and `metadata` to `path` atomically: a temp file,
/// fsync, rename over `path`, fsync of the directory. The data buffer starts 8-byte aligned.
void write_file(const std::string& path, const std::vector<TensorToWrite>& tensors,
                const std::map<std::string, std::string>& metadata = {});

}  // namespace tandem::safetensors
