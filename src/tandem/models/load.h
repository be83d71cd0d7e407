#pragma once
// Filling a model's parameters from an HF checkpoint: names must match exactly (no renaming
// table), shapes must match, and every tensor in the file must be used.
#include <torch/nn/module.h>

#include <functional>
#include <string>

#include "tandem/io/hf_checkpoint.h"
#include "tandem/models/decoder.h"

namespace tandem {

/// Replaces every parameter of `module` with the checkpoint tensor of the same name, converted
/// to `dtype` on `device`. Errors name the directory and list missing, unexpected or misshapen
/// tensors. Tensors that carry no weights (`rotary_emb.inv_freq`) and, for tied models, a stored
/// `lm_head.weight` are skipped.
/// `on_loaded` (optional) sees each parameter right after it is filled (e.g. to shard it).
void load_parameters(torch::nn::Module& module, const HfCheckpoint& checkpoint,
                     c10::ScalarType dtype, const at::Device& device, bool tied_embeddings,
                     const std::function<void(const at::Tensor&)>& on_loaded = {});

/// config.json + weights of `dir` -> a causal LM in `dtype` on `device`.
CausalLM load_causal_lm(const std::string& dir, c10::ScalarType dtype, const at::Device& device,
                        const std::function<void(const at::Tensor&)>& on_loaded = {});

}  // namespace tandem
