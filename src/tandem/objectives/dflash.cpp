#include "tandem/objectives/dflash.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>

#include "tandem/core/config.h"
#include "tandem/core/config_schema.h"
#include "tandem/core/device.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/core/hash.h"
#include "tandem/core/json_file.h"
#include "tandem/dist/sharding.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/models/flops.h"
#include "tandem/objectives/dflash_export.h"
#include "tandem/objectives/dflash_mask_token.h"
#include "tandem/objectives/distill.h"
#include "tandem/objectives/sft.h"
#include "tandem/objectives/vocab_head.h"
#include "tandem/text/tokenizer.h"

namespace tandem {

namespace {

// Argmax of hidden (N, H) @ head (V, H)^T, `chunk` rows at a time: never (N, V) logits. (N,)
at::Tensor chunked_argmax(const at::Tensor& hidden, const at::Tensor& head,
                          const FusedLossOptions& options) {
  at::NoGradGuard no_grad;
  const int64_t total = hidden.size(0);
  const int64_t chunk =
      options.chunk_tokens > 0 ? options.chunk_tokens : std::max<int64_t>(1, total);
  std::vector<at::Tensor> parts;
  for (int64_t begin = 0; begin < total; begin += chunk)
    parts.push_back(project_to_vocab(hidden.narrow(0, begin, std::min(chunk, total - begin)), head,
                                     options.fp32_head)
                        .argmax(-1));
  return parts.empty() ? at::zeros({0}, hidden.options().dtype(at::kLong)) : at::cat(parts);
}

// `blocks` with their tensors on the CPU (as drawn; a copy when a caller moved them).
DFlashBlocks on_host(const DFlashBlocks& blocks) {
  return {blocks.block_size, blocks.anchors.cpu(), blocks.anchor_valid.cpu()};
}

std::vector<int64_t> to_vector(const at::Tensor& tensor) {
  const at::Tensor values = tensor.to(at::kCPU, at::kLong).contiguous();
  return {values.data_ptr<int64_t>(), values.data_ptr<int64_t>() + values.numel()};
}

}  // namespace

DFlashOptions dflash_options(const Config& config, const RunContext& run) {
  DFlashOptions options;
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
  options.block_size = keys::dflash_draft::block_size.read(config);
  options.mask_token_id = keys::dflash_draft::mask_token_id.find(config);
  options.rope_theta = keys::draft::rope_theta.find(config);
  options.init_std = keys::draft::init_std.read(config);
  options.tokenizer_dir = keys::data::tokenizer.read(config);
  options.capture_dir = keys::capture::capture.read(config);
  options.seed = run.seed;
  options.gamma = keys::dflash_loss::gamma.read(config, dflash_default_gamma(options.block_size));
  options.max_anchors = keys::dflash_loss::max_anchors.read(config);
  options.loss.chunk_tokens = keys::chunked_loss::chunk_tokens.read(config);
  options.loss.fp32_head = keys::lm_head::fp32_lm_head.read(config);
  options.teacher = keys::dflash_loss::teacher.read(config);
  if (options.teacher == DFlashTeacher::Labels) {
    const Config loss = config.section("loss");
    for (const KeyInfo* key : keys::distill_loss::group.keys())
      check(!loss.has(key->name), "[dflash] ", loss.where(key->name),
            " applies to distillation from the target: set loss.teacher: target, or remove it");
  } else {
    options.distill = read_distill_loss(config);
  }
  options.distill.chunk_tokens = options.loss.chunk_tokens;
  options.distill.fp32_head = options.loss.fp32_head;
  return options;
}

double dflash_default_gamma(int64_t block_size) {
  const double bs = static_cast<double>(block_size);
  return block_size <= 10 ? bs / 2 : 5.0 + (bs - 10.0) / 3.0;
}

at::Tensor dflash_slot_weights(int64_t block_size, double gamma) {
  const at::Tensor slots = at::arange(block_size, at::kFloat);
  return at::exp(-(slots - 1) / gamma).index_put_({slots == 0}, 0.0);
}

DFlashObjective::DFlashObjective(const DFlashOptions& options)
    : DraftObjective({options.target_path, options.target_dtype, options.capture_dir, options.run}),
      options_(options) {
  gamma_ = options.gamma > 0 ? options.gamma : dflash_default_gamma(options.block_size);

  mask_token_ = resolve_dflash_mask_token(options.mask_token_id, options.tokenizer_dir,
                                          options.target_path, target_config_.vocab_size);
  if (!options.run.rank_zero || options.run.rank_zero->reads_files())  // said once per job
    std::cerr << "[dflash] mask token id " << mask_token_.id << " ("
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
  draft_ = DFlashDraft(
      config, at::TensorOptions().dtype(options.draft_dtype).device(options.run.placement()));
  draft_->attention_options = options.run.attention;
  init_normal_(*draft_, options.init_std, options.seed);
  for (auto& parameter : draft_->parameters()) parameter.set_requires_grad(true);
  check_capture_layers(config.target_layer_ids,
                       /*needs_last=*/options.teacher == DFlashTeacher::Target);
}

void DFlashObjective::attach_data(const DataContext& data) { check_capture_data(data); }

DFlashAnchors DFlashObjective::anchors(const PackedBatch& batch) const {
  return sample_dflash_anchors(batch, options_.block_size, options_.max_anchors, options_.seed);
}

StepTotals DFlashObjective::totals(const PackedBatch& batch, const DFlashBlocks& blocks) const {
  StepTotals totals;
  totals.documents = batch.total_documents();
  // (An IntArrayRef: torch 2.11 also has a Dimname overload, which makes {0, 1} ambiguous.)
  totals.unroll_tokens = to_vector(
      dflash_targets(batch.on_host(), on_host(blocks)).valid.sum(at::IntArrayRef{0, 1}));  // (bs)
  for (int64_t count : totals.unroll_tokens) totals.loss_tokens += count;
  return totals;
}

StepTotals DFlashObjective::count(const PackedBatch& batch) const {
  return totals(batch, anchors(batch).blocks);
}

TargetFeatures DFlashObjective::features(const PackedBatch& batch) const {
  return read_target_features(batch, draft_->config().target_layer_ids,
                              /*with_last=*/options_.teacher == DFlashTeacher::Target);
}

double dflash_draft_forward_flops(const DFlashConfig& c, const PackedBatch& batch,
                                  const DFlashBlocks& blocks) {
  const DecoderConfig& l = c.layer;
  const double tokens = static_cast<double>(batch.rows()) * batch.seq_len();
  const double queries = blocks.anchor_valid.sum().item<double>() * c.block_size;
  const double visible_context =  // sum over block queries of the context keys each one sees
      dflash_key_bands(batch.on_host().document_ids, on_host(blocks), c10::kCPU).visible_pairs();
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

double DFlashObjective::model_flops(const PackedBatch& batch) const {
  const PackedBatch& host = batch.on_host();  // counted on the host: no wait for the device
  const DFlashAnchors drawn = anchors(host);
  const double labels = static_cast<double>(totals(host, drawn.blocks).loss_tokens);
  // Online the target's layers; the frozen lm_head forward and its hidden-state gradient on the
  // labelled slots; the draft's forward and backward.
  const double target =
      target_ ? decoder_forward_flops(target_config_, static_cast<double>(host.num_tokens),
                                      host.attention_pairs(), /*with_lm_head=*/false)
              : 0.0;
  return target + 2 * lm_head_flops(target_config_, labels) +
         3 * dflash_draft_forward_flops(draft_->config(), host, drawn.blocks);
}

DFlashResult DFlashObjective::run(const PackedBatch& batch, const TargetFeatures& features,
                                  const DFlashBlocks& drawn, const StepTotals& totals) const {
  const int64_t block_size = drawn.block_size;
  // The blocks and their targets are laid out on the host, then sent: the device never waits.
  const at::Device device = batch.input_ids.device();
  const DFlashBlocks host_blocks = on_host(drawn);
  const DFlashBlocks blocks{block_size, to_device(host_blocks.anchors, device),
                            to_device(host_blocks.anchor_valid, device)};
  check(static_cast<int64_t>(totals.unroll_tokens.size()) == block_size,
        "[dflash] step totals carry ", totals.unroll_tokens.size(), " block slots, the blocks ",
        block_size);
  const at::Tensor slot_weights = dflash_slot_weights(block_size, gamma_);  // (bs)
  double weight_total = 0;
  for (int64_t k = 0; k < block_size; ++k)
    weight_total += slot_weights[k].item<double>() * static_cast<double>(totals.unroll_tokens[k]);
  check(weight_total > 0,
        "[dflash] the step has no block slot with a label (every document "
        "shorter than 2 * block_size loss tokens, or no loss-masked anchors)");

  const c10::ScalarType dtype = options_.draft_dtype;
  at::Tensor block_embeds;
  {
    at::NoGradGuard no_grad;
    block_embeds =
        apply_embedding(input_embedding_, dflash_block_ids(batch.input_ids, blocks, mask_token_.id))
            .to(dtype);  // (B, A * bs, H)
  }
  const at::Tensor context = draft_->context(features.aux.to(dtype));  // (B, S, H)
  DFlashResult result;
  result.hidden = draft_->forward(
      block_embeds, context, batch.position_ids, dflash_block_positions(batch.position_ids, blocks),
      dflash_key_bands(batch.on_host().document_ids, host_blocks, device), blocks.anchor_valid);
  const DFlashTargets host_targets = dflash_targets(batch.on_host(), host_blocks);
  result.targets = {to_device(host_targets.labels, device), to_device(host_targets.valid, device)};

  // Only the labelled slots go through the lm_head.
  const int64_t hidden_size = result.hidden.size(2);
  const at::Tensor labelled_on_host = host_targets.valid.reshape(-1).nonzero().squeeze(1);  // (N,)
  const at::Tensor slots_on_host = labelled_on_host.remainder(block_size);                  // (N,)
  const at::Tensor labelled = to_device(labelled_on_host, device);
  const at::Tensor slots = to_device(slots_on_host, device);
  // In the lm_head's dtype (the target's): a bf16 draft may train against an fp32 target.
  const at::Tensor hidden = result.hidden.reshape({-1, hidden_size})
                                .index_select(0, labelled)
                                .to(head_->lm_head().scalar_type());  // (N, H)
  const at::Tensor labels = result.targets.labels.reshape(-1).index_select(0, labelled);
  const bool distill = options_.teacher == DFlashTeacher::Target;
  at::Tensor teacher_hidden;  // (N, H_t) the target's normed last hidden state at a + k - 1
  if (distill) {
    check(features.last.defined(), "[dflash] loss.teacher: target needs the target's last hidden",
          " states (a capture made without them? capture again with this config)");
    const int64_t rows = batch.rows(), length = batch.seq_len();
    const at::Tensor slot_offsets =
        at::arange(block_size, blocks.anchors.options()).view({1, 1, -1}) - 1;
    const at::Tensor flat_columns =  // (B * A * bs): b * S + a + k - 1, clamped for slot 0
        (at::arange(rows, blocks.anchors.options()).view({-1, 1, 1}) * length +
         (blocks.anchors.unsqueeze(2) + slot_offsets).clamp(0, length - 1))
            .reshape(-1);
    at::NoGradGuard no_grad;
    teacher_hidden = head_
                         ->final_norm(features.last.reshape({rows * length, -1})
                                          .index_select(0, flat_columns.index_select(0, labelled)))
                         .to(head_->lm_head().scalar_type());
  }
  // The target's lm_head goes through with_full_parameters (gathered per call when sharded),
  // also for a micro-batch without labelled slots (N = 0: loss 0, zero gradients), so every
  // rank makes the same calls.
  if (distill) {
    const at::Tensor weights =
        to_device(slot_weights, hidden.device()).index_select(0, slots) / weight_total;  // (N,)
    const DistillLossOptions distill_options = options_.distill;
    result.loss =
        with_full_parameters({head_->lm_head()}, {hidden, teacher_hidden, labels, weights},
                             [distill_options](const auto& in, const auto& head) {
                               return std::vector<at::Tensor>{fused_distillation_loss(
                                   in[0], head[0], in[1], head[0], in[2], in[3], distill_options)};
                             })[0];
  } else {
    const FusedLossOptions loss_options = options_.loss;
    const at::Tensor logprobs = with_full_parameters(
        {head_->lm_head()}, {hidden, labels}, [loss_options](const auto& in, const auto& head) {
          return std::vector<at::Tensor>{fused_token_logprobs(in[0], head[0], in[1], loss_options)};
        })[0];
    const at::Tensor weights = to_device(slot_weights, logprobs.device()).index_select(0, slots);
    result.loss = -(logprobs * weights).sum() / weight_total;
    at::NoGradGuard no_grad;
    result.loss_sums = at::zeros({block_size}, logprobs.options().dtype(at::kDouble))
                           .index_add_(0, slots, -logprobs.detach().to(at::kDouble));
  }
  if (!result.loss_sums.defined())  // teacher target: no per-slot cross-entropy
    result.loss_sums = at::zeros({block_size}, hidden.options().dtype(at::kDouble));
  const GatheredWeight lm_head = head_->full_lm_head();  // for the accuracy metrics
  const at::Tensor wanted =  // (N,) what greedy verification would accept at each slot
      distill ? chunked_argmax(teacher_hidden, lm_head.value(), options_.loss) : labels;
  const at::Tensor hits =
      chunked_argmax(hidden.detach(), lm_head.value(), options_.loss).eq(wanted);
  result.correct =
      at::zeros({block_size}, slots.options()).index_add_(0, slots, hits.to(at::kLong));
  result.counts = to_vector(at::bincount(slots_on_host, {}, block_size));
  return result;
}

ObjectiveOutput DFlashObjective::compute(const PackedBatch& batch, const StepTotals& totals) {
  const DFlashAnchors drawn = anchors(batch);
  TargetFeatures target;
  {
    at::NoGradGuard no_grad;
    target = features(batch);
  }
  const DFlashResult result = run(batch, target, drawn.blocks, totals);
  ObjectiveOutput output;
  output.loss = result.loss;
  output.add_metric("loss", result.loss);
  for (int64_t k = 1; k < options_.block_size; ++k) {
    const double count = static_cast<double>(std::max<int64_t>(totals.unroll_tokens[k], 1));
    output.add_metric("acc_" + std::to_string(k), result.correct[k].to(at::kDouble) / count);
    if (options_.teacher == DFlashTeacher::Labels)
      output.add_metric("loss_" + std::to_string(k), result.loss_sums[k] / count);
  }
  output.add_metric("anchors", drawn.blocks.anchor_valid.sum().item<double>());  // host blocks
  output.add_metric("skipped_documents", static_cast<double>(drawn.skipped_documents));
  return output;
}

std::vector<std::string> DFlashObjective::acceptance_metrics() const {
  std::vector<std::string> names;  // slot 0 is the anchor: the predicted slots are 1..bs-1
  for (int64_t k = 1; k < options_.block_size; ++k) names.push_back("acc_" + std::to_string(k));
  return names;
}

void DFlashObjective::export_model(const std::string& dir) const {
  DFlashExportInfo info;
  info.num_target_layers = target_config_.num_hidden_layers;
  info.mask_token = mask_token_.content;
  if (mask_token_.grow_embedding) {
    info.mask_embedding = mask_embedding_;
    info.serving_note = mask_token_.serving_note;
  }
  write_dflash_export(*draft_, dir, info);
}

ObjectiveDescription dflash_description() {
  ObjectiveDescription description;
  description.name = "dflash";
  description.summary = "a DFlash block-diffusion draft against a frozen target";
  description.keys = {&keys::target::group,       &keys::draft::group,
                      &keys::dflash_draft::group, &keys::dflash_loss::group,
                      &keys::chunked_loss::group, &keys::lm_head::group,
                      &keys::distill_loss::group, &keys::capture::group};
  description.make = [](const Config& config, const RunContext& run) {
    return std::make_unique<DFlashObjective>(dflash_options(config, run));
  };
  // Its target layers, and the last layer only when the target's distribution is the teacher.
  description.capture = [](const Config& config, const RunContext& run) {
    const DFlashOptions options = dflash_options(config, run);
    CaptureRequest request{options.target_path, options.target_dtype, options.target_layer_ids,
                           options.teacher == DFlashTeacher::Target};
    if (request.layer_ids.empty())
      request.layer_ids = DFlashConfig::default_target_layers(
          DecoderConfig::from_dir(options.target_path).num_hidden_layers, options.dims.num_layers);
    return request;
  };
  description.find_export = [](const std::string& dir) -> std::optional<std::string> {
    if (is_dflash_export(dir)) return dir;
    return std::nullopt;
  };
  description.load_draft = dflash_draft_decoder;
  return description;
}

}  // namespace tandem
