#pragma once
// Filling a model's parameters from an HF checkpoint: names must match exactly (no renaming
// table), shapes must match, and every tensor in the file must be used.
#include <torch/nn/module.h>

#include <string>

#include "tandem/core/run_context.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/models/decoder.h"

namespace tandem {

/// The tensors a checkpoint holds for `module`: every parameter, then every buffer (weights that
/// are never trained: MiniMax-M2's e_score_correction_bias), by the module's names.
std::vector<std::pair<std::string, at::Tensor>> checkpoint_tensors(const torch::nn::Module& module);

/// The checkpoint holds exactly `module`'s parameters and weight buffers (and tensors that carry
/// no weights), at their shapes, each under its own name or, for mixture-of-experts tensors, as
/// the hub stores them (models/stored_weights.h); errors name the directory and list missing,
/// unexpected or misshapen tensors. Reads headers only: `module` may live on the meta device.
void check_checkpoint_matches(const torch::nn::Module& module, const HfCheckpoint& checkpoint,
                              const DecoderConfig& config);

/// Replaces every parameter and weight buffer of `module` with its checkpoint tensor (stacked
/// from one tensor per expert where the checkpoint stores them so), converted to `dtype` on
/// `run.device` one stored tensor at a time (its host copy is dropped once it is on the device).
/// Errors name the directory and list missing, unexpected or misshapen tensors. Tensors that carry
/// no weights (`rotary_emb.inv_freq`) and, for tied models, a stored `lm_head.weight` are skipped.
/// In sharded training (`run.shard_on_load`) each parameter is split as soon as it is filled,
/// so the whole model never exists on one rank.
void load_parameters(torch::nn::Module& module, const HfCheckpoint& checkpoint,
                     c10::ScalarType dtype, const RunContext& run, const DecoderConfig& config);

/// A causal LM with uninitialised parameters on `options`' device and dtype, after checking, on
/// a model without memory, its shapes against `checkpoint` (when given: check_checkpoint_matches)
/// and its size: on the CPU against the machine's physical memory (pages would be granted
/// untouched and fail only when filled); an allocation failure on a GPU names `where` and the
/// size too.
CausalLM allocate_causal_lm(const DecoderConfig& config, const at::TensorOptions& options,
                            const std::string& where, const HfCheckpoint* checkpoint = nullptr);

/// "12 tensors of the vision tower, 3 tensors of the multi-token-prediction layers": what
/// `checkpoint` holds beside the decoder and loading skips by name (empty when nothing).
std::string outside_decoder_summary(const HfCheckpoint& checkpoint, const DecoderConfig& config);

/// config.json + weights of `dir` -> a causal LM in `dtype` on `run.device` (read through
/// `run.rank_zero` when set).
CausalLM load_causal_lm(const std::string& dir, c10::ScalarType dtype, const RunContext& run);

}  // namespace tandem
