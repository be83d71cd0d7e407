#pragma once
// Filling a model's parameters from an HF checkpoint: names must match exactly (no renaming
// table), shapes must match, and every tensor in the file must be used.
#include <torch/nn/module.h>

#include <string>

#include "tandem/core/run_context.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/models/decoder.h"

namespace tandem {

/// The checkpoint holds exactly `module`'s parameters (and tensors that carry no weights), at
/// their shapes; errors name the directory and list missing, unexpected or misshapen tensors.
/// Reads headers only: `module` may live on the meta device.
void check_checkpoint_matches(const torch::nn::Module& module, const HfCheckpoint& checkpoint,
                              bool tied_embeddings);

/// Replaces every parameter of `module` with the checkpoint tensor of the same name, converted
/// to `dtype` on `run.device` one tensor at a time (the host copy of a weight is dropped once
/// it is on the device). Errors name the directory and list missing, unexpected or misshapen
/// tensors. Tensors that carry no weights (`rotary_emb.inv_freq`) and, for tied models, a stored
/// `lm_head.weight` are skipped.
/// In sharded training (`run.shard_on_load`) each parameter is split as soon as it is filled,
/// so the whole model never exists on one rank.
void load_parameters(torch::nn::Module& module, const HfCheckpoint& checkpoint,
                     c10::ScalarType dtype, const RunContext& run, bool tied_embeddings);

/// A causal LM with uninitialised parameters on `options`' device and dtype, after checking, on
/// a model without memory, its shapes against `checkpoint` (when given: check_checkpoint_matches)
/// and its size: on the CPU against the machine's physical memory (pages would be granted
/// untouched and fail only when filled); an allocation failure on a GPU names `where` and the
/// size too.
CausalLM allocate_causal_lm(const DecoderConfig& config, const at::TensorOptions& options,
                            const std::string& where, const HfCheckpoint* checkpoint = nullptr);

/// config.json + weights of `dir` -> a causal LM in `dtype` on `run.device` (read through
/// `run.rank_zero` when set).
CausalLM load_causal_lm(const std::string& dir, c10::ScalarType dtype, const RunContext& run);

}  // namespace tandem
