#include "tandem/objectives/block_draft.h"

#include <ATen/ATen.h>

#include <iostream>

#include "tandem/core/config.h"
#include "tandem/core/config_schema.h"
#include "tandem/core/device.h"
#include "tandem/core/error.h"
#include "tandem/dist/sharding.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/models/flops.h"
#include "tandem/objectives/dflash_export.h"
#include "tandem/objectives/dflash_mask_token.h"

namespace tandem {

BlockDraftOptions read_block_draft_options(const Config& config, const RunContext& run,
                                           int64_t default_block_size,
                                           double (*default_gamma)(int64_t block_size)) {
  BlockDraftOptions options;
  options.run = run;
  options.target_path = keys::target::path.read(config);
  options.target_dtype = keys::target::dtype.read(config, keys::default_dtype(run.device));
  options.draft_dtype = keys::draft::dtype.read(config, keys::default_dtype(run.device));
  options.dims.num_layers = keys::dflash_draft::num_layers.read(config);
  options.dims.intermediate_size = keys::draft::intermediate_size.read(config);
  options.dims.num_attention_heads = keys::draft::num_attention_heads.read(config);
  options.dims.num_key_value_heads = keys::draft::num_key_value_heads.read(config);
  options.dims.head_dim = keys::draft::head_dim.read(config);
  options.target_layer_ids =
      keys::dflash_draft::target_layer_ids.find(config).value_or(std::vector<int64_t>{});
  options.block_size = keys::dflash_draft::block_size.read(config, default_block_size);
  options.mask_token_id = keys::dflash_draft::mask_token_id.find(config);
  options.rope_theta = keys::draft::rope_theta.find(config);
  options.init_std = keys::draft::init_std.read(config);
  options.tokenizer_dir = keys::data::tokenizer.read(config);
  options.capture_dir = keys::capture::capture.read(config);
  options.seed = run.seed;
  options.gamma = keys::block_loss::gamma.read(config, default_gamma(options.block_size));
  options.max_anchors = keys::block_loss::max_anchors.read(config);
  options.loss.chunk_tokens = keys::chunked_loss::chunk_tokens.read(config);
  options.loss.fp32_head = keys::lm_head::fp32_lm_head.read(config);
  return options;
}

double dflash_draft_forward_flops(const DFlashConfig& c, const PackedBatch& batch,
                                  const DFlashBlocks& blocks) {
  const DecoderConfig& l = c.layer;
  const double tokens = static_cast<double>(batch.rows()) * batch.seq_len();
  const double queries = blocks.anchor_valid.sum().item<double>() * c.block_size;
  const double visible_context =  // sum over block queries of the context keys each one sees
      dflash_key_bands(batch.on_host().document_ids, blocks_on_host(blocks), c10::kCPU)
          .visible_pairs();
  const double q = static_cast<double>(l.num_attention_heads) * l.head_dim;
  const double kv = static_cast<double>(l.num_key_value_heads) * l.head_dim;
  const double h = static_cast<double>(l.hidden_size);
  const double fc =
      2 * tokens * static_cast<double>(c.target_layer_ids.size()) * c.target_hidden_size * h;
  const double context_kv = 2 * tokens * h * 2 * kv;
  const double block_matmuls =
      2 * queries * (h * (q + 2 * kv) + q * h + 3 * h * l.intermediate_size);
  const double attention = 4 * q * (visible_context + queries * c.block_size);
  return fc + l.num_hidden_layers * (context_kv + block_matmuls + attention);
}

namespace {

std::vector<int64_t> to_vector(const at::Tensor& tensor) {
  const at::Tensor values = tensor.to(at::kCPU, at::kLong).contiguous();
  return {values.data_ptr<int64_t>(), values.data_ptr<int64_t>() + values.numel()};
}

}  // namespace

StepTotals block_step_totals(const PackedBatch& batch, const at::Tensor& valid) {
  StepTotals totals;
  totals.documents = batch.total_documents();
  // (An IntArrayRef: torch 2.11 also has a Dimname overload, which makes {0, 1} ambiguous.)
  totals.unroll_tokens = to_vector(valid.sum(at::IntArrayRef{0, 1}));  // (bs)
  for (int64_t count : totals.unroll_tokens) totals.loss_tokens += count;
  return totals;
}

double step_slot_weight(const at::Tensor& slot_weights, const StepTotals& totals,
                        const std::string& tag, const std::string& why_none) {
  check(static_cast<int64_t>(totals.unroll_tokens.size()) == slot_weights.size(0), tag,
        " step totals carry ", totals.unroll_tokens.size(), " block slots, the blocks ",
        slot_weights.size(0));
  double total = 0;
  for (int64_t k = 0; k < slot_weights.size(0); ++k)
    total += slot_weights[k].item<double>() * static_cast<double>(totals.unroll_tokens[k]);
  check(total > 0, tag, " the step has no supervised block slot (", why_none, ")");
  return total;
}

SlotHits slot_hits(const at::Tensor& hits, const at::Tensor& slots, const at::Tensor& slots_on_host,
                   int64_t block_size) {
  return {at::zeros({block_size}, slots.options()).index_add_(0, slots, hits.to(at::kLong)),
          to_vector(at::bincount(slots_on_host, {}, block_size))};
}

DFlashBlocks blocks_on_host(const DFlashBlocks& blocks) {
  return {blocks.block_size, blocks.anchors.cpu(), blocks.anchor_valid.cpu()};
}

BlockDraftObjective::BlockDraftObjective(const BlockDraftOptions& options)
    : DraftObjective({options.target_path, options.target_dtype, options.capture_dir, options.run}),
      block_options_(options) {}

void BlockDraftObjective::set_up_draft(const DraftFactory& make_draft, bool needs_last,
                                       const std::string& no_grown_mask) {
  const BlockDraftOptions& options = block_options_;
  needs_last_ = needs_last;
  mask_token_ = resolve_dflash_mask_token(options.mask_token_id, options.tokenizer_dir,
                                          options.target_path, target_config_.vocab_size);
  check(!mask_token_.grow_embedding || no_grown_mask.empty(), error_tag(), " ", no_grown_mask);
  if (!options.run.rank_zero || options.run.rank_zero->reads_files())  // said once per job
    std::cerr << error_tag() << " mask token id " << mask_token_.id << " ("
              << mask_token_rule_name(mask_token_.rule)
              << (mask_token_.content.empty() ? "" : ", " + mask_token_.content) << ")"
              << (mask_token_.grow_embedding ? ": a row is grown; " + mask_token_.serving_note : "")
              << "\n";
  input_embedding_ = head_->embed_tokens();
  if (mask_token_.grow_embedding) {  // a copy with one more row; the target's stays untouched
    {
      const GatheredWeight target_embedding = head_->full_embed_tokens();
      input_embedding_ =
          grow_embedding(target_embedding.value(), mean_embedding_row(target_embedding.value()));
    }
    mask_embedding_ = input_embedding_[mask_token_.id].clone();  // (H,) for the export
    shard_on_load(options.run.shard_on_load, input_embedding_);  // split like the target's
  }

  DFlashConfig config = DFlashConfig::for_target(
      target_config_, options.dims, options.target_layer_ids, options.block_size, mask_token_.id);
  if (options.rope_theta) {
    config.layer.rope_theta = *options.rope_theta;
    config.layer.rope_scaling = RopeScaling{};
  }
  check_servable_layers(config.target_layer_ids, "target layer", "draft.target_layer_ids");
  draft_ = make_draft(
      config, at::TensorOptions().dtype(options.draft_dtype).device(options.run.placement()));
  draft_->attention_options = options.run.attention;
  init_normal_(*draft_, options.init_std, options.seed);
  for (auto& parameter : draft_->parameters()) parameter.set_requires_grad(true);
  check_capture_layers(config.target_layer_ids, needs_last);
}

void BlockDraftObjective::attach_data(const DataContext& data) { check_capture_data(data); }

TargetFeatures BlockDraftObjective::features(const PackedBatch& batch) const {
  at::NoGradGuard no_grad;
  return read_target_features(batch, draft_->config().target_layer_ids, needs_last_);
}

at::Tensor BlockDraftObjective::block_hidden(const PackedBatch& batch,
                                             const TargetFeatures& features,
                                             const DFlashBlocks& host_blocks) const {
  // The blocks are laid out on the host, then sent: the device never waits.
  const at::Device device = batch.input_ids.device();
  const DFlashBlocks blocks{host_blocks.block_size, to_device(host_blocks.anchors, device),
                            to_device(host_blocks.anchor_valid, device)};
  const c10::ScalarType dtype = block_options_.draft_dtype;
  at::Tensor block_embeds;
  {
    at::NoGradGuard no_grad;
    block_embeds =
        apply_embedding(input_embedding_, dflash_block_ids(batch.input_ids, blocks, mask_token_.id))
            .to(dtype);  // (B, A * bs, H)
  }
  const at::Tensor context = draft_->context(features.aux.to(dtype));  // (B, S, H)
  return draft_->forward(
      block_embeds, context, batch.position_ids, dflash_block_positions(batch.position_ids, blocks),
      dflash_key_bands(batch.on_host().document_ids, host_blocks, device), blocks.anchor_valid);
}

double BlockDraftObjective::target_and_draft_flops(const PackedBatch& host,
                                                   const DFlashBlocks& blocks) const {
  const double target =
      target_ ? decoder_forward_flops(target_config_, static_cast<double>(host.num_tokens),
                                      host.attention_pairs(), /*with_lm_head=*/false)
              : 0.0;
  return target + 3 * dflash_draft_forward_flops(draft_->config(), host, blocks);
}

DFlashExportInfo BlockDraftObjective::export_info() const {
  DFlashExportInfo info;
  info.num_target_layers = target_config_.num_hidden_layers;
  info.mask_token = mask_token_.content;
  if (mask_token_.grow_embedding) {
    info.mask_embedding = mask_embedding_;
    info.serving_note = mask_token_.serving_note;
  }
  return info;
}

}  // namespace tandem
