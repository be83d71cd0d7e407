#pragma once
// Packing: tokenized documents -> fixed-length rows of `seq_len` tokens, several documents per
// row, with the boundaries kept so attention never crosses documents, positions restart per
// document, and losses can be computed per document.
//
// Conventions (every PackedBatch obeys them; tests/test_packing.cpp checks each):
// - `document_ids[b, t]` is the index of the document WITHIN ROW b: 0 .. num_documents[b]-1, in
//   the order the documents sit in the row. `global_document_ids()` adds the row offsets for an
//   index over the whole batch (0 .. total_documents-1, row-major), the order of `documents`.
// - Padding (the tail of a row after its last document) belongs to no document: it is not
//   counted in num_documents, its loss_mask is 0 and `input_ids` hold `pad_id`. Its document id
//   is CLAMPED onto the row's last real document (num_documents[b]-1, never past it), and its
//   positions continue that document's count, so padding queries attend inside that document
//   (harmless: causal, so no real token ever sees them) and per-document scatters never index
//   past the last document. Losses must use loss_mask to exclude them.
// - `cu_seqlens` describes the same segments as document_ids over the flattened (B*T) tokens
//   (flash-attention varlen form): each row's padding is absorbed by that row's last document.
// - Rows are never empty: every row holds at least one real token.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tandem/data/document.h"

namespace tandem {

struct AttentionLayout;  // tandem/models/decoder.h

/// What to do with a document longer than seq_len.
enum class OverlongPolicy {
  Truncate,  // keep its first seq_len tokens, drop the rest (counted in truncated_tokens)
  Split,     // cut into chunks of seq_len (the last one shorter); each chunk is its own document
             // with positions restarting at 0, and packs like any other document
  Error,     // throw Error naming the document's source
};

/// How documents are laid into rows.
enum class PackingMode {
  Packed,   // greedy first-fit in input order: several documents per row
  BestFit,  // several documents per row, each piece into the row with the least room that holds
            // it; the trainer also chooses each micro-batch's records from a pool drawn ahead
            // (train/training_data.h), so rows fill up
  Padded,   // one document (or chunk) per row, the rest padding
};

/// Parses "truncate" | "split" | "error"; throws naming the accepted values.
OverlongPolicy parse_overlong_policy(const std::string& name);
/// Parses "packed" | "best_fit" | "padded"; throws naming the accepted values.
PackingMode parse_packing_mode(const std::string& name);

struct PackingOptions {
  int64_t seq_len = 0;  // T: tokens per row (> 0)
  PackingMode mode = PackingMode::Packed;
  OverlongPolicy overlong = OverlongPolicy::Split;
  int64_t pad_id = 0;            // input id written on padding
  int64_t max_rows = 0;          // B bound: 0 = as many rows as the documents need; else pack the
                                 // longest prefix of the documents that fits in max_rows rows
  bool trim_to_longest = false;  // T = the longest row's real length instead of seq_len
};

/// One document (or chunk of one) placed in a batch, in global document order.
struct PackedDocument {
  int64_t source_index;        // index of the input document it came from
  int64_t chunk;               // 0 unless the input was split (OverlongPolicy::Split)
  int64_t source_begin;        // first token of the input document it holds
  int64_t row;                 // b
  int64_t begin;               // first column in the row
  int64_t length;              // real tokens
  int64_t dataset_index = -1;  // the document's index in its dataset, when the batch came from
                               // one (set by the trainer; offline features are looked up by it)
  int64_t epoch = 0;  // the sampler epoch it was drawn in (set by the trainer; 0 otherwise):
                      // lets an objective draw fresh random choices on every pass over the data
};

/// A packed micro-batch. Tensors live on the CPU until `to(device)`; a batch on a GPU keeps the
/// host batch it came from (`on_host()`), so masks, indices and per-document loops are computed
/// on the host without waiting for the device.
struct PackedBatch {
  at::Tensor input_ids;      // (B, T) int64, pad_id on padding
  at::Tensor position_ids;   // (B, T) int64, restart at 0 per document; padding continues the last
  at::Tensor document_ids;   // (B, T) int64, index within the row; padding clamped onto the last
  at::Tensor loss_mask;      // (B, T) uint8, the documents' loss mask, 0 on padding
  at::Tensor padding_mask;   // (B, T) uint8, 1 on real tokens, 0 on padding
  at::Tensor num_documents;  // (B,) int64, real documents per row (>= 1)
  at::Tensor cu_seqlens;     // (total_documents + 1,) int32, segment starts over the (B*T) tokens
  int64_t max_seqlen = 0;    // longest segment in cu_seqlens (padding included)

  std::vector<PackedDocument> documents;  // (total_documents,) in global document order
  int64_t documents_consumed = 0;  // input documents packed: all of them, or a prefix (max_rows)
  int64_t truncated_tokens = 0;    // tokens dropped by OverlongPolicy::Truncate
  // Counts for per-step normalisation, computed on the host while packing (no device sync).
  int64_t num_tokens = 0;       // real (non-padding) tokens
  int64_t num_loss_tokens = 0;  // tokens with loss_mask = 1: the per-token loss normaliser

  /// Rows B.
  int64_t rows() const { return input_ids.size(0); }
  /// Columns T.
  int64_t seq_len() const { return input_ids.size(1); }
  /// Documents in the batch (sum of num_documents): the normaliser for per-document losses.
  int64_t total_documents() const { return static_cast<int64_t>(documents.size()); }
  /// Sum over the documents of length^2: what causal attention within documents spans.
  double attention_pairs() const;
  /// (B, T) int64 document index over the whole batch: document_ids + documents in earlier rows.
  at::Tensor global_document_ids() const;
  /// The decoder's view: { position_ids, document_ids } (shared, not copied).
  AttentionLayout layout() const;
  /// A copy with every tensor on `device` (cu_seqlens included); the host-side fields are shared.
  /// To a GPU the host tensors are pinned and copied asynchronously (no wait for the copy: work
  /// queued after it on the device's stream sees the data); on the same device, no copy at all.
  PackedBatch to(const at::Device& device) const;
  /// This batch with its tensors on the CPU: itself, or the host batch it was copied from.
  const PackedBatch& on_host() const;

  std::shared_ptr<const PackedBatch> host_batch;  // set by to() when the copy left the CPU
};

/// The rows of a packing plan: for each row, the pieces it holds in order.
struct PackingPiece {
  int64_t source_index;  // input document
  int64_t source_begin;  // first token taken from it
  int64_t length;        // tokens taken
  int64_t chunk;         // chunk number within the input document
};
struct PackingPlan {
  std::vector<std::vector<PackingPiece>> rows;  // (B, pieces)
  int64_t documents_consumed = 0;
  int64_t truncated_tokens = 0;
};

/// Lays documents of the given lengths into rows (no tensors), the longest prefix that fits
/// max_rows: first-fit in input order for Packed, best-fit for BestFit, one piece per row for
/// Padded. `sources` names documents in errors (may be empty).
PackingPlan plan_packing(const std::vector<int64_t>& lengths, const PackingOptions& options,
                         const std::vector<std::string>& sources = {});

/// Which of `records` (each the lengths of its documents, placed all or none) one micro-batch
/// of `options` (max_rows > 0) takes, trying them in order: each piece goes to the row with the
/// least room that holds it, a new row when none does; a record that does not fit is passed
/// over and the later ones still tried. Returns the indices taken, ascending. plan_packing
/// (BestFit) of the taken records' documents, in that order, lays every one of them out the
/// same way.
std::vector<int64_t> select_best_fit(const std::vector<std::vector<int64_t>>& records,
                                     const PackingOptions& options);

/// Packs `documents` into a PackedBatch following `options` (plan_packing + the tensors).
PackedBatch pack_documents(const std::vector<TokenizedDocument>& documents,
                           const PackingOptions& options);

}  // namespace tandem
