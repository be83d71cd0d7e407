#pragma once
// A Hugging Face checkpoint directory: config.json plus either one `model.safetensors` or shards
// listed by `model.safetensors.index.json` (`weight_map`: tensor name -> shard file).
#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tandem/io/safetensors.h"

namespace tandem {

class HfCheckpoint {
 public:
  /// Opens (mmaps) every weight file of `dir` and checks the index against the shards.
  static HfCheckpoint open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  /// All tensor names, sorted.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return location_.count(name) > 0; }
  /// Where `name` is stored; errors naming the directory when absent.
  const safetensors::TensorInfo& info(const std::string& name) const;
  /// The file holding `name`.
  const safetensors::File& file_of(const std::string& name) const;
  /// A new CPU tensor with the stored values of `name` in its stored dtype.
  at::Tensor read(const std::string& name) const;
  /// The paths of the weight files, in shard order.
  std::vector<std::string> file_paths() const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<safetensors::File>> files_;
  std::map<std::string, size_t> location_;  // tensor name -> index into files_
};

/// Writes `tensors` as an HF weight set in `dir`: one `model.safetensors` when the total is at
/// most `max_shard_bytes`, else `model-0000i-of-0000N.safetensors` shards plus the index.
void write_hf_weights(const std::string& dir,
                      const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      int64_t max_shard_bytes = int64_t{5} << 30);

}  // namespace tandem
