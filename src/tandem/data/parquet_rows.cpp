#include "tandem/data/parquet_rows.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "tandem/core/error.h"
#include "tandem/data/jsonl.h"
#include "tandem/text/utf8.h"

#ifdef TANDEM_WITH_PARQUET
#include <arrow/api.h>
#include <arrow/io/file.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/schema.h>
#include <parquet/exception.h>
#include <parquet/metadata.h>
#endif

namespace tandem {

bool is_parquet_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string_view(magic, 4) == "PAR1";
}

#ifndef TANDEM_WITH_PARQUET

struct ParquetRows::Impl {};

bool ParquetRows::available() { return false; }

ParquetRows::ParquetRows(const std::string& path, const std::vector<std::string>&,
                         const ParquetLimits&) {
  throw Error("[data] ", path,
              ": a Parquet file, and this build of tandem reads none: it was built without "
              "Apache Arrow (scripts/setup.sh installs the pinned pyarrow and passes "
              "TANDEM_PYARROW_DIR to CMake); convert the file to JSONL or rebuild");
}
ParquetRows::~ParquetRows() = default;
void ParquetRows::open(const std::string&, const std::vector<std::string>&, const ParquetLimits&) {}
bool ParquetRows::next(nlohmann::ordered_json&) { return false; }
int64_t ParquetRows::rows() const { return 0; }

#else

namespace {

using nlohmann::ordered_json;

[[noreturn]] void bad_value(const std::string& column, const std::string& detail) {
  throw BadLine(BadInput::wrong_type, "column '" + column + "': " + detail);
}

// A field name as a JSON key: valid UTF-8 (a corrupt schema may hold any bytes).
const std::string& checked_name(const std::string& name, const std::string& column) {
  if (utf8::find_invalid(name)) bad_value(column, "a field name that is not valid UTF-8");
  return name;
}

// One value of an Arrow array as JSON. `column` names the top-level column in errors.
ordered_json value_of(const arrow::Array& array, int64_t i, const std::string& column) {
  if (array.IsNull(i)) return nullptr;
  switch (array.type_id()) {
    case arrow::Type::NA:
      return nullptr;
    case arrow::Type::BOOL:
      return static_cast<const arrow::BooleanArray&>(array).Value(i);
    case arrow::Type::INT8:
      return static_cast<const arrow::Int8Array&>(array).Value(i);
    case arrow::Type::INT16:
      return static_cast<const arrow::Int16Array&>(array).Value(i);
    case arrow::Type::INT32:
      return static_cast<const arrow::Int32Array&>(array).Value(i);
    case arrow::Type::INT64:
      return static_cast<const arrow::Int64Array&>(array).Value(i);
    case arrow::Type::UINT8:
      return static_cast<const arrow::UInt8Array&>(array).Value(i);
    case arrow::Type::UINT16:
      return static_cast<const arrow::UInt16Array&>(array).Value(i);
    case arrow::Type::UINT32:
      return static_cast<const arrow::UInt32Array&>(array).Value(i);
    case arrow::Type::UINT64:
      return static_cast<const arrow::UInt64Array&>(array).Value(i);
    case arrow::Type::FLOAT:
    case arrow::Type::DOUBLE: {
      const double value = array.type_id() == arrow::Type::FLOAT
                               ? static_cast<const arrow::FloatArray&>(array).Value(i)
                               : static_cast<const arrow::DoubleArray&>(array).Value(i);
      if (!std::isfinite(value)) bad_value(column, "a NaN or infinite number, which JSON has not");
      return value;
    }
    case arrow::Type::STRING:
    case arrow::Type::LARGE_STRING:
    case arrow::Type::STRING_VIEW: {
      std::string_view text;
      if (array.type_id() == arrow::Type::STRING)
        text = static_cast<const arrow::StringArray&>(array).GetView(i);
      else if (array.type_id() == arrow::Type::LARGE_STRING)
        text = static_cast<const arrow::LargeStringArray&>(array).GetView(i);
      else
        text = static_cast<const arrow::StringViewArray&>(array).GetView(i);
      if (const auto invalid = utf8::find_invalid(text))
        bad_value(column,
                  "a string that is not valid UTF-8 (byte " + std::to_string(*invalid) + ")");
      return std::string(text);
    }
    case arrow::Type::LIST:
    case arrow::Type::LARGE_LIST:
    case arrow::Type::FIXED_SIZE_LIST: {
      std::shared_ptr<arrow::Array> values;
      int64_t begin = 0, length = 0;
      if (array.type_id() == arrow::Type::LIST) {
        const auto& l = static_cast<const arrow::ListArray&>(array);
        values = l.values();
        begin = l.value_offset(i);
        length = l.value_length(i);
      } else if (array.type_id() == arrow::Type::LARGE_LIST) {
        const auto& l = static_cast<const arrow::LargeListArray&>(array);
        values = l.values();
        begin = l.value_offset(i);
        length = l.value_length(i);
      } else {
        const auto& l = static_cast<const arrow::FixedSizeListArray&>(array);
        values = l.values();
        begin = l.value_offset(i);
        length = l.value_length(i);
      }
      ordered_json out = ordered_json::array();
      for (int64_t k = 0; k < length; ++k) out.push_back(value_of(*values, begin + k, column));
      return out;
    }
    case arrow::Type::STRUCT: {
      const auto& s = static_cast<const arrow::StructArray&>(array);
      ordered_json out = ordered_json::object();
      for (int f = 0; f < s.num_fields(); ++f)
        out[checked_name(s.struct_type()->field(f)->name(), column)] =
            value_of(*s.field(f), i, column);
      return out;
    }
    case arrow::Type::MAP: {
      const auto& m = static_cast<const arrow::MapArray&>(array);
      ordered_json out = ordered_json::object();
      for (int64_t k = m.value_offset(i); k < m.value_offset(i) + m.value_length(i); ++k) {
        const ordered_json key = value_of(*m.keys(), k, column);
        if (!key.is_string()) bad_value(column, "a map whose keys are not strings");
        out[key.get<std::string>()] = value_of(*m.items(), k, column);
      }
      return out;
    }
    case arrow::Type::DICTIONARY: {
      const auto& d = static_cast<const arrow::DictionaryArray&>(array);
      return value_of(*d.dictionary(), d.GetValueIndex(i), column);
    }
    default:
      bad_value(column, "type " + array.type()->ToString() + " has no JSON form tandem reads");
  }
}

std::string status_text(const arrow::Status& status) { return status.ToString(); }

}  // namespace

struct ParquetRows::Impl {
  std::string path;
  std::unique_ptr<parquet::arrow::FileReader> reader;
  std::vector<int> leaf_columns;  // Parquet leaf columns of the chosen fields
  int row_groups = 0;
  int next_row_group = 0;
  int64_t rows = 0;
  std::unique_ptr<arrow::RecordBatchReader> batches;  // of the current row group
  std::shared_ptr<arrow::RecordBatch> batch;
  int64_t batch_row = 0;

  // The next batch with rows; false after the last row group.
  bool advance() {
    while (true) {
      if (batches) {
        const arrow::Status status = batches->ReadNext(&batch);
        check(status.ok(), "[data] ", path, ": row group ", next_row_group - 1,
              " cannot be read: ", status_text(status));
        if (batch) {
          batch_row = 0;
          if (batch->num_rows() > 0) return true;
          continue;
        }
        batches.reset();
      }
      if (next_row_group >= row_groups) return false;
      auto opened = reader->GetRecordBatchReader({next_row_group}, leaf_columns);
      check(opened.ok(), "[data] ", path, ": row group ", next_row_group,
            " cannot be read: ", status_text(opened.status()));
      batches = std::move(opened).ValueOrDie();
      ++next_row_group;
    }
  }
};

bool ParquetRows::available() { return true; }

ParquetRows::ParquetRows(const std::string& path, const std::vector<std::string>& columns,
                         const ParquetLimits& limits)
    : impl_(std::make_unique<Impl>()) {
  // Arrow reports through Status, but its Parquet code also throws (ParquetException, and
  // std:: exceptions on corrupt metadata): every one of them names the file.
  try {
    open(path, columns, limits);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error("[data] ", path, ": not a readable Parquet file: ", e.what());
  }
}

void ParquetRows::open(const std::string& path, const std::vector<std::string>& columns,
                       const ParquetLimits& limits) {
  Impl& impl = *impl_;
  impl.path = path;
  {
    auto file = arrow::io::ReadableFile::Open(path);
    check(file.ok(), "[data] ", path, ": cannot open: ", status_text(file.status()));
    parquet::ArrowReaderProperties properties;
    properties.set_use_threads(false);  // one thread: tandem's own pools own the cores
    properties.set_batch_size(256);
    parquet::arrow::FileReaderBuilder builder;
    const arrow::Status opened = builder.Open(*file);
    check(opened.ok(), "[data] ", path, ": not a readable Parquet file: ", status_text(opened));
    builder.properties(properties);
    auto built = builder.Build();
    check(built.ok(), "[data] ", path,
          ": not a readable Parquet file: ", status_text(built.status()));
    impl.reader = std::move(built).ValueOrDie();
  }

  const std::shared_ptr<parquet::FileMetaData> metadata = impl.reader->parquet_reader()->metadata();
  const parquet::arrow::SchemaManifest& manifest = impl.reader->manifest();
  std::vector<int> fields;
  std::string present;
  for (size_t f = 0; f < manifest.schema_fields.size(); ++f) {
    const std::string& name = manifest.schema_fields[f].field->name();
    check(!utf8::find_invalid(name), "[data] ", path, ": column ", f, "'s name is not valid UTF-8");
    present += (present.empty() ? "" : ", ") + name;
    if (columns.empty() || std::find(columns.begin(), columns.end(), name) != columns.end())
      fields.push_back(static_cast<int>(f));
  }
  if (fields.empty()) {
    std::string wanted;
    for (const std::string& c : columns) wanted += (wanted.empty() ? "" : ", ") + c;
    throw Error("[data] ", path, ": none of the columns this format reads (", wanted,
                ") is in the file (its columns: ", present, ")");
  }
  // The Parquet leaf columns under the chosen top-level fields.
  const parquet::SchemaDescriptor* schema = metadata->schema();
  for (int leaf = 0; leaf < schema->num_columns(); ++leaf) {
    const int field = schema->group_node()->FieldIndex(*schema->GetColumnRoot(leaf));
    if (std::find(fields.begin(), fields.end(), field) != fields.end())
      impl.leaf_columns.push_back(leaf);
  }

  // The footer's sizes, checked before any page is read.
  impl.row_groups = metadata->num_row_groups();
  for (int g = 0; g < impl.row_groups; ++g) {
    const auto group = metadata->RowGroup(g);
    check(group->num_rows() >= 0 && group->num_rows() <= limits.max_row_group_rows, "[data] ", path,
          ": row group ", g, " declares ", group->num_rows(), " rows (at most ",
          limits.max_row_group_rows, " are read)");
    impl.rows += group->num_rows();
    for (int leaf : impl.leaf_columns) {
      const auto chunk = group->ColumnChunk(leaf);
      const int64_t bytes = chunk->total_uncompressed_size();
      check(bytes >= 0 && bytes <= limits.max_column_chunk_bytes, "[data] ", path, ": row group ",
            g, ", column '", metadata->schema()->Column(leaf)->path()->ToDotString(), "' declares ",
            bytes, " bytes uncompressed (at most ", limits.max_column_chunk_bytes, " are read)");
    }
  }
}

ParquetRows::~ParquetRows() = default;

bool ParquetRows::next(nlohmann::ordered_json& row) {
  Impl& impl = *impl_;
  try {
    if ((!impl.batch || impl.batch_row >= impl.batch->num_rows()) && !impl.advance()) return false;
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error("[data] ", impl.path, ": row group ", impl.next_row_group - 1,
                " cannot be read: ", e.what());
  }
  const int64_t i = impl.batch_row++;
  row = ordered_json::object();
  const auto& schema = impl.batch->schema();
  for (int c = 0; c < impl.batch->num_columns(); ++c) {
    const std::string& name = schema->field(c)->name();
    row[name] = value_of(*impl.batch->column(c), i, name);
  }
  return true;
}

int64_t ParquetRows::rows() const { return impl_->rows; }

#endif

}  // namespace tandem
