#pragma once
// TensorBoard event files written from the formats, with no protobuf or TensorFlow library:
// TFRecord framing around hand-encoded `Event` protobufs holding scalar summaries.
//
//   record = u64 length | u32 masked_crc32c(length) | payload | u32 masked_crc32c(payload)
//   Event   = wall_time (1, double) | step (2, int64) | file_version (3, string)
//             | summary (5, Summary) | session_log (7, SessionLog)
//   Summary = value (1, repeated Value{ tag (1, string), simple_value (2, float) })
//   SessionLog = status (1, enum; START = 1)
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem {

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78); pass a previous result as `crc` to
/// continue over more bytes. crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
inline uint32_t crc32c(std::string_view bytes) { return crc32c(bytes.data(), bytes.size()); }

/// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t mask_crc32c(uint32_t crc);

/// One TFRecord around `payload`.
std::string frame_tfrecord(std::string_view payload);

/// The payloads of a sequence of TFRecords; throws Error("[tensorboard] <what>: ...") on a
/// truncated record or a CRC mismatch. `what` names the source (a file path) in errors.
std::vector<std::string> read_tfrecords(std::string_view bytes, const std::string& what);

/// Encoded `Event` protobufs, fields in number order with proto3 defaults (step 0) left out,
/// as protobuf's own serializer writes them.
std::string encode_file_version_event(double wall_time);
std::string encode_scalars_event(double wall_time, int64_t step,
                                 const std::vector<std::pair<std::string, double>>& scalars);
/// SessionLog START at `step`: TensorBoard then drops events at steps >= `step` that earlier
/// files of the directory hold (what a resumed run re-logs).
std::string encode_session_start_event(double wall_time, int64_t step);

/// Appends scalar events to one event file, flushed after every record.
class TensorBoardWriter {
 public:
  /// Creates `dir` if needed and a new file `dir/events.out.tfevents.<seconds>.<host>` (a ".N"
  /// suffix if that name exists) starting with the file_version record and a SessionLog START at
  /// `resume_step`, so TensorBoard forgets what older files of `dir` hold at steps >= it (all of
  /// it for a fresh run, 0). `wall_time` (seconds since the epoch) fixes the clock for these
  /// first records and the name; negative means now.
  static TensorBoardWriter create(const std::string& dir, int64_t resume_step = 0,
                                  double wall_time = -1);

  /// Writes to exactly `path` (truncating it); the same records as create().
  TensorBoardWriter(const std::string& path, int64_t resume_step, double wall_time);

  /// One Event with a simple_value per scalar (cast to float; NaN and inf stay as they are).
  /// `wall_time` negative means now.
  void add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars,
                   double wall_time = -1);

  const std::string& path() const { return path_; }

 private:
  void write_record(std::string_view payload);

  std::string path_;
  std::ofstream file_;
};

/// Seconds since the epoch, with sub-second precision (what `Event.wall_time` holds).
double wall_clock_seconds();

}  // namespace tandem
