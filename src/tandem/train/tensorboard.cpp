#include "tandem/train/tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "tandem/core/error.h"

namespace tandem {

namespace {

constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1) ? 0x82F63B78u : 0u);
    table[byte] = crc;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

void append_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

uint64_t read_le(std::string_view bytes, size_t offset, int count) {
  uint64_t value = 0;
  for (int i = 0; i < count; ++i)
    value |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[offset + i])) << (8 * i);
  return value;
}

// Protobuf wire format: a key is (field_number << 3) | wire_type, then the value.
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void append_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void append_key(std::string& out, uint32_t field, WireType type) {
  append_varint(out, (static_cast<uint64_t>(field) << 3) | type);
}

void append_double(std::string& out, uint32_t field, double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  append_key(out, field, kFixed64);
  append_le(out, bits, 8);
}

void append_float(std::string& out, uint32_t field, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  append_key(out, field, kFixed32);
  append_le(out, bits, 4);
}

void append_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  append_key(out, field, kLengthDelimited);
  append_varint(out, bytes.size());
  out.append(bytes);
}

// Event fields 1 and 2; proto3 leaves out defaults, and so does this.
std::string event_header(double wall_time, int64_t step) {
  std::string event;
  if (wall_time != 0.0) append_double(event, 1, wall_time);
  if (step != 0) {
    append_key(event, 2, kVarint);
    append_varint(event, static_cast<uint64_t>(step));  // negative: ten bytes, as protobuf does
  }
  return event;
}

double resolve_time(double wall_time) { return wall_time < 0 ? wall_clock_seconds() : wall_time; }

std::string host_name() {
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = kCrc32cTable[(crc ^ bytes[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::string frame_tfrecord(std::string_view payload) {
  std::string record;
  record.reserve(payload.size() + 16);
  append_le(record, payload.size(), 8);
  append_le(record, mask_crc32c(crc32c(record.data(), 8)), 4);
  record.append(payload);
  append_le(record, mask_crc32c(crc32c(payload)), 4);
  return record;
}

std::vector<std::string> read_tfrecords(std::string_view bytes, const std::string& what) {
  std::vector<std::string> payloads;
  size_t offset = 0;
  while (offset < bytes.size()) {
    check(bytes.size() - offset >= 12, "[tensorboard] ", what, ": truncated record header at byte ",
          offset);
    const uint64_t length = read_le(bytes, offset, 8);
    check(read_le(bytes, offset + 8, 4) == mask_crc32c(crc32c(bytes.data() + offset, 8)),
          "[tensorboard] ", what, ": length CRC mismatch at byte ", offset);
    check(length <= bytes.size() - offset - 12 && bytes.size() - offset - 12 - length >= 4,
          "[tensorboard] ", what, ": truncated record at byte ", offset, " (length ", length, ")");
    const std::string_view payload = bytes.substr(offset + 12, length);
    check(read_le(bytes, offset + 12 + length, 4) == mask_crc32c(crc32c(payload)), "[tensorboard] ",
          what, ": payload CRC mismatch in the record at byte ", offset);
    payloads.emplace_back(payload);
    offset += 16 + length;
  }
  return payloads;
}

std::string encode_file_version_event(double wall_time) {
  std::string event = event_header(wall_time, 0);
  append_bytes(event, 3, "brain.Event:2");
  return event;
}

std::string encode_scalars_event(double wall_time, int64_t step,
                                 const std::vector<std::pair<std::string, double>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string summary_value;
    append_bytes(summary_value, 1, tag);
    // simple_value sits in a oneof, so it is written even when 0.
    append_float(summary_value, 2, static_cast<float>(value));
    append_bytes(summary, 1, summary_value);
  }
  std::string event = event_header(wall_time, step);
  append_bytes(event, 5, summary);
  return event;
}

std::string encode_session_start_event(double wall_time, int64_t step) {
  std::string session_log;
  append_key(session_log, 1, kVarint);
  append_varint(session_log, 1);  // SessionLog.START
  std::string event = event_header(wall_time, step);
  append_bytes(event, 7, session_log);
  return event;
}

double wall_clock_seconds() {
  const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  return std::chrono::duration<double>(since_epoch).count();
}

TensorBoardWriter TensorBoardWriter::create(const std::string& dir, int64_t resume_step,
                                            double wall_time) {
  wall_time = resolve_time(wall_time);
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  check(!error, "[tensorboard] ", dir, ": cannot create the directory: ", error.message());
  const std::string base = dir + "/events.out.tfevents." +
                           std::to_string(static_cast<int64_t>(std::floor(wall_time))) + "." +
                           host_name();
  std::string path = base;
  for (int suffix = 1; std::filesystem::exists(path); ++suffix)
    path = base + "." + std::to_string(suffix);
  return TensorBoardWriter(path, resume_step, wall_time);
}

TensorBoardWriter::TensorBoardWriter(const std::string& path, int64_t resume_step, double wall_time)
    : path_(path), file_(path, std::ios::binary | std::ios::trunc) {
  check(file_.is_open(), "[tensorboard] ", path, ": cannot open for writing");
  wall_time = resolve_time(wall_time);
  write_record(encode_file_version_event(wall_time));
  write_record(encode_session_start_event(wall_time, resume_step));
}

void TensorBoardWriter::add_scalars(int64_t step,
                                    const std::vector<std::pair<std::string, double>>& scalars,
                                    double wall_time) {
  write_record(encode_scalars_event(resolve_time(wall_time), step, scalars));
}

void TensorBoardWriter::write_record(std::string_view payload) {
  const std::string record = frame_tfrecord(payload);
  file_.write(record.data(), static_cast<std::streamsize>(record.size()));
  file_.flush();
  check(file_.good(), "[tensorboard] ", path_, ": write failed");
}

}  // namespace tandem
