// The header is untrusted input: every field is checked before any offset is used, and the
// offsets must tile the data buffer exactly, so a validated TensorInfo never points outside it.
#include "tandem/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>
#include <unordered_set>
#include <utility>

#include "tandem/core/error.h"
#include "tandem/core/file_io.h"
#include "tandem/core/json_parse.h"

namespace tandem::safetensors {
namespace {

using nlohmann::json;

constexpr size_t kLengthBytes = 8;                 // the u64 header length N
constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // same bound as the reference reader
constexpr int kMaxJsonDepth = 8;                   // a valid header nests 3 deep
constexpr size_t kDataAlignment = 8;               // writers pad the header to this
constexpr const char* kMetadataKey = "__metadata__";
constexpr uint64_t kMaxInt64 = std::numeric_limits<int64_t>::max();

struct DtypeEntry {
  Dtype dtype;
  const char* name;
  size_t size;  // bytes per element
};

constexpr DtypeEntry kDtypes[] = {
    {Dtype::BOOL, "BOOL", 1}, {Dtype::U8, "U8", 1},           {Dtype::I8, "I8", 1},
    {Dtype::I16, "I16", 2},   {Dtype::U16, "U16", 2},         {Dtype::F16, "F16", 2},
    {Dtype::BF16, "BF16", 2}, {Dtype::I32, "I32", 4},         {Dtype::U32, "U32", 4},
    {Dtype::F32, "F32", 4},   {Dtype::F64, "F64", 8},         {Dtype::I64, "I64", 8},
    {Dtype::U64, "U64", 8},   {Dtype::F8_E4M3, "F8_E4M3", 1}, {Dtype::F8_E5M2, "F8_E5M2", 1},
};

/// The table row of `dtype`.
const DtypeEntry& dtype_entry(Dtype dtype) {
  for (const DtypeEntry& entry : kDtypes) {
    if (entry.dtype == dtype) return entry;
  }
  throw Error("[safetensors] invalid Dtype value ", static_cast<int>(dtype));
}

/// Throws Error("[safetensors] <path>: <parts>").
template <typename... Parts>
[[noreturn]] void fail(const std::string& path, const Parts&... parts) {
  throw Error("[safetensors] ", path, ": ", parts...);
}

/// "[2, 3]" for shape (2, 3).
std::string shape_string(const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

/// "a..b" for the byte range [a, b) of `tensor`.
std::string offsets_string(const TensorInfo& tensor) {
  return std::to_string(tensor.begin) + ".." + std::to_string(tensor.end);
}

/// `value` serialized and cut to a short excerpt for error messages.
std::string excerpt(const json& value) {
  constexpr size_t kMaxChars = 60;
  std::string text = value.dump();
  if (text.size() <= kMaxChars) return text;
  size_t cut = kMaxChars;
  while (cut > 0 && (uint8_t(text[cut]) & 0xC0) == 0x80) --cut;  // keep UTF-8 whole
  return text.substr(0, cut) + "...";
}

/// Bytes of a tensor of `shape` and `dtype`; throws when a dimension is negative or the count
/// overflows int64 (checked over the nonzero dimensions, so numel() can never overflow either).
uint64_t shape_nbytes(const std::vector<int64_t>& shape, Dtype dtype, const std::string& path,
                      const std::string& name) {
  uint64_t nonzero_product = dtype_size(dtype);
  bool has_zero_dim = false;
  for (int64_t dim : shape) {
    if (dim < 0) {
      fail(path, "tensor '", name, "' has a negative dimension in shape ", shape_string(shape));
    }
    if (dim == 0) {
      has_zero_dim = true;
    } else if (nonzero_product > kMaxInt64 / static_cast<uint64_t>(dim)) {
      fail(path, "tensor '", name, "' shape ", shape_string(shape), " of ", dtype_name(dtype),
           " overflows a 64-bit byte count");
    } else {
      nonzero_product *= static_cast<uint64_t>(dim);
    }
  }
  return has_zero_dim ? 0 : nonzero_product;
}

/// Throws unless `file_size` bytes can hold the 8-byte header length.
void check_length_field(size_t file_size, const std::string& path) {
  if (file_size < kLengthBytes) {
    fail(path, "file is ", file_size, " bytes, too short for the 8-byte header length");
  }
}

/// The header length N read from the first 8 bytes, checked against the bound and file size.
uint64_t read_header_size(const uint8_t* bytes, size_t file_size, const std::string& path) {
  check_length_field(file_size, path);
  uint64_t header_size = 0;
  for (size_t i = kLengthBytes; i-- > 0;) header_size = (header_size << 8) | bytes[i];
  if (header_size > kMaxHeaderBytes) {
    fail(path, "header length ", header_size, " exceeds the limit of ", kMaxHeaderBytes, " bytes");
  }
  if (header_size > file_size - kLengthBytes) {
    fail(path, "header length ", header_size, " is larger than the ", file_size - kLengthBytes,
         " bytes that follow it (truncated file)");
  }
  if (header_size == 0 || bytes[kLengthBytes] != '{') fail(path, "header does not start with '{'");
  return header_size;
}

/// Offset of the first byte of `text` (`size` bytes) that is not well-formed UTF-8, if any.
std::optional<size_t> find_invalid_utf8(const uint8_t* text, size_t size) {
  size_t i = 0;
  while (i < size) {
    const uint8_t lead = text[i];
    size_t length = 1;
    uint32_t code = lead, min_code = 0;
    if (lead >= 0x80) {
      if ((lead & 0xE0) == 0xC0) {
        length = 2, code = lead & 0x1F, min_code = 0x80;
      } else if ((lead & 0xF0) == 0xE0) {
        length = 3, code = lead & 0x0F, min_code = 0x800;
      } else if ((lead & 0xF8) == 0xF0) {
        length = 4, code = lead & 0x07, min_code = 0x10000;
      } else {
        return i;
      }
      if (size - i < length) return i;
      for (size_t k = 1; k < length; ++k) {
        if ((text[i + k] & 0xC0) != 0x80) return i;
        code = (code << 6) | (text[i + k] & 0x3F);
      }
      // Overlong encodings, UTF-16 surrogates and code points past U+10FFFF are invalid.
      if (code < min_code || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return i;
    }
    i += length;
  }
  return std::nullopt;
}

/// Parses the header JSON; rejects duplicate keys (nlohmann keeps one silently) and deep nesting,
/// in time linear in the header's size (core/json_parse.h).
json parse_json(const uint8_t* text, size_t size, const std::string& path) {
  if (auto bad = find_invalid_utf8(text, size)) {
    fail(path, "header is not valid UTF-8 (byte 0x", std::hex, int(text[*bad]), std::dec,
         " at header offset ", *bad, ")");
  }
  try {
    return parse_json_text(std::string_view(reinterpret_cast<const char*>(text), size),
                           JsonLimits{kMaxJsonDepth, /*unique_keys=*/true});
  } catch (const JsonTextError& error) {
    switch (error.kind) {
      case JsonTextError::Kind::too_deep:
        fail(path, "header JSON nests deeper than ", kMaxJsonDepth);
      case JsonTextError::Kind::duplicate_key:
        if (error.depth == 1) fail(path, "duplicate tensor name '", error.key, "' in header");
        fail(path, "duplicate key '", error.key, "' inside entry '", error.entry, "'");
      case JsonTextError::Kind::invalid:
        break;
    }
    fail(path, "header is not valid JSON: ", error.what());
  }
}

/// `value` as a non-negative integer, or nullopt.
std::optional<uint64_t> as_unsigned(const json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer() && value.get<int64_t>() == 0) return 0;  // "-0"
  return std::nullopt;
}

/// The `__metadata__` entry: an object of string values.
std::map<std::string, std::string> parse_metadata(const json& value, const std::string& path) {
  if (!value.is_object()) {
    fail(path, "__metadata__ must be an object of strings, got ", value.type_name());
  }
  std::map<std::string, std::string> metadata;
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) {
      fail(path, "__metadata__ value for '", key, "' is not a string (got ", excerpt(item), ")");
    }
    metadata.emplace(key, item.get<std::string>());
  }
  return metadata;
}

/// The member `key` of tensor entry `entry`; throws when absent.
const json& member(const json& entry, const char* key, const std::string& name,
                   const std::string& path) {
  auto found = entry.find(key);
  if (found == entry.end()) fail(path, "tensor '", name, "' is missing '", key, "'");
  return *found;
}

/// The shape (d0, d1, ...) of tensor `name` from its JSON array of non-negative integers.
std::vector<int64_t> parse_shape(const json& value, const std::string& name,
                                 const std::string& path) {
  std::vector<int64_t> shape;
  bool valid = value.is_array();
  for (size_t i = 0; valid && i < value.size(); ++i) {
    const std::optional<uint64_t> dim = as_unsigned(value[i]);
    valid = dim && *dim <= kMaxInt64;
    if (valid) shape.push_back(static_cast<int64_t>(*dim));
  }
  if (!valid) {
    fail(path, "tensor '", name, "' shape must be an array of non-negative integers, got ",
         excerpt(value));
  }
  return shape;
}

/// Tensor `name`'s [begin, end) from its JSON data_offsets.
std::pair<uint64_t, uint64_t> parse_offsets(const json& value, const std::string& name,
                                            const std::string& path) {
  const bool is_pair = value.is_array() && value.size() == 2;
  const std::optional<uint64_t> begin = is_pair ? as_unsigned(value[0]) : std::nullopt;
  const std::optional<uint64_t> end = is_pair ? as_unsigned(value[1]) : std::nullopt;
  if (!begin || !end) {
    fail(path, "tensor '", name,
         "' data_offsets must be [begin, end] of non-negative integers, got ", excerpt(value));
  }
  if (*begin > *end) {
    fail(path, "tensor '", name, "' data_offsets end before they begin (", *begin, "..", *end, ")");
  }
  return {*begin, *end};
}

/// One tensor entry: exactly dtype, shape and data_offsets, with a size that matches.
TensorInfo parse_entry(const std::string& name, const json& entry, const std::string& path) {
  if (!entry.is_object()) {
    fail(path, "entry '", name, "' is not an object (got ", excerpt(entry), ")");
  }
  for (const auto& [key, unused] : entry.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      fail(path, "tensor '", name, "' has unexpected key '", key, "'");
    }
  }
  const json& dtype_value = member(entry, "dtype", name, path);
  std::optional<Dtype> dtype;
  if (dtype_value.is_string()) dtype = parse_dtype(dtype_value.get_ref<const std::string&>());
  if (!dtype) fail(path, "tensor '", name, "' has unknown dtype ", excerpt(dtype_value));

  const auto [begin, end] = parse_offsets(member(entry, "data_offsets", name, path), name, path);
  TensorInfo tensor{name, *dtype, parse_shape(member(entry, "shape", name, path), name, path),
                    begin, end};
  const uint64_t expected = shape_nbytes(tensor.shape, tensor.dtype, path, name);
  if (tensor.nbytes() != expected) {
    fail(path, "tensor '", name, "' size mismatch: data_offsets ", offsets_string(tensor), " hold ",
         tensor.nbytes(), " bytes but shape ", shape_string(tensor.shape), " of ",
         dtype_name(tensor.dtype), " needs ", expected);
  }
  return tensor;
}

/// Sorts `tensors` by offset and checks they tile [0, buffer_size) with no hole or overlap.
void check_layout(std::vector<TensorInfo>& tensors, uint64_t buffer_size, const std::string& path) {
  std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  if (!tensors.empty() && tensors.front().begin != 0) {
    fail(path, "first tensor '", tensors.front().name, "' starts at offset ", tensors.front().begin,
         ", not 0");
  }
  for (size_t i = 1; i < tensors.size(); ++i) {
    const TensorInfo& prev = tensors[i - 1];
    const TensorInfo& next = tensors[i];
    if (next.begin < prev.end) {
      fail(path, "tensor '", prev.name, "' overlaps '", next.name, "' (offsets ",
           offsets_string(prev), " and ", offsets_string(next), ")");
    }
    if (next.begin > prev.end) {
      fail(path, "hole of ", next.begin - prev.end, " bytes between tensor '", prev.name,
           "' (offsets ", offsets_string(prev), ") and '", next.name, "' (offsets ",
           offsets_string(next), ")");
    }
  }
  const uint64_t data_end = tensors.empty() ? 0 : tensors.back().end;
  if (data_end > buffer_size) {
    fail(path, "tensor '", tensors.back().name, "' (offsets ", offsets_string(tensors.back()),
         ") runs past the end of the ", buffer_size, "-byte data buffer (truncated file)");
  }
  if (data_end < buffer_size) {
    fail(
        path, "data buffer has ", buffer_size - data_end, " trailing bytes after ",
        tensors.empty() ? "an empty tensor list" : "the last tensor '" + tensors.back().name + "'");
  }
}

/// The directory holding `path` ("." for a bare file name).
std::string parent_directory(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

/// fsyncs the directory holding `path`, so a rename into it survives a crash.
void sync_parent_directory(const std::string& path) {
  const std::string directory = parent_directory(path);
  UniqueFd fd(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0 || ::fsync(fd.get()) != 0) {
    fail(path, "cannot fsync directory ", directory, ": ", std::strerror(errno));
  }
}

/// The header JSON for `tensors` laid out back to back, space-padded to a multiple of 8 bytes.
std::string encode_header(const std::vector<TensorToWrite>& tensors,
                          const std::map<std::string, std::string>& metadata,
                          const std::string& path) {
  nlohmann::ordered_json root = nlohmann::ordered_json::object();
  if (!metadata.empty()) root[kMetadataKey] = metadata;
  std::unordered_set<std::string> names;
  uint64_t offset = 0;
  for (const TensorToWrite& tensor : tensors) {
    if (tensor.name == kMetadataKey) fail(path, "tensor name '", kMetadataKey, "' is reserved");
    if (!names.insert(tensor.name).second) {
      fail(path, "duplicate tensor name '", tensor.name, "'");
    }
    const uint64_t expected = shape_nbytes(tensor.shape, tensor.dtype, path, tensor.name);
    if (tensor.nbytes != expected) {
      fail(path, "tensor '", tensor.name, "' has ", tensor.nbytes, " bytes but shape ",
           shape_string(tensor.shape), " of ", dtype_name(tensor.dtype), " needs ", expected);
    }
    if (expected > 0 && tensor.data == nullptr) {
      fail(path, "tensor '", tensor.name, "' has a null data pointer");
    }
    root[tensor.name] = {{"dtype", dtype_name(tensor.dtype)},
                         {"shape", tensor.shape},
                         {"data_offsets", {offset, offset + expected}}};
    offset += expected;
  }
  std::string text;
  try {
    text = root.dump();
  } catch (const nlohmann::json::exception& e) {
    fail(path, "cannot encode header: ", e.what());
  }
  text.append((kDataAlignment - text.size() % kDataAlignment) % kDataAlignment, ' ');
  if (text.size() > kMaxHeaderBytes) {
    fail(path, "header of ", text.size(), " bytes exceeds the limit of ", kMaxHeaderBytes);
  }
  return text;
}

/// Writes the length field, `header` and every tensor's bytes to the new file `temp_path`;
/// errors name `path`, the file being written.
void write_contents(const std::string& path, const std::string& temp_path,
                    const std::string& header, const std::vector<TensorToWrite>& tensors) {
  UniqueFd fd(::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) fail(path, "cannot create ", temp_path, ": ", std::strerror(errno));
  uint8_t length_field[kLengthBytes];
  for (size_t i = 0; i < kLengthBytes; ++i) length_field[i] = uint8_t(header.size() >> (8 * i));
  write_all(fd.get(), length_field, kLengthBytes, path, "[safetensors]");
  write_all(fd.get(), header.data(), header.size(), path, "[safetensors]");
  for (const TensorToWrite& tensor : tensors)
    write_all(fd.get(), tensor.data, tensor.nbytes, path, "[safetensors]");
  if (::fsync(fd.get()) != 0) fail(path, "fsync of ", temp_path, " failed: ", std::strerror(errno));
  if (!fd.close()) fail(path, "close of ", temp_path, " failed: ", std::strerror(errno));
}

}  // namespace

size_t dtype_size(Dtype dtype) { return dtype_entry(dtype).size; }

const char* dtype_name(Dtype dtype) { return dtype_entry(dtype).name; }

std::optional<Dtype> parse_dtype(std::string_view name) {
  for (const DtypeEntry& entry : kDtypes) {
    if (name == entry.name) return entry.dtype;
  }
  return std::nullopt;
}

int64_t TensorInfo::numel() const {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

uint64_t TensorInfo::nbytes() const { return end - begin; }

Header parse_header(const uint8_t* bytes, size_t file_size, const std::string& path) {
  const uint64_t header_size = read_header_size(bytes, file_size, path);
  const json root = parse_json(bytes + kLengthBytes, header_size, path);
  if (!root.is_object()) fail(path, "header is not a JSON object");
  Header header;
  header.data_start = kLengthBytes + header_size;
  for (const auto& [key, value] : root.items()) {
    if (key == kMetadataKey) {
      header.metadata = parse_metadata(value, path);
    } else {
      header.tensors.push_back(parse_entry(key, value, path));
    }
  }
  check_layout(header.tensors, file_size - header.data_start, path);
  return header;
}

File File::open(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail(path, "cannot open: ", std::strerror(errno));
  struct stat status;
  if (::fstat(fd.get(), &status) != 0) fail(path, "cannot stat: ", std::strerror(errno));
  if (!S_ISREG(status.st_mode)) fail(path, "not a regular file");
  const auto file_size = static_cast<size_t>(status.st_size);
  check_length_field(file_size, path);  // mmap of an empty file fails, so check first

  void* mapping = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (mapping == MAP_FAILED) fail(path, "cannot mmap: ", std::strerror(errno));
  File file;
  file.path_ = path;
  file.mapping_ = static_cast<const uint8_t*>(mapping);
  file.mapping_size_ = file_size;
  file.header_ = parse_header(file.mapping_, file_size, path);
  for (size_t i = 0; i < file.header_.tensors.size(); ++i) {
    file.index_.emplace(file.header_.tensors[i].name, i);
  }
  return file;
}

File::File(File&& other) noexcept
    : path_(std::move(other.path_)),
      mapping_(std::exchange(other.mapping_, nullptr)),
      mapping_size_(std::exchange(other.mapping_size_, 0)),
      header_(std::move(other.header_)),
      index_(std::move(other.index_)) {}

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_size_ = std::exchange(other.mapping_size_, 0);
    header_ = std::move(other.header_);
    index_ = std::move(other.index_);
  }
  return *this;
}

File::~File() { unmap(); }

void File::unmap() {
  if (mapping_ != nullptr) ::munmap(const_cast<uint8_t*>(mapping_), mapping_size_);
  mapping_ = nullptr;
  mapping_size_ = 0;
}

bool File::contains(const std::string& name) const { return index_.count(name) > 0; }

const TensorInfo& File::info(const std::string& name) const {
  auto found = index_.find(name);
  if (found == index_.end()) fail(path_, "no tensor named '", name, "'");
  return header_.tensors[found->second];
}

const uint8_t* File::data(const TensorInfo& tensor) const {
  const bool in_buffer = mapping_ != nullptr && tensor.begin <= tensor.end &&
                         tensor.end <= mapping_size_ - header_.data_start;
  if (!in_buffer) {
    fail(path_, "tensor '", tensor.name, "' (offsets ", offsets_string(tensor),
         ") is outside this file's data buffer");
  }
  return mapping_ + header_.data_start + tensor.begin;
}

void write_file(const std::string& path, const std::vector<TensorToWrite>& tensors,
                const std::map<std::string, std::string>& metadata) {
  const std::string header = encode_header(tensors, metadata, path);
  const std::string temp_path = path + ".tmp." + std::to_string(::getpid());
  try {
    write_contents(path, temp_path, header, tensors);
    if (::rename(temp_path.c_str(), path.c_str()) != 0) {
      fail(path, "cannot rename ", temp_path, " over it: ", std::strerror(errno));
    }
  } catch (...) {
    ::unlink(temp_path.c_str());
    throw;
  }
  sync_parent_directory(path);
}

}  // namespace tandem::safetensors
