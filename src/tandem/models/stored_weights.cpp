#include "tandem/models/stored_weights.h"

#include <ATen/ATen.h>

#include <optional>

#include "tandem/core/error.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/io/mxfp4.h"
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

// gpt-oss's stacked experts (MoeTraits::gpt_oss_experts): the model tensors whose stored form
// differs, as transformers writes them, or as MXFP4 when the checkpoint says so and holds the
// blocks. Other tensors: nullopt.
std::optional<StoredWeight> gpt_oss_expert_form(const std::string& model_name,
                                                const std::string& name,
                                                const DecoderConfig& config,
                                                const HfCheckpoint* checkpoint) {
  if (!family_traits(config.family).moe.gpt_oss_experts) return std::nullopt;
  const bool gate_up = ends_with(name, ".experts.gate_up_proj");
  const bool down = ends_with(name, ".experts.down_proj");
  const bool gate_up_bias = ends_with(name, ".experts.gate_up_proj_bias");
  if (!gate_up && !down && !gate_up_bias) return std::nullopt;
  StoredWeight out{model_name, {{name}}};
  out.interleaved = gate_up || gate_up_bias;
  if (gate_up_bias) return out;
  // MXFP4 where the blocks are stored, or where config.json says so and no float tensor is (the
  // missing blocks and scales are then what an error names).
  if (checkpoint && checkpoint->mxfp4() &&
      (checkpoint->contains(mxfp4_blocks_name(name)) || !checkpoint->contains(name))) {
    out.pieces = {{mxfp4_blocks_name(name)}};
    out.mxfp4 = true;
  } else {
    out.transposed = true;
  }
  return out;
}

// The stored tensor's values in the model's layout: (E, out, in) from MXFP4 or (E, in, out),
// gate and up rows apart. `value` as read (float, or U8 blocks); `scales` for MXFP4.
at::Tensor to_model_layout(const StoredWeight& weight, at::Tensor value, const at::Tensor& scales,
                           const std::string& where) {
  if (weight.mxfp4) value = dequantize_mxfp4(value, scales, where);
  if (weight.transposed) value = value.transpose(1, 2);
  if (weight.interleaved)  // dim 1: g0, u0, g1, u1, ... -> g0, g1, ..., u0, u1, ...
    value = at::cat({value.slice(1, 0, value.size(1), 2), value.slice(1, 1, value.size(1), 2)}, 1);
  return value;
}

}  // namespace

bool StoredWeight::stacked() const {
  return pieces.size() > 1 || (pieces.size() == 1 && pieces[0].size() > 1);
}

std::vector<std::string> StoredWeight::names() const {
  std::vector<std::string> out;
  for (const auto& expert : pieces) out.insert(out.end(), expert.begin(), expert.end());
  if (mxfp4) {  // the blocks' scales: `X_blocks` -> `X_scales`
    const std::string& blocks = pieces[0][0];
    out.push_back(
        mxfp4_scales_name(blocks.substr(0, blocks.size() - std::string("_blocks").size())));
  }
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
  if (auto form = gpt_oss_expert_form(model_name, name, config, nullptr)) return *form;
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
  // gpt-oss's experts keep the name in another layout: always read through their form.
  if (auto form = gpt_oss_expert_form(model_name, name, config, &checkpoint)) return *form;
  if (checkpoint.contains(name)) return StoredWeight{model_name, {{name}}};
  return hub_form(model_name, config);
}

void check_stored_shapes(const StoredWeight& weight, at::IntArrayRef shape,
                         const HfCheckpoint& checkpoint) {
  if (weight.mxfp4) {
    const std::vector<std::string> names = weight.names();  // blocks, scales
    const std::string where = "[checkpoint] " + checkpoint.dir() + ": '" + weight.model_name + "'";
    const std::vector<std::vector<int64_t>> want = {mxfp4_blocks_shape(shape, where),
                                                    mxfp4_scales_shape(shape, where)};
    for (size_t i = 0; i < names.size(); ++i) {
      const auto& info = checkpoint.info(names[i]);
      check(info.dtype == safetensors::Dtype::U8 && info.shape == want[i], "[checkpoint] ",
            checkpoint.dir(), ": MXFP4 tensor '", names[i], "' is ",
            safetensors::dtype_name(info.dtype), " ", at::IntArrayRef(info.shape),
            " but the config implies U8 ", at::IntArrayRef(want[i]), " (for '", weight.model_name,
            "' ", shape, ")");
    }
    return;
  }
  if (!weight.stacked()) {
    const std::string& name = weight.pieces[0][0];
    const auto& info = checkpoint.info(name);
    std::vector<int64_t> want = shape.vec();
    if (weight.transposed) std::swap(want[1], want[2]);
    check(info.shape == want, "[checkpoint] ", checkpoint.dir(), ": tensor '", name, "' has shape ",
          at::IntArrayRef(info.shape), " but the config implies ", at::IntArrayRef(want));
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
  const c10::ScalarType dtype = c10::typeMetaToScalarType(options.dtype());
  if (weight.transformed()) {  // one expert at a time: no fp32 copy of the whole tensor
    const std::vector<std::string> names = weight.names();
    const std::string where =
        "[checkpoint] " + checkpoint.dir() + ": tensor '" + names[0] + "'" +
        (weight.mxfp4 ? " with its scales '" + names[1] + "'" : std::string());
    const at::Tensor stored =
        weight.mxfp4 ? checkpoint.read(names[0]) : checkpoint.read_weight(names[0]);
    const at::Tensor scales = weight.mxfp4 ? checkpoint.read(names[1]) : at::Tensor();
    at::Tensor out = at::empty(shape, options);
    for (int64_t e = 0; e < shape[0]; ++e) {
      const auto one = [&](const at::Tensor& t) { return t.narrow(0, e, 1); };
      out.narrow(0, e, 1).copy_(
          to_model_layout(weight, one(stored), weight.mxfp4 ? one(scales) : at::Tensor(), where)
              .to(dtype));
    }
    return out;
  }
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
  check(!form.transformed(), "[export] ", model_name,
        ": tandem does not write gpt-oss's experts (it reads gpt-oss as a frozen model only)");
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
