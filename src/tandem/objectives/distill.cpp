#include "tandem/objectives/distill.h"

#include <ATen/ATen.h>

#include <cmath>

#include "tandem/core/config.h"
#include "tandem/core/config_schema.h"
#include "tandem/core/device.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/dist/sharding.h"
#include "tandem/models/flops.h"
#include "tandem/objectives/router_loss.h"

namespace tandem {

DistillOptions distill_options(const Config& config, const RunContext& run) {
  DistillOptions options;
  options.student = sft_options(config, run);
  options.teacher_path = keys::teacher::path.read(config);
  options.teacher_dtype = keys::teacher::dtype.read(config, keys::default_dtype(run.device));
  options.loss = read_distill_loss(config);
  options.loss.chunk_tokens = options.student.loss.chunk_tokens;
  options.loss.fp32_head = options.student.loss.fp32_head;
  return options;
}

DistillLossOptions read_distill_loss(const Config& config) {
  DistillLossOptions options;
  options.divergence = keys::distill_loss::divergence.read(config);
  options.beta = keys::distill_loss::beta.read(config);
  options.temperature = keys::distill_loss::temperature.read(config);
  options.hard_label_weight = keys::distill_loss::hard_label_weight.read(config);
  return options;
}

DistillObjective::DistillObjective(const DistillOptions& options) : options_(options) {
  const DecoderConfig teacher_config = DecoderConfig::from_dir(options.teacher_path);
  const DecoderConfig student_config = student_decoder_config(options.student);
  check(teacher_config.vocab_size == student_config.vocab_size, "[distill] the teacher ",
        options.teacher_path, " has a vocab of ", teacher_config.vocab_size,
        " tokens, the student (",
        options.student.model_path.empty() ? options.student.model_config
                                           : options.student.model_path,
        ") ", student_config.vocab_size, ": distillation needs the same vocabulary");
  student_ = make_causal_lm(options.student);
  teacher_.emplace(
      FrozenModel::load(options.teacher_path, options.teacher_dtype, options.student.run));
}

double DistillObjective::model_flops(const PackedBatch& batch) const {
  const double tokens = static_cast<double>(batch.num_tokens), pairs = batch.attention_pairs();
  return 3 * decoder_forward_flops(student_->config(), tokens, pairs, /*with_lm_head=*/true) +
         decoder_forward_flops(teacher_->config(), tokens, pairs, /*with_lm_head=*/true);
}

StepTotals DistillObjective::count(const PackedBatch& batch) const {
  return next_token_totals(batch);
}

ObjectiveOutput DistillObjective::compute(const PackedBatch& batch, const StepTotals& totals) {
  check(totals.loss_tokens > 0, "[distill] the step has no loss tokens");
  const NextTokenPositions targets = next_token_positions(batch);
  const TrainedForward student = trained_forward(student_, batch);
  const at::Tensor& student_hidden = student.hidden;
  const at::Tensor teacher_hidden =
      teacher_->forward(batch.input_ids, batch.layout(), {}, /*with_logits=*/false).final_hidden;
  auto targets_of = [&](const at::Tensor& hidden) {  // (B, T, H) -> (N, H)
    return gather_positions(hidden, targets.index);
  };
  const at::Tensor& labels = targets.labels;
  const at::Tensor weights =
      at::full({labels.size(0)}, 1.0 / static_cast<double>(totals.loss_tokens),
               student_hidden.options().dtype(at::kFloat));
  // Both output projections through with_full_parameters: gathered here when sharded.
  const DistillLossOptions loss_options = options_.loss;
  const at::Tensor loss = with_full_parameters(
      {student_->lm_head_weight(), teacher_->lm_head_weight()},
      {targets_of(student_hidden), targets_of(teacher_hidden), labels, weights},
      [loss_options](const auto& in, const auto& head) {
        return std::vector<at::Tensor>{
            fused_distillation_loss(in[0], head[0], in[1], head[1], in[2], in[3], loss_options)};
      })[0];
  ObjectiveOutput output{loss, {}};
  output.add_metric("loss", loss);
  add_router_loss(output, student.router, options_.student.router_aux_loss_coef, *this, batch,
                  totals);
  return output;
}

ObjectiveDescription distill_description() {
  ObjectiveDescription description;
  description.name = "distill";
  description.summary = "a student distilled from a frozen teacher (same vocabulary)";
  description.keys = {&keys::model::group,        &keys::teacher::group, &keys::distill_loss::group,
                      &keys::chunked_loss::group, &keys::lm_head::group, &keys::router_loss::group};
  description.make = [](const Config& config, const RunContext& run) {
    return std::make_unique<DistillObjective>(distill_options(config, run));
  };
  return description;
}

}  // namespace tandem
