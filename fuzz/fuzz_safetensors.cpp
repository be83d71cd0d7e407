// libFuzzer target for the safetensors header validator. The input is a whole file image; a
// tandem::Error is the expected answer to bad input, anything else (another exception, a crash,
// a sanitizer report) is a bug. When a header validates, every tensor's byte range is read, so
// an offset that escaped validation shows up as an ASan out-of-bounds read.
#include <cstddef>
#include <cstdint>

#include "tandem/core/error.h"
#include "tandem/io/safetensors.h"

namespace st = tandem::safetensors;

/// Sums every byte of every tensor in the validated `header` of the image `bytes` (`size` bytes).
static uint64_t touch_all_tensors(const st::Header& header, const uint8_t* bytes, size_t size) {
  uint64_t sum = 0;
  for (const st::TensorInfo& tensor : header.tensors) {
    if (header.data_start + tensor.end > size) __builtin_trap();  // validation let it escape
    for (uint64_t offset = tensor.begin; offset < tensor.end; ++offset) {
      sum += bytes[header.data_start + offset];
    }
  }
  return sum;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const st::Header header = st::parse_header(data, size, "<fuzz>");
    volatile uint64_t sum = touch_all_tensors(header, data, size);
    (void)sum;
  } catch (const tandem::Error&) {
    // Rejected input: the expected outcome.
  }
  return 0;
}
