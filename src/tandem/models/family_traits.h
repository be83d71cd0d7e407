#pragma once
// What tandem knows about each model family, one table entry per family: its config.json
// `model_type`, the HF architecture it reads and writes, the config.json fields it accepts or
// refuses beyond the common ones, what its layers are whatever config.json says, and how the
// export's config.json spells it. The reader and the writer of config.json (decoder_config.cpp)
// and the hub's tensor names (stored_weights.cpp) read this table and branch on no family
// themselves: a family built from the same layers is one more entry in family_traits.cpp.
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tandem/models/decoder_config.h"

namespace tandem {

/// How a family reads one config.json field beyond common_config_fields(). A field the family
/// lists here is judged by its rule alone (a rule for a common field replaces it); a field
/// neither common nor listed is an error naming it. Null is read as absent under every rule.
struct FieldRule {
  enum class Kind {
    Accepted,     // read where the family's layers need it (or harmless and ignored)
    OnlyValue,    // accepted only when equal to `value`: what tandem implements
    OnlyEntries,  // a list whose every entry must equal `value`
    Refused,      // refused whatever its value
  };
  std::string key;
  Kind kind = Kind::Accepted;
  nlohmann::json value;  // OnlyValue, OnlyEntries: the value tandem implements
  std::string reason;    // OnlyValue, OnlyEntries: what `value` means; Refused: why not
};

/// RMSNorm on q and k before RoPE.
enum class QkNorm {
  None,
  PerHead,              // weights (head_dim,), shared by the heads (Qwen3, Qwen3-MoE)
  AcrossHeads,          // weights (heads * head_dim,), one norm over all heads (MiniMax-M2)
  PerHeadWhenUseQkNorm  // per head when config.json's use_qk_norm is true (GLM-4.5/4.6)
};

/// How config.json says which layers attend in a sliding window. 0, null or absent
/// `sliding_window` is no window; a negative one is an error for every family.
enum class WindowReading {
  Ignored,     // sliding_window is read but changes nothing, as in transformers (MiniMax-M2)
  EveryLayer,  // sliding_window alone, on every layer (Mistral, Mixtral); layer_types overrides
  MaxWindowLayers,  // use_sliding_window, layers from max_window_layers on; layer_types overrides
  AllOrNone,        // use_sliding_window alone: every layer or none; layer_types is not read
  // layer_types, else every sliding_window_pattern-th layer full and the others windowed
  // (FamilyTraits::window_pattern when config.json has none: Gemma 3 6, gpt-oss 2)
  LayerTypesOrPattern,
};

/// How the export's config.json writes the per-layer windows.
enum class WindowSpelling {
  None,              // not written
  SlidingWindow,     // sliding_window: the window, or null
  UseSlidingWindow,  // use_sliding_window and sliding_window (the window, or null)
  LayerTypes,        // only when a layer has one: use_sliding_window, sliding_window, layer_types
};

/// The sparse MLP of a mixture-of-experts family; `enabled` false: a dense family.
struct MoeTraits {
  bool enabled = false;
  RouterScoring scoring = RouterScoring::Softmax;
  bool own_expert_width = false;        // moe_intermediate_size; else intermediate_size
  bool reads_norm_topk_prob = false;    // norm_topk_prob (default false); else always normalised
  bool weights_in_model_dtype = false;  // the router's weights cast to the model's dtype
  bool dense_layers_listed = false;     // decoder_sparse_step, mlp_only_layers; else every layer
  bool block_sparse_moe_names = false;  // hub tensors: block_sparse_moe.experts.E.w1/w3/w2
  bool shared_expert = false;           // shared_expert_intermediate_size: the gated shared expert
  // DeepSeek-V3's layout (GLM-4.5/4.6): n_routed_experts, GroupedSigmoid routing (n_group,
  // topk_group, routed_scaling_factor, norm_topk_prob) with an fp32 e_score_correction_bias
  // under the router (`mlp.gate.`), n_shared_experts ungated `shared_experts` of
  // moe_intermediate_size each, the first first_k_dense_replace layers dense.
  bool deepseek_layout = false;
  // gpt-oss's sparse MLP (MoeConfig::gpt_oss_experts): the router `mlp.router` with a bias,
  // experts with biases and the clamped SwiGLU (swiglu_limit, swiglu_alpha), stored as
  // transformers writes them (gate_up_proj (E, H, 2I), gate and up interleaved; down_proj
  // (E, I, H)) or as MXFP4 blocks and scales (io/mxfp4.h).
  bool gpt_oss_experts = false;
};

/// A hybrid family (Qwen3.5/3.6, Qwen3-Next): Gated DeltaNet layers and gated full-attention
/// layers as `layer_types` (or full_attention_interval) says, every RMSNorm of the (1 + weight)
/// form, partial RoPE. `enabled` false: every layer is plain attention.
struct HybridTraits {
  bool enabled = false;
  bool fused_projections = false;  // in_proj_qkvz / in_proj_ba (Qwen3-Next)
  // The vision-language wrapper whose `text_config` is this family's decoder (Qwen3.5/3.6): its
  // model_type is the family's, the decoder's own is `text_model_type`, read alone as well.
  const char* text_model_type = nullptr;    // "qwen3_5_text"
  const char* text_architecture = nullptr;  // "Qwen3_5ForCausalLM": a text-only checkpoint
};

/// What the writer of the export's config.json spells per family (beyond the MoE fields, which
/// follow MoeTraits, and rotary_dim, written for a family with partial_rope).
struct ExportSpelling {
  bool attention_bias = false;       // attention_bias (its o_bias)
  bool mlp_bias = false;             // mlp_bias
  bool router_jitter_noise = false;  // router_jitter_noise: 0.0
  WindowSpelling windows = WindowSpelling::None;
};

/// How a vision-language checkpoint stores its decoder (DecoderConfig::language_model_wrapped):
/// the decoder's `model.` tensors under `decoder`, an untied lm_head under `lm_head`, and the
/// tensors it does not read (the vision tower, the projector) under `not_read`.
struct WrappedStorage {
  const char* decoder = "model.language_model.";
  const char* lm_head = "lm_head.";
  std::vector<const char*> not_read = {"model.visual."};
};

struct FamilyTraits {
  DecoderFamily family;
  const char* model_type;    // config.json model_type, family_name()
  const char* architecture;  // the architectures entry accepted on read and written on export
  // Another model_type whose checkpoints are this family's, read as it (Kimi-K2's "kimi_k2":
  // DeepseekV3ForCausalLM). nullptr: none.
  const char* alias_model_type = nullptr;
  // The vision-language checkpoint whose text_config is this family's decoder, for a family whose
  // own model_type is the decoder's (Gemma 3: "gemma3", Gemma3ForConditionalGeneration; Qwen3.5's
  // family model_type is its wrapper's, HybridTraits). nullptr: none.
  const char* wrapper_model_type = nullptr;
  const char* wrapper_architecture = nullptr;
  WrappedStorage wrapped = {};

  // The layers, whatever config.json says.
  bool qkv_bias_always = false;  // q/k/v biased and o not; attention_bias is not read (Qwen2)
  bool attention_bias_qkv_only = false;  // attention_bias biases q/k/v, never o (GLM-4.5)
  // Checkpoints carry num_nextn_predict_layers multi-token-prediction layers (default 1) after
  // the decoder's, as model.layers.{num_hidden_layers + i}.*: not part of the decoder, not read
  // (GLM-4.5; DecoderConfig::mtp_layers).
  bool mtp_layers_after_decoder = false;
  // DeepSeek-V3's multi-head latent attention on every layer (LatentAttentionConfig: q_lora_rank,
  // kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, rope_interleave are read).
  bool latent_attention = false;
  // Gemma 3's layers (GemmaLayers): sandwich norms, (1 + weight) RMSNorms everywhere, embeddings
  // scaled by sqrt(hidden_size), GeGLU (hidden_activation gelu_pytorch_tanh),
  // query_pre_attn_scalar, a second RoPE base for the sliding-window layers.
  bool gemma_layers = false;
  // gpt-oss: a learned logit per head in every softmax's denominator (`self_attn.sinks`).
  bool attention_sinks = false;
  QkNorm qk_norm = QkNorm::None;
  bool partial_rope = false;  // rotary_dim / partial_rotary_factor are read (else full RoPE)
  // transformers' partial_rotary_factor when config.json gives none (0: full RoPE).
  double default_partial_rotary_factor = 0.0;
  WindowReading windows = WindowReading::MaxWindowLayers;
  // WindowReading::LayerTypesOrPattern without layer_types or sliding_window_pattern: every
  // window_pattern-th layer is full (transformers' defaults).
  int64_t window_pattern = 6;
  MoeTraits moe = {};
  HybridTraits hybrid = {};

  // config.json fields beyond common_config_fields().
  std::vector<FieldRule> fields = {};
  // The values transformers' config class takes for fields config.json leaves out, where the
  // published checkpoints rely on them (Gemma 3's text_config states neither vocab_size nor,
  // for 4B, its heads). Applied before anything is read; null: none.
  nlohmann::json defaults = nullptr;

  ExportSpelling spelling = {};

  /// The rule for `key`, or nullptr when the family lists none.
  const FieldRule* rule(const std::string& key) const;
};

/// Every family, in DecoderFamily order.
const std::vector<FamilyTraits>& family_table();
/// The entry of `family` (an Error for a value the table does not hold).
const FamilyTraits& family_traits(DecoderFamily family);
/// The entry whose model_type (or alias_model_type, wrapper_model_type, or for a wrapped hybrid
/// text_model_type) is `model_type`, or nullptr.
const FamilyTraits* find_family(const std::string& model_type);
/// Whether `model_type` names the family's vision-language wrapper (its decoder in text_config).
bool is_wrapper_type(const FamilyTraits& family, const std::string& model_type);
/// The model_type of the family's decoder read alone: its text_model_type, or its model_type.
const char* text_model_type(const FamilyTraits& family);
/// "llama, mistral, ... or minimax_m2": the model_types of the entries `include` keeps.
std::string family_names(bool (*include)(const FamilyTraits&) = nullptr);
/// The fields every family accepts: metadata (how the model was trained, cached or tokenised)
/// and the dense decoder's own, read by DecoderConfig::from_json.
const std::set<std::string>& common_config_fields();

}  // namespace tandem
