// libFuzzer target for the Parquet reader (data/parquet_rows.h, through Apache Arrow): the input
// is a file, read as rows of every column and as a conversations and a preference dataset. Every
// row must end as a JSON object or a BadLine; a file Arrow cannot read, or whose footer declares
// too much, as a tandem::Error naming it; no other exception and no crash. Allocation is bounded
// by the footer checks (ParquetLimits, lowered here so the fuzzer cannot ask for gigabytes).
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "demo_tokenizer.h"
#include "tandem/core/error.h"
#include "tandem/data/datasets.h"
#include "tandem/data/jsonl.h"
#include "tandem/data/parquet_rows.h"

namespace {

const std::string& scratch_path() {
  static const std::string path =
      "/tmp/tandem-fuzz-parquet-" + std::to_string(::getpid()) + ".parquet";
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  {
    std::ofstream out(scratch_path(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  tandem::ParquetLimits limits;
  limits.max_column_chunk_bytes = 1 << 24;
  limits.max_row_group_rows = 1 << 16;
  try {
    tandem::ParquetRows rows(scratch_path(), {}, limits);
    nlohmann::ordered_json row;
    for (int n = 0; n < 4096; ++n) {
      try {
        if (!rows.next(row)) break;
        if (!row.is_object()) __builtin_trap();
      } catch (const tandem::BadLine&) {
      }
    }
  } catch (const tandem::Error&) {
  }
  for (tandem::DataFormat format :
       {tandem::DataFormat::conversations, tandem::DataFormat::preference}) {
    tandem::DatasetOptions options;
    options.tokenizer = &demo_tokenizer();
    options.vocab_size = demo_tokenizer().vocab_size();
    options.max_length = 4096;
    options.on_error = tandem::OnError::skip;
    try {
      tandem::DocumentStream stream(scratch_path(), format, options);
      std::vector<tandem::TokenizedDocument> documents;
      for (int n = 0; n < 256 && stream.next(documents); ++n)
        for (const tandem::TokenizedDocument& document : documents)
          if (document.ids.size() != document.loss_mask.size()) __builtin_trap();
    } catch (const tandem::Error&) {
    }
  }
  return 0;
}
