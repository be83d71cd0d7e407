#include "tandem/data/packing.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>

#include "tandem/core/device.h"
#include "tandem/core/error.h"
#include "tandem/models/decoder.h"

namespace tandem {
namespace {

/// The name of document `index` in error messages: its source, else "document <index>".
std::string document_name(const std::vector<std::string>& sources, size_t index) {
  if (index < sources.size() && !sources[index].empty()) return sources[index];
  return "document " + std::to_string(index);
}

/// The pieces document `index` (of `length` tokens) becomes under the overlong policy.
std::vector<PackingPiece> cut_document(int64_t index, int64_t length, const PackingOptions& options,
                                       const std::vector<std::string>& sources,
                                       int64_t& truncated_tokens) {
  check(length > 0, "[packing] ", document_name(sources, index), ": empty document");
  const int64_t seq_len = options.seq_len;
  if (length <= seq_len) return {{index, 0, length, 0}};
  switch (options.overlong) {
    case OverlongPolicy::Error:
      throw Error("[packing] ", document_name(sources, index), ": ", length,
                  " tokens exceed seq_len ", seq_len, " (overlong policy: error)");
    case OverlongPolicy::Truncate:
      truncated_tokens += length - seq_len;
      return {{index, 0, seq_len, 0}};
    case OverlongPolicy::Split: {
      std::vector<PackingPiece> pieces;
      for (int64_t begin = 0, chunk = 0; begin < length; begin += seq_len, ++chunk)
        pieces.push_back({index, begin, std::min(seq_len, length - begin), chunk});
      return pieces;
    }
  }
  throw Error("[packing] unknown overlong policy");
}

/// The open row that takes a piece of `length` tokens, given each row's `free` columns: the
/// first with room (Packed), the one with the least room that holds it, the first of equals
/// (BestFit), none (Padded); -1 when none does.
int64_t choose_row(const std::vector<int64_t>& free, int64_t length, PackingMode mode) {
  int64_t target = -1;
  if (mode == PackingMode::Padded) return target;
  for (size_t row = 0; row < free.size(); ++row) {
    if (free[row] < length) continue;
    if (mode == PackingMode::Packed) return static_cast<int64_t>(row);
    if (target < 0 || free[row] < free[target]) target = static_cast<int64_t>(row);
  }
  return target;
}

/// Places `pieces` into rows with `free` columns left, opening rows up to `max_rows` (0: no
/// bound), each piece into choose_row's row or else a new one. Returns false, leaving `rows`
/// and `free` untouched, when some piece does not fit.
bool place(const std::vector<PackingPiece>& pieces, const PackingOptions& options,
           std::vector<std::vector<PackingPiece>>& rows, std::vector<int64_t>& free) {
  std::vector<int64_t> trial_free = free;
  std::vector<int64_t> targets;
  for (const PackingPiece& piece : pieces) {
    int64_t target = choose_row(trial_free, piece.length, options.mode);
    if (target < 0) {
      if (options.max_rows > 0 && static_cast<int64_t>(trial_free.size()) >= options.max_rows)
        return false;
      target = static_cast<int64_t>(trial_free.size());
      trial_free.push_back(options.seq_len);
    }
    trial_free[target] -= piece.length;
    targets.push_back(target);
  }
  rows.resize(trial_free.size());
  for (size_t i = 0; i < pieces.size(); ++i) rows[targets[i]].push_back(pieces[i]);
  free = std::move(trial_free);
  return true;
}

}  // namespace

OverlongPolicy parse_overlong_policy(const std::string& name) {
  if (name == "truncate") return OverlongPolicy::Truncate;
  if (name == "split") return OverlongPolicy::Split;
  if (name == "error") return OverlongPolicy::Error;
  throw Error("[packing] unknown overlong policy '", name, "' (truncate | split | error)");
}

PackingMode parse_packing_mode(const std::string& name) {
  if (name == "packed") return PackingMode::Packed;
  if (name == "best_fit") return PackingMode::BestFit;
  if (name == "padded") return PackingMode::Padded;
  throw Error("[packing] unknown packing mode '", name, "' (packed | best_fit | padded)");
}

PackingPlan plan_packing(const std::vector<int64_t>& lengths, const PackingOptions& options,
                         const std::vector<std::string>& sources) {
  check(options.seq_len > 0, "[packing] seq_len must be positive, got ", options.seq_len);
  check(options.max_rows >= 0, "[packing] max_rows must be >= 0, got ", options.max_rows);
  PackingPlan plan;
  std::vector<int64_t> free;  // (rows,) columns left in each row
  for (size_t index = 0; index < lengths.size(); ++index) {
    const auto pieces = cut_document(static_cast<int64_t>(index), lengths[index], options, sources,
                                     plan.truncated_tokens);
    if (!place(pieces, options, plan.rows, free)) {
      // Only a prefix is consumed, so a sampler position can resume at the first document left.
      check(index > 0, "[packing] ", document_name(sources, index), ": needs ", pieces.size(),
            " rows of ", options.seq_len, " tokens but max_rows is ", options.max_rows);
      if (options.overlong == OverlongPolicy::Truncate)  // undo the count of the unplaced one
        plan.truncated_tokens -= std::max<int64_t>(0, lengths[index] - options.seq_len);
      break;
    }
    plan.documents_consumed = static_cast<int64_t>(index) + 1;
  }
  return plan;
}

std::vector<int64_t> select_best_fit(const std::vector<std::vector<int64_t>>& records,
                                     const PackingOptions& options) {
  check(options.seq_len > 0, "[packing] seq_len must be positive, got ", options.seq_len);
  check(options.max_rows > 0, "[packing] best-fit selection needs max_rows > 0");
  PackingOptions best_fit = options;
  best_fit.mode = PackingMode::BestFit;
  std::vector<std::vector<PackingPiece>> rows;
  std::vector<int64_t> free;                          // (rows,) columns left in each open row
  int64_t room = options.max_rows * options.seq_len;  // columns left, rows not yet open included
  std::vector<int64_t> taken;
  int64_t document = 0;
  for (size_t record = 0; record < records.size() && room > 0; ++record) {
    std::vector<PackingPiece> pieces;
    int64_t tokens = 0, truncated = 0;
    for (const int64_t length : records[record]) {
      for (const PackingPiece& piece : cut_document(document++, length, best_fit, {}, truncated)) {
        pieces.push_back(piece);
        tokens += piece.length;
      }
    }
    if (tokens > room || !place(pieces, best_fit, rows, free)) continue;
    taken.push_back(static_cast<int64_t>(record));
    room -= tokens;
  }
  return taken;
}

PackedBatch pack_documents(const std::vector<TokenizedDocument>& documents,
                           const PackingOptions& options) {
  std::vector<int64_t> lengths;
  std::vector<std::string> sources;
  for (size_t i = 0; i < documents.size(); ++i) {
    const TokenizedDocument& document = documents[i];
    check(document.ids.size() == document.loss_mask.size(), "[packing] ",
          document.source.empty() ? "document " + std::to_string(i) : document.source, ": ",
          document.ids.size(), " ids but ", document.loss_mask.size(), " loss-mask entries");
    lengths.push_back(static_cast<int64_t>(document.ids.size()));
    sources.push_back(document.source);
  }
  const PackingPlan plan = plan_packing(lengths, options, sources);
  check(!plan.rows.empty(), "[packing] no documents to pack");

  int64_t length = options.seq_len;
  if (options.trim_to_longest) {
    length = 0;
    for (const auto& row : plan.rows) {
      int64_t used = 0;
      for (const PackingPiece& piece : row) used += piece.length;
      length = std::max(length, used);
    }
  }
  const int64_t rows = static_cast<int64_t>(plan.rows.size());
  check(rows * length <= std::numeric_limits<int32_t>::max(), "[packing] ", rows, "x", length,
        " tokens overflow int32 cu_seqlens");
  const auto long_options = at::TensorOptions().dtype(at::kLong);
  const auto byte_options = at::TensorOptions().dtype(at::kByte);

  PackedBatch batch;
  batch.input_ids = at::empty({rows, length}, long_options);
  batch.position_ids = at::empty({rows, length}, long_options);
  batch.document_ids = at::empty({rows, length}, long_options);
  batch.loss_mask = at::zeros({rows, length}, byte_options);
  batch.padding_mask = at::zeros({rows, length}, byte_options);
  batch.num_documents = at::empty({rows}, long_options);
  int64_t* ids = batch.input_ids.data_ptr<int64_t>();
  int64_t* positions = batch.position_ids.data_ptr<int64_t>();
  int64_t* document_ids = batch.document_ids.data_ptr<int64_t>();
  uint8_t* loss_mask = batch.loss_mask.data_ptr<uint8_t>();
  uint8_t* padding_mask = batch.padding_mask.data_ptr<uint8_t>();
  int64_t* num_documents = batch.num_documents.data_ptr<int64_t>();

  std::vector<int32_t> cu_seqlens{0};
  for (int64_t row = 0; row < rows; ++row) {
    const auto& pieces = plan.rows[row];
    const int64_t base = row * length;
    int64_t column = 0;
    for (size_t j = 0; j < pieces.size(); ++j) {
      const PackingPiece& piece = pieces[j];
      const TokenizedDocument& document = documents[piece.source_index];
      for (int64_t k = 0; k < piece.length; ++k) {
        const int64_t at = base + column + k;
        ids[at] = document.ids[piece.source_begin + k];
        positions[at] = k;
        document_ids[at] = static_cast<int64_t>(j);
        loss_mask[at] = document.loss_mask[piece.source_begin + k] ? 1 : 0;
        batch.num_loss_tokens += loss_mask[at];
        padding_mask[at] = 1;
      }
      batch.documents.push_back(
          {piece.source_index, piece.chunk, piece.source_begin, row, column, piece.length});
      if (j > 0) cu_seqlens.push_back(static_cast<int32_t>(base + column));
      column += piece.length;
      batch.num_tokens += piece.length;
    }
    // Padding: clamped onto the row's last document, positions continuing its count.
    const int64_t last = static_cast<int64_t>(pieces.size()) - 1;
    for (int64_t k = 0; column + k < length; ++k) {
      const int64_t at = base + column + k;
      ids[at] = options.pad_id;
      positions[at] = pieces.back().length + k;
      document_ids[at] = last;
    }
    num_documents[row] = static_cast<int64_t>(pieces.size());
    cu_seqlens.push_back(static_cast<int32_t>(base + length));
  }
  for (size_t i = 1; i < cu_seqlens.size(); ++i)
    batch.max_seqlen = std::max<int64_t>(batch.max_seqlen, cu_seqlens[i] - cu_seqlens[i - 1]);
  batch.cu_seqlens =
      at::tensor(at::ArrayRef<int32_t>(cu_seqlens), at::TensorOptions().dtype(at::kInt));
  batch.documents_consumed = plan.documents_consumed;
  batch.truncated_tokens = plan.truncated_tokens;
  return batch;
}

at::Tensor PackedBatch::global_document_ids() const {
  const at::Tensor row_offsets = num_documents.cumsum(0) - num_documents;  // (B,)
  return document_ids + row_offsets.unsqueeze(1);
}

AttentionLayout PackedBatch::layout() const {
  return AttentionLayout{position_ids, document_ids, on_host().document_ids};
}

double PackedBatch::attention_pairs() const {
  double pairs = 0;
  for (const PackedDocument& document : documents)
    pairs += static_cast<double>(document.length) * static_cast<double>(document.length);
  return pairs;
}

const PackedBatch& PackedBatch::on_host() const {
  if (input_ids.is_cpu()) return *this;
  check(host_batch != nullptr, "[packing] a batch on ", input_ids.device().str(),
        " without its host copy");
  return *host_batch;
}

PackedBatch PackedBatch::to(const at::Device& device) const {
  PackedBatch moved = *this;
  if (!device.is_cpu() && !host_batch)
    moved.host_batch = std::make_shared<const PackedBatch>(*this);
  if (device.is_cpu()) moved.host_batch.reset();
  for (at::Tensor* tensor :
       {&moved.input_ids, &moved.position_ids, &moved.document_ids, &moved.loss_mask,
        &moved.padding_mask, &moved.num_documents, &moved.cu_seqlens})
    *tensor = to_device(*tensor, device);
  return moved;
}

}  // namespace tandem
