#include "tandem/objectives/policy.h"

#include <ATen/ATen.h>

#include "tandem/core/config.h"
#include "tandem/core/config_schema.h"
#include "tandem/core/device.h"
#include "tandem/core/error.h"
#include "tandem/data/datasets.h"
#include "tandem/dist/sharding.h"
#include "tandem/models/flops.h"
#include "tandem/objectives/router_loss.h"

namespace tandem {

PolicyOptions policy_options(const Config& config, const std::string& objective,
                             const RunContext& run) {
  PolicyOptions options;
  options.policy = sft_options(config, run);
  options.sequence_level = objective == "gspo";
  // GRPO's and GSPO's clip ranges differ in default (the GSPO paper's are far narrower).
  const NumberKey& low =
      options.sequence_level ? keys::gspo_loss::epsilon_low : keys::grpo_loss::epsilon_low;
  const NumberKey& high =
      options.sequence_level ? keys::gspo_loss::epsilon_high : keys::grpo_loss::epsilon_high;
  options.clip.low = low.read(config);
  options.clip.high = high.read(config);
  return options;
}

PolicyObjective::PolicyObjective(const PolicyOptions& options)
    : options_(options), policy_(make_causal_lm(options.policy)) {}

void PolicyObjective::attach_data(const DataContext& data) {
  check(data.rollouts != nullptr, "[", name(), "] trains on rollouts: set data.format: rollout");
  rollouts_ = data.rollouts;
  const int64_t vocab = policy_->config().vocab_size;
  for (const RolloutSample& sample : *rollouts_) {
    for (const auto* ids : {&sample.prompt_ids, &sample.completion_ids})
      for (const int32_t id : *ids)
        check(id >= 0 && id < vocab, "[", name(), "] ", sample.source, ": token id ", id,
              " is outside the policy's vocabulary [0, ", vocab, ")");
    check(sample.advantage.has_value(), "[", name(), "] ", sample.source, ": no advantage");
  }
}

namespace {

// What the loss needs at each labelled position, gathered from the batch and its rollouts.
struct RolloutTargets {
  at::Tensor index;             // (N,) flat positions b * T + t that predict a completion token
  at::Tensor labels;            // (N,)
  at::Tensor old;               // (N,) log pi_old of the label
  at::Tensor document;          // (N,) index among the documents that have labelled tokens
  at::Tensor advantages;        // (D,) per such document
  std::vector<double> rewards;  // (D,) where the rollout has a reward
};

// Built on the host (a loop over the batch's documents and their rollouts), then moved to
// `device` in one go.
RolloutTargets rollout_targets(const PackedBatch& device_batch,
                               const std::vector<RolloutSample>& rollouts) {
  const at::Device device = device_batch.input_ids.device();
  const PackedBatch& batch = device_batch.on_host();
  const int64_t length = batch.seq_len();
  RolloutTargets out;
  const NextTokenPositions positions = next_token_positions(batch);  // on the host here
  const at::Tensor mask = next_token_targets(batch);                 // (B, T-1), same order
  out.index = positions.index;
  out.labels = positions.labels;
  at::Tensor old = at::zeros({batch.rows(), length - 1}, at::kFloat);
  at::Tensor document = at::full({batch.rows(), length - 1}, -1, at::kLong);
  std::vector<float> advantages;
  auto old_rows = old.accessor<float, 2>();
  auto document_rows = document.accessor<int64_t, 2>();
  const auto labelled_at = mask.accessor<bool, 2>();
  for (const PackedDocument& packed : batch.documents) {
    const RolloutSample& sample = rollouts.at(static_cast<size_t>(packed.dataset_index));
    const int64_t prompt = static_cast<int64_t>(sample.prompt_ids.size());
    // Row position begin+i predicts document token i+1, completion token i+1-prompt.
    bool labelled = false;
    for (int64_t i = std::max<int64_t>(prompt - 1, 0); i + 1 < packed.length; ++i) {
      const int64_t column = packed.begin + i;
      if (!labelled_at[packed.row][column]) continue;
      old_rows[packed.row][column] = sample.old_logprobs[static_cast<size_t>(i + 1 - prompt)];
      document_rows[packed.row][column] = static_cast<int64_t>(advantages.size());
      labelled = true;
    }
    if (!labelled) continue;  // its completion was truncated away
    advantages.push_back(static_cast<float>(*sample.advantage));
    if (sample.reward) out.rewards.push_back(*sample.reward);
  }
  out.old = old.index({mask});
  out.document = document.index({mask});
  check(out.document.numel() == 0 || out.document.min().item<int64_t>() >= 0,
        "[policy] a labelled position outside every rollout's completion");
  out.advantages = at::tensor(advantages, at::kFloat);
  for (at::Tensor* tensor : {&out.index, &out.labels, &out.old, &out.document, &out.advantages})
    *tensor = to_device(*tensor, device);
  return out;
}

}  // namespace

double PolicyObjective::model_flops(const PackedBatch& batch) const {
  return 3 * decoder_forward_flops(policy_->config(), static_cast<double>(batch.num_tokens),
                                   batch.attention_pairs(), /*with_lm_head=*/true);
}

StepTotals PolicyObjective::count(const PackedBatch& batch) const {
  StepTotals totals;
  const at::Tensor mask = next_token_targets(batch);  // (B, T-1)
  totals.loss_tokens = mask.sum().item<int64_t>();
  const at::Tensor document =
      batch.global_document_ids().narrow(1, 0, batch.seq_len() - 1).index({mask});
  totals.documents = std::get<0>(at::_unique(document)).numel();
  return totals;
}

ObjectiveOutput PolicyObjective::compute(const PackedBatch& batch, const StepTotals& totals) {
  check(rollouts_ != nullptr, "[", name(), "] no rollouts attached");
  check(totals.loss_tokens > 0, "[", name(), "] the step has no completion tokens");
  const RolloutTargets targets = rollout_targets(batch, *rollouts_);
  const TrainedForward forward = trained_forward(policy_, batch);
  const at::Tensor& hidden = forward.hidden;                          // (B, T, H)
  const at::Tensor inputs = gather_positions(hidden, targets.index);  // (N, H)
  const FusedLossOptions loss_options = options_.policy.loss;
  const std::vector<at::Tensor> head = with_full_parameters(  // gathered here when sharded
      {policy_->lm_head_weight()}, {inputs, targets.labels},
      [loss_options](const auto& in, const auto& weight) {
        at::Tensor entropy;
        at::Tensor logprobs = fused_token_logprobs(in[0], weight[0], in[1], loss_options, &entropy);
        return std::vector<at::Tensor>{logprobs, entropy};
      });
  const at::Tensor logprobs = head[0], entropy = head[1];  // (N,) each
  const double per_token = 1.0 / static_cast<double>(totals.loss_tokens);
  const double per_document = 1.0 / static_cast<double>(totals.documents);
  const PolicyLosses losses =
      options_.sequence_level
          ? gspo_document_losses(logprobs, targets.old, targets.document, targets.advantages,
                                 options_.clip)
          : grpo_token_losses(logprobs, targets.old,
                              targets.advantages.index_select(0, targets.document), options_.clip);
  const double scale = options_.sequence_level ? per_document : per_token;
  at::Tensor loss = losses.losses.sum() * scale;
  double reward_sum = 0;
  for (double reward : targets.rewards) reward_sum += reward;
  ObjectiveOutput output{loss, {}};
  output.add_metric("loss", loss);
  output.add_metric("ratio_mean", losses.ratio.sum().to(at::kDouble) * scale);
  output.add_metric("clipped_fraction", losses.clipped.sum().to(at::kDouble) * scale);
  output.add_metric("kl_new_old", kl_k3(logprobs, targets.old).sum().to(at::kDouble) * per_token);
  output.add_metric("entropy", entropy.sum().to(at::kDouble) * per_token);
  output.add_metric("advantage_mean", targets.advantages.sum().to(at::kDouble) * per_document);
  if (!targets.rewards.empty()) output.add_metric("reward_mean", reward_sum * per_document);
  add_router_loss(output, forward.router, options_.policy.router_aux_loss_coef, *this, batch,
                  totals);
  return output;
}

namespace {

ObjectiveDescription policy_description(const std::string& name, const std::string& summary,
                                        const KeyGroup& loss) {
  ObjectiveDescription description;
  description.name = name;
  description.summary = summary + "; data.format: rollout (from `tandem rollout` or any engine)";
  description.keys = {&keys::model::group, &loss, &keys::chunked_loss::group, &keys::lm_head::group,
                      &keys::router_loss::group};
  description.make = [name](const Config& config, const RunContext& run) {
    return std::make_unique<PolicyObjective>(policy_options(config, name, run));
  };
  return description;
}

}  // namespace

ObjectiveDescription grpo_description() {
  return policy_description("grpo", "a policy tuned on rollouts, clipped per token (GRPO)",
                            keys::grpo_loss::group);
}

ObjectiveDescription gspo_description() {
  return policy_description("gspo", "a policy tuned on rollouts, clipped per sequence (GSPO)",
                            keys::gspo_loss::group);
}

}  // namespace tandem
