#include "tandem/train/training_data.h"

#include "tandem/core/error.h"

namespace tandem {

int64_t TrainingData::num_records() const {
  return dataset ? dataset->num_records() : static_cast<int64_t>(rollouts.size());
}

int TrainingData::documents_per_record() const {
  return dataset ? dataset->documents_per_record() : 1;
}

int64_t TrainingData::record_tokens(int64_t record) const {
  if (!dataset) return static_cast<int64_t>(rollouts.at(static_cast<size_t>(record)).prompt_ids.size() +
                                            rollouts.at(static_cast<size_t>(record)).completion_ids.size());
  int64_t tokens = 0;
  for (int j = 0; j < documents_per_record(); ++j)
    tokens += dataset->length(record * documents_per_record() + j);
  return tokens;
}

TokenizedDocument TrainingData::document(int64_t index) const {
  return dataset ? dataset->document(index) : rollouts.at(static_cast<size_t>(index)).document();
}

TrainingData read_training_data(const Config& config) {
  const Config data = config.section("data");
  TrainingData setup;
  setup.path = data.get_string("path");
  setup.format = parse_data_format(data.get_choice(
      "format", {"conversations", "text", "pretokenized", "preference", "rollout"},
      "conversations"));
  const bool paired_or_rollout =
      setup.format == DataFormat::preference || setup.format == DataFormat::rollout;
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
  if (setup.format == DataFormat::rollout) {
    RolloutStream stream(setup.path, options);
    RolloutSample sample;
    while (stream.next(sample)) setup.rollouts.push_back(std::move(sample));
    compute_group_advantages(setup.rollouts, data.get_bool("scale_rewards_by_std", true));
  } else {
    setup.dataset = TokenizedDataset::open(setup.path, setup.format, options, cache);
  }
  check(setup.num_records() > 0, "[train] ", data.where("path"), ": ", setup.path,
        " yielded no documents");
  setup.packing.seq_len = data.get_int("seq_len");
  setup.packing.mode = parse_packing_mode(data.get_choice("packing", {"packed", "padded"}, "packed"));
  // A preference side or a rollout is one sequence: splitting it would restart its positions
  // mid-completion, so those formats truncate (or fail) instead.
  const std::string overlong = data.get_choice("overlong", {"split", "truncate", "error"},
                                               paired_or_rollout ? "truncate" : "split");
  check(!(paired_or_rollout && overlong == "split"), "[train] ", data.where("overlong"),
        ": 'split' would cut a ", data_format_name(setup.format),
        " sequence into unrelated pieces; use truncate or error");
  setup.packing.overlong = parse_overlong_policy(overlong);
  setup.rows = data.get_int("micro_batch_rows", 1);
  check(setup.rows > 0, "[train] ", data.where("micro_batch_rows"), ": must be positive");
  setup.packing.max_rows = setup.rows;
  return setup;
}

namespace {

// Packs the longest prefix of `records` (whole records only) that fits one micro-batch.
// Returns the batch; `used` receives the number of records it holds. `epochs[i]` is the sampler
// epoch record i was drawn in (empty: all 0).
PackedBatch pack_records(const std::vector<int64_t>& records, const std::vector<int64_t>& epochs,
                         const TrainingData& data, int64_t& used) {
  const int per_record = data.documents_per_record();
  std::vector<TokenizedDocument> documents;
  std::vector<int64_t> indices;  // document index of each entry of `documents`
  std::vector<int64_t> document_epochs;
  documents.reserve(records.size() * per_record);
  for (size_t r = 0; r < records.size(); ++r)
    for (int j = 0; j < per_record; ++j) {
      indices.push_back(records[r] * per_record + j);
      document_epochs.push_back(epochs.empty() ? 0 : epochs[r]);
      documents.push_back(data.document(indices.back()));
    }
  PackedBatch batch = pack_documents(documents, data.packing);
  // First-fit in input order places a prefix the same way, so dropping a half record and
  // packing again keeps every other document where it was.
  used = batch.documents_consumed / per_record;
  if (batch.documents_consumed % per_record != 0) {
    check(used > 0, "[train] ", documents.front().source, ": one ",
          data_format_name(data.format), " record (", data.record_tokens(records.front()),
          " tokens) does not fit in a micro-batch of ", data.rows, " rows x ", data.packing.seq_len,
          " tokens; raise data.micro_batch_rows or data.seq_len");
    documents.resize(static_cast<size_t>(used * per_record));
    batch = pack_documents(documents, data.packing);
  }
  for (PackedDocument& document : batch.documents) {
    document.dataset_index = indices[static_cast<size_t>(document.source_index)];
    document.epoch = document_epochs[static_cast<size_t>(document.source_index)];
  }
  return batch;
}

// How many candidates may fill one micro-batch: enough that their tokens overflow it, so the
// packer, not this guess, decides where the batch ends.
template <typename Peek>
std::vector<int64_t> candidates(const TrainingData& data, int64_t available, Peek peek) {
  const int64_t capacity = data.rows * data.packing.seq_len;
  int64_t wanted = 8;
  for (;;) {
    std::vector<int64_t> records = peek(std::min(wanted, available * 4));
    int64_t tokens = 0;
    for (size_t i = 0; i < records.size(); ++i) {
      tokens += data.record_tokens(records[i]);
      if (tokens > capacity) {
        records.resize(i + 1);
        return records;
      }
    }
    if (wanted >= available * 4) return records;  // the whole (small) dataset fits
    wanted *= 2;
  }
}

}  // namespace

PackedBatch next_micro_batch(Sampler& sampler, const TrainingData& data) {
  const std::vector<int64_t> records = candidates(
      data, sampler.per_rank(), [&](int64_t count) { return sampler.peek(count); });
  // Record i is taken at offset + i of the sampler's current epoch, wrapping into the next ones.
  const SamplerState position = sampler.state();
  std::vector<int64_t> epochs;
  for (size_t i = 0; i < records.size(); ++i)
    epochs.push_back(position.epoch +
                     (position.offset + static_cast<int64_t>(i)) / sampler.per_rank());
  int64_t used = 0;
  PackedBatch batch = pack_records(records, epochs, data, used);
  sampler.next(used);
  return batch;
}

PackedBatch next_micro_batch_in_order(int64_t& next_record, const TrainingData& data) {
  const int64_t total = data.num_records();
  check(next_record >= 0 && next_record < total, "[data] record ", next_record,
        " is past the end (", total, " records)");
  const std::vector<int64_t> records =
      candidates(data, total - next_record, [&](int64_t count) {
        std::vector<int64_t> out;
        for (int64_t r = next_record; r < std::min(total, next_record + count); ++r) out.push_back(r);
        return out;
      });
  int64_t used = 0;
  PackedBatch batch = pack_records(records, {}, data, used);
  next_record += used;
  return batch;
}

}  // namespace tandem
