#include "tandem/objectives/dpo.h"

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "tandem/core/config.h"
#include "tandem/core/config_schema.h"
#include "tandem/core/device.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/core/hash.h"
#include "tandem/data/token_cache.h"
#include "tandem/dist/sharding.h"
#include "tandem/models/flops.h"
#include "tandem/objectives/dpo_loss.h"
#include "tandem/objectives/router_loss.h"

namespace tandem {

DpoOptions dpo_options(const Config& config, const RunContext& run) {
  DpoOptions options;
  options.policy = sft_options(config, run);
  options.reference_logprobs = keys::reference::logprobs.read(config);
  options.reference_path = keys::reference::path.read(config);
  if (options.reference_path.empty()) {
    check(!options.policy.model_path.empty() || !options.reference_logprobs.empty(), "[dpo] ",
          keys::reference::path.where(config),
          ": a fresh policy (model.config) has no starting checkpoint "
          "to serve as the reference; set reference.path or reference.logprobs");
    options.reference_path = options.policy.model_path;  // the usual choice: the initial policy
  }
  options.reference_dtype = keys::reference::dtype.read(config, keys::default_dtype(run.device));
  options.loss_type = keys::dpo_loss::type.read(config);
  options.beta = keys::dpo_loss::beta.read(config);
  return options;
}

at::Tensor document_logprobs(const at::Tensor& hidden, const at::Tensor& lm_head,
                             const PackedBatch& batch, const FusedLossOptions& options) {
  const NextTokenPositions targets = next_token_positions(batch);
  const at::Tensor inputs = gather_positions(hidden, targets.index);  // (N, H)
  const at::Tensor logprobs = fused_token_logprobs(inputs, lm_head, targets.labels, options);
  return at::zeros({batch.total_documents()}, logprobs.options())
      .index_add(0, targets.document, logprobs);  // (D,)
}

at::Tensor document_target_counts(const PackedBatch& batch) {
  // Counted on the host copy (its targets' documents), then sent.
  const at::Tensor document = next_token_positions(batch.on_host()).document;  // (N,)
  return to_device(at::zeros({batch.total_documents()}, at::kLong)
                       .index_add(0, document, at::ones_like(document)),
                   batch.input_ids.device());
}

DpoObjective::DpoObjective(const DpoOptions& options) : options_(options) {
  const DecoderConfig policy_config = student_decoder_config(options.policy);
  const std::string policy_source =
      options.policy.model_path.empty() ? options.policy.model_config : options.policy.model_path;
  if (!options.reference_logprobs.empty()) {
    cache_.emplace(ReferenceLogprobs::open(options.reference_logprobs));
    check(options.reference_path.empty() ||
              std::filesystem::weakly_canonical(options.reference_path) ==
                  std::filesystem::weakly_canonical(cache_->info().reference),
          "[dpo] ", options.reference_logprobs, ": computed with the reference ",
          cache_->info().reference, ", but reference.path is ", options.reference_path,
          "; rerun `tandem reference-logprobs` or fix reference.path");
    check(cache_->info().vocab_size == policy_config.vocab_size, "[dpo] ",
          options.reference_logprobs, ": computed with a reference of vocab ",
          cache_->info().vocab_size, ", the policy (", policy_source, ") has ",
          policy_config.vocab_size, ": DPO needs the same vocabulary");
  } else {
    const DecoderConfig reference_config = DecoderConfig::from_dir(options.reference_path);
    check(reference_config.vocab_size == policy_config.vocab_size, "[dpo] the reference ",
          options.reference_path, " has a vocab of ", reference_config.vocab_size,
          " tokens, the policy (", policy_source, ") ", policy_config.vocab_size,
          ": DPO needs the same vocabulary");
  }
  policy_ = make_causal_lm(options.policy);
  if (cache_) return;
  reference_.emplace(
      FrozenModel::load(options.reference_path, options.reference_dtype, options.policy.run));
}

std::vector<std::string> DpoObjective::frozen_models() const {
  if (cache_) return {};
  return {"reference"};
}

void DpoObjective::attach_data(const DataContext& data) {
  const TokenizedDataset& dataset = data.documents("dpo");
  check(dataset.format() == DataFormat::preference, "[dpo] ", dataset.source_path(),
        ": DPO trains on preference pairs; set data.format: preference (this is ",
        data_format_name(dataset.format()), " data)");
  if (cache_)
    cache_->check_matches(hex64(dataset.key()), dataset.size(), data.seq_len,
                          dataset.source_path());
}

double DpoObjective::model_flops(const PackedBatch& batch) const {
  const double tokens = static_cast<double>(batch.num_tokens), pairs = batch.attention_pairs();
  const double policy = decoder_forward_flops(policy_->config(), tokens, pairs, true);
  return 3 * policy + (reference_ ? decoder_forward_flops(reference_->config(), tokens, pairs, true)
                                  : 0.0);  // a cached reference costs nothing here
}

StepTotals DpoObjective::count(const PackedBatch& batch) const { return next_token_totals(batch); }

ObjectiveOutput DpoObjective::compute(const PackedBatch& batch, const StepTotals& totals) {
  const int64_t step_pairs = totals.documents / 2;
  check(step_pairs > 0, "[dpo] the step has no preference pairs");
  // Pair up the batch's documents: dataset index 2r is record r's chosen side, 2r+1 its rejected.
  const int64_t documents = batch.total_documents();
  std::map<int64_t, std::pair<int64_t, int64_t>> sides;  // record -> (chosen, rejected) positions
  for (int64_t d = 0; d < documents; ++d) {
    const int64_t index = batch.documents[static_cast<size_t>(d)].dataset_index;
    check(index >= 0, "[dpo] a batch document has no dataset index");
    auto [it, fresh] = sides.try_emplace(index / 2, -1, -1);
    (index % 2 == 0 ? it->second.first : it->second.second) = d;
  }
  std::vector<int64_t> chosen_positions, rejected_positions;
  for (const auto& [record, positions] : sides) {
    check(positions.first >= 0 && positions.second >= 0, "[dpo] pair ", record,
          " is split across micro-batches (the data must be preference records)");
    chosen_positions.push_back(positions.first);
    rejected_positions.push_back(positions.second);
  }
  const at::Device device = batch.input_ids.device();
  const at::Tensor host_chosen = at::tensor(chosen_positions, at::kLong);
  const at::Tensor host_rejected = at::tensor(rejected_positions, at::kLong);
  const at::Tensor chosen = to_device(host_chosen, device);
  const at::Tensor rejected = to_device(host_rejected, device);

  const TrainedForward forward = trained_forward(policy_, batch);
  const at::Tensor& hidden = forward.hidden;                               // (B, T, H)
  const at::Tensor host_counts = document_target_counts(batch.on_host());  // (D,) on the host
  const at::Tensor counts = to_device(host_counts, device);
  at::Tensor reference;
  if (cache_) {
    std::vector<int64_t> indices;
    for (const PackedDocument& document : batch.documents)
      indices.push_back(document.dataset_index);
    reference = to_device(cache_->lookup(at::tensor(indices, at::kLong), host_counts), device);
  } else {
    at::NoGradGuard no_grad;
    const at::Tensor reference_hidden =
        reference_->forward(batch.input_ids, batch.layout(), {}, /*with_logits=*/false)
            .final_hidden;
    const GatheredWeight reference_head = reference_->full_lm_head();
    reference =
        document_logprobs(reference_hidden, reference_head.value(), batch, options_.policy.loss);
  }
  const double scale = 1.0 / static_cast<double>(step_pairs);
  at::Tensor loss;
  DpoPairLosses losses;
  if (options_.policy.loss.chunk_tokens > 0) {  // fused per pair (objectives/dpo_loss.h)
    // The pair table and each position's document on the host: the fused loss finds each pair's
    // positions there, never reading the device.
    const NextTokenPositions targets = next_token_positions(batch);
    const DpoLossType type = options_.loss_type;
    const double beta = options_.beta;
    const FusedLossOptions loss_options = options_.policy.loss;
    const std::vector<at::Tensor> out = with_full_parameters(  // gathered here when sharded
        {policy_->lm_head_weight()},
        {gather_positions(hidden, targets.index), targets.labels, targets.host_document,
         host_chosen, host_rejected, reference, counts},
        [type, beta, scale, loss_options](const auto& in, const auto& head) {
          DpoPairLosses pairs;
          const at::Tensor pair_loss =
              fused_dpo_loss({in[0], head[0], in[1], in[2], in[3], in[4], in[5], in[6]}, type, beta,
                             scale, loss_options, &pairs);
          return std::vector<at::Tensor>{pair_loss, pairs.losses, pairs.rewards_chosen,
                                         pairs.rewards_rejected};
        });
    loss = out[0];
    losses = {out[1], out[2], out[3]};
  } else {  // full logits
    const FusedLossOptions loss_options = options_.policy.loss;
    const at::Tensor policy = with_full_parameters(  // gathered here when sharded
        {policy_->lm_head_weight()}, {hidden},
        [batch, loss_options](const auto& in, const auto& head) {
          return std::vector<at::Tensor>{document_logprobs(in[0], head[0], batch, loss_options)};
        })[0];
    losses =
        dpo_pair_losses({policy.index_select(0, chosen), policy.index_select(0, rejected),
                         reference.index_select(0, chosen), reference.index_select(0, rejected),
                         counts.index_select(0, chosen), counts.index_select(0, rejected)},
                        options_.loss_type, options_.beta);
    loss = losses.losses.sum() * scale;
  }
  const at::Tensor margins = losses.rewards_chosen - losses.rewards_rejected;
  ObjectiveOutput output{loss, {}};
  output.add_metric("loss", loss);
  output.add_metric("rewards/chosen", losses.rewards_chosen.sum().to(at::kDouble) * scale);
  output.add_metric("rewards/rejected", losses.rewards_rejected.sum().to(at::kDouble) * scale);
  output.add_metric("rewards/margin", margins.sum().to(at::kDouble) * scale);
  output.add_metric("rewards/accuracy", (margins > 0).sum().to(at::kDouble) * scale);
  output.add_metric("pairs", static_cast<double>(chosen_positions.size()));
  add_router_loss(output, forward.router, options_.policy.router_aux_loss_coef, *this, batch,
                  totals);
  return output;
}

ObjectiveDescription dpo_description() {
  ObjectiveDescription description;
  description.name = "dpo";
  description.summary = "a policy tuned on preference pairs against a frozen reference";
  description.keys = {&keys::model::group,    &keys::reference::group,
                      &keys::dpo_loss::group, &keys::chunked_loss::group,
                      &keys::lm_head::group,  &keys::router_loss::group};
  description.make = [](const Config& config, const RunContext& run) {
    return std::make_unique<DpoObjective>(dpo_options(config, run));
  };
  return description;
}

}  // namespace tandem
