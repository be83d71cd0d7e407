#pragma once
// Parquet files as records (UltraChat, UltraFeedback and most hub datasets ship them): each row
// one JSON object of the chosen top-level columns, values as JSON holds them (strings, integers,
// floats, booleans, nulls, lists, structs, maps with string keys, dictionary-encoded values).
// Read through Apache Arrow's C++ libraries (those of the pinned pyarrow wheel, the way libtorch
// comes from the torch wheel), one row group at a time in batches of rows, so memory is bounded
// by one row group's chosen columns, not the file. The sizes a file's footer declares are checked
// before anything is read. In a build without Arrow (TANDEM_WITH_PARQUET unset: CMake found no
// pyarrow), opening a Parquet file is an Error that says so.
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tandem {

/// Bounds on what a Parquet footer may declare, checked before reading.
struct ParquetLimits {
  int64_t max_column_chunk_bytes = int64_t{1} << 30;  // uncompressed, per row group and column
  int64_t max_row_group_rows = int64_t{1} << 26;
};

class ParquetRows {
 public:
  /// Whether this build reads Parquet.
  static bool available();

  /// Opens `path` and reads the top-level columns named in `columns` that it has (every column
  /// when `columns` is empty). Throws Error naming the file: not Parquet, an unreadable footer,
  /// a row group or column chunk above `limits`, none of `columns` present, no Arrow in the build.
  ParquetRows(const std::string& path, const std::vector<std::string>& columns,
              const ParquetLimits& limits = {});
  ~ParquetRows();
  ParquetRows(const ParquetRows&) = delete;
  ParquetRows& operator=(const ParquetRows&) = delete;

  /// The next row, its columns in the file's order; false after the last. A value JSON cannot
  /// hold (binary data, a NaN or infinity, invalid UTF-8, a map with non-string keys, a type
  /// with no JSON form) throws BadLine (wrong_type) naming the column; a row group Arrow cannot
  /// decode throws Error naming the file and the row group.
  bool next(nlohmann::ordered_json& row);

  /// Total rows the footer declares.
  int64_t rows() const;

 private:
  void open(const std::string& path, const std::vector<std::string>& columns,
            const ParquetLimits& limits);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Whether the file at `path` starts with Parquet's magic bytes "PAR1".
bool is_parquet_file(const std::string& path);

}  // namespace tandem
