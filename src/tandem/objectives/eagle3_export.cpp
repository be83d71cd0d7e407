#include "tandem/objectives/eagle3_export.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <iostream>

#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/core/file_io.h"
#include "tandem/core/json_file.h"
#include "tandem/data/vocab_map.h"
#include "tandem/eval/eagle3_decode.h"
#include "tandem/io/export_dir.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/models/frozen.h"
#include "tandem/models/load.h"

namespace tandem {

namespace {

// Engine numbering of tandem's aux layer i (output of decoder layer i).
std::vector<int64_t> vllm_layer_ids(const Eagle3Config& config) {
  std::vector<int64_t> ids;
  for (int64_t layer : config.aux_layer_ids) ids.push_back(layer + 1);
  return ids;
}

// The draft layer's dims as a Llama config.json object.
nlohmann::json layer_json(const Eagle3Config& config, c10::ScalarType dtype) {
  DecoderConfig layer = config.layer;
  layer.family = DecoderFamily::Llama;
  layer.num_hidden_layers = 1;
  layer.sliding_window = {0};
  layer.torch_dtype = hf_dtype_name(dtype);
  nlohmann::json json = layer.to_json();
  json["num_hidden_layers"] = 1;
  return json;
}

// EAGLE-3.1's two switches, under the names speculators, SpecForge and vLLM read, written only
// when one is on (an EAGLE-3 export stays as it was). Returns whether it wrote them.
bool add_eagle31_flags(const Eagle3Config& config, nlohmann::json& json) {
  if (!config.fc_norm && !config.norm_output) return false;
  json["fc_norm"] = config.fc_norm;
  json["norm_output"] = config.norm_output;
  return true;
}

}  // namespace

nlohmann::json eagle3_sglang_config(const Eagle3Config& config, c10::ScalarType dtype) {
  nlohmann::json json = layer_json(config, dtype);
  json["architectures"] = {"LlamaForCausalLMEagle3"};
  json["model_type"] = "llama";
  json["draft_vocab_size"] = config.draft_vocab_size;
  json["target_hidden_size"] = config.target_hidden_size;
  json["num_aux_hidden_states"] = config.aux_layer_ids.size();
  json["eagle_aux_hidden_state_layer_ids"] = vllm_layer_ids(config);
  json["eagle_config"] = {{"eagle_aux_hidden_state_layer_ids", config.aux_layer_ids},
                          {"use_aux_hidden_state", true},
                          {"use_input_layernorm_in_first_layer", true},
                          {"use_last_layernorm", true}};
  json["norm_before_residual"] = false;
  json["attention_bias"] = false;
  json["tie_word_embeddings"] = false;
  add_eagle31_flags(config, json);
  return json;
}

nlohmann::json eagle3_speculators_config(const Eagle3Config& config, c10::ScalarType dtype,
                                         const Eagle3ExportInfo& info) {
  nlohmann::json layer = layer_json(config, dtype);
  layer.erase("architectures");
  layer.erase("bos_token_id");
  layer.erase("eos_token_id");
  layer.erase("pad_token_id");
  layer["model_type"] = "llama";
  nlohmann::json json;
  json["architectures"] = {"Eagle3DraftModel"};
  json["speculators_model_type"] = "eagle3";
  json["speculators_version"] = "0.9.0";
  json["transformer_layer_config"] = layer;
  json["draft_vocab_size"] = config.draft_vocab_size;
  json["target_hidden_size"] = config.target_hidden_size;
  json["norm_before_residual"] = false;
  json["eagle_aux_hidden_state_layer_ids"] = vllm_layer_ids(config);
  json["torch_dtype"] = hf_dtype_name(dtype);
  if (add_eagle31_flags(config, json)) json["norm_before_fc"] = false;
  json["speculators_config"] =
      speculators_config_section("eagle3", info.speculative_tokens, info.verifier);
  return json;
}

void write_eagle3_exports(const Eagle3DraftImpl& draft, const std::string& dir,
                          const Eagle3ExportInfo& info) {
  std::filesystem::create_directories(dir);
  const c10::ScalarType dtype = draft.fc->weight.scalar_type();
  std::vector<std::pair<std::string, at::Tensor>> sglang, speculators;
  for (const auto& parameter : draft.named_parameters()) {
    const std::string& name = parameter.key();
    sglang.emplace_back(name, parameter.value());
    const std::string prefix = "midlayer.";
    speculators.emplace_back(
        name.rfind(prefix, 0) == 0 ? "layers.0." + name.substr(prefix.size()) : name,
        parameter.value());
  }
  for (auto* weights : {&sglang, &speculators}) {
    weights->emplace_back("d2t", draft.d2t);
    weights->emplace_back("t2d", draft.t2d);
  }
  write_export_dir(dir + "/sglang", eagle3_sglang_config(draft.config(), dtype), sglang);
  write_export_dir(dir + "/speculators", eagle3_speculators_config(draft.config(), dtype, info),
                   speculators);
}

Eagle3Draft load_eagle3_export(const std::string& dir, c10::ScalarType dtype) {
  const std::string path = dir + "/config.json";
  const nlohmann::json json =
      read_json_file(path, "eagle3", " (is " + dir + " an EAGLE-3 export?)");
  check(json.value("architectures", nlohmann::json::array()) ==
            nlohmann::json::array({"LlamaForCausalLMEagle3"}),
        "[eagle3] ", path,
        ": architectures must be [\"LlamaForCausalLMEagle3\"] (the sglang "
        "export; the speculators one is for vLLM)");
  Eagle3Config config;
  nlohmann::json layer = json;
  layer["architectures"] = {"LlamaForCausalLM"};
  for (const char* key : {"draft_vocab_size", "target_hidden_size", "num_aux_hidden_states",
                          "eagle_aux_hidden_state_layer_ids", "eagle_config",
                          "norm_before_residual", "fc_norm", "norm_output"})
    layer.erase(key);
  config.layer = DecoderConfig::from_json(layer, path);
  try {
    check(!json.at("norm_before_residual").get<bool>(), "[eagle3] ", path,
          ": norm_before_residual: true drafts are not supported");
    config.draft_vocab_size = json.at("draft_vocab_size").get<int64_t>();
    config.target_hidden_size = json.at("target_hidden_size").get<int64_t>();
    config.aux_layer_ids =
        json.at("eagle_config").at("eagle_aux_hidden_state_layer_ids").get<std::vector<int64_t>>();
    config.fc_norm = json.value("fc_norm", false);
    config.norm_output = json.value("norm_output", false);
  } catch (const nlohmann::json::exception& e) {
    throw Error("[eagle3] ", path, ": ", e.what());
  }
  Eagle3Draft draft(config, at::TensorOptions().dtype(dtype));
  const HfCheckpoint checkpoint = HfCheckpoint::open(dir);
  at::NoGradGuard no_grad;
  for (auto& parameter : draft->named_parameters()) {
    check(checkpoint.contains(parameter.key()), "[eagle3] ", dir, ": missing '", parameter.key(),
          "'");
    const at::Tensor stored = checkpoint.read_weight(parameter.key());
    check(stored.sizes() == parameter.value().sizes(), "[eagle3] ", dir, ": '", parameter.key(),
          "' has shape ", stored.sizes(), ", the config implies ", parameter.value().sizes());
    parameter.value().copy_(stored);
  }
  for (const char* name : {"d2t", "t2d"}) {
    check(checkpoint.contains(name), "[eagle3] ", dir, ": missing '", name, "'");
    at::Tensor& buffer = std::string(name) == "d2t" ? draft->d2t : draft->t2d;
    const at::Tensor stored = checkpoint.read(name);
    check(stored.sizes() == buffer.sizes() && stored.scalar_type() == buffer.scalar_type(),
          "[eagle3] ", dir, ": '", name, "' is ", stored.scalar_type(), stored.sizes(),
          ", expected ", buffer.scalar_type(), buffer.sizes());
    buffer.copy_(stored);
  }
  VocabMap{draft->d2t, draft->t2d}.validate(dir);
  return draft;
}

namespace {

constexpr const char* kSglangArchitecture = "LlamaForCausalLMEagle3";

bool declares_eagle3(const std::string& dir) {
  const std::string path = dir + "/config.json";
  if (!std::filesystem::exists(path)) return false;
  const nlohmann::json json = read_json_file(path, "eval");
  return json.value("architectures", nlohmann::json::array()) ==
         nlohmann::json::array({kSglangArchitecture});
}

class Eagle3DraftDecoder : public DraftDecoder {
 public:
  Eagle3DraftDecoder(const std::string& dir, c10::ScalarType dtype, const c10::Device& device)
      : dir_(dir), draft_(load_eagle3_export(dir, dtype)) {
    draft_->to(device);
  }
  std::string type() const override { return "EAGLE-3"; }
  int64_t default_draft_tokens() const override { return 7; }
  void check_target(const FrozenModel& target, const std::string& target_dir) const override {
    const Eagle3Config& config = draft_->config();
    check_vocab_and_width(dir_, config.layer.vocab_size, config.target_hidden_size, target,
                          target_dir);
  }
  std::unique_ptr<DraftProposer> proposer(const FrozenModel& target, int64_t draft_tokens,
                                          const DecodeOptions& /*options*/) const override {
    return std::make_unique<Eagle3Proposer>(target, *draft_, draft_tokens);
  }

 private:
  std::string dir_;
  Eagle3Draft draft_;
};

}  // namespace

std::optional<std::string> find_eagle3_export(const std::string& dir) {
  if (declares_eagle3(dir)) return dir;
  if (declares_eagle3(dir + "/sglang")) return dir + "/sglang";
  return std::nullopt;
}

std::unique_ptr<DraftDecoder> eagle3_draft_decoder(const std::string& export_dir,
                                                   c10::ScalarType dtype,
                                                   const c10::Device& device) {
  return std::make_unique<Eagle3DraftDecoder>(export_dir, dtype, device);
}

}  // namespace tandem
