#include "tandem/objectives/dspark_export.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <set>

#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/core/json_file.h"
#include "tandem/eval/dspark_decode.h"
#include "tandem/io/export_dir.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/objectives/dflash_export.h"

namespace tandem {

namespace {

constexpr const char* kModelType = "dspark";

}  // namespace

nlohmann::json dspark_speculators_config(const DSparkDraftImpl& draft, c10::ScalarType dtype,
                                         const DSparkExportInfo& info) {
  const DFlashConfig& config = draft.config();
  DecoderConfig layer = config.layer;
  layer.family = DecoderFamily::Qwen3;
  layer.sliding_window.assign(static_cast<size_t>(layer.num_hidden_layers), 0);
  layer.tie_word_embeddings = false;
  layer.torch_dtype = hf_dtype_name(dtype);
  nlohmann::json layer_json = layer.to_json();  // every dim: a missing one takes Qwen3's default
  for (const char* key : {"architectures", "bos_token_id", "eos_token_id", "pad_token_id"})
    layer_json.erase(key);
  layer_json["model_type"] = "qwen3";
  layer_json["attention_bias"] = false;
  std::vector<int64_t> aux_ids;  // hidden_states indices: the input of layer i + 1
  for (int64_t id : config.target_layer_ids) aux_ids.push_back(id + 1);
  nlohmann::json json;
  json["architectures"] = {"DSparkDraftModel"};
  json["speculators_model_type"] = kModelType;
  json["speculators_version"] = "0.9.0";
  json["transformer_layer_config"] = layer_json;
  json["draft_vocab_size"] = config.layer.vocab_size;  // the full vocabulary: no d2t / t2d
  json["target_hidden_size"] = config.target_hidden_size;
  json["block_size"] = config.block_size;
  json["aux_hidden_state_layer_ids"] = aux_ids;
  json["mask_token_id"] = config.mask_token_id;
  json["sample_from_anchor"] = true;  // slot k predicts a + k + 1, the anchor's slot included
  json["sliding_window_non_causal"] = false;
  json["markov_rank"] = draft.heads().markov_rank;
  json["markov_head_type"] = "vanilla";
  json["enable_confidence_head"] = draft.heads().confidence_head;
  json["confidence_head_with_markov"] = true;
  json["tie_word_embeddings"] = false;
  json["torch_dtype"] = hf_dtype_name(dtype);
  // Every slot drafts a token: block_size speculative tokens per step.
  json["speculators_config"] =
      speculators_config_section(kModelType, config.block_size, info.verifier);
  return json;
}

nlohmann::json dspark_sglang_config(const DSparkDraftImpl& draft, c10::ScalarType dtype,
                                    const DSparkExportInfo& info) {
  const DFlashConfig& config = draft.config();
  DFlashExportInfo dflash;
  dflash.num_target_layers = info.num_target_layers;
  // The Qwen3 layer config, block_size, num_target_layers and target_hidden_size as DFlash's
  // z-lab export writes them; DeepSpec keeps the rest at the top level, not in dflash_config.
  nlohmann::json json = dflash_export_config(config, dtype, dflash);
  json.erase("dflash_config");
  json["architectures"] = {"Qwen3DSparkModel"};
  json["target_layer_ids"] = config.target_layer_ids;  // outputs of decoder layers, 0-based
  json["mask_token_id"] = config.mask_token_id;
  json["markov_rank"] = draft.heads().markov_rank;
  json["markov_head_type"] = "vanilla";
  json["enable_confidence_head"] = draft.heads().confidence_head;
  json["confidence_head_with_markov"] = true;
  json["sample_from_anchor"] = true;  // [anchor, MASK x (block_size - 1)]: every slot predicts
  json["layer_types"] = std::vector<std::string>(
      static_cast<size_t>(config.layer.num_hidden_layers), "full_attention");
  return json;
}

void write_dspark_export(const DSparkDraftImpl& draft, const std::string& dir,
                         const DSparkExportInfo& info) {
  const DFlashConfig& config = draft.config();
  check(config.mask_token_id < config.layer.vocab_size, "[export] ", dir, ": mask token id ",
        config.mask_token_id,
        " is a grown row; speculators embeds the mask with the target's own embedding, so it "
        "must be one of the target's tokens (set draft.mask_token_id)");
  const c10::ScalarType dtype = draft.fc->weight.scalar_type();
  std::vector<std::pair<std::string, at::Tensor>> weights;
  for (const auto& parameter : draft.named_parameters())
    weights.emplace_back(parameter.key(), parameter.value().detach());
  write_export_dir(dir + "/speculators", dspark_speculators_config(draft, dtype, info), weights);
  write_export_dir(dir + "/sglang", dspark_sglang_config(draft, dtype, info), weights);
}

std::shared_ptr<DSparkDraftImpl> load_dspark_export(const std::string& dir, c10::ScalarType dtype) {
  const std::string path = dir + "/config.json";
  const nlohmann::json json = read_json_file(path, "dspark", " (is " + dir + " a DSpark export?)");
  check(json.value("speculators_model_type", "") == kModelType, "[dspark] ", path,
        ": speculators_model_type must be \"dspark\"");
  DFlashConfig config;
  DSparkHeads heads;
  try {
    nlohmann::json layer = json.at("transformer_layer_config");
    check(layer.value("model_type", "") == "qwen3", "[dspark] ", path,
          ": transformer_layer_config.model_type must be \"qwen3\"");
    layer["architectures"] = {"Qwen3ForCausalLM"};
    config.layer = DecoderConfig::from_json(layer, path);
    check(json.at("draft_vocab_size").get<int64_t>() == config.layer.vocab_size, "[dspark] ", path,
          ": draft_vocab_size ", json.at("draft_vocab_size").get<int64_t>(),
          " differs from the vocabulary ", config.layer.vocab_size,
          " (reduced-vocabulary DSpark drafts are not supported)");
    check(json.value("markov_head_type", "vanilla") == "vanilla", "[dspark] ", path,
          ": markov_head_type ", json.at("markov_head_type").dump(),
          " is not supported (vanilla only)");
    check(json.value("sample_from_anchor", true), "[dspark] ", path,
          ": sample_from_anchor: false drafts are not supported");
    check(json.value("confidence_head_with_markov", true), "[dspark] ", path,
          ": confidence_head_with_markov: false drafts are not supported");
    config.block_size = json.at("block_size").get<int64_t>();
    config.mask_token_id = json.at("mask_token_id").get<int64_t>();
    for (int64_t id : json.at("aux_hidden_state_layer_ids").get<std::vector<int64_t>>()) {
      check(id >= 1, "[dspark] ", path, ": aux_hidden_state_layer_ids entry ", id,
            " is not a decoder layer's output (1 or more)");
      config.target_layer_ids.push_back(id - 1);
    }
    const nlohmann::json target_hidden = json.value("target_hidden_size", nlohmann::json());
    config.target_hidden_size =
        target_hidden.is_number() ? target_hidden.get<int64_t>() : config.layer.hidden_size;
    heads.markov_rank = json.at("markov_rank").get<int64_t>();
    check(heads.markov_rank >= 1, "[dspark] ", path, ": markov_rank ", heads.markov_rank,
          " is not supported (tandem's DSpark drafts have a Markov head: 1 or more)");
    heads.confidence_head = json.value("enable_confidence_head", true);
  } catch (const nlohmann::json::exception& e) {
    throw Error("[dspark] ", path, ": ", e.what());
  }
  for (int64_t window : config.layer.sliding_window)
    check(window == 0, "[dspark] ", path,
          ": sliding-window draft layers are not supported (tandem's draft attends fully)");
  config.validate(path);
  auto draft = std::make_shared<DSparkDraftImpl>(config, heads, at::TensorOptions().dtype(dtype));
  const HfCheckpoint checkpoint = HfCheckpoint::open(dir);
  std::set<std::string> expected;
  at::NoGradGuard no_grad;
  for (auto& parameter : draft->named_parameters()) {
    expected.insert(parameter.key());
    check(checkpoint.contains(parameter.key()), "[dspark] ", dir, ": missing '", parameter.key(),
          "'");
    const at::Tensor stored = checkpoint.read_weight(parameter.key());
    check(stored.sizes() == parameter.value().sizes(), "[dspark] ", dir, ": '", parameter.key(),
          "' has shape ", stored.sizes(), ", ", path, " implies ", parameter.value().sizes());
    parameter.value().copy_(stored);
  }
  for (const std::string& name : checkpoint.names())
    check(expected.count(name) == 1, "[dspark] ", dir, ": unexpected tensor '", name,
          "' (not a weight of the draft ", path, " describes)");
  return draft;
}

namespace {

class DSparkDraftDecoder : public DraftDecoder {
 public:
  DSparkDraftDecoder(const std::string& dir, c10::ScalarType dtype, const c10::Device& device)
      : dir_(dir), draft_(load_dspark_export(dir, dtype)) {
    draft_->to(device);
  }
  std::string type() const override { return "DSpark"; }
  // Every slot of a block predicts a token.
  int64_t default_draft_tokens() const override { return draft_->config().block_size; }
  bool has_confidence_head() const override { return draft_->heads().confidence_head; }
  void check_target(const FrozenModel& target, const std::string& target_dir) const override {
    const DFlashConfig& config = draft_->config();
    const int64_t layers = target.config().num_hidden_layers;
    for (int64_t layer : config.target_layer_ids)
      check(layer < layers, "[eval] ", dir_, ": reads the output of target layer ", layer, ", ",
            target_dir, " has ", layers, " layers");
    check(config.mask_token_id < target.config().vocab_size, "[eval] ", dir_, ": mask token ",
          config.mask_token_id, " is outside ", target_dir, "'s vocabulary");
    check_vocab_and_width(dir_, config.layer.vocab_size, config.target_hidden_size, target,
                          target_dir);
  }
  std::unique_ptr<DraftProposer> proposer(const FrozenModel& target, int64_t draft_tokens,
                                          const DecodeOptions& options) const override {
    return std::make_unique<DSparkProposer>(target, *draft_, draft_tokens,
                                            options.confidence_threshold);
  }

 private:
  std::string dir_;
  std::shared_ptr<DSparkDraftImpl> draft_;
};

}  // namespace

std::unique_ptr<DraftDecoder> dspark_draft_decoder(const std::string& dir, c10::ScalarType dtype,
                                                   const c10::Device& device) {
  return std::make_unique<DSparkDraftDecoder>(dir, dtype, device);
}

std::optional<std::string> find_dspark_export(const std::string& dir) {
  for (const std::string& candidate : {dir, dir + "/speculators"}) {
    const std::string path = candidate + "/config.json";
    if (!std::filesystem::exists(path)) continue;
    if (read_json_file(path, "eval").value("speculators_model_type", "") == kModelType)
      return candidate;
  }
  return std::nullopt;
}

}  // namespace tandem
