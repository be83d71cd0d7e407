#pragma once
// A Hugging Face checkpoint directory: config.json plus either one `model.safetensors` or shards
// listed by `model.safetensors.index.json` (`weight_map`: tensor name -> shard file). Weights of
// a block-wise FP8 checkpoint are dequantized as they are read (io/block_fp8.h).
#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tandem/io/block_fp8.h"
#include "tandem/io/safetensors.h"

namespace tandem {

/// How the ranks of a multi-process run share checkpoint reads (docs/distributed.md, rank-0
/// loading). The rank that `reads_files()` opens the weight files; it sends each checkpoint's
/// header (names, stored dtypes, shapes; or the error opening it raised) and then each tensor it
/// reads to the others, which open no weight file and receive into tensors allocated from that
/// header, so every rank agrees on dtypes and shapes before any tensor moves. Every rank must open
/// the same checkpoints and read the same tensors in the same order (the loaders are
/// deterministic).
class CheckpointBroadcast {
 public:
  virtual ~CheckpointBroadcast() = default;
  virtual bool reads_files() const = 0;
  /// From the reading rank to all: `text` is replaced by the reader's on the other ranks.
  virtual void broadcast_text(std::string& text) = 0;
  /// From the reading rank to all (contiguous, same dtype and shape on every rank). In place, or
  /// `tensor` replaced by the same values on the implementation's device (NCCL sends GPU memory).
  virtual void broadcast_tensor(at::Tensor& tensor) = 0;
  /// Told each weight file the reading rank opens, and each checkpoint a rank receives.
  virtual void log(const std::string& line) = 0;
};

class HfCheckpoint {
 public:
  /// Opens (mmaps) every weight file of `dir` and checks the index against the shards; with a
  /// `broadcast` (not owned; it must outlive the checkpoint), only its reading rank does and the
  /// others receive the header. nullptr: this process reads its own files.
  static HfCheckpoint open(const std::string& dir, CheckpointBroadcast* broadcast = nullptr);

  const std::string& dir() const { return dir_; }
  /// All tensor names, sorted.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return location_.count(name) > 0; }
  /// Where `name` is stored; errors naming the directory when absent.
  const safetensors::TensorInfo& info(const std::string& name) const;
  /// The file holding `name` (an error on a rank that received the checkpoint).
  const safetensors::File& file_of(const std::string& name) const;
  /// A new tensor with the stored values of `name` in its stored dtype, on the CPU (or on the
  /// broadcast's device, when it sends over a GPU) (received from the
  /// reading rank when the checkpoint was opened with a CheckpointBroadcast).
  at::Tensor read(const std::string& name) const;
  /// read() for a model weight: a float as stored (F32, F16, BF16 or F64), or a block-wise FP8
  /// weight (F8_E4M3 beside its `_scale_inv`, io/block_fp8.h) dequantized to fp32. Anything else
  /// is an error naming the directory and tensor: an integer or boolean tensor where a weight
  /// belongs would otherwise be converted silently.
  at::Tensor read_weight(const std::string& name) const;
  /// The block of a block-wise FP8 checkpoint (config.json's quantization_config), or none.
  const BlockFp8& fp8() const { return fp8_; }
  /// Whether config.json says the experts are MXFP4 (gpt-oss: `*_blocks` + `*_scales`,
  /// io/mxfp4.h; read through models/stored_weights.h).
  bool mxfp4() const { return mxfp4_; }
  /// From the headers alone, for a weight stored as FP8: its scale is there with the shape its
  /// block implies, and config.json declares the block. An Error naming the tensor otherwise;
  /// nothing for a weight stored as a float.
  void check_fp8(const std::string& name) const;
  /// The paths of the weight files, in shard order.
  std::vector<std::string> file_paths() const;

 private:
  static HfCheckpoint open_files(const std::string& dir);
  std::string header_json() const;
  static HfCheckpoint from_header(const std::string& dir, const std::string& header);

  std::string dir_;
  std::vector<std::unique_ptr<safetensors::File>> files_;
  std::map<std::string, size_t> location_;                   // tensor name -> index into files_
  std::map<std::string, safetensors::TensorInfo> received_;  // receiving ranks: the header
  std::vector<std::string> paths_;                           // receiving ranks: the reader's files
  CheckpointBroadcast* broadcast_ = nullptr;                 // set when opened under one
  BlockFp8 fp8_;        // from config.json (sent with the header to the receiving ranks)
  bool mxfp4_ = false;  // likewise
};

/// Writes `tensors` as an HF weight set in `dir`: one `model.safetensors` when the total is at
/// most `max_shard_bytes`, else `model-0000i-of-0000N.safetensors` shards plus the index.
void write_hf_weights(const std::string& dir,
                      const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      int64_t max_shard_bytes = int64_t{5} << 30);

}  // namespace tandem
