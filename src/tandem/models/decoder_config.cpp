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
    case DecoderFamily::Llama: return "llama";
    case DecoderFamily::Mistral: return "mistral";
    case DecoderFamily::Qwen2: return "qwen2";
    case DecoderFamily::Qwen3: return "qwen3";
  }
  return "?";
}

namespace {

const char* architecture_name(DecoderFamily family) {
  switch (family) {
    case DecoderFamily::Llama: return "LlamaForCausalLM";
    case DecoderFamily::Mistral: return "MistralForCausalLM";
    case DecoderFamily::Qwen2: return "Qwen2ForCausalLM";
    case DecoderFamily::Qwen3: return "Qwen3ForCausalLM";
  }
  return "?";
}

// Fields that describe how the model was trained, cached or tokenised, never what it computes.
const std::set<std::string> kMetadataFields = {
    "_name_or_path", "architectures", "model_type", "transformers_version", "initializer_range",
    "use_cache", "torch_dtype", "dtype", "bos_token_id", "eos_token_id", "pad_token_id",
    "output_attentions", "output_hidden_states", "return_dict", "tie_word_embeddings",
    "use_sliding_window", "max_window_layers", "sliding_window", "layer_types", "head_dim",
    "rope_theta", "rope_scaling", "rope_parameters", "attention_bias", "mlp_bias",
    "attention_dropout", "hidden_act", "pretraining_tp", "rms_norm_eps", "vocab_size",
    "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "max_position_embeddings", "is_decoder", "chunk_size_feed_forward",
    "id2label", "label2id", "problem_type", "tokenizer_class", "prefix", "task_specific_params",
    "finetuning_task", "bad_words_ids", "decoder_start_token_id", "sep_token_id"};

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

DecoderFamily parse_family(const json& config, const std::string& path) {
  check(config.contains("model_type") && config["model_type"].is_string(), "[config] ", path,
        ": missing 'model_type' (expected llama, mistral, qwen2 or qwen3)");
  const std::string type = config["model_type"];
  DecoderFamily family;
  if (type == "llama") family = DecoderFamily::Llama;
  else if (type == "mistral") family = DecoderFamily::Mistral;
  else if (type == "qwen2") family = DecoderFamily::Qwen2;
  else if (type == "qwen3") family = DecoderFamily::Qwen3;
  else
    throw Error("[config] ", path, ": unsupported model_type '", type,
                "' (tandem supports llama, mistral, qwen2, qwen3)");
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
  out.rope_theta = rope.has("rope_theta") ? rope.number("rope_theta")
                                          : top.number_or("rope_theta", 10000.0);
  std::string type = rope.string_or("rope_type", rope.string_or("type", "default"));
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
    static const std::set<std::string> known = {"rope_type", "type", "rope_theta", "factor",
                                                "low_freq_factor", "high_freq_factor",
                                                "original_max_position_embeddings"};
    check(known.count(item.key()) > 0, "[config] ", path, ": unsupported RoPE field '",
          item.key(), "' for llama3 scaling");
  }
}

// Sliding windows per layer: Mistral's `sliding_window`, Qwen's `use_sliding_window` with
// `max_window_layers`, or transformers 5's explicit `layer_types`.
void parse_sliding_window(const json& config, const std::string& path, DecoderConfig& out) {
  Reader reader(config, path);
  const int64_t layers = out.num_hidden_layers;
  out.sliding_window.assign(layers, 0);
  const int64_t window = reader.integer_or("sliding_window", 0);
  if (out.family == DecoderFamily::Mistral) {
    if (window > 0) out.sliding_window.assign(layers, window);
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

std::vector<int64_t> parse_token_ids(const json& value, const std::string& path,
                                     const char* key) {
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

}  // namespace

DecoderConfig DecoderConfig::from_json(const json& config, const std::string& path) {
  check(config.is_object(), "[config] ", path, ": expected a JSON object");
  for (const auto& item : config.items()) {
    check(kMetadataFields.count(item.key()) > 0, "[config] ", path, ": unsupported field '",
          item.key(), "' (tandem does not implement it; a model using it would be computed wrong)");
  }
  DecoderConfig out;
  out.family = parse_family(config, path);
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
  out.qk_norm = out.family == DecoderFamily::Qwen3;

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
        where, ": max_position_embeddings must be in 0..", int64_t{1} << 30, " (0: not given), got ",
        max_position_embeddings);
  for (const auto& [name, id] : {std::pair{"bos_token_id", bos_token_id},
                                 std::pair{"pad_token_id", pad_token_id}})
    if (id) check(*id >= 0 && *id < vocab_size, "[config] ", where, ": ", name, " ", *id,
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
    out["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", rope_scaling.factor},
                           {"low_freq_factor", rope_scaling.low_freq_factor},
                           {"high_freq_factor", rope_scaling.high_freq_factor},
                           {"original_max_position_embeddings",
                            rope_scaling.original_max_position_embeddings}};
  } else {
    out["rope_scaling"] = nullptr;
  }
  if (max_position_embeddings > 0) out["max_position_embeddings"] = max_position_embeddings;
  out["tie_word_embeddings"] = tie_word_embeddings;
  if (family != DecoderFamily::Qwen2) out["attention_bias"] = o_bias;
  if (family == DecoderFamily::Llama) out["mlp_bias"] = mlp_bias;
  out["attention_dropout"] = 0.0;
  const int64_t window = *std::max_element(sliding_window.begin(), sliding_window.end());
  if (family == DecoderFamily::Mistral) {
    out["sliding_window"] = window > 0 ? json(window) : json(nullptr);
  } else if (family != DecoderFamily::Llama && window > 0) {
    std::vector<std::string> types;
    for (int64_t w : sliding_window) types.push_back(w > 0 ? "sliding_attention" : "full_attention");
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
