#include "tandem/models/dflash.h"

#include <ATen/ATen.h>

#include <cmath>

#include "tandem/core/error.h"
#include "tandem/models/dflash_attention.h"
#include "tandem/models/rope.h"

namespace tandem {

std::vector<int64_t> DFlashConfig::default_target_layers(int64_t num_target_layers,
                                                         int64_t num_draft_layers) {
  check(num_target_layers > 0 && num_draft_layers > 0, "[dflash] default target layers need ",
        "positive layer counts, got target ", num_target_layers, " and draft ", num_draft_layers);
  if (num_draft_layers == 1) return {num_target_layers / 2};
  const int64_t span = num_target_layers - 4;  // from layer 1 to layer N - 3
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < num_draft_layers; ++i) {
    // Python's round(): halves to even, which nearbyint does in the default rounding mode.
    const double spaced =
        1.0 + static_cast<double>(i * span) / static_cast<double>(num_draft_layers - 1);
    ids.push_back(static_cast<int64_t>(std::nearbyint(spaced)));
  }
  return ids;
}

DFlashConfig DFlashConfig::for_target(const DecoderConfig& target, const DFlashDims& dims,
                                      std::vector<int64_t> target_layer_ids, int64_t block_size,
                                      int64_t mask_token_id) {
  const auto or_target = [](int64_t value, int64_t fallback) {
    return value > 0 ? value : fallback;
  };
  DFlashConfig config;
  // z-lab drafts are Qwen3 layers (per-head q/k norm) for every target.
  config.layer =
      target.draft_layers(DecoderFamily::Qwen3, dims.num_layers,
                          {dims.num_attention_heads, dims.num_key_value_heads, dims.head_dim});
  config.layer.intermediate_size = or_target(dims.intermediate_size, target.intermediate_size);
  check(config.layer.intermediate_size > 0, "[dflash] the ", family_name(target.family),
        " target has no dense MLP width (intermediate_size: every layer has experts); set "
        "draft.intermediate_size");
  config.target_hidden_size = target.hidden_size;
  config.target_layer_ids = target_layer_ids.empty()
                                ? default_target_layers(target.num_hidden_layers, dims.num_layers)
                                : std::move(target_layer_ids);
  config.block_size = block_size;
  config.mask_token_id = mask_token_id;
  return config;
}

void DFlashConfig::validate(const std::string& where) const {
  check(layer.num_hidden_layers >= 1, "[dflash] ", where, ": the draft needs at least one layer");
  layer.validate(where);
  check(layer.qk_norm, "[dflash] ", where, ": DFlash draft layers are Qwen3 layers (q/k norm)");
  check(!target_layer_ids.empty() && target_layer_ids.size() <= 1024, "[dflash] ", where,
        ": reads ", target_layer_ids.size(), " target layers (1 to 1024)");
  check(target_hidden_size > 0 && target_hidden_size <= (int64_t{1} << 16), "[dflash] ", where,
        ": target_hidden_size must be in 1..65536, got ", target_hidden_size);
  check(block_size >= 2 && block_size <= 1024, "[dflash] ", where, ": block_size ", block_size,
        " must be in 2..1024 (the anchor plus at least one predicted token)");
  check(mask_token_id >= 0 && mask_token_id <= layer.vocab_size, "[dflash] ", where,
        ": mask_token_id ", mask_token_id, " outside 0..", layer.vocab_size,
        " (the target vocab, plus one grown row)");
}

at::Tensor dflash_block_ids(const at::Tensor& input_ids, const DFlashBlocks& blocks,
                            int64_t mask_token_id) {
  const int64_t batch = input_ids.size(0), count = blocks.num_anchors();
  const at::Tensor anchor_ids = at::where(blocks.anchor_valid, input_ids.gather(1, blocks.anchors),
                                          at::full_like(blocks.anchors, mask_token_id));
  at::Tensor ids = at::full({batch, count, blocks.block_size}, mask_token_id, input_ids.options());
  ids.select(2, 0).copy_(anchor_ids);
  return ids.view({batch, count * blocks.block_size});
}

at::Tensor dflash_block_positions(const at::Tensor& position_ids, const DFlashBlocks& blocks) {
  const int64_t batch = position_ids.size(0), count = blocks.num_anchors();
  const at::Tensor anchor_positions = at::where(
      blocks.anchor_valid, position_ids.gather(1, blocks.anchors), at::zeros_like(blocks.anchors));
  const at::Tensor slots = at::arange(blocks.block_size, position_ids.options());
  return (anchor_positions.unsqueeze(2) + slots.view({1, 1, -1}))
      .reshape({batch, count * blocks.block_size});
}

at::Tensor dflash_context_mask(const at::Tensor& document_ids, const at::Tensor& padding_mask,
                               const DFlashBlocks& blocks) {
  const int64_t length = document_ids.size(1);
  const at::Tensor columns = at::arange(length, document_ids.options()).view({1, 1, length});
  const at::Tensor anchors = blocks.anchors.unsqueeze(2);  // (B, A, 1)
  const at::Tensor anchor_document = document_ids.gather(1, blocks.anchors).unsqueeze(2);
  return (columns < anchors)  // strictly before: the anchor's own hidden state is not known yet
      .logical_and(document_ids.unsqueeze(1) == anchor_document)
      .logical_and(padding_mask.to(at::kBool).unsqueeze(1))
      .logical_and(blocks.anchor_valid.unsqueeze(2));  // (B, A, S)
}

KeyBands dflash_key_bands(const at::Tensor& document_ids_host, const DFlashBlocks& host_blocks,
                          const c10::Device& device) {
  check(host_blocks.anchors.is_cpu() && host_blocks.anchor_valid.is_cpu(),
        "[dflash] the blocks' bands are computed from the blocks on the host");
  const at::Tensor starts = document_starts(document_ids_host);  // (B, S)
  const at::Tensor anchors = host_blocks.anchors.to(at::kLong);  // (B, A)
  const at::Tensor valid = host_blocks.anchor_valid.to(at::kBool);
  const at::Tensor first = at::where(valid, starts.gather(1, anchors), 0);
  const at::Tensor last = at::where(valid, anchors - 1, -1);  // strictly before the anchor
  const int64_t block_size = host_blocks.block_size;
  return KeyBands::from_host(first.repeat_interleave(block_size, 1),
                             last.repeat_interleave(block_size, 1), device);
}

DFlashDraftImpl::DFlashDraftImpl(const DFlashConfig& config, const at::TensorOptions& options)
    : config_(config) {
  config_.validate("draft config");
  const int64_t hidden = config.layer.hidden_size;
  const int64_t features =
      static_cast<int64_t>(config.target_layer_ids.size()) * config.target_hidden_size;
  fc = register_module("fc", Linear(features, hidden, false, options));
  hidden_norm = register_module("hidden_norm", RMSNorm(hidden, config.layer.rms_norm_eps, options));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.layer.num_hidden_layers; ++i)
    layers->push_back(DecoderLayer(config_.layer, i, options));
  norm = register_module("norm", RMSNorm(hidden, config.layer.rms_norm_eps, options));
  inverse_frequencies_ = RopeFrequencies::of(config.layer.head_dim, config.layer.rope_theta,
                                             config.layer.rope_scaling);
}

at::Tensor DFlashDraftImpl::context(const at::Tensor& target_features) const {
  return hidden_norm->forward(fc->forward(target_features));
}

at::Tensor DFlashDraftImpl::forward(const at::Tensor& block_embeds, const at::Tensor& context,
                                    const at::Tensor& context_positions,
                                    const at::Tensor& block_positions,
                                    const KeyBands& context_bands,
                                    const at::Tensor& anchor_valid) const {
  check(block_embeds.dim() == 3 && context.dim() == 3 && block_embeds.size(0) == context.size(0),
        "[dflash] block embeddings (B, Q, H) and context (B, S, H) expected, got ",
        block_embeds.sizes(), " and ", context.sizes());
  check(block_positions.sizes() == block_embeds.sizes().slice(0, 2) &&
            context_positions.sizes() == context.sizes().slice(0, 2),
        "[dflash] positions ", block_positions.sizes(), " / ", context_positions.sizes(),
        " do not match the blocks ", block_embeds.sizes(), " / context ", context.sizes());
  const c10::ScalarType dtype = block_embeds.scalar_type();
  const RopeTables context_rope = rope_tables(inverse_frequencies_, context_positions, dtype);
  const RopeTables block_rope = rope_tables(inverse_frequencies_, block_positions, dtype);
  at::Tensor hidden = block_embeds;  // (B, Q, H)
  for (const auto& module : *layers) {
    const DecoderLayerImpl& layer = *module->as<DecoderLayerImpl>();
    hidden = layer.forward(hidden, block_rope, [&](const QueryKeyValue& block) {
      // The same k/v projections (and k_norm) on the context, which skips input_layernorm.
      const QueryKeyValue from_context = layer.self_attn->project_key_value(context, context_rope);
      return dflash_attention(block.q, from_context.k, from_context.v, block.k, block.v,
                              context_bands, anchor_valid, attention_options);
    });
  }
  const int64_t block_size = block_embeds.size(1) / anchor_valid.size(1);
  const at::Tensor keep = anchor_valid.repeat_interleave(block_size, 1).unsqueeze(2).to(dtype);
  return norm->forward(hidden) * keep;  // (B, Q, H)
}

}  // namespace tandem
