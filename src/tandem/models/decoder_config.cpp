#include "tandem/models/decoder_config.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "tandem/core/error.h"
#include "tandem/core/json_file.h"

namespace tandem {

using nlohmann::json;

const char* family_name(DecoderFamily family) {
  switch (family) {
    case DecoderFamily::Llama:
      return "llama";
    case DecoderFamily::Mistral:
      return "mistral";
    case DecoderFamily::Qwen2:
      return "qwen2";
    case DecoderFamily::Qwen3:
      return "qwen3";
    case DecoderFamily::Qwen3Moe:
      return "qwen3_moe";
    case DecoderFamily::Mixtral:
      return "mixtral";
    case DecoderFamily::MiniMaxM2:
      return "minimax_m2";
  }
  return "?";
}

namespace {

const char* architecture_name(DecoderFamily family) {
  switch (family) {
    case DecoderFamily::Llama:
      return "LlamaForCausalLM";
    case DecoderFamily::Mistral:
      return "MistralForCausalLM";
    case DecoderFamily::Qwen2:
      return "Qwen2ForCausalLM";
    case DecoderFamily::Qwen3:
      return "Qwen3ForCausalLM";
    case DecoderFamily::Qwen3Moe:
      return "Qwen3MoeForCausalLM";
    case DecoderFamily::Mixtral:
      return "MixtralForCausalLM";
    case DecoderFamily::MiniMaxM2:
      return "MiniMaxM2ForCausalLM";
  }
  return "?";
}

// Fields that describe how the model was trained, cached or tokenised, never what it computes.
const std::set<std::string> kMetadataFields = {"_name_or_path",
                                               "architectures",
                                               "model_type",
                                               "transformers_version",
                                               "initializer_range",
                                               "use_cache",
                                               "torch_dtype",
                                               "dtype",
                                               "bos_token_id",
                                               "eos_token_id",
                                               "pad_token_id",
                                               "output_attentions",
                                               "output_hidden_states",
                                               "return_dict",
                                               "tie_word_embeddings",
                                               "use_sliding_window",
                                               "max_window_layers",
                                               "sliding_window",
                                               "layer_types",
                                               "head_dim",
                                               "rope_theta",
                                               "rope_scaling",
                                               "rope_parameters",
                                               "attention_bias",
                                               "mlp_bias",
                                               "attention_dropout",
                                               "hidden_act",
                                               "pretraining_tp",
                                               "rms_norm_eps",
                                               "vocab_size",
                                               "hidden_size",
                                               "intermediate_size",
                                               "num_hidden_layers",
                                               "num_attention_heads",
                                               "num_key_value_heads",
                                               "max_position_embeddings",
                                               "is_decoder",
                                               "chunk_size_feed_forward",
                                               "id2label",
                                               "label2id",
                                               "problem_type",
                                               "tokenizer_class",
                                               "prefix",
                                               "task_specific_params",
                                               "finetuning_task",
                                               "bad_words_ids",
                                               "decoder_start_token_id",
                                               "sep_token_id"};

// The mixture-of-experts fields, read by parse_moe (allowed for the MoE families only).
const std::set<std::string> kMoeFields = {
    "num_experts",          "num_local_experts",   "num_experts_per_tok", "moe_intermediate_size",
    "norm_topk_prob",       "decoder_sparse_step", "mlp_only_layers",     "router_aux_loss_coef",
    "output_router_logits", "router_jitter_noise"};

// MiniMax-M2's own fields (transformers' and the released checkpoints' spellings), read by
// parse_minimax_m2: each is accepted only with the value that means what transformers computes.
const std::set<std::string> kMiniMaxFields = {"rotary_dim",
                                              "partial_rotary_factor",
                                              "scoring_func",
                                              "use_routing_bias",
                                              "use_qk_norm",
                                              "qk_norm_type",
                                              "shared_intermediate_size",
                                              "attn_type_list",
                                              "use_mtp",
                                              "num_mtp_modules",
                                              "mtp_transformer_layers"};

bool is_moe_family(DecoderFamily family) {
  return family == DecoderFamily::Qwen3Moe || family == DecoderFamily::Mixtral ||
         family == DecoderFamily::MiniMaxM2;
}

class Reader {
 public:
  Reader(const json& object, std::string path) : object_(object), path_(std::move(path)) {}

  bool has(const char* key) const { return object_.contains(key) && !object_.at(key).is_null(); }

  int64_t integer(const char* key) const {
    check(has(key), "[config] ", path_, ": missing required field '", key, "'");
    const json& value = object_.at(key);
    check(value.is_number_integer(), "[config] ", path_, ": field '", key,
          "' must be an integer, got ", value.dump());
    return value.get<int64_t>();
  }
  int64_t integer_or(const char* key, int64_t fallback) const {
    return has(key) ? integer(key) : fallback;
  }
  double number(const char* key) const {
    check(has(key), "[config] ", path_, ": missing required field '", key, "'");
    const json& value = object_.at(key);
    check(value.is_number(), "[config] ", path_, ": field '", key, "' must be a number, got ",
          value.dump());
    return value.get<double>();
  }
  double number_or(const char* key, double fallback) const {
    return has(key) ? number(key) : fallback;
  }
  bool boolean_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& value = object_.at(key);
    check(value.is_boolean(), "[config] ", path_, ": field '", key, "' must be true or false");
    return value.get<bool>();
  }
  std::string string_or(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const json& value = object_.at(key);
    check(value.is_string(), "[config] ", path_, ": field '", key, "' must be a string");
    return value.get<std::string>();
  }
  const json& at(const char* key) const { return object_.at(key); }

 private:
  const json& object_;
  std::string path_;
};

// head_dim x partial_rotary_factor (MiniMax-M2 writes it in rope_parameters or at the top level),
// the factor checked to be in (0, 1].
int64_t partial_rotary_dims(const Reader& reader, int64_t head_dim, const std::string& path) {
  const double factor = reader.number("partial_rotary_factor");
  check(factor > 0 && factor <= 1, "[config] ", path,
        ": partial_rotary_factor must be in (0, 1], got ", factor);
  return static_cast<int64_t>(static_cast<double>(head_dim) * factor);
}

DecoderFamily parse_family(const json& config, const std::string& path) {
  check(config.contains("model_type") && config["model_type"].is_string(), "[config] ", path,
        ": missing 'model_type' (expected llama, mistral, qwen2, qwen3, qwen3_moe, mixtral or "
        "minimax_m2)");
  const std::string type = config["model_type"];
  DecoderFamily family;
  if (type == "llama")
    family = DecoderFamily::Llama;
  else if (type == "mistral")
    family = DecoderFamily::Mistral;
  else if (type == "qwen2")
    family = DecoderFamily::Qwen2;
  else if (type == "qwen3")
    family = DecoderFamily::Qwen3;
  else if (type == "qwen3_moe")
    family = DecoderFamily::Qwen3Moe;
  else if (type == "mixtral")
    family = DecoderFamily::Mixtral;
  else if (type == "minimax_m2")
    family = DecoderFamily::MiniMaxM2;
  else
    throw Error("[config] ", path, ": unsupported model_type '", type,
                "' (tandem supports llama, mistral, qwen2, qwen3, qwen3_moe, mixtral, minimax_m2)");
  if (config.contains("architectures") && config["architectures"].is_array()) {
    for (const json& arch : config["architectures"]) {
      check(arch.is_string() && arch.get<std::string>() == architecture_name(family), "[config] ",
            path, ": unsupported architecture ", arch.dump(), " for model_type '", type,
            "' (expected ", architecture_name(family), ")");
    }
  }
  return family;
}

// rope_theta and rope_scaling (transformers 4) or rope_parameters (transformers 5).
void parse_rope(const json& config, const std::string& path, DecoderConfig& out) {
  Reader top(config, path);
  json scaling = json::object();
  if (top.has("rope_parameters")) {
    check(config["rope_parameters"].is_object(), "[config] ", path,
          ": 'rope_parameters' must be an object");
    scaling = config["rope_parameters"];
  } else if (top.has("rope_scaling")) {
    check(config["rope_scaling"].is_object(), "[config] ", path,
          ": 'rope_scaling' must be an object or null");
    scaling = config["rope_scaling"];
  }
  Reader rope(scaling, path);
  out.rope_theta =
      rope.has("rope_theta") ? rope.number("rope_theta") : top.number_or("rope_theta", 10000.0);
  std::string type = rope.string_or("rope_type", rope.string_or("type", "default"));
  if (rope.has("partial_rotary_factor")) {
    check(out.family == DecoderFamily::MiniMaxM2, "[config] ", path,
          ": partial_rotary_factor is implemented for minimax_m2 only");
    out.rotary_dim = partial_rotary_dims(rope, out.head_dim, path);
  }
  if (type == "default") return;
  check(type == "llama3", "[config] ", path, ": unsupported RoPE scaling type '", type,
        "' (tandem implements default and llama3)");
  out.rope_scaling.type = type;
  out.rope_scaling.factor = rope.number("factor");
  out.rope_scaling.low_freq_factor = rope.number("low_freq_factor");
  out.rope_scaling.high_freq_factor = rope.number("high_freq_factor");
  out.rope_scaling.original_max_position_embeddings =
      rope.integer("original_max_position_embeddings");
  for (const auto& item : scaling.items()) {
    static const std::set<std::string> known = {"rope_type",
                                                "type",
                                                "rope_theta",
                                                "factor",
                                                "partial_rotary_factor",
                                                "low_freq_factor",
                                                "high_freq_factor",
                                                "original_max_position_embeddings"};
    check(known.count(item.key()) > 0, "[config] ", path, ": unsupported RoPE field '", item.key(),
          "' for llama3 scaling");
  }
}

// Sliding windows per layer: Mistral's `sliding_window`, Qwen's `use_sliding_window` with
// `max_window_layers`, or transformers 5's explicit `layer_types`.
void parse_sliding_window(const json& config, const std::string& path, DecoderConfig& out) {
  Reader reader(config, path);
  const int64_t layers = out.num_hidden_layers;
  out.sliding_window.assign(layers, 0);
  const int64_t window = reader.integer_or("sliding_window", 0);
  if (out.family == DecoderFamily::MiniMaxM2) return;  // transformers ignores sliding_window there
  if (out.family == DecoderFamily::Mistral || out.family == DecoderFamily::Mixtral) {
    if (window > 0) out.sliding_window.assign(layers, window);
  } else if (out.family == DecoderFamily::Qwen3Moe) {
    // Every layer or none: Qwen3-MoE's attention reads use_sliding_window alone.
    if (reader.boolean_or("use_sliding_window", false)) {
      check(window > 0, "[config] ", path, ": use_sliding_window is true but sliding_window is ",
            window);
      out.sliding_window.assign(layers, window);
    }
    return;
  } else if (reader.boolean_or("use_sliding_window", false)) {
    check(window > 0, "[config] ", path, ": use_sliding_window is true but sliding_window is ",
          window);
    const int64_t first = reader.integer_or("max_window_layers", layers);
    for (int64_t i = first; i < layers; ++i) out.sliding_window[i] = window;
  }
  if (!reader.has("layer_types")) return;
  const json& types = config["layer_types"];
  check(types.is_array() && static_cast<int64_t>(types.size()) == layers, "[config] ", path,
        ": 'layer_types' must list one type per layer (", layers, ")");
  for (int64_t i = 0; i < layers; ++i) {
    const std::string type = types[i].is_string() ? types[i].get<std::string>() : "";
    if (type == "full_attention") {
      out.sliding_window[i] = 0;
    } else if (type == "sliding_attention") {
      check(window > 0, "[config] ", path, ": layer ", i,
            " is sliding_attention but sliding_window is not set");
      out.sliding_window[i] = window;
    } else {
      throw Error("[config] ", path, ": unsupported layer type ", types[i].dump(), " at layer ", i);
    }
  }
}

std::vector<int64_t> parse_token_ids(const json& value, const std::string& path, const char* key) {
  std::vector<int64_t> ids;
  if (value.is_null()) return ids;
  if (value.is_number_integer()) return {value.get<int64_t>()};
  check(value.is_array(), "[config] ", path, ": '", key, "' must be an integer or a list");
  for (const json& id : value) {
    check(id.is_number_integer(), "[config] ", path, ": '", key, "' has a non-integer entry");
    ids.push_back(id.get<int64_t>());
  }
  return ids;
}

// The sparse MLP: how many experts, top-k, their width, which layers have them, how routing
// scores. Qwen3-MoE names the count num_experts, Mixtral and MiniMax-M2 num_local_experts.
void parse_moe(const json& config, const std::string& path, DecoderConfig& out) {
  Reader reader(config, path);
  MoeConfig& moe = out.moe;
  const bool qwen = out.family == DecoderFamily::Qwen3Moe;
  // The hub's Qwen3-MoE configs say num_experts, transformers 5 writes num_local_experts for all
  // three families: either is read, and both must agree when both are there.
  check(reader.has("num_experts") || reader.has("num_local_experts"), "[config] ", path,
        ": missing required field 'num_local_experts' (or 'num_experts')");
  const char* count_key = reader.has("num_local_experts") ? "num_local_experts" : "num_experts";
  moe.num_experts = reader.integer(count_key);
  if (reader.has("num_experts") && reader.has("num_local_experts"))
    check(reader.integer("num_experts") == moe.num_experts, "[config] ", path, ": num_experts (",
          reader.integer("num_experts"), ") and num_local_experts (", moe.num_experts,
          ") disagree");
  check(moe.num_experts >= 1 && moe.num_experts <= 4096, "[config] ", path, ": ", count_key,
        " must be in 1..4096, got ", moe.num_experts);
  moe.experts_per_token = reader.integer("num_experts_per_tok");
  check(moe.experts_per_token >= 1 && moe.experts_per_token <= moe.num_experts, "[config] ", path,
        ": num_experts_per_tok must be in 1..", count_key, " (", moe.num_experts, "), got ",
        moe.experts_per_token);
  moe.expert_intermediate_size =
      qwen ? reader.integer("moe_intermediate_size") : out.intermediate_size;
  check(moe.expert_intermediate_size >= 1 && moe.expert_intermediate_size <= (int64_t{1} << 20),
        "[config] ", path, ": moe_intermediate_size must be in 1..", int64_t{1} << 20, ", got ",
        moe.expert_intermediate_size);
  moe.normalize_top_k = qwen ? reader.boolean_or("norm_topk_prob", false) : true;
  moe.weights_in_model_dtype = qwen;
  moe.scoring = out.family == DecoderFamily::MiniMaxM2 ? RouterScoring::SigmoidWithBias
                                                       : RouterScoring::Softmax;
  moe.router_aux_loss_coef = reader.number_or("router_aux_loss_coef", 0.001);
  const double jitter = reader.number_or("router_jitter_noise", 0.0);
  check(jitter == 0.0, "[config] ", path, ": unsupported router_jitter_noise ", jitter,
        " (tandem routes without jitter; set it to 0.0)");

  const int64_t layers = out.num_hidden_layers;
  moe.sparse_layers.assign(static_cast<size_t>(layers), true);
  if (!qwen) {
    for (const char* key : {"decoder_sparse_step", "mlp_only_layers"})
      check(!reader.has(key), "[config] ", path, ": unsupported field '", key, "' for ",
            family_name(out.family), " (every layer has experts there)");
    return;
  }
  const int64_t step = reader.integer_or("decoder_sparse_step", 1);
  check(step >= 1, "[config] ", path, ": decoder_sparse_step must be >= 1, got ", step);
  std::set<int64_t> dense;
  if (reader.has("mlp_only_layers")) {
    const json& list = config["mlp_only_layers"];
    check(list.is_array(), "[config] ", path,
          ": 'mlp_only_layers' must be a list of layer indices");
    for (const json& layer : list) {
      check(layer.is_number_integer() && layer.get<int64_t>() >= 0 && layer.get<int64_t>() < layers,
            "[config] ", path, ": mlp_only_layers entry ", layer.dump(),
            " is not a layer index in 0..", layers - 1);
      dense.insert(layer.get<int64_t>());
    }
  }
  for (int64_t i = 0; i < layers; ++i)
    moe.sparse_layers[static_cast<size_t>(i)] = !dense.count(i) && (i + 1) % step == 0;
}

// MiniMax-M2: q/k norms across all heads, partial RoPE (rotary_dim, or partial_rotary_factor in
// rope_parameters), sigmoid routing with a per-expert bias. The released checkpoints' extra
// fields are accepted when they say exactly that.
void parse_minimax_m2(const json& config, const std::string& path, DecoderConfig& out) {
  Reader reader(config, path);
  out.qk_norm = true;
  out.qk_norm_across_heads = true;
  int64_t rotary = out.rotary_dim;  // from rope_parameters.partial_rotary_factor, if given
  if (reader.has("partial_rotary_factor")) rotary = partial_rotary_dims(reader, out.head_dim, path);
  if (reader.has("rotary_dim")) {
    const int64_t dim = reader.integer("rotary_dim");
    check(rotary == 0 || rotary == dim, "[config] ", path, ": rotary_dim ", dim,
          " disagrees with partial_rotary_factor (", rotary, " of head_dim ", out.head_dim, ")");
    rotary = dim;
  }
  check(rotary == 0 || (rotary >= 2 && rotary <= out.head_dim && rotary % 2 == 0), "[config] ",
        path, ": rotary_dim must be even and in 2..head_dim (", out.head_dim, "), got ", rotary);
  out.rotary_dim = rotary == out.head_dim ? 0 : rotary;
  auto require = [&](const char* key, const json& wanted, const char* meaning) {
    if (reader.has(key))
      check(config[key] == wanted, "[config] ", path, ": unsupported ", key, " ",
            config[key].dump(), " (tandem implements ", wanted.dump(), ": ", meaning, ")");
  };
  require("scoring_func", "sigmoid", "sigmoid router scores");
  require("use_routing_bias", true, "the e_score_correction_bias of each layer");
  require("use_qk_norm", true, "q and k RMS-normalised");
  require("qk_norm_type", "per_layer", "one norm across all heads");
  require("shared_intermediate_size", 0, "no shared expert");
  if (reader.has("attn_type_list")) {
    const json& types = config["attn_type_list"];
    check(types.is_array(), "[config] ", path, ": 'attn_type_list' must be a list");
    for (const json& type : types)
      check(type == 1, "[config] ", path, ": unsupported attn_type_list entry ", type.dump(),
            " (tandem implements 1: full softmax attention; 0 is MiniMax-01's lightning "
            "attention)");
  }
  // use_mtp, num_mtp_modules, mtp_transformer_layers: multi-token-prediction heads beside the
  // model; the causal LM (what transformers builds) does not run them.
}

}  // namespace

DecoderConfig DecoderConfig::from_json(const json& config, const std::string& path) {
  check(config.is_object(), "[config] ", path, ": expected a JSON object");
  DecoderConfig out;
  out.family = parse_family(config, path);
  const bool moe_family = is_moe_family(out.family);
  for (const auto& item : config.items()) {
    const std::string& key = item.key();
    check(key != "quantization_config", "[config] ", path,
          ": the checkpoint is quantized (quantization_config); tandem reads float weights "
          "(bf16, fp16, fp32): dequantize it to bf16 first");
    check(kMetadataFields.count(key) > 0 || (moe_family && kMoeFields.count(key) > 0) ||
              (out.family == DecoderFamily::MiniMaxM2 && kMiniMaxFields.count(key) > 0),
          "[config] ", path, ": unsupported field '", key, "' for model_type '",
          family_name(out.family),
          "' (tandem does not implement it; a model using it would be computed wrong)");
  }
  Reader reader(config, path);
  out.vocab_size = reader.integer("vocab_size");
  out.hidden_size = reader.integer("hidden_size");
  out.intermediate_size = reader.integer("intermediate_size");
  out.num_hidden_layers = reader.integer("num_hidden_layers");
  out.num_attention_heads = reader.integer("num_attention_heads");
  out.num_key_value_heads = reader.integer_or("num_key_value_heads", out.num_attention_heads);
  check(out.num_attention_heads > 0, "[config] ", path, ": num_attention_heads must be positive");
  out.head_dim = reader.integer_or("head_dim", out.hidden_size / out.num_attention_heads);
  out.rms_norm_eps = reader.number_or("rms_norm_eps", 1e-6);
  out.max_position_embeddings = reader.integer_or("max_position_embeddings", 0);
  out.validate_sizes(path);  // before the layer count sizes anything below
  out.tie_word_embeddings = reader.boolean_or("tie_word_embeddings", false);
  parse_rope(config, path, out);
  parse_sliding_window(config, path, out);

  const bool attention_bias = reader.boolean_or("attention_bias", false);
  out.qkv_bias = out.family == DecoderFamily::Qwen2 || attention_bias;
  out.o_bias = out.family != DecoderFamily::Qwen2 && attention_bias;
  out.mlp_bias = reader.boolean_or("mlp_bias", false);
  out.qk_norm = out.family == DecoderFamily::Qwen3 || out.family == DecoderFamily::Qwen3Moe;
  if (moe_family) {
    check(!out.mlp_bias, "[config] ", path, ": mlp_bias is not part of ", family_name(out.family));
    check(!attention_bias || out.family == DecoderFamily::Qwen3Moe, "[config] ", path,
          ": attention_bias is not part of ", family_name(out.family),
          " (its projections have none)");
    parse_moe(config, path, out);
  }
  if (out.family == DecoderFamily::MiniMaxM2) parse_minimax_m2(config, path, out);

  const std::string act = reader.string_or("hidden_act", "silu");
  check(act == "silu", "[config] ", path, ": unsupported hidden_act '", act,
        "' (tandem implements silu)");
  const int64_t tp = reader.integer_or("pretraining_tp", 1);
  check(tp == 1, "[config] ", path, ": unsupported pretraining_tp ", tp, " (only 1)");
  const double dropout = reader.number_or("attention_dropout", 0.0);
  check(dropout == 0.0, "[config] ", path, ": unsupported attention_dropout ", dropout,
        " (tandem runs without dropout; set it to 0.0)");

  out.torch_dtype = reader.string_or("dtype", reader.string_or("torch_dtype", ""));
  if (reader.has("bos_token_id")) out.bos_token_id = reader.integer("bos_token_id");
  if (config.contains("eos_token_id"))
    out.eos_token_ids = parse_token_ids(config["eos_token_id"], path, "eos_token_id");
  if (reader.has("pad_token_id")) out.pad_token_id = reader.integer("pad_token_id");
  if (out.pad_token_id && *out.pad_token_id < 0) out.pad_token_id.reset();  // -1: "no pad token"
  out.validate(path);
  return out;
}

void DecoderConfig::validate_sizes(const std::string& where) const {
  // Stated bounds, far above any published model (vocabularies of ~262k, widths of 16k to 25k,
  // MLPs of ~53k, 126 layers, 128 heads of up to 256 dims), checked before any size is used
  // to allocate or loop: a wrong or hostile config.json fails here, naming the field.
  auto in_range = [&](int64_t value, const char* name, int64_t bound) {
    check(value > 0 && value <= bound, "[config] ", where, ": ", name, " must be in 1..", bound,
          ", got ", value);
  };
  in_range(vocab_size, "vocab_size", int64_t{1} << 24);
  in_range(hidden_size, "hidden_size", int64_t{1} << 16);
  in_range(intermediate_size, "intermediate_size", int64_t{1} << 20);
  in_range(num_hidden_layers, "num_hidden_layers", 1024);
  in_range(num_attention_heads, "num_attention_heads", 1024);
  in_range(num_key_value_heads, "num_key_value_heads", 1024);
  in_range(head_dim, "head_dim", 4096);
}

void DecoderConfig::validate(const std::string& where) const {
  validate_sizes(where);
  check(max_position_embeddings >= 0 && max_position_embeddings <= (int64_t{1} << 30), "[config] ",
        where, ": max_position_embeddings must be in 0..", int64_t{1} << 30,
        " (0: not given), got ", max_position_embeddings);
  for (const auto& [name, id] :
       {std::pair{"bos_token_id", bos_token_id}, std::pair{"pad_token_id", pad_token_id}})
    if (id)
      check(*id >= 0 && *id < vocab_size, "[config] ", where, ": ", name, " ", *id,
            " is outside the vocabulary [0, ", vocab_size, ")");
  check(head_dim % 2 == 0, "[config] ", where, ": head_dim must be even for RoPE, got ", head_dim);
  check(num_attention_heads % num_key_value_heads == 0, "[config] ", where,
        ": num_attention_heads (", num_attention_heads, ") is not a multiple of ",
        "num_key_value_heads (", num_key_value_heads, ")");
  check(rms_norm_eps > 0, "[config] ", where, ": rms_norm_eps must be positive");
  check(std::isfinite(rope_theta) && rope_theta > 0, "[config] ", where,
        ": rope_theta must be a finite number > 0");
  check(static_cast<int64_t>(sliding_window.size()) == num_hidden_layers, "[config] ", where,
        ": one sliding window entry per layer expected");
  if (rope_scaling.type == "llama3") {
    check(rope_scaling.factor > 0 && rope_scaling.original_max_position_embeddings > 0 &&
              rope_scaling.high_freq_factor > rope_scaling.low_freq_factor,
          "[config] ", where, ": invalid llama3 rope scaling parameters");
  }
  for (int64_t id : eos_token_ids)
    check(id >= 0 && id < vocab_size, "[config] ", where, ": eos_token_id ", id,
          " is outside the vocabulary [0, ", vocab_size, ")");
  check(rotary_dim == 0 || (rotary_dim >= 2 && rotary_dim <= head_dim && rotary_dim % 2 == 0),
        "[config] ", where, ": rotary_dim must be even and in 2..head_dim, got ", rotary_dim);
  check(!qk_norm_across_heads || qk_norm, "[config] ", where,
        ": q/k norms across heads need qk_norm");
  if (moe.enabled()) {
    check(moe.experts_per_token >= 1 && moe.experts_per_token <= moe.num_experts, "[config] ",
          where, ": num_experts_per_tok must be in 1..", moe.num_experts);
    check(moe.expert_intermediate_size >= 1, "[config] ", where,
          ": the experts' intermediate size must be positive");
    check(static_cast<int64_t>(moe.sparse_layers.size()) == num_hidden_layers, "[config] ", where,
          ": one experts-or-dense entry per layer expected");
  }
}

DecoderConfig DecoderConfig::dense_layer_base() const {
  DecoderConfig base = *this;
  base.moe = MoeConfig();
  base.rotary_dim = 0;
  base.qk_norm_across_heads = false;
  return base;
}

DecoderConfig DecoderConfig::from_dir(const std::string& dir) {
  const std::string path = dir + "/config.json";
  return from_json(
      read_json_file(path, "config", " (is '" + dir + "' an HF checkpoint directory?)"), path);
}

json DecoderConfig::to_json() const {
  json out;
  out["architectures"] = {architecture_name(family)};
  out["model_type"] = family_name(family);
  out["vocab_size"] = vocab_size;
  out["hidden_size"] = hidden_size;
  out["intermediate_size"] = intermediate_size;
  out["num_hidden_layers"] = num_hidden_layers;
  out["num_attention_heads"] = num_attention_heads;
  out["num_key_value_heads"] = num_key_value_heads;
  out["head_dim"] = head_dim;
  out["hidden_act"] = "silu";
  out["rms_norm_eps"] = rms_norm_eps;
  out["rope_theta"] = rope_theta;
  if (rope_scaling.type == "llama3") {
    out["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", rope_scaling.factor},
        {"low_freq_factor", rope_scaling.low_freq_factor},
        {"high_freq_factor", rope_scaling.high_freq_factor},
        {"original_max_position_embeddings", rope_scaling.original_max_position_embeddings}};
  } else {
    out["rope_scaling"] = nullptr;
  }
  if (max_position_embeddings > 0) out["max_position_embeddings"] = max_position_embeddings;
  out["tie_word_embeddings"] = tie_word_embeddings;
  const bool bias_field = family != DecoderFamily::Qwen2 && family != DecoderFamily::Mixtral &&
                          family != DecoderFamily::MiniMaxM2;
  if (bias_field) out["attention_bias"] = o_bias;
  if (family == DecoderFamily::Llama) out["mlp_bias"] = mlp_bias;
  out["attention_dropout"] = 0.0;
  if (moe.enabled()) {
    out["num_local_experts"] = moe.num_experts;  // transformers 5's spelling for all three
    out["num_experts_per_tok"] = moe.experts_per_token;
    out["router_aux_loss_coef"] = moe.router_aux_loss_coef;
    out["output_router_logits"] = false;
  }
  if (family == DecoderFamily::Qwen3Moe) {
    out["moe_intermediate_size"] = moe.expert_intermediate_size;
    out["norm_topk_prob"] = moe.normalize_top_k;
    out["decoder_sparse_step"] = 1;
    std::vector<int64_t> dense;
    for (size_t i = 0; i < moe.sparse_layers.size(); ++i)
      if (!moe.sparse_layers[i]) dense.push_back(static_cast<int64_t>(i));
    out["mlp_only_layers"] = dense;
  }
  if (family == DecoderFamily::MiniMaxM2) {
    out["rotary_dim"] = rotated_dims();  // the field vLLM and SGLang read; transformers too
    out["router_jitter_noise"] = 0.0;
  }
  const int64_t window = *std::max_element(sliding_window.begin(), sliding_window.end());
  if (family == DecoderFamily::Mistral || family == DecoderFamily::Mixtral) {
    out["sliding_window"] = window > 0 ? json(window) : json(nullptr);
  } else if (family == DecoderFamily::Qwen3Moe) {
    out["use_sliding_window"] = window > 0;
    out["sliding_window"] = window > 0 ? json(window) : json(nullptr);
  } else if (family != DecoderFamily::Llama && family != DecoderFamily::MiniMaxM2 && window > 0) {
    std::vector<std::string> types;
    for (int64_t w : sliding_window)
      types.push_back(w > 0 ? "sliding_attention" : "full_attention");
    out["use_sliding_window"] = true;
    out["sliding_window"] = window;
    out["layer_types"] = types;
  }
  if (!torch_dtype.empty()) out["torch_dtype"] = torch_dtype;
  if (bos_token_id) out["bos_token_id"] = *bos_token_id;
  if (eos_token_ids.size() == 1) out["eos_token_id"] = eos_token_ids[0];
  if (eos_token_ids.size() > 1) out["eos_token_id"] = eos_token_ids;
  if (pad_token_id) out["pad_token_id"] = *pad_token_id;
  return out;
}

}  // namespace tandem
