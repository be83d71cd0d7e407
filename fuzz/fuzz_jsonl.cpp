// libFuzzer target for the record readers of every data format: JSONL, and JSON arrays (a file
// starting with '['). The first byte picks the format (conversations, text, pretokenized,
// preference, rollout), on_error (skip or fail), unknown_roles (error, skip_turn,
// skip_conversation) and the record filter (none, either side of a held-out split, or the
// format's first field read from a column named "c"); the rest is the file. Every record must end
// as a document, a counted skip, or a tandem::Error naming the file; no other exception and no
// crash.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "demo_tokenizer.h"
#include "tandem/core/error.h"
#include "tandem/data/datasets.h"
#include "tandem/text/tokenizer.h"

namespace {

const std::string& scratch_path() {
  static const std::string path = "/tmp/tandem-fuzz-jsonl-" + std::to_string(::getpid()) + ".jsonl";
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using tandem::DataFormat;
  const DataFormat formats[] = {DataFormat::conversations, DataFormat::text,
                                DataFormat::pretokenized, DataFormat::preference,
                                DataFormat::rollout};
  const DataFormat format = formats[data[0] % 5];
  {
    std::ofstream out(scratch_path(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data) + 1, static_cast<std::streamsize>(size - 1));
  }
  tandem::DatasetOptions options;
  options.tokenizer = &demo_tokenizer();
  options.vocab_size = demo_tokenizer().vocab_size();
  options.max_length = 4096;
  options.on_error = (data[0] / 5) % 2 ? tandem::OnError::fail : tandem::OnError::skip;
  const tandem::UnknownRoles policies[] = {tandem::UnknownRoles::error,
                                           tandem::UnknownRoles::skip_turn,
                                           tandem::UnknownRoles::skip_conversation};
  options.unknown_roles = policies[(data[0] / 10) % 3];
  switch ((data[0] / 30) % 4) {
    case 1:
    case 2:
      options.heldout = {0.5, 7, (data[0] / 30) % 4 == 2};
      break;
    case 3:
      options.columns = {{tandem::columns_of(format).front(), "c"}};
      break;
  }
  try {
    if (format == DataFormat::rollout) {
      tandem::RolloutStream stream(scratch_path(), options);
      tandem::RolloutSample sample;
      while (stream.next(sample)) {
        if (sample.old_logprobs.size() != sample.completion_ids.size()) __builtin_trap();
      }
    } else {
      tandem::DocumentStream stream(scratch_path(), format, options);
      std::vector<tandem::TokenizedDocument> documents;
      while (stream.next(documents)) {
        for (const tandem::TokenizedDocument& document : documents) {
          if (document.ids.size() != document.loss_mask.size()) __builtin_trap();
          for (int32_t id : document.ids)
            if (id < 0 || id >= options.vocab_size) __builtin_trap();
        }
      }
    }
  } catch (const tandem::Error&) {
  }
  return 0;
}
