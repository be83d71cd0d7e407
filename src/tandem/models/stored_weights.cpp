#include "tandem/models/stored_weights.h"

#include <ATen/ATen.h>

#include "tandem/core/error.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/models/family_traits.h"

namespace tandem {

namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The family's checkpoints call a layer's sparse MLP `block_sparse_moe` and its experts'
// projections w1/w3/w2 (Mixtral, MiniMax-M2: MoeTraits::block_sparse_moe_names).
bool hub_calls_it_block_sparse_moe(const DecoderConfig& config) {
  return family_traits(config.family).moe.block_sparse_moe_names;
}

// The checkpoint's name of one expert's projection: "gate", "up" or "down".
std::string expert_projection(const std::string& experts_prefix, int64_t expert,
                              const std::string& projection, const DecoderConfig& config) {
  std::string stored = projection + "_proj";
  if (hub_calls_it_block_sparse_moe(config))
    stored = projection == "gate" ? "w1" : projection == "up" ? "w3" : "w2";
  return experts_prefix + std::to_string(expert) + "." + stored + ".weight";
}

}  // namespace

bool StoredWeight::stacked() const {
  return pieces.size() > 1 || (pieces.size() == 1 && pieces[0].size() > 1);
}

std::vector<std::string> StoredWeight::names() const {
  std::vector<std::string> out;
  for (const auto& expert : pieces) out.insert(out.end(), expert.begin(), expert.end());
  return out;
}

std::string checkpoint_name(const std::string& model_name, const DecoderConfig& config) {
  if (!config.language_model_wrapped) return model_name;
  const WrappedStorage& wrapped = family_traits(config.family).wrapped;
  for (const auto& [own, stored] :
       {std::pair<std::string, std::string>{"model.", wrapped.decoder},
        std::pair<std::string, std::string>{"lm_head.", wrapped.lm_head}})
    if (model_name.rfind(own, 0) == 0) return stored + model_name.substr(own.size());
  return model_name;
}

const char* outside_decoder(const std::string& stored_name, const DecoderConfig& config) {
  if (config.language_model_wrapped)
    for (const char* prefix : family_traits(config.family).wrapped.not_read)
      if (stored_name.rfind(prefix, 0) == 0) return "the vision tower";
  if (config.hybrid() && stored_name.rfind("mtp.", 0) == 0)
    return "the multi-token-prediction layers";
  // GLM-4.5: the MTP layers are numbered on after the decoder's, model.layers.{N + i} for
  // i < mtp_layers (a layer past those is unexpected, as in any checkpoint).
  const std::string layers = "model.layers.";
  if (!family_traits(config.family).mtp_layers_after_decoder || stored_name.rfind(layers, 0) != 0)
    return nullptr;
  const size_t digits = stored_name.find_first_not_of("0123456789", layers.size());
  if (digits == std::string::npos || digits == layers.size() || digits - layers.size() > 6 ||
      stored_name[digits] != '.')
    return nullptr;
  const int64_t index = std::stoll(stored_name.substr(layers.size(), digits - layers.size()));
  if (index >= config.num_hidden_layers && index < config.num_hidden_layers + config.mtp_layers)
    return "the multi-token-prediction layers";
  return nullptr;
}

StoredWeight hub_form(const std::string& model_name, const DecoderConfig& config) {
  std::string name = checkpoint_name(model_name, config);
  StoredWeight out{model_name, {{name}}};
  if (!config.moe.enabled()) return out;
  const std::string sparse_mlp = ".mlp.";
  const size_t at = name.find(sparse_mlp);
  if (hub_calls_it_block_sparse_moe(config) && at != std::string::npos &&
      name.rfind("model.layers.", 0) == 0)
    name.replace(at, sparse_mlp.size(), ".block_sparse_moe.");
  const std::string gate_up = "gate_up_proj", down = "down_proj";
  const bool is_gate_up = ends_with(name, ".experts." + gate_up);
  const bool is_down = ends_with(name, ".experts." + down);
  if (!is_gate_up && !is_down) {
    out.pieces = {{name}};
    return out;
  }
  const std::string prefix = name.substr(0, name.size() - (is_gate_up ? gate_up : down).size());
  out.pieces.clear();
  for (int64_t e = 0; e < config.moe.num_experts; ++e) {
    if (is_gate_up)
      out.pieces.push_back({expert_projection(prefix, e, "gate", config),
                            expert_projection(prefix, e, "up", config)});
    else
      out.pieces.push_back({expert_projection(prefix, e, "down", config)});
  }
  return out;
}

StoredWeight stored_form(const std::string& model_name, const DecoderConfig& config,
                         const HfCheckpoint& checkpoint) {
  const std::string name = checkpoint_name(model_name, config);
  if (checkpoint.contains(name)) return StoredWeight{model_name, {{name}}};
  return hub_form(model_name, config);
}

void check_stored_shapes(const StoredWeight& weight, at::IntArrayRef shape,
                         const HfCheckpoint& checkpoint) {
  if (!weight.stacked()) {
    const std::string& name = weight.pieces[0][0];
    const auto& info = checkpoint.info(name);
    check(info.shape == shape.vec(), "[checkpoint] ", checkpoint.dir(), ": tensor '", name,
          "' has shape ", at::IntArrayRef(info.shape), " but the config implies ", shape);
    return;
  }
  check(shape.size() == 3 && shape[0] == static_cast<int64_t>(weight.pieces.size()),
        "[checkpoint] ", checkpoint.dir(), ": '", weight.model_name, "' of shape ", shape,
        " cannot hold ", weight.pieces.size(), " experts");
  for (const auto& expert : weight.pieces) {
    const int64_t rows = shape[1] / static_cast<int64_t>(expert.size());
    const std::vector<int64_t> want = {rows, shape[2]};
    for (const std::string& name : expert) {
      const auto& info = checkpoint.info(name);
      check(info.shape == want, "[checkpoint] ", checkpoint.dir(), ": expert tensor '", name,
            "' has shape ", at::IntArrayRef(info.shape), " but the config implies ",
            at::IntArrayRef(want), " (one expert's slice of '", weight.model_name, "' ", shape,
            ")");
    }
  }
}

at::Tensor read_stored_weight(const StoredWeight& weight, at::IntArrayRef shape,
                              const HfCheckpoint& checkpoint, const at::TensorOptions& options) {
  if (!weight.stacked())
    return checkpoint.read_weight(weight.pieces[0][0])
        .to(options.device(), c10::typeMetaToScalarType(options.dtype()));
  at::Tensor out = at::empty(shape, options);
  for (size_t e = 0; e < weight.pieces.size(); ++e) {
    const auto& expert = weight.pieces[e];
    const int64_t rows = shape[1] / static_cast<int64_t>(expert.size());
    for (size_t j = 0; j < expert.size(); ++j)
      out[static_cast<int64_t>(e)]
          .narrow(0, static_cast<int64_t>(j) * rows, rows)
          .copy_(checkpoint.read_weight(expert[j]));
  }
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> split_for_hub(const std::string& model_name,
                                                              const at::Tensor& value,
                                                              const DecoderConfig& config) {
  const StoredWeight form = hub_form(model_name, config);
  if (!form.stacked()) return {{form.pieces[0][0], value}};
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (size_t e = 0; e < form.pieces.size(); ++e) {
    const auto& expert = form.pieces[e];
    const int64_t rows = value.size(1) / static_cast<int64_t>(expert.size());
    for (size_t j = 0; j < expert.size(); ++j)
      out.emplace_back(expert[j], value[static_cast<int64_t>(e)]
                                      .narrow(0, static_cast<int64_t>(j) * rows, rows)
                                      .contiguous());
  }
  return out;
}

}  // namespace tandem
