#include "tandem/train/training_data.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <numeric>

#include "tandem/core/config_schema.h"
#include "tandem/core/error.h"
#include "tandem/core/hash.h"

namespace tandem {

int64_t TrainingData::num_records() const {
  if (!parts.empty()) return static_cast<int64_t>(parts.size());
  return dataset ? dataset->num_records() : static_cast<int64_t>(rollouts.size());
}

int TrainingData::documents_per_record() const {
  return dataset ? dataset->documents_per_record() : 1;
}

RecordPart TrainingData::part(int64_t record) const {
  if (parts.empty()) return {record, 0, -1};
  return parts.at(static_cast<size_t>(record));
}

int64_t TrainingData::document_length(int64_t index) const {
  if (dataset) return dataset->length(index);
  const RolloutSample& sample = rollouts.at(static_cast<size_t>(index));
  return static_cast<int64_t>(sample.prompt_ids.size() + sample.completion_ids.size());
}

int64_t TrainingData::record_tokens(int64_t record) const {
  const RecordPart where = part(record);
  if (where.end >= 0) return where.end - where.begin;
  int64_t tokens = 0;
  for (int j = 0; j < documents_per_record(); ++j)
    tokens += document_length(where.record * documents_per_record() + j);
  return tokens;
}

TokenizedDocument TrainingData::document(int64_t index) const {
  return dataset ? dataset->document(index) : rollouts.at(static_cast<size_t>(index)).document();
}

namespace {

// Whether best_fit cuts documents longer than a row into row-sized records (overlong: split;
// a preference pair or a rollout is never split).
bool splits_into_rows(const TrainingData& data) {
  return data.packing.mode == PackingMode::BestFit &&
         data.packing.overlong == OverlongPolicy::Split && data.documents_per_record() == 1;
}

// Every record against one micro-batch, before step 1 (data.overlong and data.on_error decide
// what happens to one that does not fit); fills data.parts when any record is split or skipped.
void plan_records(TrainingData& data, OnError on_error) {
  const int64_t seq_len = data.packing.seq_len, capacity = data.rows * seq_len;
  const int per_record = data.documents_per_record();
  const int64_t records = data.num_records();  // the dataset's: no parts yet
  PackingOptions alone = data.packing;         // a record packed by itself, rows unbounded
  alone.max_rows = 0;
  const bool best_fit_rows = splits_into_rows(data);
  std::vector<RecordPart> parts;
  bool changed = false;
  for (int64_t record = 0; record < records; ++record) {
    std::vector<int64_t> lengths;
    int64_t tokens = 0, longest = 0;
    for (int j = 0; j < per_record; ++j) {
      lengths.push_back(data.document_length(record * per_record + j));
      tokens += lengths.back();
      longest = std::max(longest, lengths.back());
    }
    std::string problem;  // why the record cannot be trained on as it is
    bool split = false;
    int64_t part_tokens = capacity;  // a split document's parts: a micro-batch each
    if (best_fit_rows && tokens > seq_len) {
      // best_fit: a row each, so every part is placed on its own (the packer would cut the
      // document at the same seq_len boundaries).
      split = true;
      part_tokens = seq_len;
    } else if (data.packing.overlong == OverlongPolicy::Error && longest > seq_len) {
      problem = std::to_string(longest) +
                " tokens, longer than data.seq_len = " + std::to_string(seq_len) +
                " (data.overlong: error)";
    } else if (tokens > seq_len &&
               static_cast<int64_t>(plan_packing(lengths, alone).rows.size()) > data.rows) {
      if (data.packing.overlong == OverlongPolicy::Split && per_record == 1)
        split = true;
      else
        problem = "needs more than data.micro_batch_rows = " + std::to_string(data.rows) +
                  " rows of " + std::to_string(seq_len) + " tokens (" + std::to_string(tokens) +
                  " tokens" +
                  (per_record > 1 ? " in its " + std::to_string(per_record) + " documents" : "") +
                  "); raise data.micro_batch_rows or data.seq_len";
    }
    if (!problem.empty()) {
      const std::string source = data.document(record * per_record).source;
      check(on_error == OnError::skip, "[data] ", source, ": a ", data_format_name(data.format),
            " record of ", problem, "; data.on_error: skip skips such records");
      ++data.skipped_records;
      changed = true;
    } else if (split) {
      // Parts of a whole micro-batch (the packer cuts them into seq_len rows) or of one row.
      for (int64_t begin = 0; begin < tokens; begin += part_tokens)
        parts.push_back({record, begin, std::min(tokens, begin + part_tokens)});
      ++data.split_documents;
      changed = true;
    } else {
      parts.push_back({record, 0, -1});
    }
  }
  if (changed) data.parts = std::move(parts);
}

// Each file's weight applied to the sampler's records (see training_data.h) unless
// `weighted_draws` is false; fills data.file_draws either way.
void apply_weights(TrainingData& data, bool weighted_draws) {
  const size_t files = data.files.size();
  // The sampler's records of each file, as runs [begin, end) of `records` sharing one dataset
  // record (a document split into parts is drawn whole or not at all).
  std::vector<RecordPart> records = data.parts;
  if (records.empty())
    for (int64_t r = 0; r < data.num_records(); ++r) records.push_back({r, 0, -1});
  std::vector<int64_t> file_end(files);  // dataset records before the end of each file
  for (size_t k = 0, sum = 0; k < files; ++k)
    file_end[k] = static_cast<int64_t>(sum += data.file_records[k]);
  std::vector<std::vector<std::pair<size_t, size_t>>> units(files);
  size_t k = 0;
  for (size_t i = 0; i < records.size();) {
    size_t end = i + 1;
    while (end < records.size() && records[end].record == records[i].record) ++end;
    while (records[i].record >= file_end[k]) ++k;
    units[k].push_back({i, end});
    i = end;
  }
  data.file_draws.assign(files, 0);
  bool weighted = false;
  double planned = 0;  // sampler records per epoch the weights ask for
  for (k = 0; k < files; ++k) {
    const double weight = weighted_draws ? data.files[k].weight : 1.0;
    weighted |= weight != 1.0;
    for (const auto& unit : units[k])
      planned += weight * static_cast<double>(unit.second - unit.first);
  }
  check(planned <= static_cast<double>(kMaxDrawsPerEpoch), "[data] the weights of data.path draw ",
        planned, " records per epoch, above the bound of ", kMaxDrawsPerEpoch,
        " (24 bytes each, held in memory); lower the weights");
  std::vector<RecordPart> drawn;
  for (k = 0; k < files; ++k) {
    const auto append = [&](const std::pair<size_t, size_t>& unit) {
      drawn.insert(drawn.end(), records.begin() + unit.first, records.begin() + unit.second);
      data.file_draws[k] += static_cast<int64_t>(unit.second - unit.first);
    };
    const double weight = weighted_draws ? data.files[k].weight : 1.0;
    const auto count = static_cast<int64_t>(units[k].size());
    if (count == 0) continue;
    const auto whole = static_cast<int64_t>(std::floor(weight));
    const auto extra = static_cast<int64_t>(std::llround((weight - whole) * count));
    check(whole > 0 || extra > 0, "[data] ", data.files[k].path, ": weight ", weight,
          " draws none of its ", count, " records; raise the weight or leave the file out");
    for (int64_t copy = 0; copy < whole; ++copy)
      for (const auto& unit : units[k]) append(unit);
    if (extra > 0) {
      const uint64_t seed =
          data.dataset ? data.dataset->files()[k].key : hash_file(data.files[k].path);
      std::vector<int64_t> chosen = epoch_permutation(count, seed, 0);
      chosen.resize(static_cast<size_t>(extra));
      std::sort(chosen.begin(), chosen.end());
      for (const int64_t unit : chosen) append(units[k][static_cast<size_t>(unit)]);
    }
  }
  if (weighted) data.parts = std::move(drawn);
}

}  // namespace

DataOptions read_data_options(const Config& config) {
  namespace data = keys::data;
  DataOptions options;
  options.paths = data::path.read(config);
  options.format = data::format.read(config);
  const bool paired_or_rollout =
      options.format == DataFormat::preference || options.format == DataFormat::rollout;
  options.packing.seq_len = data::seq_len.read(config);
  options.packing.mode = data::packing.read(config);
  // A preference side or a rollout is one sequence: splitting it would restart its positions
  // mid-completion, so those formats truncate (or fail) instead.
  options.packing.overlong = data::overlong.read(
      config, paired_or_rollout ? OverlongPolicy::Truncate : OverlongPolicy::Split);
  check(!(paired_or_rollout && options.packing.overlong == OverlongPolicy::Split), "[train] ",
        data::overlong.where(config), ": 'split' would cut a ", data_format_name(options.format),
        " sequence into unrelated pieces; use truncate or error");
  options.rows = data::micro_batch_rows.read(config);
  // A micro-batch is rows x seq_len tokens, and its activations grow with that product times the
  // model's width: bounded before any batch is allocated.
  check(options.rows * options.packing.seq_len <= kMaxMicroBatchTokens, "[train] ",
        data::micro_batch_rows.where(config), " x ", data::seq_len.where(config), " = ",
        options.rows * options.packing.seq_len, " tokens per micro-batch, above the bound of ",
        kMaxMicroBatchTokens, "; use more micro-batches per step (training.micro_batches)");
  options.packing.max_rows = options.rows;
  // One document per row: a row longer than the micro-batch's longest document is all padding.
  options.packing.trim_to_longest = options.packing.mode == PackingMode::Padded;
  options.lookahead = data::packing_lookahead.read(config);
  options.tokenizer_dir = data::tokenizer.read(config);
  options.dataset.chat_template = data::chat_template.read(config);
  options.dataset.template_kwargs = data::template_kwargs.read(config);
  options.dataset.max_length = data::max_length.read(config);
  options.dataset.last_turn_only = data::last_turn_only.read(config);
  options.dataset.train_reasoning = data::train_reasoning.read(config);
  options.dataset.unknown_roles = data::unknown_roles.read(config);
  options.dataset.on_error = data::on_error.read(config);
  options.dataset.vocab_size = data::vocab_size.read(config);
  options.dataset.columns = data::columns.read(config);
  options.dataset.heldout.fraction = data::heldout_fraction.read(config);
  options.dataset.heldout.seed = static_cast<uint64_t>(data::heldout_seed.read(config));
  options.cache_dir = data::cache_dir.read(config);
  options.validation = data::validation.read(config);
  if (options.format == DataFormat::rollout)
    options.scale_rewards_by_std = data::scale_rewards_by_std.read(config);
  return options;
}

namespace {

// The data `read` names (where_path: the key that named it, for messages), opened and planned.
TrainingData open_training_data(const DataOptions& read, const std::string& where_path,
                                bool weighted) {
  TrainingData setup;
  setup.files = expand_data_files(read.paths, where_path);
  const std::vector<std::string> paths = paths_of(setup.files);
  setup.path = describe_files(paths);
  setup.format = read.format;
  setup.packing = read.packing;
  setup.rows = read.rows;
  setup.lookahead = read.lookahead;
  setup.tokenizer_dir = read.tokenizer_dir;
  setup.cache_dir = read.cache_dir;
  DatasetOptions options = read.dataset;
  if (!setup.tokenizer_dir.empty()) {
    setup.tokenizer = Tokenizer::from_dir(setup.tokenizer_dir);
    options.tokenizer = &*setup.tokenizer;
  }
  CacheOptions cache;
  cache.dir = setup.cache_dir;
  if (setup.format == DataFormat::rollout) {
    // A held-out sample would leave its group's advantages computed from part of the group.
    check(!options.heldout.active(), "[train] ", where_path,
          ": data.heldout_fraction: rollouts are not split (a group's samples must stay together); "
          "hold prompts out "
          "before `tandem rollout` instead");
    for (size_t file = 0; file < paths.size(); ++file) {
      RolloutStream stream(paths[file], options);
      RolloutSample sample;
      const size_t before = setup.rollouts.size();
      while (stream.next(sample)) {
        // Group ids are a file's own: files of separate rollout runs reuse 0, 1, 2, ...
        if (paths.size() > 1) sample.group_id = std::to_string(file) + "/" + sample.group_id;
        setup.rollouts.push_back(std::move(sample));
      }
      setup.file_records.push_back(static_cast<int64_t>(setup.rollouts.size() - before));
      setup.file_passed_over.push_back(stream.passed_over());
    }
    compute_group_advantages(setup.rollouts, read.scale_rewards_by_std);
  } else {
    setup.dataset = TokenizedDataset::open(paths, setup.format, options, cache);
    for (const TokenizedFile& file : setup.dataset->files()) {
      setup.file_records.push_back(file.documents / setup.dataset->documents_per_record());
      setup.file_passed_over.push_back(file.passed_over);
    }
  }
  check(setup.num_records() > 0, "[train] ", where_path, ": ", setup.path, " yielded no documents",
        !options.heldout.active()      ? ""
        : options.heldout.keep_heldout ? " on the held-out side of data.heldout_fraction"
                                       : " on the training side of data.heldout_fraction");
  plan_records(setup, options.on_error);
  check(setup.num_records() > 0, "[train] ", where_path, ": ", setup.path,
        ": every record was skipped (", setup.skipped_records, " fit in no micro-batch)");
  const bool rows_apart = splits_into_rows(setup);
  if (setup.split_documents > 0 || setup.skipped_records > 0)
    std::cerr << "[data] " << setup.split_documents << " document(s) longer than a "
              << (rows_apart
                      ? "row (" + std::to_string(setup.packing.seq_len) +
                            " tokens) split into rows packed apart, "
                      : "micro-batch (" + std::to_string(setup.rows) + " x " +
                            std::to_string(setup.packing.seq_len) + " tokens) split into parts, ")
              << setup.skipped_records << " record(s) that fit in no micro-batch skipped\n";
  apply_weights(setup, weighted);
  return setup;
}

}  // namespace

TrainingData read_training_data(const Config& config, bool weighted) {
  return open_training_data(read_data_options(config), keys::data::path.where(config), weighted);
}

std::optional<TrainingData> read_validation_data(const Config& config) {
  DataOptions read = read_data_options(config);
  const std::string validation = read.validation;
  if (validation.empty()) return std::nullopt;
  const std::string where = keys::data::validation.where(config);
  check(read.format != DataFormat::rollout, "[train] ", where,
        ": rollouts are not validated (a policy is judged by the rewards of held-out prompts: "
        "`tandem rollout` them); remove data.validation");
  if (validation == "heldout") {
    check(read.dataset.heldout.active(), "[train] ", where, " = heldout needs ",
          keys::data::heldout_fraction.where(config),
          " > 0 (the records it leaves out are the validation set)");
    read.dataset.heldout.keep_heldout = true;
  } else {
    read.paths = {WeightedPath{validation, 1.0}};
    read.dataset.heldout = HeldoutOptions{};  // the whole file
  }
  return open_training_data(read, where, /*weighted=*/false);
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
  std::vector<int64_t> offsets;  // first token of each entry within its dataset document
  for (size_t r = 0; r < records.size(); ++r) {
    const RecordPart part = data.part(records[r]);
    for (int j = 0; j < per_record; ++j) {
      indices.push_back(part.record * per_record + j);
      document_epochs.push_back(epochs.empty() ? 0 : epochs[r]);
      documents.push_back(data.document(indices.back()));
      offsets.push_back(part.begin);
      if (part.end >= 0) {  // a part of a document longer than a micro-batch
        TokenizedDocument& document = documents.back();
        document.ids = {document.ids.begin() + part.begin, document.ids.begin() + part.end};
        document.loss_mask = {document.loss_mask.begin() + part.begin,
                              document.loss_mask.begin() + part.end};
        document.source +=
            " (tokens " + std::to_string(part.begin) + ".." + std::to_string(part.end) + ")";
      }
    }
  }
  PackedBatch batch = pack_documents(documents, data.packing);
  // First-fit in input order places a prefix the same way, so dropping a half record and
  // packing again keeps every other document where it was.
  used = batch.documents_consumed / per_record;
  if (batch.documents_consumed % per_record != 0) {
    check(used > 0, "[train] ", documents.front().source, ": one ", data_format_name(data.format),
          " record (", data.record_tokens(records.front()),
          " tokens) does not fit in a micro-batch of ", data.rows, " rows x ", data.packing.seq_len,
          " tokens; raise data.micro_batch_rows or data.seq_len");
    documents.resize(static_cast<size_t>(used * per_record));
    batch = pack_documents(documents, data.packing);
  }
  for (PackedDocument& document : batch.documents) {
    document.dataset_index = indices[static_cast<size_t>(document.source_index)];
    document.epoch = document_epochs[static_cast<size_t>(document.source_index)];
    document.source_begin += offsets[static_cast<size_t>(document.source_index)];
  }
  return batch;
}

// The lengths of sampler record `record`'s documents (a part's own length for a part).
std::vector<int64_t> record_lengths(const TrainingData& data, int64_t record) {
  const int per_record = data.documents_per_record();
  const RecordPart part = data.part(record);
  if (part.end >= 0) return {part.end - part.begin};
  std::vector<int64_t> lengths;
  for (int j = 0; j < per_record; ++j)
    lengths.push_back(data.document_length(part.record * per_record + j));
  return lengths;
}

// best_fit: tops the pool up to data.lookahead micro-batches' worth of tokens from the sampler,
// never past the end of the pool's epoch; then takes the records of the next micro-batch out of
// it (select_best_fit over the pool). Returns them in the order they were placed.
std::vector<PendingRecord> take_best_fit(DataCursor& cursor, const TrainingData& data) {
  Sampler& sampler = cursor.sampler;
  std::vector<PendingRecord>& pending = cursor.pending;
  const int64_t wanted = data.lookahead * data.rows * data.packing.seq_len;
  std::vector<int64_t> tokens_of;  // (pending,) tokens of each pending record
  int64_t tokens = 0;
  for (const PendingRecord& waiting : pending) {
    tokens_of.push_back(data.record_tokens(waiting.record));
    tokens += tokens_of.back();
  }
  while (tokens < wanted) {
    const SamplerState at = sampler.state();
    const int64_t epoch = at.offset == sampler.per_rank() ? at.epoch + 1 : at.epoch;
    if (!pending.empty() && epoch != pending.front().epoch) break;  // the epoch's last records
    pending.push_back({sampler.next(), epoch});
    tokens_of.push_back(data.record_tokens(pending.back().record));
    tokens += tokens_of.back();
  }
  // Tried in this order: the oldest, then the others longest first (oldest first among equals),
  // so the short ones fill the gaps the long ones leave.
  std::vector<size_t> order(pending.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin() + 1, order.end(),
                   [&](size_t a, size_t b) { return tokens_of[a] > tokens_of[b]; });
  std::vector<std::vector<int64_t>> lengths;
  for (const size_t index : order) lengths.push_back(record_lengths(data, pending[index].record));
  const std::vector<int64_t> taken = select_best_fit(lengths, data.packing);
  // plan_records left out every record that fits no micro-batch, so the oldest always fits.
  check(!taken.empty() && taken.front() == 0, "[train] sampler record ", pending.front().record,
        " (", tokens_of.front(), " tokens) fits in no micro-batch of ", data.rows, " rows x ",
        data.packing.seq_len, " tokens");
  std::vector<PendingRecord> chosen;  // in the order they were placed
  std::vector<bool> is_taken(pending.size(), false);
  for (const int64_t index : taken) {
    chosen.push_back(pending[order[static_cast<size_t>(index)]]);
    is_taken[order[static_cast<size_t>(index)]] = true;
  }
  std::vector<PendingRecord> left;
  for (size_t i = 0; i < pending.size(); ++i)
    if (!is_taken[i]) left.push_back(pending[i]);
  pending = std::move(left);
  return chosen;
}

// packed and padded draw straight from the sampler: records best_fit drew ahead (a checkpoint
// of a best_fit run resumed with another mode) would be lost.
void check_nothing_pending(const DataCursor& cursor, const TrainingData& data) {
  check(cursor.pending.empty(), "[train] the data position holds ", cursor.pending.size(),
        " records drawn ahead by data.packing: best_fit, but data.packing is now ",
        data.packing.mode == PackingMode::Padded ? "padded" : "packed",
        "; resume with data.packing: best_fit, or start a fresh run");
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

PackedBatch next_micro_batch(DataCursor& cursor, const TrainingData& data) {
  if (data.packing.mode == PackingMode::BestFit) {
    std::vector<int64_t> records, epochs;
    for (const PendingRecord& record : take_best_fit(cursor, data)) {
      records.push_back(record.record);
      epochs.push_back(record.epoch);
    }
    int64_t used = 0;
    PackedBatch batch = pack_records(records, epochs, data, used);
    check(used == static_cast<int64_t>(records.size()), "[train] best-fit packing placed ", used,
          " of the ", records.size(), " records it chose");
    return batch;
  }
  check_nothing_pending(cursor, data);
  Sampler& sampler = cursor.sampler;
  const std::vector<int64_t> records =
      candidates(data, sampler.per_rank(), [&](int64_t count) { return sampler.peek(count); });
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

MicroBatchSize next_micro_batch_size(DataCursor& cursor, const TrainingData& data) {
  const int per_record = data.documents_per_record();
  std::vector<int64_t> records;
  if (data.packing.mode == PackingMode::BestFit) {
    for (const PendingRecord& record : take_best_fit(cursor, data))
      records.push_back(record.record);
  } else {
    check_nothing_pending(cursor, data);
    records = candidates(data, cursor.sampler.per_rank(),
                         [&](int64_t count) { return cursor.sampler.peek(count); });
  }
  std::vector<int64_t> lengths;
  for (const int64_t record : records)
    for (const int64_t length : record_lengths(data, record)) lengths.push_back(length);
  // As pack_records: whole records only, so a half-placed last record is packed again without.
  PackingPlan plan = plan_packing(lengths, data.packing);
  MicroBatchSize size;
  size.records = plan.documents_consumed / per_record;
  check(size.records > 0, "[train] one ", data_format_name(data.format), " record (",
        data.record_tokens(records.front()), " tokens) does not fit in a micro-batch of ",
        data.rows, " rows x ", data.packing.seq_len,
        " tokens; raise data.micro_batch_rows or data.seq_len");
  if (plan.documents_consumed % per_record != 0) {
    lengths.resize(static_cast<size_t>(size.records * per_record));
    plan = plan_packing(lengths, data.packing);
  }
  size.rows = static_cast<int64_t>(plan.rows.size());
  size.length = data.packing.trim_to_longest ? 0 : data.packing.seq_len;
  for (const std::vector<PackingPiece>& row : plan.rows) {
    int64_t used = 0;
    for (const PackingPiece& piece : row) {
      size.documents += 1;
      used += piece.length;
    }
    size.tokens += used;
    size.length = std::max(size.length, used);
  }
  if (data.packing.mode == PackingMode::BestFit)
    check(size.records == static_cast<int64_t>(records.size()), "[train] best-fit packing placed ",
          size.records, " of the ", records.size(), " records it chose");
  else
    cursor.sampler.next(size.records);
  return size;
}

PackedBatch next_micro_batch_in_order(int64_t& next_record, const TrainingData& data) {
  const int64_t total = data.num_records();
  check(next_record >= 0 && next_record < total, "[data] record ", next_record,
        " is past the end (", total, " records)");
  const std::vector<int64_t> records = candidates(data, total - next_record, [&](int64_t count) {
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
