#include "tandem/objectives/eagle3.h"

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <memory>

#include "tandem/core/config.h"
#include "tandem/core/config_schema.h"
#include "tandem/core/device.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/core/hash.h"
#include "tandem/data/token_cache.h"
#include "tandem/dist/sharding.h"
#include "tandem/models/flops.h"
#include "tandem/objectives/distill_loss.h"
#include "tandem/objectives/eagle3_export.h"
#include "tandem/objectives/sft.h"

namespace tandem {

namespace {

// x shifted left by `k` along dim 1, the last k columns filled with `fill`. (B, T, ...) -> same.
at::Tensor shift_left(const at::Tensor& x, int64_t k, double fill) {
  const int64_t length = x.size(1);
  if (k >= length) return at::full_like(x, fill);
  std::vector<int64_t> tail_shape = x.sizes().vec();
  tail_shape[1] = k;
  return at::cat({x.narrow(1, k, length - k), at::full(tail_shape, fill, x.options())}, 1);
}

}  // namespace

Eagle3Options eagle3_options(const Config& config, const RunContext& run) {
  Eagle3Options options;
  options.run = run;
  options.target_path = keys::target::path.read(config);
  options.target_name = keys::verifier::name.read(config);
  options.target_dtype = keys::target::dtype.read(config, keys::default_dtype(run.device));
  options.draft_dtype = keys::draft::dtype.read(config, keys::default_dtype(run.device));
  options.aux_layer_ids =
      keys::eagle3_draft::aux_layer_ids.find(config).value_or(std::vector<int64_t>{});
  options.ttt_length = keys::eagle3_draft::ttt_length.read(config);
  options.fc_norm = keys::eagle3_draft::fc_norm.read(config);
  options.norm_output = keys::eagle3_draft::norm_output.read(config);
  options.decay = keys::eagle3_draft::decay.read(config);
  options.draft_vocab_size = keys::eagle3_draft::draft_vocab_size.read(config);
  options.intermediate_size = keys::draft::intermediate_size.read(config);
  options.rope_theta = keys::draft::rope_theta.find(config);
  options.heads = {keys::draft::num_attention_heads.read(config),
                   keys::draft::num_key_value_heads.read(config),
                   keys::draft::head_dim.read(config)};
  options.train_lm_head = keys::eagle3_draft::train_lm_head.read(config);
  options.init_std = keys::draft::init_std.read(config);
  options.seed = run.seed;
  options.capture_dir = keys::capture::capture.read(config);
  options.teacher_chunk_tokens = keys::chunked_loss::chunk_tokens.read(config);
  return options;
}

at::Tensor eagle3_step_targets(const PackedBatch& batch, int64_t step) {
  const int64_t k = 2 + step;
  const at::Tensor same_document = shift_left(batch.document_ids, k, -1) == batch.document_ids;
  const at::Tensor real = shift_left(batch.padding_mask, k, 0).to(at::kBool);
  const at::Tensor trained = shift_left(batch.loss_mask, k, 0).to(at::kBool);
  return same_document.logical_and(real).logical_and(trained);
}

double eagle3_draft_forward_flops(const Eagle3Config& c, double tokens, double attention_pairs,
                                  int64_t steps) {
  const DecoderConfig& l = c.layer;
  const double q = static_cast<double>(l.num_attention_heads) * l.head_dim;
  const double kv = static_cast<double>(l.num_key_value_heads) * l.head_dim;
  const double h = static_cast<double>(l.hidden_size);
  const double per_step_params = 2 * h * (q + 2 * kv) + q * h + 3 * h * l.intermediate_size +
                                 h * static_cast<double>(c.draft_vocab_size);
  const double per_step = 2 * tokens * per_step_params + 2.0 * attention_pairs * q;
  return static_cast<double>(steps) * per_step + 2 * tokens * 3 * c.target_hidden_size * h;
}

double Eagle3Objective::model_flops(const PackedBatch& batch) const {
  const double tokens = static_cast<double>(batch.num_tokens), pairs = batch.attention_pairs();
  // Online, the target's layers (its logits come from the teacher term); the teacher's
  // full-vocab logits at every position; the draft's forward and backward.
  const double target =
      target_ ? decoder_forward_flops(target_config_, tokens, pairs, /*with_lm_head=*/false) : 0.0;
  return target + lm_head_flops(target_config_, tokens) +
         3 * eagle3_draft_forward_flops(draft_->config(), tokens, pairs, options_.ttt_length);
}

Eagle3Objective::Eagle3Objective(const Eagle3Options& options)
    : DraftObjective({options.target_path, options.target_dtype, options.capture_dir, options.run}),
      options_(options) {
  const int64_t draft_vocab = std::min(options.draft_vocab_size, target_config_.vocab_size);
  Eagle3Config config = Eagle3Config::for_target(target_config_, options.aux_layer_ids, draft_vocab,
                                                 options.intermediate_size, options.heads);
  if (options.rope_theta) {  // an unscaled RoPE of its own, as SpecForge's drafts often have
    config.layer.rope_theta = *options.rope_theta;
    config.layer.rope_scaling = RopeScaling{};
  }
  config.fc_norm = options.fc_norm;
  config.norm_output = options.norm_output;
  verifier_ = verifier_of(options.target_path, options.target_name);
  check_servable_layers(config.aux_layer_ids, "aux layer", "draft.aux_layer_ids");
  check_capture_layers(config.aux_layer_ids, /*needs_last=*/true);
  draft_ = Eagle3Draft(
      config, at::TensorOptions().dtype(options.draft_dtype).device(options.run.placement()));
  draft_->attention_options = options.run.attention;
  init_normal_(*draft_, options.init_std, options.seed);
  for (auto& parameter : draft_->parameters()) parameter.set_requires_grad(true);
  draft_->lm_head->weight.set_requires_grad(options.train_lm_head);
  // The identity map until the data's map arrives; a dry run's draft has no memory to fill.
  if (!options.run.dry_run) set_vocab_map(VocabMap{draft_->d2t.clone(), draft_->t2d.clone()});
}

void Eagle3Objective::set_vocab_map(const VocabMap& map) {
  map.validate("draft vocab map");
  check(map.vocab_size() == target_config_.vocab_size &&
            map.draft_vocab_size() == draft_->config().draft_vocab_size,
        "[eagle3] the vocab map is ", map.draft_vocab_size(), " of ", map.vocab_size(),
        " ids; the draft needs ", draft_->config().draft_vocab_size, " of ",
        target_config_.vocab_size);
  if (draft_->d2t.is_meta()) return;  // a dry run: the map is checked; there is nothing to fill
  at::NoGradGuard no_grad;
  draft_->d2t.copy_(map.d2t);
  draft_->t2d.copy_(map.t2d);
  // lm_head starts as the target's output rows of the draft vocab (docs/eagle3.md).
  const GatheredWeight target_lm_head = head_->full_lm_head();
  draft_->lm_head->weight.copy_(target_lm_head.value().index_select(
      0, to_device(map.draft_to_target(), target_lm_head.value().device())));
}

void Eagle3Objective::attach_data(const DataContext& data) {
  const TokenizedDataset& dataset = data.documents("eagle3");
  const int64_t vocab = target_config_.vocab_size;
  const std::string fingerprint = hex64(dataset.key());
  const CachedVocabMap cached =
      cached_vocab_map(data.cache_dir.empty() ? default_data_cache_dir() : data.cache_dir,
                       fingerprint, vocab, draft_->config().draft_vocab_size, [&] {
                         TokenCounter counter(vocab);
                         for (int64_t i = 0; i < dataset.size(); ++i)
                           counter.add(dataset.document(i));
                         return counter.counts();
                       });
  set_vocab_map(cached.map);
  check_capture_data(data);
}

StepTotals Eagle3Objective::count(const PackedBatch& batch) const {
  StepTotals totals;
  totals.documents = batch.total_documents();
  for (int64_t i = 0; i < options_.ttt_length; ++i)
    totals.unroll_tokens.push_back(eagle3_step_targets(batch, i).sum().item<int64_t>());
  totals.loss_tokens = totals.unroll_tokens.front();
  return totals;
}

TargetFeatures Eagle3Objective::features(const PackedBatch& batch) const {
  return read_target_features(batch, draft_->config().aux_layer_ids, /*with_last=*/true);
}

Teacher Eagle3Objective::teacher(const at::Tensor& last_hidden) const {
  at::NoGradGuard no_grad;
  const GatheredWeight target_lm_head = head_->full_lm_head();
  const int64_t rows = last_hidden.size(0), length = last_hidden.size(1);
  // The target's own dtype for the GEMM (bf16 weights: bf16 inputs, fp32 accumulation), fp32
  // from the logits on: no fp32 copy of the (V, H) lm_head.
  const at::Tensor& lm_head = target_lm_head.value();  // (V, H)
  const at::Tensor normed = head_->final_norm(last_hidden)
                                .reshape({rows * length, -1})
                                .to(lm_head.scalar_type());  // (N, H)
  const at::Tensor draft_ids = draft_->draft_to_target();    // (D,)
  const int64_t total = normed.size(0), chunk = std::max<int64_t>(1, options_.teacher_chunk_tokens);
  std::vector<at::Tensor> entropy, argmax, log_probs;
  for (int64_t begin = 0; begin < total; begin += chunk) {
    const at::Tensor logits =
        at::linear(normed.narrow(0, begin, std::min(chunk, total - begin)), lm_head)
            .to(at::kFloat);  // (n, V)
    argmax.push_back(logits.argmax(-1));
    log_probs.push_back(at::log_softmax(logits.index_select(1, draft_ids), -1));  // (n, D)
    entropy.push_back(-(log_probs.back().exp() * log_probs.back()).sum(-1));
  }
  Teacher teacher;
  teacher.log_probs = at::cat(log_probs);
  teacher.entropy = at::cat(entropy).view({rows, length});
  teacher.argmax = at::cat(argmax).view({rows, length});
  teacher.in_vocab = draft_->t2d.index({teacher.argmax});
  return teacher;
}

Eagle3Result Eagle3Objective::unroll(const PackedBatch& batch, const TargetFeatures& features,
                                     const StepTotals& totals) const {
  check(static_cast<int64_t>(totals.unroll_tokens.size()) == options_.ttt_length,
        "[eagle3] step totals carry ", totals.unroll_tokens.size(), " unroll steps, expected ",
        options_.ttt_length);
  const c10::ScalarType dtype = options_.draft_dtype;
  const Teacher teacher_all = teacher(features.last);
  const at::Tensor draft_ids = draft_->draft_to_target();
  const KeyBands context_bands = causal_key_bands(batch.layout());  // the same for every step
  // Soft cross-entropy against the teacher = forward KL + the teacher's entropy: the fused
  // forward-KL loss (objectives/distill_loss.h) forms each chunk's draft logits and gradient and
  // drops them, so no (T, D) draft logits are kept for backward; the teacher's log-probabilities
  // were formed once above and are read shifted by each step.
  DistillLossOptions loss_options;
  loss_options.divergence = Divergence::ForwardKL;
  loss_options.chunk_tokens = options_.teacher_chunk_tokens;
  const int64_t rows = batch.rows(), length = batch.seq_len();
  const at::Tensor no_labels = at::zeros({rows * length}, batch.input_ids.options());
  const at::Tensor teacher_log_probs = teacher_all.log_probs;
  // Row r = b * T + t of the flattened batch; its teacher at step i is row b * T + t + 1 + i
  // (clamped inside the row: positions past the end have weight 0).
  const at::Tensor columns = at::arange(length, batch.input_ids.options().dtype(at::kLong));
  const at::Tensor row_starts =
      at::arange(rows, columns.options()).mul_(length).unsqueeze(1);  // (B, 1)

  Eagle3Result result;
  TttState state;
  at::Tensor hidden = draft_->fuse(features.aux.to(dtype));  // (B, T, H)
  at::Tensor loss = at::zeros({}, hidden.options().dtype(at::kFloat));
  for (int64_t i = 0; i < options_.ttt_length; ++i) {
    const at::Tensor ids = shift_left(batch.input_ids, 1 + i, 0);  // x_{t+1+i}
    at::Tensor embeds;
    {
      at::NoGradGuard no_grad;
      embeds = head_->embed(ids).to(dtype);
    }
    hidden = draft_->step(embeds, hidden, batch.position_ids + i, context_bands, state);
    const at::Tensor normed = draft_->head_input(hidden);  // (B, T, H): lm_head's input

    // The target's view of x_{t+2+i}: its logits at t+1+i.
    const at::Tensor valid = eagle3_step_targets(batch, i);  // (B, T)
    const at::Tensor target_argmax = shift_left(teacher_all.argmax, 1 + i, 0);
    const at::Tensor in_vocab = shift_left(teacher_all.in_vocab, 1 + i, 0);
    const at::Tensor loss_positions = valid.logical_and(in_vocab);  // (B, T)
    const double normaliser = static_cast<double>(std::max<int64_t>(totals.unroll_tokens[i], 1));
    const at::Tensor weights = loss_positions.to(at::kFloat).reshape(-1) / normaliser;  // (N,)
    const at::Tensor teacher_rows =
        (columns + (1 + i)).clamp_max_(length - 1).unsqueeze(0).add(row_starts).reshape(-1);
    // The lm_head goes through with_full_parameters (gathered per call when sharded); the draft
    // argmax comes back beside the loss (a shared slot: a sharded backward re-runs the body).
    const auto draft_argmax = std::make_shared<at::Tensor>();
    const at::Tensor divergence = with_full_parameters(
        {draft_->lm_head->weight}, {normed.reshape({rows * length, -1}), no_labels, weights},
        [loss_options, teacher_log_probs, teacher_rows, draft_argmax](const auto& in,
                                                                      const auto& head) {
          return std::vector<at::Tensor>{fused_distillation_loss_from_log_probs(
              in[0], head[0], teacher_log_probs, teacher_rows, in[1], in[2], loss_options,
              draft_argmax.get())};
        })[0];
    const at::Tensor teacher_entropy =
        (shift_left(teacher_all.entropy, 1 + i, 0).reshape(-1) * weights).sum();
    const at::Tensor step_loss = divergence + teacher_entropy;
    loss = loss + std::pow(options_.decay, static_cast<double>(i)) * step_loss;
    {
      at::NoGradGuard no_grad;
      const at::Tensor predicted = draft_ids.index({draft_argmax->view({rows, length})});
      result.correct.push_back(predicted.eq(target_argmax).logical_and(valid).sum());
      result.loss_positions.push_back(loss_positions.sum());
    }
    result.step_losses.push_back(step_loss);
    result.step_outputs.push_back(hidden);
  }
  result.loss = loss;
  return result;
}

ObjectiveOutput Eagle3Objective::compute(const PackedBatch& batch, const StepTotals& totals) {
  check(totals.loss_tokens > 0, "[eagle3] the step has no positions with a target");
  const TargetFeatures target_features = features(batch);
  Eagle3Result result = unroll(batch, target_features, totals);
  ObjectiveOutput output;
  output.loss = result.loss;
  output.add_metric("loss", result.loss);
  for (int64_t i = 0; i < options_.ttt_length; ++i) {
    const double count = static_cast<double>(std::max<int64_t>(totals.unroll_tokens[i], 1));
    output.add_metric("acc_" + std::to_string(i), result.correct[i].to(at::kDouble) / count);
    output.add_metric("loss_" + std::to_string(i), result.step_losses[i]);
  }
  // Positions with a target at step 0 (counted on the host) whose target is outside the vocab.
  const int64_t with_target = eagle3_step_targets(batch.on_host(), 0).sum().item<int64_t>();
  const double first_count = static_cast<double>(std::max<int64_t>(totals.unroll_tokens[0], 1));
  output.add_metric("target_out_of_draft_vocab",
                    (with_target - result.loss_positions[0].to(at::kDouble)) / first_count);
  return output;
}

std::vector<std::string> Eagle3Objective::acceptance_metrics() const {
  std::vector<std::string> names;
  for (int64_t i = 0; i < options_.ttt_length; ++i) names.push_back("acc_" + std::to_string(i));
  return names;
}

void Eagle3Objective::export_model(const std::string& dir) const {
  Eagle3ExportInfo info;
  info.verifier = verifier_;
  info.speculative_tokens = options_.ttt_length;
  write_eagle3_exports(*draft_, dir, info);
}

ObjectiveDescription eagle3_description() {
  ObjectiveDescription description;
  description.name = "eagle3";
  description.summary = "an EAGLE-3 draft against a frozen target (test-time training)";
  description.keys = {&keys::target::group,       &keys::verifier::group,
                      &keys::draft::group,        &keys::eagle3_draft::group,
                      &keys::chunked_loss::group, &keys::capture::group};
  description.make = [](const Config& config, const RunContext& run) {
    return std::make_unique<Eagle3Objective>(eagle3_options(config, run));
  };
  // The aux layers (and the last layer: the teacher's distribution comes from it).
  description.capture = [](const Config& config, const RunContext& run) {
    const Eagle3Options options = eagle3_options(config, run);
    CaptureRequest request{options.target_path, options.target_dtype, options.aux_layer_ids,
                           /*last_hidden=*/true};
    if (request.layer_ids.empty())
      request.layer_ids = Eagle3Config::default_aux_layers(
          DecoderConfig::from_dir(options.target_path).num_hidden_layers);
    return request;
  };
  description.find_export = find_eagle3_export;
  description.load_draft = eagle3_draft_decoder;
  return description;
}

}  // namespace tandem
