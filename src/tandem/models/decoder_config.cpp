// The reader and the writer of config.json. What differs between families (names, fields, the
// layers they imply, the export's spelling) is the table in family_traits.cpp, read here.
#include "tandem/models/decoder_config.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "tandem/core/error.h"
#include "tandem/core/json_file.h"
#include "tandem/io/quantization_config.h"
#include "tandem/models/family_traits.h"

namespace tandem {

using nlohmann::json;

namespace {

// The bound of every position count (max_position_embeddings, windows): far above any model.
constexpr int64_t kMaxPositions = int64_t{1} << 30;

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

// The table's entry for config.json's model_type, the architectures checked against it (a
// wrapped family's decoder read alone names its text architecture).
const FamilyTraits& parse_family(const json& config, const std::string& path) {
  check(config.contains("model_type") && config["model_type"].is_string(), "[config] ", path,
        ": missing 'model_type' (expected ", family_names(), ")");
  const std::string type = config["model_type"];
  const FamilyTraits* family = find_family(type);
  check(family != nullptr, "[config] ", path, ": unsupported model_type '", type,
        "' (tandem supports ", family_names(), ")");
  // Qwen3.5's decoder read alone, Gemma 3's wrapper: the architecture of that form.
  const bool text_alone =
      family->hybrid.text_model_type != nullptr && type == family->hybrid.text_model_type;
  const bool wrapper = family->wrapper_model_type != nullptr && type == family->wrapper_model_type;
  const std::string expected = text_alone ? family->hybrid.text_architecture
                               : wrapper  ? family->wrapper_architecture
                                          : family->architecture;
  if (config.contains("architectures") && config["architectures"].is_array()) {
    for (const json& arch : config["architectures"]) {
      check(arch.is_string() && arch.get<std::string>() == expected, "[config] ", path,
            ": unsupported architecture ", arch.dump(), " for model_type '", type, "' (expected ",
            expected, ")");
    }
  }
  return *family;
}

// A vision-language wrapper (Qwen3.5/3.6, Gemma 3): its decoder's config.json object,
// `text_config`, with the wrapper's tie_word_embeddings when it states one (transformers ties by
// the wrapper's). The wrapper's own fields are the vision tower's and its special tokens, none of
// which the decoder reads; anything else is an error naming it.
json unwrap_text_config(const json& config, const std::string& path, const FamilyTraits& family) {
  static const std::set<std::string> wrapper_fields = {
      "text_config", "vision_config", "image_token_id", "video_token_id", "vision_start_token_id",
      "vision_end_token_id", "tie_word_embeddings",
      // Gemma 3's image tokens
      "boi_token_index", "eoi_token_index", "image_token_index", "mm_tokens_per_image"};
  for (const auto& item : config.items())
    check(wrapper_fields.count(item.key()) > 0 || common_config_fields().count(item.key()) > 0,
          "[config] ", path, ": unsupported field '", item.key(), "' for ", family.model_type,
          " (tandem reads the decoder in text_config and the vision tower's fields only)");
  check(config.contains("text_config") && config["text_config"].is_object(), "[config] ", path,
        ": model_type '", family.model_type,
        "' is a vision-language wrapper; its decoder must be the object 'text_config'");
  json text = config["text_config"];
  if (!text.contains("model_type")) text["model_type"] = text_model_type(family);
  check(text["model_type"] == text_model_type(family), "[config] ", path,
        ": text_config.model_type must be '", text_model_type(family), "', got ",
        text["model_type"].dump());
  if (config.contains("tie_word_embeddings") && !config["tie_word_embeddings"].is_null())
    text["tie_word_embeddings"] = config["tie_word_embeddings"];
  return text;
}

// Every field is common to all families or judged by the family's rule for it: anything else
// would change the model in a way tandem does not compute. Null reads as absent.
void check_fields(const json& config, const std::string& path, const FamilyTraits& family) {
  const char* name = family.model_type;
  for (const auto& item : config.items()) {
    const std::string& key = item.key();
    const json& value = item.value();
    if (key == "quantization_config") {  // block-wise FP8 (io/block_fp8.h), MXFP4 (io/mxfp4.h)
      const QuantizationConfig quantization = read_quantization_config(config, path);
      check(!quantization.mxfp4 || family.moe.gpt_oss_experts, "[config] ", path,
            ": quantization_config says mxfp4, which tandem reads for gpt-oss's experts only, "
            "not for model_type '",
            name, "': dequantize it to bf16 first");
      continue;
    }
    const FieldRule* rule = family.rule(key);
    if (rule == nullptr) {
      check(common_config_fields().count(key) > 0, "[config] ", path, ": unsupported field '", key,
            "' for model_type '", name,
            "' (tandem does not implement it; a model using it would be computed wrong)");
      continue;
    }
    if (value.is_null()) continue;
    switch (rule->kind) {
      case FieldRule::Kind::Accepted:
        break;
      case FieldRule::Kind::Refused:
        throw Error("[config] ", path, ": unsupported field '", key, "' for ", name, " (",
                    rule->reason, ")");
      case FieldRule::Kind::OnlyValue:
        check(value == rule->value, "[config] ", path, ": unsupported ", key, " ", value.dump(),
              " for ", name, " (tandem implements ", rule->value.dump(), ": ", rule->reason, ")");
        break;
      case FieldRule::Kind::OnlyEntries:
        check(value.is_array(), "[config] ", path, ": '", key, "' must be a list");
        for (const json& entry : value)
          check(entry == rule->value, "[config] ", path, ": unsupported ", key, " entry ",
                entry.dump(), " for ", name, " (tandem implements ", rule->value.dump(), ": ",
                rule->reason, ")");
        break;
    }
  }
}

// rope_theta and rope_scaling (transformers 4) or rope_parameters (transformers 5).
void parse_rope(const json& config, const std::string& path, const FamilyTraits& family,
                DecoderConfig& out) {
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
    check(family.partial_rope, "[config] ", path, ": partial_rotary_factor is implemented for ",
          family_names([](const FamilyTraits& f) { return f.partial_rope; }), " only");
    out.rotary_dim = partial_rotary_dims(rope, out.head_dim, path);
  }
  if (type == "default") return;
  check(type == "linear" || type == "llama3" || type == "yarn", "[config] ", path,
        ": unsupported RoPE scaling type '", type,
        "' (tandem implements default, linear, llama3 and yarn)");
  RopeScaling& r = out.rope_scaling;
  r.type = type;
  if (type == "llama3" || type == "linear") r.factor = rope.number("factor");
  std::set<std::string> known = {"rope_type",
                                 "type",
                                 "rope_theta",
                                 "factor",
                                 "partial_rotary_factor",
                                 "original_max_position_embeddings"};
  if (type == "linear") {
    // every frequency divided by factor: nothing else is read
  } else if (type == "llama3") {
    r.low_freq_factor = rope.number("low_freq_factor");
    r.high_freq_factor = rope.number("high_freq_factor");
    r.original_max_position_embeddings = rope.integer("original_max_position_embeddings");
    known.insert({"low_freq_factor", "high_freq_factor"});
  } else {
    // transformers reads the original context from here, else from max_position_embeddings.
    r.original_max_position_embeddings =
        rope.integer_or("original_max_position_embeddings", out.max_position_embeddings);
    // A null factor is the context's growth (transformers recomputes it so).
    check(rope.has("factor") ||
              (r.original_max_position_embeddings > 0 && out.max_position_embeddings > 0),
          "[config] ", path,
          ": yarn scaling without a factor needs max_position_embeddings and "
          "original_max_position_embeddings (the factor is their ratio)");
    r.factor = rope.has("factor") ? rope.number("factor")
                                  : static_cast<double>(out.max_position_embeddings) /
                                        static_cast<double>(r.original_max_position_embeddings);
    // 0 reads as absent (transformers: `or 32`, `or 1`).
    r.beta_fast = rope.number_or("beta_fast", 0.0);
    r.beta_slow = rope.number_or("beta_slow", 0.0);
    if (r.beta_fast == 0) r.beta_fast = 32.0;
    if (r.beta_slow == 0) r.beta_slow = 1.0;
    r.truncate = rope.boolean_or("truncate", true);
    r.mscale = rope.number_or("mscale", 0.0);
    r.mscale_all_dim = rope.number_or("mscale_all_dim", 0.0);
    r.attention_factor = rope.number_or("attention_factor", 0.0);
    known.insert(
        {"beta_fast", "beta_slow", "truncate", "mscale", "mscale_all_dim", "attention_factor"});
  }
  for (const auto& item : scaling.items())
    check(known.count(item.key()) > 0, "[config] ", path, ": unsupported RoPE field '", item.key(),
          "' for ", type, " scaling");
}

// Sliding windows per layer, as the family spells them (WindowReading): Mistral's
// `sliding_window`, Qwen's `use_sliding_window` with `max_window_layers`, or transformers 5's
// explicit `layer_types`. A window of 0 or null is none (transformers: null); negative is an
// error for every family, even one that ignores the field.
void parse_sliding_window(const json& config, const std::string& path, const FamilyTraits& family,
                          DecoderConfig& out) {
  Reader reader(config, path);
  const int64_t layers = out.num_hidden_layers;
  out.sliding_window.assign(layers, 0);
  const int64_t window = reader.integer_or("sliding_window", 0);
  check(window >= 0 && window <= kMaxPositions, "[config] ", path,
        ": sliding_window must be in 0..", kMaxPositions, " (0 or null: no window), got ", window);
  auto use_sliding_window = [&] {
    if (!reader.boolean_or("use_sliding_window", false)) return false;
    check(window > 0, "[config] ", path, ": use_sliding_window is true but sliding_window is ",
          window);
    return true;
  };
  switch (family.windows) {
    case WindowReading::Ignored:  // transformers ignores sliding_window there
      return;
    case WindowReading::EveryLayer:
      if (window > 0) out.sliding_window.assign(layers, window);
      break;
    case WindowReading::AllOrNone:  // the attention reads use_sliding_window alone
      if (use_sliding_window()) out.sliding_window.assign(layers, window);
      return;
    case WindowReading::LayerTypesOrPattern:
      if (!reader.has("layer_types")) {  // transformers' default: every n-th layer full
        const int64_t pattern = reader.integer_or("sliding_window_pattern", family.window_pattern);
        check(pattern >= 1, "[config] ", path, ": sliding_window_pattern must be >= 1, got ",
              pattern);
        check(window > 0 || pattern == 1, "[config] ", path,
              ": sliding_window must be set for the sliding-window layers");
        for (int64_t i = 0; i < layers; ++i)
          out.sliding_window[i] = (i + 1) % pattern == 0 ? 0 : window;
        return;
      }
      break;
    case WindowReading::MaxWindowLayers:
      if (use_sliding_window()) {
        const int64_t first = reader.integer_or("max_window_layers", layers);
        check(first >= 0, "[config] ", path,
              ": max_window_layers (the first layer with a window) must be >= 0, got ", first);
        for (int64_t i = first; i < layers; ++i) out.sliding_window[i] = window;
      }
      break;
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

// DeepSeek-V3's sparse MLP beyond the common fields: group-limited routing, the scaling of the
// chosen weights, the ungated shared experts, the dense first layers. transformers' defaults for
// these differ between the families that use them, so each must be stated (the published
// config.json files state every one).
void parse_deepseek_moe(const Reader& reader, const std::string& path, DecoderConfig& out) {
  MoeConfig& moe = out.moe;
  moe.groups = reader.integer("n_group");
  moe.top_groups = reader.integer("topk_group");
  check(moe.groups >= 1 && moe.num_experts % moe.groups == 0, "[config] ", path, ": n_group (",
        moe.groups, ") must divide n_routed_experts (", moe.num_experts, ")");
  const int64_t per_group = moe.num_experts / moe.groups;
  check(per_group >= 2, "[config] ", path, ": each of the n_group (", moe.groups,
        ") groups needs at least 2 experts (a group scores by its best two), got ", per_group);
  check(moe.top_groups >= 1 && moe.top_groups <= moe.groups, "[config] ", path,
        ": topk_group must be in 1..n_group (", moe.groups, "), got ", moe.top_groups);
  check(moe.top_groups * per_group >= moe.experts_per_token, "[config] ", path, ": topk_group (",
        moe.top_groups, ") groups of ", per_group, " experts hold fewer than num_experts_per_tok (",
        moe.experts_per_token, ")");
  moe.routed_scaling_factor = reader.number("routed_scaling_factor");
  check(std::isfinite(moe.routed_scaling_factor) && moe.routed_scaling_factor > 0, "[config] ",
        path, ": routed_scaling_factor must be a finite number > 0, got ",
        moe.routed_scaling_factor);
  const int64_t shared = reader.integer("n_shared_experts");
  check(shared >= 0 && shared <= 64, "[config] ", path, ": n_shared_experts must be in 0..64, got ",
        shared);
  moe.shared_expert_intermediate_size = shared * moe.expert_intermediate_size;
  moe.shared_expert_gated = false;
  const int64_t layers = out.num_hidden_layers;
  const int64_t dense = reader.integer("first_k_dense_replace");
  check(dense >= 0 && dense <= layers, "[config] ", path,
        ": first_k_dense_replace must be in 0..num_hidden_layers (", layers, "), got ", dense);
  for (int64_t i = 0; i < dense; ++i) moe.sparse_layers[static_cast<size_t>(i)] = false;
}

// gpt-oss's experts: the clamped SwiGLU's limit and gain (transformers' defaults filled by the
// family table), and the published configs' second spelling of top-k, which must agree.
void parse_gpt_oss_experts(const Reader& reader, const std::string& path, DecoderConfig& out) {
  ClampedSwiglu& swiglu = out.moe.gpt_oss_experts;
  swiglu.limit = reader.number("swiglu_limit");
  swiglu.alpha = reader.number("swiglu_alpha");
  check(std::isfinite(swiglu.limit) && swiglu.limit > 0, "[config] ", path,
        ": swiglu_limit must be a finite number > 0, got ", swiglu.limit);
  check(std::isfinite(swiglu.alpha) && swiglu.alpha > 0, "[config] ", path,
        ": swiglu_alpha must be a finite number > 0, got ", swiglu.alpha);
  if (reader.has("experts_per_token"))
    check(reader.integer("experts_per_token") == out.moe.experts_per_token, "[config] ", path,
          ": experts_per_token (", reader.integer("experts_per_token"),
          ") and num_experts_per_tok (", out.moe.experts_per_token, ") disagree");
}

// The sparse MLP: how many experts, top-k, their width, which layers have them, how routing
// scores, as the family's MoeTraits say.
void parse_moe(const json& config, const std::string& path, const MoeTraits& family,
               DecoderConfig& out) {
  Reader reader(config, path);
  MoeConfig& moe = out.moe;
  // The hub's Qwen3-MoE configs say num_experts, transformers 5 writes num_local_experts for all
  // three families: either is read, and both must agree when both are there.
  // DeepSeek-V3's layout says n_routed_experts (transformers' alias: num_local_experts).
  const char* other_key = family.deepseek_layout ? "n_routed_experts" : "num_experts";
  check(reader.has(other_key) || reader.has("num_local_experts"), "[config] ", path,
        ": missing required field 'num_local_experts' (or '", other_key, "')");
  const char* count_key = reader.has("num_local_experts") ? "num_local_experts" : other_key;
  moe.num_experts = reader.integer(count_key);
  if (reader.has(other_key) && reader.has("num_local_experts"))
    check(reader.integer(other_key) == moe.num_experts, "[config] ", path, ": ", other_key, " (",
          reader.integer(other_key), ") and num_local_experts (", moe.num_experts, ") disagree");
  check(moe.num_experts >= 1 && moe.num_experts <= 4096, "[config] ", path, ": ", count_key,
        " must be in 1..4096, got ", moe.num_experts);
  moe.experts_per_token = reader.integer("num_experts_per_tok");
  check(moe.experts_per_token >= 1 && moe.experts_per_token <= moe.num_experts, "[config] ", path,
        ": num_experts_per_tok must be in 1..", count_key, " (", moe.num_experts, "), got ",
        moe.experts_per_token);
  moe.expert_intermediate_size =
      family.own_expert_width ? reader.integer("moe_intermediate_size") : out.intermediate_size;
  check(moe.expert_intermediate_size >= 1 && moe.expert_intermediate_size <= (int64_t{1} << 20),
        "[config] ", path, ": moe_intermediate_size must be in 1..", int64_t{1} << 20, ", got ",
        moe.expert_intermediate_size);
  // transformers' default: false in Qwen3-MoE and Qwen3-Next, true in DeepSeek-V3's layout.
  moe.normalize_top_k = family.reads_norm_topk_prob
                            ? reader.boolean_or("norm_topk_prob", family.deepseek_layout)
                            : true;
  moe.weights_in_model_dtype = family.weights_in_model_dtype;
  moe.scoring = family.scoring;
  if (family.shared_expert) {
    moe.shared_expert_intermediate_size = reader.integer("shared_expert_intermediate_size");
    check(moe.shared_expert_intermediate_size >= 0 &&
              moe.shared_expert_intermediate_size <= (int64_t{1} << 20),
          "[config] ", path, ": shared_expert_intermediate_size must be in 0..", int64_t{1} << 20,
          " (0: none), got ", moe.shared_expert_intermediate_size);
  }
  moe.router_aux_loss_coef = reader.number_or("router_aux_loss_coef", 0.001);
  check(std::isfinite(moe.router_aux_loss_coef) && moe.router_aux_loss_coef >= 0, "[config] ", path,
        ": router_aux_loss_coef must be a finite number >= 0, got ", moe.router_aux_loss_coef);
  const double jitter = reader.number_or("router_jitter_noise", 0.0);
  check(jitter == 0.0, "[config] ", path, ": unsupported router_jitter_noise ", jitter,
        " (tandem routes without jitter; set it to 0.0)");

  if (family.gpt_oss_experts) parse_gpt_oss_experts(reader, path, out);

  const int64_t layers = out.num_hidden_layers;
  moe.sparse_layers.assign(static_cast<size_t>(layers), true);
  if (family.deepseek_layout) return parse_deepseek_moe(reader, path, out);
  if (!family.dense_layers_listed) return;  // every layer has experts
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

// Partial RoPE: rotary_dim, or partial_rotary_factor at the top level or in rope_parameters
// (parse_rope read that one), which must agree when both are given; else the family's default
// factor, as transformers fills it in.
void parse_partial_rope(const json& config, const std::string& path, const FamilyTraits& family,
                        DecoderConfig& out) {
  Reader reader(config, path);
  int64_t rotary = out.rotary_dim;  // from rope_parameters.partial_rotary_factor, if given
  if (reader.has("partial_rotary_factor")) rotary = partial_rotary_dims(reader, out.head_dim, path);
  if (rotary == 0 && !reader.has("rotary_dim") && family.default_partial_rotary_factor > 0)
    rotary = static_cast<int64_t>(static_cast<double>(out.head_dim) *
                                  family.default_partial_rotary_factor);
  if (reader.has("rotary_dim")) {
    const int64_t dim = reader.integer("rotary_dim");
    check(rotary == 0 || rotary == dim, "[config] ", path, ": rotary_dim ", dim,
          " disagrees with partial_rotary_factor (", rotary, " of head_dim ", out.head_dim, ")");
    rotary = dim;
  }
  check(rotary == 0 || (rotary >= 2 && rotary <= out.head_dim && rotary % 2 == 0), "[config] ",
        path, ": rotary_dim must be even and in 2..head_dim (", out.head_dim, "), got ", rotary);
  out.rotary_dim = rotary == out.head_dim ? 0 : rotary;
}

// The hybrid layers: Gated DeltaNet sizes, and which layers they are: `layer_types`
// (linear_attention / full_attention), else every full_attention_interval-th layer attends
// (transformers' default 4). Attention is gated and every RMSNorm is of the (1 + weight) form.
void parse_hybrid(const json& config, const std::string& path, const HybridTraits& family,
                  DecoderConfig& out) {
  Reader reader(config, path);
  LinearAttentionConfig& linear = out.linear_attention;
  linear.key_heads = reader.integer("linear_num_key_heads");
  linear.value_heads = reader.integer("linear_num_value_heads");
  linear.key_dim = reader.integer("linear_key_head_dim");
  linear.value_dim = reader.integer("linear_value_head_dim");
  linear.conv_kernel = reader.integer("linear_conv_kernel_dim");
  linear.fused_projections = family.fused_projections;
  const int64_t layers = out.num_hidden_layers;
  linear.layers.assign(static_cast<size_t>(layers), false);
  if (reader.has("layer_types")) {
    const json& types = config["layer_types"];
    check(types.is_array() && static_cast<int64_t>(types.size()) == layers, "[config] ", path,
          ": 'layer_types' must list one type per layer (", layers, ")");
    for (int64_t i = 0; i < layers; ++i) {
      const std::string type = types[i].is_string() ? types[i].get<std::string>() : "";
      check(type == "linear_attention" || type == "full_attention", "[config] ", path,
            ": unsupported layer type ", types[i].dump(), " at layer ", i,
            " (a hybrid's layers are linear_attention or full_attention)");
      linear.layers[static_cast<size_t>(i)] = type == "linear_attention";
    }
  } else {
    const int64_t interval = reader.integer_or("full_attention_interval", 4);
    check(interval >= 1 && interval <= layers, "[config] ", path,
          ": full_attention_interval must be in 1..num_hidden_layers (", layers, "), got ",
          interval);
    for (int64_t i = 0; i < layers; ++i)
      linear.layers[static_cast<size_t>(i)] = (i + 1) % interval != 0;
  }
  out.gated_attention = true;
  out.zero_centered_norms = true;
}

// Gemma 3's RoPE: transformers 5 writes rope_parameters per layer type (`full_attention`,
// `sliding_attention`); transformers 4 rope_theta / rope_scaling for the full layers and
// rope_local_base_freq for the sliding ones. The sliding layers' RoPE is default RoPE.
void parse_gemma_rope(const json& config, const std::string& path, const FamilyTraits& family,
                      DecoderConfig& out) {
  Reader top(config, path);
  const bool per_type = top.has("rope_parameters") && config["rope_parameters"].is_object() &&
                        config["rope_parameters"].contains("full_attention");
  if (!per_type) {
    parse_rope(config, path, family, out);
    if (!top.has("rope_theta") && !top.has("rope_parameters"))
      out.rope_theta = 1e6;  // transformers' Gemma 3 default
    out.gemma.local_rope_theta = top.number_or("rope_local_base_freq", 10000.0);
    return;
  }
  const json& both = config["rope_parameters"];
  for (const auto& item : both.items())
    check(item.key() == "full_attention" || item.key() == "sliding_attention", "[config] ", path,
          ": rope_parameters has an entry for '", item.key(),
          "' (Gemma 3 has full_attention and sliding_attention)");
  json full = config;
  full["rope_parameters"] = both["full_attention"];
  parse_rope(full, path + ": rope_parameters.full_attention", family, out);
  // As transformers: a type without its own rope_theta takes the top-level field, else 1e6 / 1e4.
  if (!both["full_attention"].is_object() || !both["full_attention"].contains("rope_theta"))
    out.rope_theta = top.number_or("rope_theta", 1e6);
  out.gemma.local_rope_theta = top.number_or("rope_local_base_freq", 10000.0);
  if (both.contains("sliding_attention") && !both["sliding_attention"].is_null()) {
    const json& local = both["sliding_attention"];
    check(local.is_object(), "[config] ", path,
          ": rope_parameters.sliding_attention must be an object");
    Reader reader(local, path + ": rope_parameters.sliding_attention");
    const std::string type = reader.string_or("rope_type", reader.string_or("type", "default"));
    check(type == "default", "[config] ", path, ": unsupported RoPE type '", type,
          "' for the sliding-window layers (tandem implements default there)");
    for (const auto& item : local.items())
      check(item.key() == "rope_type" || item.key() == "type" || item.key() == "rope_theta",
            "[config] ", path, ": unsupported field '", item.key(),
            "' in rope_parameters.sliding_attention");
    out.gemma.local_rope_theta = reader.number_or("rope_theta", out.gemma.local_rope_theta);
  }
}

// Gemma 3's layers and activation (transformers' defaults for absent fields: FamilyTraits).
void parse_gemma(const json& config, const std::string& path, DecoderConfig& out) {
  Reader reader(config, path);
  GemmaLayers& g = out.gemma;
  g.sandwich_norms = true;
  g.scaled_embeddings = true;
  g.query_pre_attn_scalar = reader.number_or("query_pre_attn_scalar", 256.0);
  check(std::isfinite(g.query_pre_attn_scalar) && g.query_pre_attn_scalar > 0, "[config] ", path,
        ": query_pre_attn_scalar must be a finite number > 0, got ", g.query_pre_attn_scalar);
  check(std::isfinite(g.local_rope_theta) && g.local_rope_theta > 0, "[config] ", path,
        ": the sliding-window layers' rope_theta must be a finite number > 0, got ",
        g.local_rope_theta);
  const std::string act =
      reader.string_or("hidden_activation", reader.string_or("hidden_act", "gelu_pytorch_tanh"));
  check(act == "gelu_pytorch_tanh", "[config] ", path, ": unsupported hidden_activation '", act,
        "' (tandem implements gelu_pytorch_tanh for Gemma 3)");
  out.mlp_activation = MlpActivation::GeluTanh;
  out.zero_centered_norms = true;
}

// DeepSeek-V3's multi-head latent attention. Defaults transformers' families disagree on, or
// that decide the layer's shapes, must be stated; rope_interleave defaults to true, the layout of
// every published DeepSeek-V3 / Kimi-K2 checkpoint. head_dim becomes qk_head_dim (what the
// attention kernels see) and rotary_dim qk_rope_head_dim (the RoPE tables' width).
void parse_latent_attention(const json& config, const std::string& path, DecoderConfig& out) {
  Reader reader(config, path);
  LatentAttentionConfig& mla = out.latent_attention;
  // Null is "no low-rank query" (q_proj); absent would be transformers' default 1536.
  check(config.contains("q_lora_rank"), "[config] ", path,
        ": missing required field 'q_lora_rank' (null for a q_proj query)");
  mla.q_lora_rank = reader.integer_or("q_lora_rank", 0);
  mla.kv_lora_rank = reader.integer("kv_lora_rank");
  mla.qk_nope_head_dim = reader.integer("qk_nope_head_dim");
  mla.qk_rope_head_dim = reader.integer("qk_rope_head_dim");
  mla.v_head_dim = reader.integer("v_head_dim");
  mla.rope_interleave = reader.boolean_or("rope_interleave", true);
  auto in_range = [&](int64_t value, const char* name, int64_t low, int64_t bound) {
    check(value >= low && value <= bound, "[config] ", path, ": ", name, " must be in ", low, "..",
          bound, ", got ", value);
  };
  in_range(mla.q_lora_rank, "q_lora_rank", 0, 1 << 16);
  in_range(mla.kv_lora_rank, "kv_lora_rank", 1, 1 << 16);
  in_range(mla.qk_nope_head_dim, "qk_nope_head_dim", 1, 1024);
  in_range(mla.qk_rope_head_dim, "qk_rope_head_dim", 2, 1024);
  in_range(mla.v_head_dim, "v_head_dim", 1, 1024);
  // transformers sets head_dim to qk_rope_head_dim; a config.json that says so agrees.
  if (reader.has("head_dim"))
    check(reader.integer("head_dim") == mla.qk_rope_head_dim, "[config] ", path, ": head_dim ",
          reader.integer("head_dim"), " must equal qk_rope_head_dim (", mla.qk_rope_head_dim,
          ") in a latent attention model, or be absent");
  if (reader.has("qk_head_dim"))  // transformers writes it: the sum of the two
    check(reader.integer("qk_head_dim") == mla.qk_head_dim(), "[config] ", path, ": qk_head_dim ",
          reader.integer("qk_head_dim"), " must equal qk_nope_head_dim + qk_rope_head_dim (",
          mla.qk_head_dim(), ")");
  check(out.num_key_value_heads == out.num_attention_heads, "[config] ", path,
        ": num_key_value_heads (", out.num_key_value_heads, ") must equal num_attention_heads (",
        out.num_attention_heads,
        "): latent attention expands its keys and values to every query head");
  out.head_dim = mla.qk_head_dim();
  out.rotary_dim = mla.qk_rope_head_dim;
  // transformers (yarn_apply_mscale): under any RoPE scaling with mscale_all_dim, the softmax
  // scale is multiplied by m^2, m = 0.1 mscale_all_dim ln(factor) + 1 (1 when factor <= 1).
  const RopeScaling& r = out.rope_scaling;
  if (r.type != "default" && r.mscale_all_dim != 0 && r.factor > 1) {
    const double m = 0.1 * r.mscale_all_dim * std::log(r.factor) + 1.0;
    mla.softmax_scale_factor = m * m;
  }
}

}  // namespace

DecoderConfig DecoderConfig::from_json(const json& config, const std::string& path) {
  check(config.is_object(), "[config] ", path, ": expected a JSON object");
  const FamilyTraits& family = parse_family(config, path);
  if (is_wrapper_type(family, config["model_type"].get<std::string>())) {
    DecoderConfig out = from_json(unwrap_text_config(config, path, family), path + ": text_config");
    out.language_model_wrapped = true;
    return out;
  }
  if (family.defaults.is_object()) {  // transformers' values for what config.json leaves out
    json filled = config;
    for (const auto& item : family.defaults.items()) filled.emplace(item.key(), item.value());
    if (filled.size() > config.size()) return from_json(filled, path);
  }
  DecoderConfig out;
  out.family = family.family;
  check_fields(config, path, family);
  Reader reader(config, path);
  out.vocab_size = reader.integer("vocab_size");
  out.hidden_size = reader.integer("hidden_size");
  // A family whose every layer has experts of their own width may have no dense width at all.
  const bool no_dense_mlp =
      family.moe.enabled && family.moe.own_expert_width && !family.moe.dense_layers_listed;
  out.intermediate_size = no_dense_mlp ? reader.integer_or("intermediate_size", 0)
                                       : reader.integer("intermediate_size");
  out.num_hidden_layers = reader.integer("num_hidden_layers");
  out.num_attention_heads = reader.integer("num_attention_heads");
  out.num_key_value_heads = reader.integer_or("num_key_value_heads", out.num_attention_heads);
  check(out.num_attention_heads > 0, "[config] ", path, ": num_attention_heads must be positive");
  out.head_dim = reader.integer_or("head_dim", out.hidden_size / out.num_attention_heads);
  out.rms_norm_eps = reader.number_or("rms_norm_eps", 1e-6);
  out.max_position_embeddings = reader.integer_or("max_position_embeddings", 0);
  out.validate_sizes(path);  // before the layer count sizes anything below
  out.tie_word_embeddings = reader.boolean_or("tie_word_embeddings", false);
  if (family.gemma_layers)
    parse_gemma_rope(config, path, family, out);
  else
    parse_rope(config, path, family, out);
  parse_sliding_window(config, path, family, out);

  // attention_bias: the q/k/v and o biases, unless the family fixes them (Qwen2: q/k/v always,
  // o never). A family without them, or without MLP biases, accepts only false (FieldRule).
  // GLM-4.5: attention_bias biases q/k/v only.
  const bool attention_bias = reader.boolean_or("attention_bias", false);
  out.qkv_bias = family.qkv_bias_always || attention_bias;
  out.o_bias = !family.qkv_bias_always && !family.attention_bias_qkv_only && attention_bias;
  out.mlp_bias = reader.boolean_or("mlp_bias", false);
  out.qk_norm = family.qk_norm == QkNorm::PerHeadWhenUseQkNorm
                    ? reader.boolean_or("use_qk_norm", false)
                    : family.qk_norm != QkNorm::None;
  out.qk_norm_across_heads = family.qk_norm == QkNorm::AcrossHeads;
  out.attention_sinks = family.attention_sinks;
  if (family.moe.enabled) parse_moe(config, path, family.moe, out);
  if (family.latent_attention) parse_latent_attention(config, path, out);
  if (family.partial_rope) parse_partial_rope(config, path, family, out);
  if (family.mtp_layers_after_decoder) {
    out.mtp_layers =
        reader.integer_or("num_nextn_predict_layers", reader.integer_or("num_mtp_layers", 1));
    check(out.mtp_layers >= 0 && out.mtp_layers <= 64, "[config] ", path,
          ": num_nextn_predict_layers must be in 0..64, got ", out.mtp_layers);
  }
  if (family.hybrid.enabled) parse_hybrid(config, path, family.hybrid, out);
  if (family.gemma_layers) {
    parse_gemma(config, path, out);
  } else {
    const std::string act = reader.string_or("hidden_act", "silu");
    check(act == "silu", "[config] ", path, ": unsupported hidden_act '", act,
          "' (tandem implements silu)");
  }
  const int64_t tp = reader.integer_or("pretraining_tp", 1);
  check(tp == 1, "[config] ", path, ": unsupported pretraining_tp ", tp, " (only 1)");
  const double dropout = reader.number_or("attention_dropout", 0.0);
  check(dropout == 0.0, "[config] ", path, ": unsupported attention_dropout ", dropout,
        " (tandem runs without dropout; set it to 0.0)");

  out.torch_dtype = reader.string_or("dtype", reader.string_or("torch_dtype", ""));
  if (reader.has("bos_token_id")) out.bos_token_id = reader.integer("bos_token_id");
  if (config.contains("eos_token_id"))
    out.eos_token_ids = parse_token_ids(config["eos_token_id"], path, "eos_token_id");
  if (reader.has("pad_token_id")) {
    const int64_t pad = reader.integer("pad_token_id");
    check(pad >= -1, "[config] ", path,
          ": pad_token_id must be a token id or -1 (no pad token), got ", pad);
    if (pad >= 0) out.pad_token_id = pad;  // -1: "no pad token" in some published configs
  }
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
  // 0: no dense MLP (checked against the layers by validate()).
  check(intermediate_size >= 0 && intermediate_size <= (int64_t{1} << 20), "[config] ", where,
        ": intermediate_size must be in 1..", int64_t{1} << 20, ", got ", intermediate_size);
  in_range(num_hidden_layers, "num_hidden_layers", 1024);
  in_range(num_attention_heads, "num_attention_heads", 1024);
  in_range(num_key_value_heads, "num_key_value_heads", 1024);
  in_range(head_dim, "head_dim", 4096);
}

void DecoderConfig::validate(const std::string& where) const {
  validate_sizes(where);
  check(max_position_embeddings >= 0 && max_position_embeddings <= kMaxPositions, "[config] ",
        where, ": max_position_embeddings must be in 0..", kMaxPositions, " (0: not given), got ",
        max_position_embeddings);
  for (const auto& [name, id] :
       {std::pair{"bos_token_id", bos_token_id}, std::pair{"pad_token_id", pad_token_id}})
    if (id)
      check(*id >= 0 && *id < vocab_size, "[config] ", where, ": ", name, " ", *id,
            " is outside the vocabulary [0, ", vocab_size, ")");
  check(head_dim % 2 == 0, "[config] ", where, ": head_dim must be even for RoPE, got ", head_dim);
  check(num_attention_heads % num_key_value_heads == 0, "[config] ", where,
        ": num_attention_heads (", num_attention_heads, ") is not a multiple of ",
        "num_key_value_heads (", num_key_value_heads, ")");
  check(std::isfinite(rms_norm_eps) && rms_norm_eps > 0, "[config] ", where,
        ": rms_norm_eps must be a finite number > 0, got ", rms_norm_eps);
  check(std::isfinite(rope_theta) && rope_theta > 0, "[config] ", where,
        ": rope_theta must be a finite number > 0, got ", rope_theta);
  check(static_cast<int64_t>(sliding_window.size()) == num_hidden_layers, "[config] ", where,
        ": one sliding window entry per layer expected");
  for (int64_t window : sliding_window)
    check(window >= 0 && window <= kMaxPositions, "[config] ", where,
          ": sliding_window must be in 0..", kMaxPositions, " (0: no window), got ", window);
  if (rope_scaling.type == "llama3") {
    const RopeScaling& r = rope_scaling;
    check(std::isfinite(r.factor) && r.factor > 0 && std::isfinite(r.high_freq_factor) &&
              r.low_freq_factor > 0 && r.high_freq_factor > r.low_freq_factor &&
              r.original_max_position_embeddings > 0 &&
              r.original_max_position_embeddings <= kMaxPositions,
          "[config] ", where,
          ": invalid llama3 rope scaling parameters (wanted factor > 0, 0 < low_freq_factor < "
          "high_freq_factor, original_max_position_embeddings in 1..",
          kMaxPositions, "; got factor ", r.factor, ", low_freq_factor ", r.low_freq_factor,
          ", high_freq_factor ", r.high_freq_factor, ", original_max_position_embeddings ",
          r.original_max_position_embeddings, ")");
  }
  if (rope_scaling.type == "yarn") {
    const RopeScaling& r = rope_scaling;
    const auto finite_positive = [](double v) { return std::isfinite(v) && v > 0; };
    check(finite_positive(r.factor) && finite_positive(r.beta_fast) &&
              finite_positive(r.beta_slow) && std::isfinite(r.mscale) && r.mscale >= 0 &&
              std::isfinite(r.mscale_all_dim) && r.mscale_all_dim >= 0 &&
              std::isfinite(r.attention_factor) && r.attention_factor >= 0 &&
              r.original_max_position_embeddings > 0 &&
              r.original_max_position_embeddings <= kMaxPositions,
          "[config] ", where,
          ": invalid yarn rope scaling parameters (wanted factor, beta_fast, beta_slow > 0; "
          "mscale, mscale_all_dim, attention_factor >= 0 or absent; "
          "original_max_position_embeddings (or max_position_embeddings) in 1..",
          kMaxPositions, "; got factor ", r.factor, ", beta_fast ", r.beta_fast, ", beta_slow ",
          r.beta_slow, ", mscale ", r.mscale, ", mscale_all_dim ", r.mscale_all_dim,
          ", attention_factor ", r.attention_factor, ", original_max_position_embeddings ",
          r.original_max_position_embeddings, ")");
  }
  for (int64_t id : eos_token_ids)
    check(id >= 0 && id < vocab_size, "[config] ", where, ": eos_token_id ", id,
          " is outside the vocabulary [0, ", vocab_size, ")");
  check(rotary_dim == 0 || (rotary_dim >= 2 && rotary_dim <= head_dim && rotary_dim % 2 == 0),
        "[config] ", where, ": rotary_dim must be even and in 2..head_dim, got ", rotary_dim);
  check(!qk_norm_across_heads || qk_norm, "[config] ", where,
        ": q/k norms across heads need qk_norm");
  for (int64_t i = 0; i < num_hidden_layers && intermediate_size == 0; ++i)
    check(moe.enabled() && moe.sparse_layers.at(static_cast<size_t>(i)), "[config] ", where,
          ": intermediate_size is missing or 0 but layer ", i, " has a dense MLP");
  if (hybrid()) {
    const LinearAttentionConfig& l = linear_attention;
    auto positive = [&](int64_t value, const char* name, int64_t bound) {
      check(value > 0 && value <= bound, "[config] ", where, ": ", name, " must be in 1..", bound,
            ", got ", value);
    };
    positive(l.key_heads, "linear_num_key_heads", 1024);
    positive(l.value_heads, "linear_num_value_heads", 1024);
    positive(l.key_dim, "linear_key_head_dim", 4096);
    positive(l.value_dim, "linear_value_head_dim", 4096);
    positive(l.conv_kernel, "linear_conv_kernel_dim", 64);
    check(l.value_heads % l.key_heads == 0, "[config] ", where, ": linear_num_value_heads (",
          l.value_heads, ") is not a multiple of linear_num_key_heads (", l.key_heads, ")");
    check(static_cast<int64_t>(l.layers.size()) == num_hidden_layers, "[config] ", where,
          ": one layer type per layer expected");
  }
  if (latent_attention.enabled()) {
    const LatentAttentionConfig& mla = latent_attention;
    check(head_dim == mla.qk_head_dim() && rotated_dims() == mla.qk_rope_head_dim &&
              mla.v_head_dim <= head_dim && num_key_value_heads == num_attention_heads &&
              mla.qk_rope_head_dim % 2 == 0 && !qk_norm && !gated_attention && !hybrid(),
          "[config] ", where,
          ": latent attention needs head_dim = qk_nope_head_dim + qk_rope_head_dim (", head_dim,
          " vs ", mla.qk_head_dim(), "), an even qk_rope_head_dim as the RoPE width (",
          mla.qk_rope_head_dim, "), v_head_dim <= that head_dim (", mla.v_head_dim,
          ") and one key/value head per query head, without q/k norms or gates");
    check(std::isfinite(mla.softmax_scale_factor) && mla.softmax_scale_factor > 0, "[config] ",
          where, ": the latent attention's softmax scale factor must be finite and > 0");
  }
  if (moe.enabled()) {
    check(moe.experts_per_token >= 1 && moe.experts_per_token <= moe.num_experts, "[config] ",
          where, ": num_experts_per_tok must be in 1..", moe.num_experts);
    check(moe.expert_intermediate_size >= 1, "[config] ", where,
          ": the experts' intermediate size must be positive");
    check(static_cast<int64_t>(moe.sparse_layers.size()) == num_hidden_layers, "[config] ", where,
          ": one experts-or-dense entry per layer expected");
    check(std::isfinite(moe.router_aux_loss_coef) && moe.router_aux_loss_coef >= 0, "[config] ",
          where, ": router_aux_loss_coef must be a finite number >= 0, got ",
          moe.router_aux_loss_coef);
  }
}

DecoderConfig DecoderConfig::draft_layers(DecoderFamily draft_family, int64_t num_layers,
                                          const DraftHeads& heads) const {
  DecoderConfig draft = *this;
  draft.family = draft_family;
  draft.num_hidden_layers = num_layers;
  draft.moe = MoeConfig();
  draft.rotary_dim = 0;
  draft.qk_norm = family_traits(draft_family).qk_norm != QkNorm::None;
  draft.qk_norm_across_heads = false;
  draft.qkv_bias = draft.o_bias = draft.mlp_bias = false;
  draft.sliding_window.assign(static_cast<size_t>(std::max<int64_t>(num_layers, 0)), 0);
  draft.tie_word_embeddings = false;
  draft.gated_attention = draft.zero_centered_norms = draft.language_model_wrapped = false;
  draft.linear_attention = LinearAttentionConfig();
  draft.mtp_layers = 0;
  draft.gemma = GemmaLayers();
  draft.attention_sinks = false;
  draft.mlp_activation = MlpActivation::Silu;
  if (latent_attention.enabled()) {  // plain heads as wide as the target's values
    draft.head_dim = latent_attention.v_head_dim;
    draft.num_key_value_heads = num_attention_heads;
    draft.latent_attention = LatentAttentionConfig();
  }
  if (heads.num_attention_heads > 0) draft.num_attention_heads = heads.num_attention_heads;
  if (heads.num_key_value_heads > 0)
    draft.num_key_value_heads = heads.num_key_value_heads;
  else if (latent_attention.enabled())  // one key/value head per query head, however many
    draft.num_key_value_heads = draft.num_attention_heads;
  if (heads.head_dim > 0) draft.head_dim = heads.head_dim;
  check(draft.num_attention_heads % draft.num_key_value_heads == 0, "[config] the draft's ",
        draft.num_attention_heads, " attention heads (draft.num_attention_heads, 0: the target's) ",
        "are not a multiple of its ", draft.num_key_value_heads,
        " key/value heads (draft.num_key_value_heads, 0: the target's)");
  return draft;
}

DecoderConfig DecoderConfig::from_dir(const std::string& dir) {
  const std::string path = dir + "/config.json";
  return from_json(
      read_json_file(path, "config", " (is '" + dir + "' an HF checkpoint directory?)"), path);
}

json DecoderConfig::to_json() const {
  const FamilyTraits& traits = family_traits(family);
  check(!hybrid() && !gated_attention && !traits.moe.deepseek_layout && !traits.gemma_layers &&
            !attention_sinks && !moe.gpt_oss_experts.enabled(),
        "[export] ", traits.model_type, ": tandem does not write ", traits.model_type,
        " models (they are read as frozen targets only)");
  json out;
  out["architectures"] = {traits.architecture};
  out["model_type"] = traits.model_type;
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
  } else if (rope_scaling.type == "linear") {
    out["rope_scaling"] = {{"rope_type", "linear"}, {"factor", rope_scaling.factor}};
  } else if (rope_scaling.type == "yarn") {
    const RopeScaling& r = rope_scaling;
    json yarn = {{"rope_type", "yarn"},
                 {"factor", r.factor},
                 {"original_max_position_embeddings", r.original_max_position_embeddings},
                 {"beta_fast", r.beta_fast},
                 {"beta_slow", r.beta_slow}};
    if (!r.truncate) yarn["truncate"] = false;
    if (r.mscale > 0) yarn["mscale"] = r.mscale;
    if (r.mscale_all_dim > 0) yarn["mscale_all_dim"] = r.mscale_all_dim;
    if (r.attention_factor > 0) yarn["attention_factor"] = r.attention_factor;
    out["rope_scaling"] = yarn;
  } else {
    out["rope_scaling"] = nullptr;
  }
  if (max_position_embeddings > 0) out["max_position_embeddings"] = max_position_embeddings;
  out["tie_word_embeddings"] = tie_word_embeddings;
  if (traits.spelling.attention_bias) out["attention_bias"] = o_bias;
  if (traits.spelling.mlp_bias) out["mlp_bias"] = mlp_bias;
  out["attention_dropout"] = 0.0;
  if (moe.enabled()) {
    out["num_local_experts"] = moe.num_experts;  // transformers 5's spelling for all three
    out["num_experts_per_tok"] = moe.experts_per_token;
    out["router_aux_loss_coef"] = moe.router_aux_loss_coef;
    out["output_router_logits"] = false;
  }
  if (traits.moe.own_expert_width) out["moe_intermediate_size"] = moe.expert_intermediate_size;
  if (traits.moe.reads_norm_topk_prob) out["norm_topk_prob"] = moe.normalize_top_k;
  if (traits.moe.dense_layers_listed) {
    out["decoder_sparse_step"] = 1;
    std::vector<int64_t> dense;
    for (size_t i = 0; i < moe.sparse_layers.size(); ++i)
      if (!moe.sparse_layers[i]) dense.push_back(static_cast<int64_t>(i));
    out["mlp_only_layers"] = dense;
  }
  // The field vLLM and SGLang read; transformers too.
  if (traits.partial_rope) out["rotary_dim"] = rotated_dims();
  if (traits.spelling.router_jitter_noise) out["router_jitter_noise"] = 0.0;
  const int64_t window =
      sliding_window.empty() ? 0 : *std::max_element(sliding_window.begin(), sliding_window.end());
  const json window_or_null = window > 0 ? json(window) : json(nullptr);
  switch (traits.spelling.windows) {
    case WindowSpelling::None:
      break;
    case WindowSpelling::SlidingWindow:
      out["sliding_window"] = window_or_null;
      break;
    case WindowSpelling::UseSlidingWindow:
      out["use_sliding_window"] = window > 0;
      out["sliding_window"] = window_or_null;
      break;
    case WindowSpelling::LayerTypes: {
      if (window == 0) break;
      std::vector<std::string> types;
      for (int64_t w : sliding_window)
        types.push_back(w > 0 ? "sliding_attention" : "full_attention");
      out["use_sliding_window"] = true;
      out["sliding_window"] = window;
      out["layer_types"] = types;
      break;
    }
  }
  if (!torch_dtype.empty()) out["torch_dtype"] = torch_dtype;
  if (bos_token_id) out["bos_token_id"] = *bos_token_id;
  if (eos_token_ids.size() == 1) out["eos_token_id"] = eos_token_ids[0];
  if (eos_token_ids.size() > 1) out["eos_token_id"] = eos_token_ids;
  if (pad_token_id) out["pad_token_id"] = *pad_token_id;
  return out;
}

}  // namespace tandem
