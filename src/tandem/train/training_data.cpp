#include "tandem/train/training_data.h"

#include "tandem/core/error.h"

namespace tandem {

TrainingData read_training_data(const Config& config) {
  const Config data = config.section("data");
  TrainingData setup;
  const std::string path = data.get_string("path");
  const DataFormat format = parse_data_format(
      data.get_choice("format", {"conversations", "text", "pretokenized"}, "conversations"));
  DatasetOptions options;
  setup.tokenizer_dir = data.get_string("tokenizer", "");
  if (!setup.tokenizer_dir.empty()) {
    setup.tokenizer = Tokenizer::from_dir(setup.tokenizer_dir);
    options.tokenizer = &*setup.tokenizer;
  }
  options.chat_template = data.get_string("chat_template", "llama3");
  options.max_length = data.get_int("max_length", 0);
  options.last_turn_only = data.get_bool("last_turn_only", false);
  options.on_error = parse_on_error(data.get_choice("on_error", {"fail", "skip"}, "fail"));
  options.vocab_size = data.get_int("vocab_size", 0);
  CacheOptions cache;
  cache.dir = data.get_string("cache_dir", "");
  setup.cache_dir = cache.dir;
  setup.dataset = TokenizedDataset::open(path, format, options, cache);
  check(setup.dataset->size() > 0, "[train] ", data.where("path"), ": ", path,
        " yielded no documents");
  setup.packing.seq_len = data.get_int("seq_len");
  setup.packing.mode = parse_packing_mode(data.get_choice("packing", {"packed", "padded"}, "packed"));
  setup.packing.overlong =
      parse_overlong_policy(data.get_choice("overlong", {"split", "truncate", "error"}, "split"));
  setup.rows = data.get_int("micro_batch_rows", 1);
  check(setup.rows > 0, "[train] ", data.where("micro_batch_rows"), ": must be positive");
  setup.packing.max_rows = setup.rows;
  return setup;
}

PackedBatch next_micro_batch(Sampler& sampler, const TrainingData& data) {
  const TokenizedDataset& dataset = *data.dataset;
  const int64_t capacity = data.rows * data.packing.seq_len;
  int64_t wanted = 8;
  std::vector<int64_t> indices;
  for (;;) {
    indices = sampler.peek(wanted);
    int64_t tokens = 0;
    size_t enough = indices.size();
    for (size_t i = 0; i < indices.size(); ++i) {
      tokens += dataset.length(indices[i]);
      if (tokens > capacity) {
        enough = i + 1;
        break;
      }
    }
    if (tokens > capacity) {
      indices.resize(enough);
      break;
    }
    if (wanted >= sampler.per_rank() * 4) break;  // the whole (small) dataset fits
    wanted *= 2;
  }
  std::vector<TokenizedDocument> documents;
  documents.reserve(indices.size());
  for (int64_t index : indices) documents.push_back(dataset.document(index));
  PackedBatch batch = pack_documents(documents, data.packing);
  for (PackedDocument& document : batch.documents)
    document.dataset_index = indices[static_cast<size_t>(document.source_index)];
  sampler.next(batch.documents_consumed);
  return batch;
}

}  // namespace tandem
