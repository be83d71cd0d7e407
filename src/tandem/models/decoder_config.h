#pragma once
// Hyperparameters of a Llama-family decoder (Llama 2/3/3.x, Mistral, Qwen2, Qwen3), of a
// mixture-of-experts one built on the same layers (Qwen3-MoE, Mixtral, MiniMax-M2), or of a hybrid
// whose layers are Gated DeltaNet linear attention or gated full attention (Qwen3.5/3.6 dense and
// MoE, Qwen3-Next), read from an HF config.json. Both transformers 4 (`rope_theta`, `rope_scaling`,
// `torch_dtype`) and transformers 5 (`rope_parameters`, `dtype`, `layer_types`) spellings are
// understood; any field that would change the model and is not implemented is an error naming it.
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace tandem {

/// What each family is (its names, config.json fields, implied layers, export spelling) is its
/// entry in the table of family_traits.cpp (family_traits.h); a family has one there.
enum class DecoderFamily {
  Llama,
  Mistral,
  Qwen2,
  Qwen3,
  Qwen3Moe,
  Mixtral,
  MiniMaxM2,
  Qwen3_5,     // Qwen3.5 / Qwen3.6 dense: hybrid layers, SwiGLU MLP
  Qwen3_5Moe,  // Qwen3.5 / Qwen3.6 MoE: hybrid layers, experts and a gated shared expert
  Qwen3Next,   // Qwen3-Next: hybrid layers with fused projections, experts and a shared expert
  Glm4Moe,     // GLM-4.5/4.6: partial RoPE, q/k/v biases, group-routed experts and shared experts
  DeepseekV3,  // DeepSeek-V3/R1, Kimi-K2: multi-head latent attention, GLM-4.5's experts
  Gemma3,      // Gemma 3: sandwich norms, scaled embeddings, GeGLU, two RoPE bases
  GptOss       // gpt-oss: attention sinks, alternating windows, biased clamped-SwiGLU experts
};

/// The config.json `model_type` from the family table: "llama", "mistral", "qwen2", "qwen3",
/// "qwen3_moe", "mixtral", "minimax_m2", "qwen3_5", "qwen3_5_moe", "qwen3_next", "glm4_moe",
/// "deepseek_v3", "gemma3_text" or "gpt_oss".
const char* family_name(DecoderFamily family);

/// How a mixture-of-experts router turns its logits (tokens, experts) into the chosen experts
/// and their weights.
enum class RouterScoring {
  Softmax,          // Qwen3-MoE, Mixtral: softmax in fp32, top-k of the probabilities
  SigmoidWithBias,  // MiniMax-M2: sigmoid in fp32; top-k of sigmoid + e_score_correction_bias,
                    // weighted by the sigmoids alone
  GroupedSigmoid,   // GLM-4.5, DeepSeek-V3: the router's logits in fp32, sigmoid; the experts
                    // (split into `groups` groups) are chosen among the `top_groups` groups
                    // whose two best sigmoid + e_score_correction_bias sum highest, top-k of
                    // sigmoid + bias there; weighted by the sigmoids (normalised when
                    // normalize_top_k) times routed_scaling_factor
  SoftmaxOfTopK     // gpt-oss: top-k of the logits (the router has a bias), weighted by the
                    // softmax over those k alone, in the logits' dtype
};

/// gpt-oss's experts (MoeConfig::gpt_oss_experts): every projection biased, and the clamped
/// SwiGLU (g = min(gate, limit), u = clamp(up, -limit, limit), out = (u + 1) g sigmoid(alpha g)).
struct ClampedSwiglu {
  double limit = 0;  // swiglu_limit; 0: the experts are plain SwiGLU without biases
  double alpha = 1.702;

  bool enabled() const { return limit > 0; }
};

/// The sparse MLP of a mixture-of-experts decoder. `num_experts == 0`: a dense model.
struct MoeConfig {
  int64_t num_experts = 0;
  int64_t experts_per_token = 0;  // top-k
  int64_t expert_intermediate_size = 0;
  RouterScoring scoring = RouterScoring::Softmax;
  bool normalize_top_k = true;  // the k weights divided by their sum (Qwen3-MoE: norm_topk_prob)
  bool weights_in_model_dtype = false;  // Qwen3-MoE casts them to the model's dtype; others: fp32
  std::vector<bool> sparse_layers;      // per decoder layer: experts (true) or the dense MLP
  double router_aux_loss_coef = 0;      // as the checkpoint declares it (written back on export)
  // Qwen3.5-MoE, Qwen3-Next: a SwiGLU expert every token runs, of this width, scaled by
  // sigmoid(shared_expert_gate x) and added to the routed experts' sum. 0: none.
  int64_t shared_expert_intermediate_size = 0;
  // The shared expert's output scaled by sigmoid(shared_expert_gate x) (Qwen3.5-MoE, Qwen3-Next),
  // or added as it is (GLM-4.5, DeepSeek-V3: `shared_experts`, n_shared_experts experts' width).
  bool shared_expert_gated = true;
  // GroupedSigmoid routing: the experts' groups, how many of them a token may use, the factor on
  // the chosen weights.
  int64_t groups = 1;
  int64_t top_groups = 1;
  double routed_scaling_factor = 1.0;
  // gpt-oss: the router (`mlp.router`, with a bias) and experts with biases
  // (experts.gate_up_proj_bias, experts.down_proj_bias) and the clamped SwiGLU.
  ClampedSwiglu gpt_oss_experts;

  bool enabled() const { return num_experts > 0; }
};

/// The Gated DeltaNet layers of a hybrid model (models/gated_deltanet.h). `layers` empty: none.
struct LinearAttentionConfig {
  std::vector<bool> layers;  // per decoder layer: Gated DeltaNet (true) or attention
  int64_t key_heads = 0, value_heads = 0, key_dim = 0, value_dim = 0;
  int64_t conv_kernel = 0;  // the causal depthwise conv's width (linear_conv_kernel_dim)
  // Qwen3-Next: q, k, v, z come from one in_proj_qkvz and b, a from one in_proj_ba, their rows
  // grouped per key head; Qwen3.5: in_proj_qkv, in_proj_z, in_proj_b, in_proj_a.
  bool fused_projections = false;

  bool enabled() const { return !layers.empty(); }
  bool at(int64_t layer) const { return enabled() && layers.at(static_cast<size_t>(layer)); }
};

/// DeepSeek-V3's multi-head latent attention (models/latent_attention.h). Each query head is
/// [nope | rope] (qk_nope_head_dim + qk_rope_head_dim); keys and values come from one latent of
/// kv_lora_rank values per token (normed), expanded per head by kv_b_proj to [k_nope | v], and
/// one RoPE key of qk_rope_head_dim shared by every head. `kv_lora_rank == 0`: none.
struct LatentAttentionConfig {
  int64_t q_lora_rank = 0;  // the query through q_a_proj, q_a_layernorm, q_b_proj; 0: q_proj
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  // The RoPE dims stored as interleaved pairs (x0, x1), (x2, x3), ...: de-interleaved (evens,
  // then odds) before the rotate-half rotation, as transformers does (DeepSeek-V3's default).
  bool rope_interleave = true;
  // The softmax scale qk_head_dim^-0.5 times this: m^2 with m = 0.1 mscale_all_dim ln(factor) + 1
  // under YaRN with mscale_all_dim (DeepSeek-V3: 1.874, a scale of 0.1352), else 1.
  double softmax_scale_factor = 1.0;

  bool enabled() const { return kv_lora_rank > 0; }
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
};

/// The MLP's activation: SwiGLU (silu(gate) * up) or Gemma's GeGLU (gelu_tanh(gate) * up).
enum class MlpActivation { Silu, GeluTanh };

/// Gemma 3's layers (all false / 0 elsewhere).
struct GemmaLayers {
  // Each layer norms its attention's and its MLP's outputs too before the residual adds:
  // h = x + post_attention_layernorm(attn(input_layernorm(x))),
  // out = h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h))).
  bool sandwich_norms = false;
  bool scaled_embeddings = false;  // embed_tokens(ids) times sqrt(hidden_size), in its dtype
  // The softmax scale query_pre_attn_scalar^-0.5 in place of head_dim^-0.5 (0: head_dim).
  double query_pre_attn_scalar = 0;
  // The sliding-window layers' RoPE: default RoPE of this base (rope_local_base_freq, or
  // rope_parameters.sliding_attention); the full layers' is rope_theta / rope_scaling. 0: one
  // RoPE for every layer.
  double local_rope_theta = 0;

  bool enabled() const { return sandwich_norms; }
};

/// RoPE frequency scaling: linear, Llama 3's, or YaRN (Qwen3's long-context setting, DeepSeek-V3,
/// gpt-oss); models/rope.h computes both.
struct RopeScaling {
  std::string type = "default";   // "default" | "linear" | "llama3" | "yarn"
  double factor = 1.0;            // linear: every frequency divided by it
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 0;
  // yarn: the rotation counts that bound the blend of interpolated and original frequencies,
  // whether that range is rounded out to whole dims (gpt-oss: false), and the attention factor
  // (cos and sin are multiplied by it): given, or from factor and mscale / mscale_all_dim
  // (0: absent).
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  bool truncate = true;
  double mscale = 0.0;
  double mscale_all_dim = 0.0;
  double attention_factor = 0.0;
};

/// A draft's attention heads where its config sets them (draft.num_attention_heads,
/// draft.num_key_value_heads, draft.head_dim); 0: DecoderConfig::draft_layers' default.
struct DraftHeads {
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
};

struct DecoderConfig {
  DecoderFamily family = DecoderFamily::Llama;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // the dense MLP's width; 0 where no layer has one (Qwen3.5-MoE)
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // hidden_size / num_attention_heads unless the config says otherwise
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // bias on q/k/v projections (Qwen2 always; others via attention_bias)
  bool o_bias = false;    // bias on o_proj (attention_bias in Llama/Mistral/Qwen3)
  bool mlp_bias = false;  // bias on gate/up/down (Llama's mlp_bias)
  MlpActivation mlp_activation = MlpActivation::Silu;
  bool qk_norm = false;  // RMSNorm on q and k before RoPE (Qwen3: per head)
  // MiniMax-M2: the q/k norms span all heads (weights (heads * head_dim,)), not one head.
  bool qk_norm_across_heads = false;
  int64_t rotary_dim = 0;  // RoPE on the first rotary_dim dims of each head (0: all of them)
  // Qwen3.5 / Qwen3-Next attention: q_proj gives each head its query and as many gate values;
  // the attended values are multiplied by sigmoid(gate) before o_proj.
  bool gated_attention = false;
  // Qwen3.5 / Qwen3-Next: every decoder RMSNorm scales by (1 + weight), in fp32 before the cast
  // back (the weights are stored centred on 0). The gated norm inside Gated DeltaNet is plain.
  bool zero_centered_norms = false;
  LinearAttentionConfig linear_attention;
  // DeepSeek-V3: every layer's attention is latent; head_dim is then qk_head_dim() (what the
  // attention kernels see, values zero-padded to it) and rotary_dim qk_rope_head_dim.
  LatentAttentionConfig latent_attention;
  GemmaLayers gemma;
  // gpt-oss: each attention head has a learned logit `sinks` in its softmax's denominator (a key
  // every query sees whose value is 0): out = softmax-weighted values x sigmoid(lse - sink).
  bool attention_sinks = false;
  // The checkpoint is a vision-language wrapper (Qwen3_5ForConditionalGeneration,
  // Gemma3ForConditionalGeneration): config.json holds the decoder in `text_config` and the
  // weights live where the family's WrappedStorage says (`model.language_model.`,
  // `language_model.model.`); the vision tower's tensors are not read.
  bool language_model_wrapped = false;
  // GLM-4.5, DeepSeek-V3: the multi-token-prediction layers its checkpoints store after the
  // decoder's (num_nextn_predict_layers, default 1), skipped by name; 0 elsewhere.
  int64_t mtp_layers = 0;
  MoeConfig moe;
  // Per decoder layer: the sliding attention window in tokens, or 0 for full causal attention.
  std::vector<int64_t> sliding_window;
  std::string torch_dtype;  // dtype the checkpoint declares ("bfloat16", ...), may be empty
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> pad_token_id;

  /// Parses and validates a config.json object; `path` names the file in errors.
  static DecoderConfig from_json(const nlohmann::json& json, const std::string& path);
  /// Reads `dir/config.json`.
  static DecoderConfig from_dir(const std::string& dir);
  /// The config.json that transformers reads back as this model (transformers 4 spelling,
  /// which transformers 5 also reads).
  nlohmann::json to_json() const;
  /// Checks internal consistency (positive sizes, heads divide, ...); `where` names the source.
  void validate(const std::string& where) const;
  /// Whether some layer is Gated DeltaNet (a hybrid: Qwen3.5/3.6, Qwen3-Next).
  bool hybrid() const { return linear_attention.enabled(); }
  /// The dims RoPE rotates: rotary_dim, or head_dim when it is 0.
  int64_t rotated_dims() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
  /// A draft's `num_layers` decoder layers of `family` built from this target's config: its
  /// hidden size, heads, head_dim, intermediate size, vocab, RoPE and eps, with the family's
  /// own q/k norm (per head when it has one), full RoPE, a dense MLP, no biases, no sliding
  /// window, no tied embeddings, plain attention and norms (none of a hybrid's layers). A latent
  /// attention target's draft attends with plain heads of v_head_dim, one key/value head per
  /// query head. `heads` replaces the heads and their width where set; the draft then sets what
  /// else it sizes differently.
  DecoderConfig draft_layers(DecoderFamily family, int64_t num_layers,
                             const DraftHeads& heads = {}) const;
  /// The sizes alone (vocab, widths, layers, heads) within their stated bounds; validate()
  /// includes it. Parsing calls it before the layer count sizes anything.
  void validate_sizes(const std::string& where) const;
};

}  // namespace tandem
