#pragma once
// Sharded parameters (docs/distributed.md, distributed.mode: shard or hybrid; ZeRO-3 / FSDP). A
// sharded tensor keeps its identity (the module still lists it, with its full shape and HF name),
// but its storage is empty except while it is in use: each rank of the shard group holds only a
// flat slice of it (`shard`, padded so that every rank's slice has the same length), and the
// full values are all-gathered right before a computation reads them and freed right after.
//
// Model code asks for full values through `with_full_parameters` (layers.cpp does for every
// Linear, Embedding and RMSNorm), so each layer is gathered on its own, for its forward, and
// again for its backward: the backward recomputes that one layer from its saved inputs with the
// re-gathered weights (activation recompute per layer), reduce-scatters the weight gradients
// across the shard group, and hands each rank the gradient of its own slice. The optimizer sees
// only the slices: parameters, gradients, fp32 masters and AdamW moments are all 1/ranks.
//
// Every rank of a shard group must run the same sequence of layer calls (the collectives pair
// up in order): the trainer gives every rank the same number of micro-batches and objectives
// do not branch on the data around a layer call.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tandem {

namespace dist {
class ProcessGroup;
}

/// Where the elements of a flattened tensor of `numel` elements live across `ranks`: rank r
/// holds [begin(r), end(r)), padded with zeros to `chunk` elements.
struct ShardLayout {
  int64_t numel = 0;
  int64_t ranks = 1;
  int64_t chunk() const { return numel == 0 ? 1 : (numel + ranks - 1) / ranks; }
  int64_t begin(int64_t rank) const { return std::min(numel, rank * chunk()); }
  int64_t end(int64_t rank) const { return std::min(numel, (rank + 1) * chunk()); }
  int64_t count(int64_t rank) const { return end(rank) - begin(rank); }  // unpadded elements
};

/// The tensors one shard group has split. Destroying it gathers nothing: the sharded tensors
/// are unusable afterwards (it lives as long as the training run).
class ParameterShards {
 public:
  explicit ParameterShards(std::shared_ptr<dist::ProcessGroup> group);
  ~ParameterShards();
  ParameterShards(const ParameterShards&) = delete;
  ParameterShards& operator=(const ParameterShards&) = delete;

  /// Splits `tensor` (contiguous, owning its storage): this rank keeps its slice and the full
  /// storage is freed. Returns the slice (chunk,), which requires grad when `trainable` (the
  /// optimizer's parameter). Sharding a tensor twice returns the same slice (made trainable if
  /// `trainable`, e.g. a model sharded while loading, then handed to the optimizer).
  at::Tensor shard(const at::Tensor& tensor, bool trainable);
  /// This rank's slice of a sharded tensor.
  at::Tensor local_shard(const at::Tensor& tensor) const;
  ShardLayout layout(const at::Tensor& tensor) const;

 private:
  std::shared_ptr<dist::ProcessGroup> group_;
  std::vector<at::Tensor> tensors_;  // the full tensors this object sharded
};

/// Whether `tensor` is sharded (its full values exist only inside with_full_parameters).
bool is_sharded(const at::Tensor& tensor);

/// Bytes this rank holds for `tensor`: its storage (empty while sharded) plus its slice.
int64_t held_bytes(const at::Tensor& tensor);

/// Sharded training loads every model from its HF checkpoint (frozen models, and a trained model
/// that starts from one) with RunContext::shard_on_load set: each weight is split by those
/// shards as it arrives (not trainable yet), so no rank ever holds a whole loaded model. A
/// trained model's slices become trainable when it is sharded again with trainable = true.
/// Without shards (nullptr) this does nothing.
void shard_on_load(ParameterShards* shards, const at::Tensor& weight);

/// While alive, the full values of every sharded tensor among `tensors` are present (gathered
/// in order, freed in reverse). No autograd: for frozen weights, exports and checkpoints.
class FullParameters {
 public:
  explicit FullParameters(std::vector<at::Tensor> tensors);
  ~FullParameters();
  FullParameters(const FullParameters&) = delete;
  FullParameters& operator=(const FullParameters&) = delete;

 private:
  std::vector<at::Tensor> gathered_;
};

/// body(inputs, parameters) -> outputs, where `parameters` hold full values.
using ParameterBody = std::function<std::vector<at::Tensor>(
    const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& parameters)>;

/// Runs `body` on `inputs` and the full values of `parameters`. Without sharded parameters it
/// is just body(inputs, parameters). With them, the parameters are gathered for the call and
/// freed after; under autograd the call is one node whose backward re-gathers them, recomputes
/// `body`, and gives each sharded trainable parameter's slice its reduce-scattered gradient.
/// `body` must be deterministic and return fresh tensors (not views of its inputs).
std::vector<at::Tensor> with_full_parameters(const std::vector<at::Tensor>& parameters,
                                             const std::vector<at::Tensor>& inputs,
                                             const ParameterBody& body);

}  // namespace tandem
