#include "tandem/objectives/dflash.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

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

}  // namespace

DFlashOptions dflash_options(const Config& config, const RunContext& run) {
  DFlashOptions options;
  static_cast<BlockDraftOptions&>(options) =
      read_block_draft_options(config, run, 16, dflash_default_gamma);
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
    : BlockDraftObjective(options), options_(options) {
  gamma_ = options.gamma > 0 ? options.gamma : dflash_default_gamma(options.block_size);
  set_up_draft(
      [](const DFlashConfig& config, const at::TensorOptions& tensor_options) {
        return DFlashDraft(config, tensor_options);
      },
      /*needs_last=*/options.teacher == DFlashTeacher::Target, /*no_grown_mask=*/"");
}

DFlashAnchors DFlashObjective::anchors(const PackedBatch& batch) const {
  return sample_dflash_anchors(batch, options_.block_size, options_.max_anchors, options_.seed);
}

StepTotals DFlashObjective::totals(const PackedBatch& batch, const DFlashBlocks& blocks) const {
  return block_step_totals(batch, dflash_targets(batch.on_host(), blocks_on_host(blocks)).valid);
}

StepTotals DFlashObjective::count(const PackedBatch& batch) const {
  return totals(batch, anchors(batch).blocks);
}

double DFlashObjective::model_flops(const PackedBatch& batch) const {
  const PackedBatch& host = batch.on_host();  // counted on the host: no wait for the device
  const DFlashAnchors drawn = anchors(host);
  const double labels = static_cast<double>(totals(host, drawn.blocks).loss_tokens);
  // The target and the draft; the frozen lm_head forward and its hidden-state gradient on the
  // labelled slots.
  return target_and_draft_flops(host, drawn.blocks) + 2 * lm_head_flops(target_config_, labels);
}

DFlashResult DFlashObjective::run(const PackedBatch& batch, const TargetFeatures& features,
                                  const DFlashBlocks& drawn, const StepTotals& totals) const {
  const int64_t block_size = drawn.block_size;
  // The blocks and their targets are laid out on the host, then sent: the device never waits.
  const at::Device device = batch.input_ids.device();
  const DFlashBlocks host_blocks = blocks_on_host(drawn);
  const DFlashBlocks blocks{block_size, to_device(host_blocks.anchors, device),
                            to_device(host_blocks.anchor_valid, device)};
  const at::Tensor slot_weights = dflash_slot_weights(block_size, gamma_);  // (bs)
  const double weight_total = step_slot_weight(
      slot_weights, totals, "[dflash]",
      "every document shorter than 2 * block_size loss tokens, or no loss-masked anchors");  // W

  DFlashResult result;
  result.hidden = block_hidden(batch, features, host_blocks);  // (B, A * bs, H)
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
  SlotHits hits =
      slot_hits(chunked_argmax(hidden.detach(), lm_head.value(), options_.loss).eq(wanted), slots,
                slots_on_host, block_size);
  result.correct = std::move(hits.correct);
  result.counts = std::move(hits.counts);
  return result;
}

ObjectiveOutput DFlashObjective::compute(const PackedBatch& batch, const StepTotals& totals) {
  const DFlashAnchors drawn = anchors(batch);
  const TargetFeatures target = features(batch);  // no autograd
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
  write_dflash_export(*draft_, dir, export_info());
}

ObjectiveDescription dflash_description() {
  ObjectiveDescription description;
  description.name = "dflash";
  description.summary = "a DFlash block-diffusion draft against a frozen target";
  description.keys = {
      &keys::target::group,     &keys::draft::group,        &keys::dflash_draft::group,
      &keys::block_loss::group, &keys::dflash_loss::group,  &keys::chunked_loss::group,
      &keys::lm_head::group,    &keys::distill_loss::group, &keys::capture::group};
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
