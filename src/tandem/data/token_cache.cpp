#include "tandem/data/token_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <random>

#include "tandem/core/error.h"
#include "tandem/core/hash.h"
#include "tandem/core/json_parse.h"
#include "tandem/data/data_files.h"
#include "tandem/text/tokenizer.h"

namespace tandem {

namespace {

constexpr char kMagic[8] = {'T', 'A', 'N', 'D', 'M', 'T', 'O', 'K'};
constexpr char kEndMagic[8] = {'T', 'A', 'N', 'D', 'M', 'E', 'N', 'D'};
constexpr uint32_t kVersion = 2;  // 2: role aliases, unknown_roles, implicit preference prompts
constexpr size_t kHeaderSize = 80;
constexpr size_t kTrailerSize = 24;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t documents_per_record;
  uint64_t key;
  uint64_t num_documents;
  uint64_t num_tokens;
  uint64_t num_trained_tokens;
  uint64_t index_offset;
  uint64_t meta_offset;
  uint64_t meta_size;
  uint64_t reserved;
};
static_assert(sizeof(Header) == kHeaderSize);

struct Trailer {
  uint64_t checksum;
  uint64_t file_size;
  char magic[8];
};
static_assert(sizeof(Trailer) == kTrailerSize);

bool uses_tokenizer(DataFormat format) { return format != DataFormat::pretokenized; }

// Writes a cache file body by body while hashing it; finish() seals it with header and trailer.
class CacheWriter {
 public:
  CacheWriter(const std::string& path, int documents_per_record)
      : path_(path), file_(std::fopen(path.c_str(), "wb+")) {
    check(file_ != nullptr, "[data] ", path, ": cannot create (", std::strerror(errno), ")");
    header_ = Header{};
    std::memcpy(header_.magic, kMagic, 8);
    header_.version = kVersion;
    header_.documents_per_record = static_cast<uint32_t>(documents_per_record);
    write_raw(&header_, kHeaderSize);  // placeholder, rewritten by finish()
  }
  ~CacheWriter() {
    if (file_) std::fclose(file_);
  }

  void add(const TokenizedDocument& document, int64_t line) {
    const size_t length = document.ids.size();
    IndexEntry entry{offset_, static_cast<uint64_t>(line), static_cast<uint32_t>(length), 0};
    std::vector<uint8_t> bytes(length * 4 + (length + 7) / 8);
    std::memcpy(bytes.data(), document.ids.data(), length * 4);  // int32 ids >= 0 as u32
    uint8_t* bits = bytes.data() + length * 4;
    for (size_t t = 0; t < length; ++t)
      if (document.loss_mask[t]) {
        bits[t / 8] |= static_cast<uint8_t>(1u << (t % 8));
        ++entry.trained;
      }
    bytes.resize((bytes.size() + 3) / 4 * 4, 0);
    write_body(bytes.data(), bytes.size());
    index_.push_back(entry);
    header_.num_tokens += length;
    header_.num_trained_tokens += entry.trained;
  }

  void finish(uint64_t key, const std::string& meta) {
    pad_body_to(8);
    header_.key = key;
    header_.num_documents = index_.size();
    header_.index_offset = offset_;
    write_body(index_.data(), index_.size() * sizeof(IndexEntry));
    header_.meta_offset = offset_;
    header_.meta_size = meta.size();
    write_body(meta.data(), meta.size());
    Trailer trailer{};
    trailer.checksum = Hasher(hasher_).update(&header_, kHeaderSize).digest();
    trailer.file_size = offset_ + kTrailerSize;
    std::memcpy(trailer.magic, kEndMagic, 8);
    write_raw(&trailer, kTrailerSize);
    check(std::fseek(file_, 0, SEEK_SET) == 0, "[data] ", path_, ": seek failed");
    write_raw(&header_, kHeaderSize);
    check(std::fflush(file_) == 0 && ::fsync(fileno(file_)) == 0, "[data] ", path_,
          ": cannot flush (", std::strerror(errno), ")");
    const int closed = std::fclose(file_);
    file_ = nullptr;
    check(closed == 0, "[data] ", path_, ": cannot close");
  }

  struct IndexEntry {
    uint64_t offset;
    uint64_t line;
    uint32_t length;
    uint32_t trained;
  };

 private:
  void write_raw(const void* data, size_t size) {
    check(std::fwrite(data, 1, size, file_) == size, "[data] ", path_, ": write failed (",
          std::strerror(errno), ")");
  }
  void write_body(const void* data, size_t size) {
    write_raw(data, size);
    hasher_.update(data, size);
    offset_ += size;
  }
  void pad_body_to(size_t alignment) {
    static const uint8_t zeros[8] = {};
    if (offset_ % alignment) write_body(zeros, alignment - offset_ % alignment);
  }

  std::string path_;
  std::FILE* file_;
  Header header_;
  Hasher hasher_;
  uint64_t offset_ = kHeaderSize;
  std::vector<IndexEntry> index_;
};

// The reasons a cache file is unusable, or "" when it is sound.
std::string validate_cache(const uint8_t* bytes, size_t size, uint64_t key) {
  if (size < kHeaderSize + kTrailerSize) return "shorter than header and trailer";
  Header header;
  Trailer trailer;
  std::memcpy(&header, bytes, kHeaderSize);
  std::memcpy(&trailer, bytes + size - kTrailerSize, kTrailerSize);
  if (std::memcmp(header.magic, kMagic, 8) != 0) return "not a tandem token cache";
  if (header.version != kVersion) return "cache format version " + std::to_string(header.version);
  if (std::memcmp(trailer.magic, kEndMagic, 8) != 0 || trailer.file_size != size)
    return "truncated (trailer missing or size mismatch)";
  if (header.key != key) return "key mismatch";
  const uint64_t body_end = size - kTrailerSize;
  if (header.documents_per_record < 1 || header.documents_per_record > 2 ||
      header.index_offset < kHeaderSize || header.index_offset > body_end ||
      header.index_offset % 8 != 0 || header.meta_offset > body_end ||
      header.num_documents > (body_end - header.index_offset) / sizeof(CacheWriter::IndexEntry) ||
      header.index_offset + header.num_documents * sizeof(CacheWriter::IndexEntry) !=
          header.meta_offset ||
      header.meta_offset + header.meta_size != body_end)
    return "inconsistent layout";
  const uint64_t checksum = Hasher()
                                .update(bytes + kHeaderSize, body_end - kHeaderSize)
                                .update(bytes, kHeaderSize)
                                .digest();
  if (checksum != trailer.checksum) return "checksum mismatch";
  uint64_t tokens = 0;
  for (uint64_t i = 0; i < header.num_documents; ++i) {
    CacheWriter::IndexEntry entry;
    std::memcpy(&entry, bytes + header.index_offset + i * sizeof(entry), sizeof(entry));
    const uint64_t end = entry.offset + uint64_t{entry.length} * 4 + (entry.length + 7) / 8;
    if (entry.offset < kHeaderSize || end > header.index_offset || entry.trained > entry.length)
      return "document " + std::to_string(i) + " out of bounds";
    tokens += entry.length;
  }
  if (tokens != header.num_tokens) return "token count mismatch";
  return "";
}

std::string input_stem(const std::string& path) {
  std::string stem = std::filesystem::path(path).stem().string();
  for (char& c : stem)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  return stem.empty() ? "data" : stem;
}

// Tokenizes `path` into the open writer; returns the meta JSON.
nlohmann::json build(const std::string& path, DataFormat format, const DatasetOptions& options,
                     CacheWriter& writer) {
  DocumentStream stream(path, format, options);
  std::vector<TokenizedDocument> documents;
  int64_t good = 0;
  while (stream.next(documents)) {
    for (const TokenizedDocument& document : documents) writer.add(document, stream.line());
    ++good;
  }
  nlohmann::json meta = {
      {"source", path},
      {"format", data_format_name(format)},
      {"tokenizer", options.tokenizer && uses_tokenizer(format) ? options.tokenizer->path() : ""},
      {"chat_template", uses_tokenizer(format) ? options.chat_template : ""},
      {"template_kwargs", uses_tokenizer(format) ? options.template_kwargs : ""},
      {"max_length", options.max_length},
      {"last_turn_only", options.last_turn_only},
      {"train_reasoning", options.train_reasoning},
      {"unknown_roles", static_cast<int>(options.unknown_roles)},
      {"on_error", on_error_name(options.on_error)},
      {"vocab_size", options.effective_vocab_size()},
      {"columns", options.columns},
      {"heldout_fraction", options.heldout.fraction},
      {"heldout_seed", options.heldout.seed},
      {"keep_heldout", options.heldout.keep_heldout},
      {"lines", good + stream.skipped().total()},
      {"passed_over", stream.passed_over()},
      {"skipped", stream.skipped().to_json()}};
  return meta;
}

std::string unique_suffix() {
  std::random_device device;
  return std::to_string(::getpid()) + "-" + hex64((uint64_t{device()} << 32) | device());
}

}  // namespace

struct TokenizedDataset::IndexEntry : CacheWriter::IndexEntry {};

std::string default_data_cache_dir() {
  if (const char* root = std::getenv("TANDEM_CACHE"); root && *root)
    return std::string(root) + "/data";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.cache/tandem/data";
}

uint64_t token_cache_key(const std::string& path, DataFormat format,
                         const DatasetOptions& options) {
  Hasher key;
  key.update_field("tandem token cache").update_u64(kVersion);
  key.update_field(data_format_name(format)).update_u64(hash_file(path));
  if (uses_tokenizer(format)) {
    check(options.tokenizer != nullptr, "[data] ", path, ": the ", data_format_name(format),
          " format needs a tokenizer");
    key.update_u64(hash_file(options.tokenizer->path()));
    // The rendering itself: the resolved template's source, special tokens and kwargs.
    key.update_field(
        format == DataFormat::text
            ? std::string()
            : ChatTemplate::resolve(
                  options.chat_template,
                  std::filesystem::path(options.tokenizer->path()).parent_path().string(),
                  options.template_kwargs)
                  .fingerprint());
  }
  key.update_u64(static_cast<uint64_t>(options.max_length));
  key.update_u64(format == DataFormat::conversations && options.last_turn_only);
  key.update_u64(format == DataFormat::conversations && !options.train_reasoning);
  key.update_u64(static_cast<uint64_t>(options.unknown_roles));
  key.update_field(on_error_name(options.on_error));
  key.update_u64(static_cast<uint64_t>(options.effective_vocab_size()));
  if (!options.columns.empty()) {  // unset: the key as before the option
    key.update_field("columns").update_u64(options.columns.size());
    for (const auto& [field, column] : options.columns)
      key.update_field(field).update_field(column);
  }
  if (options.heldout.active()) {  // unset: the key of a file read whole, as before the option
    // The fraction's exact bits: two fractions that print alike split differently.
    key.update_field("heldout").update_u64(std::bit_cast<uint64_t>(options.heldout.fraction));
    key.update_u64(options.heldout.seed).update_u64(options.heldout.keep_heldout);
  }
  return key.digest();
}

// One file's cache entry, memory-mapped.
struct TokenizedDataset::Mapping {
  const uint8_t* bytes = nullptr;
  size_t size = 0;
  uint64_t index_offset = 0;
  RecordFile record_file = RecordFile::jsonl;  // how sources name records
  std::string path;                            // the input file
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (bytes) ::munmap(const_cast<uint8_t*>(bytes), size);
  }
};

void TokenizedDataset::open_file(const std::string& path, DataFormat format,
                                 const DatasetOptions& options, const CacheOptions& cache,
                                 TokenizedFile& file, Mapping& mapping,
                                 uint32_t& documents_per_record) {
  const uint64_t key = token_cache_key(path, format, options);
  file.path = path;
  file.key = key;
  mapping.path = path;
  mapping.record_file = record_file_kind(path);
  std::string file_path;  // the file to map
  if (cache.enabled) {
    const std::string dir = cache.dir.empty() ? default_data_cache_dir() : cache.dir;
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    check(!error, "[data] cannot create the cache directory ", dir, ": ", error.message());
    file.cache_path = dir + "/" + input_stem(path) + "-" + std::string(data_format_name(format)) +
                      "-" + hex64(key) + ".tokens";
    file_path = file.cache_path;
  }
  for (int attempt = 0;; ++attempt) {
    file.from_cache = cache.enabled && std::filesystem::exists(file_path);
    if (!file.from_cache) {
      const std::string temp =
          cache.enabled
              ? file_path + ".tmp-" + unique_suffix()
              : (std::filesystem::temp_directory_path() / ("tandem-tokens-" + unique_suffix()))
                    .string();
      try {
        CacheWriter writer(temp, format == DataFormat::preference ? 2 : 1);
        const nlohmann::json meta = build(path, format, options, writer);
        writer.finish(key, meta.dump());
        if (cache.enabled) std::filesystem::rename(temp, file_path);
      } catch (...) {
        std::error_code ignored;
        std::filesystem::remove(temp, ignored);
        throw;
      }
      if (!cache.enabled) file_path = temp;
    }

    // Map and validate.
    const int fd = ::open(file_path.c_str(), O_RDONLY);
    if (fd < 0) {
      const int open_errno = errno;
      std::error_code ignored;
      if (!cache.enabled) std::filesystem::remove(file_path, ignored);
      throw Error("[data] ", file_path, ": cannot open (", std::strerror(open_errno), ")");
    }
    struct stat info;
    const bool stat_ok = ::fstat(fd, &info) == 0;
    void* bytes = MAP_FAILED;
    if (stat_ok && info.st_size > 0)
      bytes = ::mmap(nullptr, static_cast<size_t>(info.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    const int map_errno = errno;
    ::close(fd);
    std::error_code unnamed;
    if (!cache.enabled) std::filesystem::remove(file_path, unnamed);  // unnamed from here on
    std::string problem = !stat_ok ? "cannot stat" : info.st_size == 0 ? "empty file" : "";
    if (problem.empty() && bytes == MAP_FAILED)
      problem = std::string("mmap: ") + std::strerror(map_errno);
    if (problem.empty())
      problem = validate_cache(static_cast<const uint8_t*>(bytes), info.st_size, key);
    Header header{};
    if (problem.empty()) {
      std::memcpy(&header, bytes, kHeaderSize);
      // The record and skip counts, JSON after the index: read as part of the validation, so a
      // cache whose metadata does not parse is rebuilt like any other corrupt one.
      const char* text = static_cast<const char*>(bytes) + header.meta_offset;
      try {
        const nlohmann::json meta = parse_json_text(std::string_view(text, header.meta_size));
        file.lines = meta.at("lines").get<int64_t>();
        file.passed_over = meta.value("passed_over", int64_t{0});  // absent before the option
        file.skipped = SkipCounts::from_json(meta.at("skipped"));
      } catch (const std::exception& e) {
        problem = std::string("metadata: ") + e.what();
      }
    }
    if (!problem.empty()) {
      if (bytes != MAP_FAILED) ::munmap(bytes, static_cast<size_t>(info.st_size));
      check(file.from_cache && attempt == 0, "[data] ", file_path,
            ": just written and unreadable: ", problem);
      std::cerr << "[data] warning: token cache " << file_path << " is corrupt (" << problem
                << "); rebuilding it\n";
      std::error_code removed;
      std::filesystem::remove(file_path, removed);
      check(!removed, "[data] ", file_path, ": corrupt and cannot be removed (", removed.message(),
            ")");
      continue;
    }
    mapping.bytes = static_cast<const uint8_t*>(bytes);
    mapping.size = static_cast<size_t>(info.st_size);
    mapping.index_offset = header.index_offset;
    documents_per_record = header.documents_per_record;
    file.documents = static_cast<int64_t>(header.num_documents);
    file.tokens = static_cast<int64_t>(header.num_tokens);
    file.trained_tokens = static_cast<int64_t>(header.num_trained_tokens);
    return;
  }
}

TokenizedDataset TokenizedDataset::open(const std::string& path, DataFormat format,
                                        const DatasetOptions& options, const CacheOptions& cache) {
  return open(std::vector<std::string>{path}, format, options, cache);
}

TokenizedDataset TokenizedDataset::open(const std::vector<std::string>& paths, DataFormat format,
                                        const DatasetOptions& options, const CacheOptions& cache) {
  check(!paths.empty(), "[data] no input file");
  check(format != DataFormat::rollout, "[data] ", paths.front(),
        ": rollout files are read with RolloutStream; they are not cached");
  TokenizedDataset out;
  out.format_ = format;
  out.documents_per_record_ = format == DataFormat::preference ? 2 : 1;
  out.source_path_ = describe_files(paths);
  Hasher key;
  key.update_field("tandem dataset of several files");
  for (const std::string& path : paths) {
    TokenizedFile file;
    auto mapping = std::make_unique<Mapping>();
    uint32_t per_record = 0;
    open_file(path, format, options, cache, file, *mapping, per_record);
    check(per_record == static_cast<uint32_t>(out.documents_per_record_), "[data] ",
          file.cache_path, ": holds ", per_record, " documents per record, not ",
          out.documents_per_record_);
    file.first_document = out.num_documents_;
    out.num_documents_ += file.documents;
    out.num_tokens_ += file.tokens;
    out.num_trained_tokens_ += file.trained_tokens;
    key.update_u64(file.key);
    out.files_.push_back(std::move(file));
    out.mappings_.push_back(std::move(mapping));
  }
  out.key_ = paths.size() == 1 ? out.files_.front().key : key.digest();
  return out;
}

TokenizedDataset::TokenizedDataset(TokenizedDataset&& other) noexcept = default;
TokenizedDataset& TokenizedDataset::operator=(TokenizedDataset&& other) noexcept = default;
TokenizedDataset::~TokenizedDataset() = default;

int TokenizedDataset::file_of(int64_t i) const {
  check(i >= 0 && i < num_documents_, "[data] ", source_path_, ": document ", i, " out of range (",
        num_documents_, " documents)");
  // The last file starting at or before i (files without documents start where the next does).
  const auto after = std::upper_bound(
      files_.begin(), files_.end(), i,
      [](int64_t index, const TokenizedFile& file) { return index < file.first_document; });
  auto file = after - 1;
  while (file->documents == 0) --file;  // i lies in a file with documents
  return static_cast<int>(file - files_.begin());
}

std::pair<const TokenizedDataset::Mapping*, int64_t> TokenizedDataset::locate(int64_t i) const {
  const int k = file_of(i);
  return {mappings_[k].get(), i - files_[k].first_document};
}

const TokenizedDataset::IndexEntry& TokenizedDataset::entry(int64_t i) const {
  const auto [mapping, local] = locate(i);
  return *reinterpret_cast<const IndexEntry*>(mapping->bytes + mapping->index_offset +
                                              local * sizeof(IndexEntry));
}

int64_t TokenizedDataset::length(int64_t i) const { return entry(i).length; }

int64_t TokenizedDataset::trained_length(int64_t i) const { return entry(i).trained; }

TokenizedDocument TokenizedDataset::document(int64_t i) const {
  const auto [mapping, local] = locate(i);
  const IndexEntry& e = *reinterpret_cast<const IndexEntry*>(
      mapping->bytes + mapping->index_offset + local * sizeof(IndexEntry));
  TokenizedDocument out;
  out.ids.resize(e.length);
  std::memcpy(out.ids.data(), mapping->bytes + e.offset, size_t{e.length} * 4);
  const uint8_t* bits = mapping->bytes + e.offset + size_t{e.length} * 4;
  out.loss_mask.resize(e.length);
  for (uint32_t t = 0; t < e.length; ++t) out.loss_mask[t] = (bits[t / 8] >> (t % 8)) & 1;
  out.source = record_name(mapping->path, mapping->record_file, e.line);
  if (documents_per_record_ == 2) out.source += local % 2 == 0 ? " (chosen)" : " (rejected)";
  return out;
}

PreferencePair TokenizedDataset::pair(int64_t i) const {
  check(documents_per_record_ == 2, "[data] ", source_path_, ": not a preference dataset");
  return {document(2 * i), document(2 * i + 1)};
}

}  // namespace tandem
