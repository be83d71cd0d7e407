#pragma once
// Where a model tensor lives in an HF checkpoint. Dense models store every tensor under the name
// the model gives it. Mixture-of-experts models hold each layer's experts stacked (transformers 5's
// in-memory layout, models/moe.h) while checkpoints, the ones on the hub and the ones
// transformers 5 writes, store one tensor per expert and projection:
//   Qwen3-MoE             model.layers.{l}.mlp.experts.{e}.{gate,up,down}_proj.weight
//   Mixtral, MiniMax-M2   model.layers.{l}.block_sparse_moe.experts.{e}.{w1,w3,w2}.weight
//                         (w1 gate, w3 up, w2 down), block_sparse_moe.gate.weight and
//                         (MiniMax-M2) block_sparse_moe.e_score_correction_bias
// A checkpoint that stores the stacked form under the model's own names (mlp.experts.gate_up_proj
// (E, 2I, H), mlp.experts.down_proj (E, H, I)) is read as it is.
// A vision-language wrapper (Qwen3.5/3.6) stores the decoder's `model.` tensors under
// `model.language_model.`; its vision tower (`model.visual.`) and the multi-token-prediction
// layers some hybrid checkpoints carry (`mtp.`) are not part of the decoder and are not read,
// nor are GLM-4.5's, numbered on after the decoder's (`model.layers.{num_hidden_layers + i}.`).
// GLM-4.5 stores its experts as Qwen3-MoE does, its shared experts as `mlp.shared_experts.*`
// and its routing bias under the router, `mlp.gate.e_score_correction_bias` (fp32).
// gpt-oss stores each layer's experts stacked, as transformers holds them: mlp.experts.gate_up_proj
// (E, H, 2I) with gate and up columns alternating, gate_up_proj_bias (E, 2I) alternating alike,
// down_proj (E, I, H); or, as published, the two projections as MXFP4 (io/mxfp4.h) of their
// (E, out, in) form: gate_up_proj_blocks / _scales (rows alternating gate, up) and
// down_proj_blocks / _scales. The model holds (E, 2I, H) gate rows then up rows, (E, H, I).
#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

#include "tandem/models/decoder_config.h"

namespace tandem {

class HfCheckpoint;

/// The checkpoint tensors that make one model tensor.
struct StoredWeight {
  std::string model_name;
  // pieces[e]: the tensors concatenated along dim 0 into slice e of a stacked (E, ...) tensor
  // (gate then up for gate_up_proj); one list of one name: the tensor is stored whole.
  std::vector<std::vector<std::string>> pieces;
  // gpt-oss's experts (one piece): how the stored tensor differs from the model's (E, out, in).
  bool transposed = false;   // stored (E, in, out)
  bool interleaved = false;  // dim 1 alternates gate, up (the model: gate rows, then up rows)
  bool mxfp4 = false;        // the piece names the `_blocks` of an MXFP4 pair (io/mxfp4.h)

  bool stacked() const;
  /// Whether the stored tensor is transformed on its way to the model (gpt-oss's experts).
  bool transformed() const { return transposed || interleaved || mxfp4; }
  /// Every checkpoint name it reads.
  std::vector<std::string> names() const;
};

/// The name `model_name` has in `config`'s checkpoints (the wrapper's prefix where it has one).
std::string checkpoint_name(const std::string& model_name, const DecoderConfig& config);

/// What a checkpoint tensor that is not part of the decoder belongs to ("the vision tower",
/// "the multi-token-prediction layers"), or nullptr for every other tensor.
const char* outside_decoder(const std::string& stored_name, const DecoderConfig& config);

/// The hub form of `model_name`: per-expert tensors for a stacked expert tensor, the family's
/// spelling for the rest (what exports write, and what loading looks for when the checkpoint
/// does not hold `model_name` itself).
StoredWeight hub_form(const std::string& model_name, const DecoderConfig& config);

/// How `checkpoint` stores `model_name`: under that name when it holds it, else the hub form
/// (whose names may be missing: the caller reports them).
StoredWeight stored_form(const std::string& model_name, const DecoderConfig& config,
                         const HfCheckpoint& checkpoint);

/// Checks that every piece of `weight` is in `checkpoint` with the shape that assembles
/// `shape`; errors name the directory, the tensor and the shape expected.
void check_stored_shapes(const StoredWeight& weight, at::IntArrayRef shape,
                         const HfCheckpoint& checkpoint);

/// Reads `weight` from `checkpoint` into a new tensor of `shape` in `options`' dtype and device,
/// one piece at a time (no host copy of a whole stacked tensor).
at::Tensor read_stored_weight(const StoredWeight& weight, at::IntArrayRef shape,
                              const HfCheckpoint& checkpoint, const at::TensorOptions& options);

/// The tensors to write for a model tensor in the hub form: (name, value or a slice of it).
std::vector<std::pair<std::string, at::Tensor>> split_for_hub(const std::string& model_name,
                                                              const at::Tensor& value,
                                                              const DecoderConfig& config);

}  // namespace tandem
