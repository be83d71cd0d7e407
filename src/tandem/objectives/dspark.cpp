#include "tandem/objectives/dspark.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "tandem/core/config.h"
#include "tandem/core/config_schema.h"
#include "tandem/core/device.h"
#include "tandem/core/error.h"
#include "tandem/dist/sharding.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/models/flops.h"
#include "tandem/objectives/dspark_export.h"

namespace tandem {

namespace {

double dspark_default_gamma(int64_t) { return 4.0; }  // DeepSpec's, for every block size

}  // namespace

DSparkOptions dspark_options(const Config& config, const RunContext& run) {
  DSparkOptions options;
  static_cast<BlockDraftOptions&>(options) =
      read_block_draft_options(config, run, 7, dspark_default_gamma);
  options.target_name = keys::verifier::name.read(config);
  options.heads.markov_rank = keys::dspark_draft::markov_rank.read(config);
  options.heads.confidence_head = keys::dspark_draft::confidence_head.read(config);
  options.heads.init = keys::dspark_draft::head_init.read(config);
  options.loss_weights.cross_entropy = keys::dspark_loss::ce_weight.read(config);
  options.loss_weights.l1 = keys::dspark_loss::l1_weight.read(config);
  options.confidence_weight = keys::dspark_loss::confidence_weight.read(config);
  if (!options.heads.confidence_head) {
    const Config loss = config.section("loss");
    check(!loss.has(keys::dspark_loss::confidence_weight.info().name), "[dspark] ",
          loss.where(keys::dspark_loss::confidence_weight.info().name),
          " weighs the confidence head's loss, but draft.confidence_head is false");
    options.confidence_weight = 0;
  }
  check(options.loss_weights.cross_entropy + options.loss_weights.l1 > 0,
        "[dspark] loss.ce_weight and loss.l1_weight are both 0: nothing would train the draft's "
        "tokens");
  return options;
}

DSparkObjective::DSparkObjective(const DSparkOptions& options)
    : BlockDraftObjective(options), options_(options) {
  const DSparkHeads heads = options.heads;
  std::shared_ptr<DSparkDraftImpl>* made = &dspark_;
  // The target's last layer: its distribution is the L1 term's and the confidence target's, and
  // the loss forms it (and reports loss_l1) whatever their weights.
  set_up_draft(
      [heads, made](const DFlashConfig& config, const at::TensorOptions& tensor_options) {
        *made = std::make_shared<DSparkDraftImpl>(config, heads, tensor_options);
        return DFlashDraft(std::static_pointer_cast<DFlashDraftImpl>(*made));
      },
      /*needs_last=*/true,
      "the mask token must be one of the target's tokens (speculators and vLLM embed it with the "
      "target's embedding), and the tokenizer has none to spare: set draft.mask_token_id to a "
      "reserved token the target never emits");
  // The heads draw from their own stream, so that head_init leaves the backbone as it is.
  init_dspark_heads(*dspark_, options.seed + 12345);
  verifier_ = verifier_of(options.target_path, options.target_name);
}

DFlashAnchors DSparkObjective::anchors(const PackedBatch& batch) const {
  return sample_dflash_anchors(batch, options_.block_size, options_.max_anchors, options_.seed,
                               AnchorRule::NextTrained);
}

StepTotals DSparkObjective::totals(const PackedBatch& batch, const DFlashBlocks& blocks) const {
  return block_step_totals(batch, dspark_targets(batch.on_host(), blocks_on_host(blocks)).valid);
}

StepTotals DSparkObjective::count(const PackedBatch& batch) const {
  return totals(batch, anchors(batch).blocks);
}

double DSparkObjective::model_flops(const PackedBatch& batch) const {
  const PackedBatch& host = batch.on_host();  // counted on the host: no wait for the device
  const DFlashAnchors drawn = anchors(host);
  const double slots = static_cast<double>(totals(host, drawn.blocks).loss_tokens);
  // The draft's logits and their hidden-state gradient, the target's logits: three lm_head
  // passes over the supervised slots; the Markov bias forward and its two gradients.
  const double vocab = static_cast<double>(target_config_.vocab_size);
  const double markov = 3 * 2 * slots * static_cast<double>(options_.heads.markov_rank) * vocab;
  return target_and_draft_flops(host, drawn.blocks) + 3 * lm_head_flops(target_config_, slots) +
         markov;
}

DSparkResult DSparkObjective::run(const PackedBatch& batch, const TargetFeatures& features,
                                  const DFlashBlocks& drawn, const StepTotals& totals) const {
  const int64_t block_size = drawn.block_size;
  const at::Device device = batch.input_ids.device();
  const DFlashBlocks host_blocks = blocks_on_host(drawn);
  const at::Tensor slot_weights = dspark_slot_weights(block_size, options_.gamma);  // (bs)
  const double weight_total = step_slot_weight(
      slot_weights, totals, "[dspark]",
      "no loss-masked anchor followed by a loss-masked token in its document");  // W

  DSparkResult result;
  result.hidden = block_hidden(batch, features, host_blocks);  // (B, A * bs, H)
  const DSparkTargets host_targets = dspark_targets(batch.on_host(), host_blocks);
  result.targets = {to_device(host_targets.labels, device), to_device(host_targets.prev, device),
                    to_device(host_targets.valid, device),
                    to_device(host_targets.target_columns, device)};

  // Only the supervised slots go through the heads.
  const int64_t hidden_size = result.hidden.size(2);
  const at::Tensor supervised_on_host =
      host_targets.valid.reshape(-1).nonzero().squeeze(1);  // (N,)
  const at::Tensor slots_on_host = supervised_on_host.remainder(block_size);
  const at::Tensor supervised = to_device(supervised_on_host, device);
  const at::Tensor slots = to_device(slots_on_host, device);
  const at::Tensor draft_hidden =
      result.hidden.reshape({-1, hidden_size}).index_select(0, supervised);  // (N, H)
  // In the lm_head's dtype (the target's): a bf16 draft may train against an fp32 target.
  const at::Tensor hidden = draft_hidden.to(head_->lm_head().scalar_type());
  const at::Tensor labels = result.targets.labels.reshape(-1).index_select(0, supervised);
  const at::Tensor prev = result.targets.prev.reshape(-1).index_select(0, supervised);
  const at::Tensor code = dspark_->markov_code(prev);  // (N, r) or undefined
  at::Tensor teacher_hidden;  // (N, H) the target's normed last hidden state at a + k
  {
    check(features.last.defined(), "[dspark] the loss needs the target's last hidden states (a ",
          "capture made without them? capture again with this config)");
    const int64_t rows = batch.rows(), length = batch.seq_len();
    const at::Tensor flat_columns =  // (N,): b * S + a + k
        (at::arange(rows, result.targets.target_columns.options()).view({-1, 1, 1}) * length +
         result.targets.target_columns)
            .reshape(-1)
            .index_select(0, supervised);
    at::NoGradGuard no_grad;
    teacher_hidden =
        head_->final_norm(features.last.reshape({rows * length, -1}).index_select(0, flat_columns))
            .to(hidden.scalar_type());
  }
  const at::Tensor weights =
      to_device(slot_weights, device).index_select(0, slots) / weight_total;  // (N,)

  // The lm_head (and markov_w2) go through with_full_parameters (gathered per call when
  // sharded), also for a micro-batch without supervised slots, so every rank makes the same
  // calls.
  const bool markov = code.defined();
  std::vector<at::Tensor> parameters = {head_->lm_head()};
  if (markov) parameters.push_back(dspark_->markov_head->markov_w2->weight);
  std::vector<at::Tensor> inputs = {hidden, teacher_hidden, labels, weights};
  if (markov) inputs.push_back(code);
  const DSparkLossWeights loss_weights = options_.loss_weights;
  const FusedLossOptions loss_options = options_.loss;
  const std::vector<at::Tensor> vocab = with_full_parameters(
      parameters, inputs, [loss_weights, loss_options](const auto& in, const auto& weight) {
        const bool with_markov = weight.size() == 2;
        const DSparkVocabLoss parts =
            fused_dspark_loss(in[0], weight[0], with_markov ? in[4] : at::Tensor(),
                              with_markov ? weight[1] : at::Tensor(), in[1], in[2], in[3],
                              loss_weights, loss_options);
        return std::vector<at::Tensor>{parts.loss, parts.cross_entropy, parts.l1, parts.argmax};
      });
  result.loss = vocab[0];
  result.corrected_argmax = vocab[3];
  // The parts carry no gradient (a sharded call marks its outputs differentiable: detach them).
  const at::Tensor cross_entropy = vocab[1].detach(), l1 = vocab[2].detach();
  const at::Tensor reduced_weights = weights.to(cross_entropy.scalar_type());
  result.ce_share = (cross_entropy * reduced_weights).sum();
  result.l1_share = (l1 * reduced_weights).sum();
  result.confidence_target = (1 - l1 / 2).clamp(0, 1);
  if (options_.heads.confidence_head) {
    result.confidence_logits = dspark_->confidence_logits(draft_hidden, code);  // (N,)
    const at::Tensor bce = at::binary_cross_entropy_with_logits(
        result.confidence_logits.to(reduced_weights.scalar_type()), result.confidence_target, {},
        {}, at::Reduction::None);
    const at::Tensor share = (bce * reduced_weights).sum();
    result.loss = result.loss + options_.confidence_weight * share;
    result.confidence_share = share.detach();
  } else {
    result.confidence_share = at::zeros({}, result.ce_share.options());
  }
  SlotHits hits = slot_hits(result.corrected_argmax.eq(labels), slots, slots_on_host, block_size);
  result.correct = std::move(hits.correct);
  result.counts = std::move(hits.counts);
  return result;
}

ObjectiveOutput DSparkObjective::compute(const PackedBatch& batch, const StepTotals& totals) {
  const DFlashAnchors drawn = anchors(batch);
  const TargetFeatures target = features(batch);  // no autograd
  const DSparkResult result = run(batch, target, drawn.blocks, totals);
  ObjectiveOutput output;
  output.loss = result.loss;
  output.add_metric("loss", result.loss);
  output.add_metric("loss_ce", result.ce_share);
  output.add_metric("loss_l1", result.l1_share);
  if (options_.heads.confidence_head) output.add_metric("loss_confidence", result.confidence_share);
  for (int64_t k = 0; k < options_.block_size; ++k) {
    const double count = static_cast<double>(std::max<int64_t>(totals.unroll_tokens[k], 1));
    output.add_metric("acc_" + std::to_string(k), result.correct[k].to(at::kDouble) / count);
  }
  output.add_metric("anchors", drawn.blocks.anchor_valid.sum().item<double>());  // host blocks
  return output;
}

std::vector<std::string> DSparkObjective::acceptance_metrics() const {
  std::vector<std::string> names;  // every slot predicts a token
  for (int64_t k = 0; k < options_.block_size; ++k) names.push_back("acc_" + std::to_string(k));
  return names;
}

void DSparkObjective::export_model(const std::string& dir) const {
  write_dspark_export(*dspark_, dir, {verifier_, target_config_.num_hidden_layers});
}

ObjectiveDescription dspark_description() {
  ObjectiveDescription description;
  description.name = "dspark";
  description.summary =
      "a DSpark block draft (Markov and confidence heads) against a frozen target";
  description.keys = {&keys::target::group,       &keys::verifier::group,
                      &keys::draft::group,        &keys::dflash_draft::group,
                      &keys::dspark_draft::group, &keys::block_loss::group,
                      &keys::dspark_loss::group,  &keys::chunked_loss::group,
                      &keys::lm_head::group,      &keys::capture::group};
  description.make = [](const Config& config, const RunContext& run) {
    return std::make_unique<DSparkObjective>(dspark_options(config, run));
  };
  description.capture = [](const Config& config, const RunContext& run) {
    const DSparkOptions options = dspark_options(config, run);
    CaptureRequest request{options.target_path, options.target_dtype, options.target_layer_ids,
                           /*last_hidden=*/true};
    if (request.layer_ids.empty())
      request.layer_ids = DFlashConfig::default_target_layers(
          DecoderConfig::from_dir(options.target_path).num_hidden_layers, options.dims.num_layers);
    return request;
  };
  description.find_export = find_dspark_export;
  description.load_draft = dspark_draft_decoder;
  return description;
}

}  // namespace tandem
