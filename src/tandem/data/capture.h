#pragma once
// Captured target features for offline draft training (`tandem capture`): the frozen target runs
// once over a tokenized dataset and its hidden states are stored, so training needs no target
// layers (only its embedding, final norm and lm_head).
//
// Directory layout:
//   manifest.json             settings + the list of finished shards (rewritten atomically)
//   shard-00000.safetensors   documents [first, first + count) of the dataset, per document j:
//       aux.{j}        (L, k*H) captured layers side by side, in `layer_ids` order
//       last.{j}       (L, H)   raw output of the target's last decoder layer (before its norm);
//                               EAGLE-3 captures only (its teacher), DFlash drafts read aux alone
//       input_ids.{j}  (L,) int32, loss_mask.{j} (L,) uint8: the document as captured
// Documents longer than seq_len are run in chunks of seq_len with positions restarting, exactly
// as training splits them, so row r of a document holds its token r as training sees it.
// Resumable: shards are written atomically one by one and listed in the manifest only once
// complete; a rerun with the same settings continues after the last listed shard, a rerun with
// different settings is refused.
// On W ranks (torchrun): shard s (documents s*N..) goes to rank s % W, which lists its finished
// shards in ranks/rank-R-of-W.json; the last rank to finish writes manifest.json, the same file
// one process writes, and removes ranks/.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tandem/data/rank_parts.h"
#include "tandem/io/safetensors.h"

namespace tandem {

class FrozenModel;
class TokenizedDataset;
struct PackedBatch;

struct CaptureSettings {
  std::string target;              // the target checkpoint directory
  std::vector<int64_t> layer_ids;  // outputs of these decoder layers are stored in aux
  std::string dtype;               // stored dtype ("fp32", "bf16", "fp16")
  int64_t seq_len = 0;             // training's chunk length
  std::string dataset_key;         // TokenizedDataset::key() as 16 hex digits
  int64_t num_documents = 0;
  int64_t hidden_size = 0;
  bool last_hidden = true;  // last.{j} stored too (EAGLE-3's teacher; DFlash needs none)

  nlohmann::json to_json() const;
  static CaptureSettings from_json(const nlohmann::json& json, const std::string& where);
  bool operator==(const CaptureSettings& other) const;
};

struct CaptureProgress {
  int64_t documents_done = 0;  // before this run
  int64_t documents_written = 0;
  int64_t shards_written = 0;
};

struct CaptureOptions {
  int64_t documents_per_shard = 256;
  int64_t rows = 8;  // documents packed per target forward (at most `rows` rows of seq_len)
  bool quiet = false;
  // Under torchrun: this rank captures shards rank, rank + ranks, ... (data/rank_parts.h).
  DataRank rank;
};

/// Runs `target` over every document of `dataset` and writes `dir` (resuming if it holds an
/// unfinished capture with the same settings).
CaptureProgress capture_features(const FrozenModel& target, const TokenizedDataset& dataset,
                                 const CaptureSettings& settings, const std::string& dir,
                                 const CaptureOptions& options = {});

/// A finished capture directory, memory-mapped.
class CaptureStore {
 public:
  /// Opens `dir`; errors when the manifest is missing or malformed, the capture is unfinished,
  /// or a shard is missing or corrupt.
  static CaptureStore open(const std::string& dir);

  const CaptureSettings& settings() const { return settings_; }
  const std::string& dir() const { return dir_; }

  struct Slice {
    at::Tensor aux;   // (length, k*H) in the stored dtype
    at::Tensor last;  // (length, H); undefined when the capture has no last hidden states
  };
  /// Rows [begin, begin + length) of document `index`; `ids` (length,) int64 must equal the
  /// captured ids there (a capture of other data is an error naming the document).
  Slice read(int64_t index, int64_t begin, int64_t length, const at::Tensor& ids) const;

 private:
  std::string dir_;
  CaptureSettings settings_;
  std::vector<std::shared_ptr<safetensors::File>> shards_;
  std::vector<int64_t> shard_first_;  // first document of each shard
};

/// Checks that `capture` was made from `dataset` split at `seq_len` (offline training reads the
/// features by dataset document); `who` ("[eagle3]", ...) starts the error.
void check_capture_matches_data(const CaptureStore& capture, const TokenizedDataset& dataset,
                                int64_t seq_len, const std::string& who);

/// Checks that `capture` holds the target layers `layer_ids` of hidden size `hidden_size` (and the
/// last hidden states when `needs_last_hidden`); `who` ("[eagle3]", ...) starts the error.
void check_capture_features(const CaptureStore& capture, const std::vector<int64_t>& layer_ids,
                            int64_t hidden_size, bool needs_last_hidden, const std::string& who);

/// The captured features of every document of `batch`, laid out as the batch (zeros on padding).
struct CapturedBatch {
  at::Tensor aux;   // (B, S, k*H)
  at::Tensor last;  // (B, S, H); undefined when the capture has none
};
CapturedBatch read_captured_batch(const CaptureStore& capture, const PackedBatch& batch,
                                  c10::ScalarType dtype, const std::string& who);
/// The same for a batch that is still on the host, its features copied to `device`.
CapturedBatch read_captured_batch(const CaptureStore& capture, const PackedBatch& batch,
                                  c10::ScalarType dtype, const c10::Device& device,
                                  const std::string& who);

}  // namespace tandem
