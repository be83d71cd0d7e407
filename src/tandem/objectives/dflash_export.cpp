#include "tandem/objectives/dflash_export.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <filesystem>
#include <fstream>

#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/core/file_io.h"
#include "tandem/core/json_file.h"
#include "tandem/eval/dflash_decode.h"
#include "tandem/io/export_dir.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/io/tensor_io.h"
#include "tandem/models/frozen.h"

namespace tandem {

namespace {

constexpr const char* kArchitecture = "DFlashDraftModel";
constexpr const char* kMaskEmbeddingPt = "mask_embedding.pt";
constexpr const char* kMaskEmbeddingSafetensors = "mask_embedding.safetensors";

// The fields the export adds to a Qwen3 config.json; erased before DecoderConfig reads the rest.
const std::vector<std::string>& dflash_fields() {
  static const std::vector<std::string> fields = {"block_size", "num_target_layers",
                                                  "target_hidden_size", "dflash_config", "tandem"};
  return fields;
}

void write_file(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  check(out.good(), "[export] ", path, ": write failed");
}

}  // namespace

nlohmann::json dflash_export_config(const DFlashConfig& config, c10::ScalarType dtype,
                                    const DFlashExportInfo& info) {
  DecoderConfig layer = config.layer;
  layer.family = DecoderFamily::Qwen3;
  layer.sliding_window.assign(static_cast<size_t>(layer.num_hidden_layers), 0);
  layer.tie_word_embeddings = false;
  layer.torch_dtype = hf_dtype_name(dtype);
  nlohmann::json json = layer.to_json();  // dims, rms_norm_eps, rope_theta/rope_scaling, silu
  json["architectures"] = {kArchitecture};
  json["model_type"] = "qwen3";
  json["attention_bias"] = false;
  json["tie_word_embeddings"] = false;
  json["block_size"] = config.block_size;
  json["num_target_layers"] = info.num_target_layers;
  json["target_hidden_size"] = config.target_hidden_size;
  json["dflash_config"] = {{"mask_token_id", config.mask_token_id},
                           {"target_layer_ids", config.target_layer_ids}};
  if (!info.mask_token.empty()) json["dflash_config"]["mask_token"] = info.mask_token;
  if (info.mask_embedding.defined())
    json["tandem"] = {{"mask_token_grown", true},
                      {"mask_embedding", {kMaskEmbeddingPt, kMaskEmbeddingSafetensors}},
                      {"serving_note", info.serving_note}};
  return json;
}

void write_dflash_export(const DFlashDraftImpl& draft, const std::string& dir,
                         const DFlashExportInfo& info) {
  const DFlashConfig& config = draft.config();
  const c10::ScalarType dtype = draft.fc->weight.scalar_type();
  const bool grown = info.mask_embedding.defined();
  check(!grown || config.mask_token_id == config.layer.vocab_size, "[export] ", dir,
        ": a separate mask embedding is written only for a grown mask token (id ",
        config.mask_token_id, ", vocab ", config.layer.vocab_size, ")");
  check(grown || config.mask_token_id < config.layer.vocab_size, "[export] ", dir,
        ": mask_token_id ", config.mask_token_id,
        " is the grown row but no mask embedding was given");
  std::vector<std::pair<std::string, at::Tensor>> weights;
  for (const auto& parameter : draft.named_parameters())
    weights.emplace_back(parameter.key(), parameter.value().detach());

  publish_export_dir(dir, [&](const std::string& staging) {
    write_hf_weights(staging, weights);
    replace_file(staging + "/config.json", dflash_export_config(config, dtype, info).dump(2) + "\n",
                 "[export]");
    if (grown) {
      const at::Tensor row =
          info.mask_embedding.detach().to(at::kCPU, dtype).reshape(-1).contiguous();
      check(row.numel() == config.layer.hidden_size, "[export] ", dir, ": the mask embedding has ",
            row.numel(), " values, hidden_size is ", config.layer.hidden_size);
      write_tensors(staging + "/" + kMaskEmbeddingSafetensors, {{"mask_embedding", row}});
      write_file(staging + "/" + kMaskEmbeddingPt, torch::jit::pickle_save(row));
      replace_file(staging + "/README.md",
                   "# Serving this DFlash draft\n\n"
                   "The mask token was not in the target's vocabulary: training grew the input "
                   "embedding by one row, so `dflash_config.mask_token_id` = " +
                       std::to_string(config.mask_token_id) + " = the target's `vocab_size`.\n\n" +
                       info.serving_note +
                       ".\n\n- `mask_embedding.pt`: the grown row, a (hidden_size,) tensor "
                       "(`torch.load`); vLLM's DFlash loader reads this file to replace the "
                       "embedding of `mask_token_id`.\n- `mask_embedding.safetensors`: the same "
                       "row as `mask_embedding`.\n\nSGLang refuses a `mask_token_id` >= the "
                       "target's vocab_size: retrain with `draft.mask_token_id` set to an id the "
                       "target has a row for but never emits.\n",
                   "[export]");
    }
  });
}

bool is_dflash_export(const std::string& dir) {
  const std::string path = dir + "/config.json";
  if (!std::filesystem::exists(path)) return false;
  const nlohmann::json json = read_json_file(path, "eval");
  return json.value("architectures", nlohmann::json::array()) ==
         nlohmann::json::array({kArchitecture});
}

DFlashExport load_dflash_export(const std::string& dir, c10::ScalarType dtype) {
  const std::string path = dir + "/config.json";
  const nlohmann::json json = read_json_file(path, "dflash", " (is " + dir + " a DFlash export?)");
  check(json.value("architectures", nlohmann::json::array()) ==
            nlohmann::json::array({kArchitecture}),
        "[dflash] ", path, ": architectures must be [\"DFlashDraftModel\"], got ",
        json.value("architectures", nlohmann::json()).dump());
  check(json.value("model_type", "") == "qwen3", "[dflash] ", path,
        ": model_type must be \"qwen3\" (DFlash draft layers are Qwen3 layers)");
  DFlashConfig config;
  DFlashExport out;
  nlohmann::json layer = json;
  layer["architectures"] = {"Qwen3ForCausalLM"};
  for (const std::string& key : dflash_fields()) layer.erase(key);
  try {
    const nlohmann::json& dflash = json.at("dflash_config");
    for (const auto& item : dflash.items())
      check(item.key() == "mask_token_id" || item.key() == "target_layer_ids" ||
                item.key() == "mask_token" || item.key() == "block_size" ||
                item.key() == "num_target_layers",
            "[dflash] ", path, ": unsupported dflash_config field '", item.key(),
            "' (tandem's draft is non-causal full attention with the target's embeddings)");
    config.mask_token_id = dflash.at("mask_token_id").get<int64_t>();
    config.target_layer_ids = dflash.at("target_layer_ids").get<std::vector<int64_t>>();
    config.block_size = dflash.contains("block_size") ? dflash.at("block_size").get<int64_t>()
                                                      : json.at("block_size").get<int64_t>();
    out.num_target_layers = dflash.contains("num_target_layers")
                                ? dflash.at("num_target_layers").get<int64_t>()
                                : json.value("num_target_layers", int64_t{0});
    config.target_hidden_size =
        json.value("target_hidden_size", json.at("hidden_size").get<int64_t>());
    check(!json.value("is_causal", false), "[dflash] ", path,
          ": is_causal: true drafts are not supported");
    layer.erase("is_causal");
  } catch (const nlohmann::json::exception& e) {
    throw Error("[dflash] ", path, ": ", e.what());
  }
  config.layer = DecoderConfig::from_json(layer, path);
  for (int64_t window : config.layer.sliding_window)
    check(window == 0, "[dflash] ", path,
          ": sliding-window draft layers are not supported (tandem's draft attends fully)");
  for (int64_t id : config.target_layer_ids)
    check(id >= 0 && (out.num_target_layers == 0 || id < out.num_target_layers), "[dflash] ", path,
          ": target_layer_ids entry ", id, " outside the target's ", out.num_target_layers,
          " layers");
  config.validate(path);
  out.draft = DFlashDraft(config, at::TensorOptions().dtype(dtype));
  const HfCheckpoint checkpoint = HfCheckpoint::open(dir);
  at::NoGradGuard no_grad;
  for (auto& parameter : out.draft->named_parameters()) {
    check(checkpoint.contains(parameter.key()), "[dflash] ", dir, ": missing '", parameter.key(),
          "'");
    const at::Tensor stored = checkpoint.read_weight(parameter.key());
    check(stored.sizes() == parameter.value().sizes(), "[dflash] ", dir, ": '", parameter.key(),
          "' has shape ", stored.sizes(), ", ", path, " implies ", parameter.value().sizes());
    parameter.value().copy_(stored);
  }
  const std::string mask_file = dir + "/" + kMaskEmbeddingSafetensors;
  if (std::filesystem::exists(mask_file)) {
    const safetensors::File mask = safetensors::File::open(mask_file);
    check(mask.contains("mask_embedding"), "[dflash] ", mask_file, ": missing 'mask_embedding'");
    out.mask_embedding = read_tensor(mask, mask.info("mask_embedding")).to(dtype);
    check(out.mask_embedding.sizes() == at::IntArrayRef{config.layer.hidden_size}, "[dflash] ",
          mask_file, ": 'mask_embedding' has shape ", out.mask_embedding.sizes(), ", expected (",
          config.layer.hidden_size, ")");
  }
  check(config.mask_token_id < config.layer.vocab_size || out.mask_embedding.defined(), "[dflash] ",
        path, ": mask_token_id ", config.mask_token_id, " is outside the target vocab (",
        config.layer.vocab_size, ") and ", dir, " has no ", kMaskEmbeddingSafetensors);
  return out;
}

namespace {

class DFlashDraftDecoder : public DraftDecoder {
 public:
  DFlashDraftDecoder(const std::string& dir, c10::ScalarType dtype, const c10::Device& device)
      : dir_(dir), export_(load_dflash_export(dir, dtype)) {
    export_.draft->to(device);
    if (export_.mask_embedding.defined())
      export_.mask_embedding = export_.mask_embedding.to(device);
  }
  std::string type() const override { return "DFlash"; }
  // The most one block predicts: slot 0 of a block is the last verified token.
  int64_t default_draft_tokens() const override { return export_.draft->config().block_size - 1; }
  void check_target(const FrozenModel& target, const std::string& target_dir) const override {
    const DFlashConfig& config = export_.draft->config();
    const int64_t layers = target.config().num_hidden_layers;
    check(export_.num_target_layers == 0 || export_.num_target_layers == layers, "[eval] ", dir_,
          ": the draft was trained on a target of ", export_.num_target_layers, " layers, ",
          target_dir, " has ", layers);
    for (int64_t layer : config.target_layer_ids)
      check(layer < layers, "[eval] ", dir_, ": reads target layer ", layer, ", ", target_dir,
            " has ", layers);
    check_vocab_and_width(dir_, config.layer.vocab_size, config.target_hidden_size, target,
                          target_dir);
  }
  std::unique_ptr<DraftProposer> proposer(const FrozenModel& target, int64_t draft_tokens,
                                          const DecodeOptions& /*options*/) const override {
    return std::make_unique<DFlashProposer>(target, *export_.draft, export_.mask_embedding,
                                            draft_tokens);
  }

 private:
  std::string dir_;
  DFlashExport export_;
};

}  // namespace

std::unique_ptr<DraftDecoder> dflash_draft_decoder(const std::string& dir, c10::ScalarType dtype,
                                                   const c10::Device& device) {
  return std::make_unique<DFlashDraftDecoder>(dir, dtype, device);
}

}  // namespace tandem
