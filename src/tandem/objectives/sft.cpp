#include "tandem/objectives/sft.h"

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tandem/core/config.h"
#include "tandem/core/config_schema.h"
#include "tandem/core/device.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/core/file_io.h"
#include "tandem/core/json_file.h"
#include "tandem/dist/sharding.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/models/family_traits.h"
#include "tandem/models/flops.h"
#include "tandem/models/load.h"
#include "tandem/models/stored_weights.h"
#include "tandem/objectives/router_loss.h"

namespace tandem {

SftOptions sft_options(const Config& config, const RunContext& run) {
  SftOptions options;
  options.run = run;
  options.model_path = keys::model::path.read(config);
  options.model_config = keys::model::config.read(config);
  check(options.model_path.empty() != options.model_config.empty(), "[sft] ",
        keys::model::path.where(config),
        ": set exactly one of model.path (start from a checkpoint) or model.config (a fresh "
        "model from a config.json)");
  options.dtype = keys::model::dtype.read(config, keys::default_dtype(run.device));
  options.init_std = keys::model::init_std.read(config);
  options.seed = run.seed;
  options.loss.chunk_tokens = keys::chunked_loss::chunk_tokens.read(config);
  options.loss.fp32_head = keys::lm_head::fp32_lm_head.read(config);
  options.router_aux_loss_coef = keys::router_loss::router_aux_loss_coef.read(config);
  return options;
}

at::Tensor next_token_targets(const PackedBatch& batch) {
  const int64_t length = batch.seq_len();
  const at::Tensor same_document =
      batch.document_ids.narrow(1, 1, length - 1) == batch.document_ids.narrow(1, 0, length - 1);
  const at::Tensor trained = batch.loss_mask.narrow(1, 1, length - 1).to(at::kBool);
  const at::Tensor real = batch.padding_mask.narrow(1, 1, length - 1).to(at::kBool);
  return same_document.logical_and(trained).logical_and(real);  // (B, T-1)
}

NextTokenPositions next_token_positions(const PackedBatch& batch) {
  const PackedBatch& host = batch.on_host();
  const int64_t rows = host.rows();
  // (B, T): the (B, T-1) target mask with a last column that never predicts.
  const at::Tensor predicts =
      at::cat({next_token_targets(host), at::zeros({rows, 1}, at::kBool)}, 1);
  const at::Tensor index = predicts.reshape(-1).nonzero().squeeze(1);  // (N,) on the host
  const at::Device device = batch.input_ids.device();
  NextTokenPositions out;
  out.index = to_device(index, device);
  out.labels = to_device(host.input_ids.reshape(-1).index_select(0, index + 1), device);
  out.host_document = host.global_document_ids().reshape(-1).index_select(0, index);
  out.document = to_device(out.host_document, device);
  return out;
}

at::Tensor gather_positions(const at::Tensor& hidden, const at::Tensor& index) {
  return hidden.reshape({-1, hidden.size(-1)}).index_select(0, index);
}

DecoderConfig student_decoder_config(const SftOptions& options) {
  const DecoderConfig config =
      !options.model_path.empty()
          ? DecoderConfig::from_dir(options.model_path)
          : DecoderConfig::from_json(read_json_file(options.model_config, "sft", " model config"),
                                     options.model_config);
  // The gated delta rule has a forward only (models/gated_delta_rule.h).
  check(!config.hybrid(), "[model] ",
        options.model_path.empty() ? options.model_config : options.model_path, ": ",
        family_name(config.family),
        " is a hybrid (Gated DeltaNet) model, which tandem reads as a frozen target, teacher or "
        "reference only: training one (SFT, distillation student, DPO or GRPO policy) is not "
        "supported yet");
  // DeepSeek-V3's MoE layout (GLM-4.5, DeepSeek-V3), Gemma 3, gpt-oss: read, never written
  // (DecoderConfig::to_json); gpt-oss's sinks have no gradient either.
  const FamilyTraits& traits = family_traits(config.family);
  check(!traits.moe.deepseek_layout && !traits.gemma_layers && !traits.attention_sinks, "[model] ",
        options.model_path.empty() ? options.model_config : options.model_path, ": ",
        family_name(config.family),
        " is read as a frozen target, teacher or reference only: training one (SFT, distillation "
        "student, DPO or GRPO policy) is not supported, tandem does not write its checkpoints");
  return config;
}

CausalLM make_causal_lm(const SftOptions& options) {
  student_decoder_config(options);  // refuses what tandem cannot train, before any loading
  CausalLM model{nullptr};
  if (!options.model_path.empty()) {
    model = load_causal_lm(options.model_path, options.dtype, options.run);
  } else {
    model =
        allocate_causal_lm(student_decoder_config(options),
                           at::TensorOptions().dtype(options.dtype).device(options.run.placement()),
                           options.model_config);
    init_normal_(*model, options.init_std, options.seed);
    model->attention_options = options.run.attention;
  }
  for (auto& parameter : model->parameters()) parameter.set_requires_grad(true);
  return model;
}

SftObjective::SftObjective(const SftOptions& options)
    : options_(options), model_(make_causal_lm(options)) {}

StepTotals next_token_totals(const PackedBatch& batch) {
  StepTotals totals;
  totals.loss_tokens = next_token_targets(batch).sum().item<int64_t>();
  totals.documents = batch.total_documents();
  return totals;
}

StepTotals SftObjective::count(const PackedBatch& batch) const { return next_token_totals(batch); }

ObjectiveOutput SftObjective::compute(const PackedBatch& batch, const StepTotals& totals) {
  check(totals.loss_tokens > 0, "[sft] the step has no loss tokens");
  const TrainedForward forward = trained_forward(model_, batch);
  const at::Tensor& hidden = forward.hidden;  // (B, T, H)
  const NextTokenPositions targets_at = next_token_positions(batch);
  const at::Tensor inputs = gather_positions(hidden, targets_at.index);  // (N, H)
  const at::Tensor& targets = targets_at.labels;                         // (N,)
  const at::Tensor weights =
      at::full({targets.size(0)}, 1.0 / static_cast<double>(totals.loss_tokens),
               inputs.options().dtype(at::kFloat));
  const FusedLossOptions loss_options = options_.loss;
  const at::Tensor loss =
      with_full_parameters({model_->lm_head_weight()}, {inputs, targets, weights},
                           [loss_options](const auto& in, const auto& w) {
                             return std::vector<at::Tensor>{fused_linear_cross_entropy(
                                 in[0], w[0], in[1], in[2], loss_options)};
                           })[0];
  ObjectiveOutput output{loss, {}};
  output.add_metric("loss", loss);
  add_router_loss(output, forward.router, options_.router_aux_loss_coef, *this, batch, totals);
  return output;
}

void SftObjective::export_model(const std::string& dir) const {
  export_causal_lm(model_, dir, options_.model_path);
}

double SftObjective::model_flops(const PackedBatch& batch) const {
  return 3 * decoder_forward_flops(model_->config(), static_cast<double>(batch.num_tokens),
                                   batch.attention_pairs(), /*with_lm_head=*/true);
}

void export_causal_lm(const CausalLM& model, const std::string& dir,
                      const std::string& source_dir) {
  std::filesystem::create_directories(dir);
  // In the hub form: one tensor per expert for mixture-of-experts models (what transformers
  // writes and vLLM / SGLang read; models/stored_weights.h), plus the weight buffers.
  DecoderConfig config = model->config();
  std::vector<std::pair<std::string, at::Tensor>> weights;
  for (const auto& [name, value] : checkpoint_tensors(*model))
    for (auto& stored : split_for_hub(name, value, config)) weights.push_back(std::move(stored));
  const c10::ScalarType dtype = weights.front().second.scalar_type();
  config.torch_dtype = hf_dtype_name(dtype);
  write_hf_weights(dir, weights);
  replace_file(dir + "/config.json", config.to_json().dump(2) + "\n", "[export]");
  // vLLM and transformers take a model's sampling defaults (and its stop ids) from here.
  const std::string source = source_dir + "/generation_config.json";
  if (!source_dir.empty() && std::filesystem::exists(source)) {
    replace_file(dir + "/generation_config.json", read_json_file(source, "export").dump(2) + "\n",
                 "[export]");
  } else {
    nlohmann::json generation = {{"_from_model_config", true}};
    if (config.bos_token_id) generation["bos_token_id"] = *config.bos_token_id;
    if (config.eos_token_ids.size() == 1) generation["eos_token_id"] = config.eos_token_ids[0];
    if (config.eos_token_ids.size() > 1) generation["eos_token_id"] = config.eos_token_ids;
    if (config.pad_token_id) generation["pad_token_id"] = *config.pad_token_id;
    replace_file(dir + "/generation_config.json", generation.dump(2) + "\n", "[export]");
  }
}

ObjectiveDescription sft_description() {
  ObjectiveDescription description;
  description.name = "sft";
  description.summary = "supervised fine-tuning: next-token cross-entropy on loss-masked tokens";
  description.keys = {&keys::model::group, &keys::chunked_loss::group, &keys::lm_head::group,
                      &keys::router_loss::group};
  description.make = [](const Config& config, const RunContext& run) {
    return std::make_unique<SftObjective>(sft_options(config, run));
  };
  return description;
}

}  // namespace tandem
