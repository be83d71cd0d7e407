#include "tandem/models/family_traits.h"

#include "tandem/core/error.h"

namespace tandem {

namespace {

using nlohmann::json;
using Kind = FieldRule::Kind;

FieldRule accepted(const char* key) { return {key, Kind::Accepted, nullptr, ""}; }
FieldRule only(const char* key, json value, const char* meaning) {
  return {key, Kind::OnlyValue, std::move(value), meaning};
}
FieldRule only_entries(const char* key, json value, const char* meaning) {
  return {key, Kind::OnlyEntries, std::move(value), meaning};
}
FieldRule refused(const char* key, const char* reason) {
  return {key, Kind::Refused, nullptr, reason};
}
std::vector<FieldRule> rules(std::initializer_list<std::vector<FieldRule>> groups) {
  std::vector<FieldRule> out;
  for (const auto& group : groups) out.insert(out.end(), group.begin(), group.end());
  return out;
}

// Every mixture-of-experts family: the expert count under either name (the hub's Qwen3-MoE
// configs say num_experts, transformers 5 writes num_local_experts for all three), top-k, the
// auxiliary loss coefficient (written back on export), the router's jitter (must be 0).
std::vector<FieldRule> moe_fields() {
  return {accepted("num_experts"),
          accepted("num_local_experts"),
          accepted("num_experts_per_tok"),
          accepted("router_aux_loss_coef"),
          accepted("output_router_logits"),
          accepted("router_jitter_noise"),
          only("mlp_bias", false, "its MLPs and experts have no bias")};
}

// A family whose experts are as wide as intermediate_size, always renormalised, on every
// layer, with no attention biases (Mixtral, MiniMax-M2). moe_intermediate_size and
// norm_topk_prob are accepted and not read: transformers' configs of these families have
// neither, so they change nothing there either.
std::vector<FieldRule> every_layer_moe_fields() {
  return {accepted("moe_intermediate_size"), accepted("norm_topk_prob"),
          refused("decoder_sparse_step", "every layer has experts there"),
          refused("mlp_only_layers", "every layer has experts there"),
          only("attention_bias", false, "its attention projections have no bias")};
}

// Every hybrid family: the Gated DeltaNet sizes, which layers are which, the attention's output
// gate, partial RoPE (top level in Qwen3-Next's configs), and fields of the state cache and of
// the multi-token-prediction heads beside the model, which transformers does not read either.
std::vector<FieldRule> hybrid_fields() {
  return {accepted("linear_conv_kernel_dim"),
          accepted("linear_key_head_dim"),
          accepted("linear_value_head_dim"),
          accepted("linear_num_key_heads"),
          accepted("linear_num_value_heads"),
          accepted("full_attention_interval"),
          accepted("partial_rotary_factor"),
          only("attn_output_gate", true, "the attention output gated by sigmoid(q_proj's gate)"),
          accepted("mamba_ssm_dtype"),
          accepted("mtp_num_hidden_layers"),
          accepted("mtp_use_dedicated_embeddings"),
          only("use_sliding_window", false, "no layer attends in a window")};
}

// The Qwen3.5/3.6 and Qwen3-Next experts: their own width, a gated shared expert.
std::vector<FieldRule> hybrid_moe_fields() {
  return {accepted("moe_intermediate_size"), accepted("shared_expert_intermediate_size")};
}

// DeepSeek-V3's sparse MLP (MoeTraits::deepseek_layout). num_local_experts is transformers'
// alias of n_routed_experts.
std::vector<FieldRule> deepseek_moe_fields() {
  return {accepted("n_routed_experts"),
          accepted("num_local_experts"),
          accepted("num_experts_per_tok"),
          accepted("moe_intermediate_size"),
          accepted("n_shared_experts"),
          accepted("n_group"),
          accepted("topk_group"),
          accepted("routed_scaling_factor"),
          accepted("norm_topk_prob"),
          accepted("first_k_dense_replace"),
          accepted("router_aux_loss_coef"),
          accepted("output_router_logits"),
          accepted("num_nextn_predict_layers"),
          accepted("num_mtp_layers"),
          only("scoring_func", "sigmoid", "sigmoid router scores"),
          only("topk_method", "noaux_tc", "group-limited top-k with e_score_correction_bias"),
          only("mlp_bias", false, "its MLPs and experts have no bias")};
}

}  // namespace

const std::vector<FamilyTraits>& family_table() {
  static const std::vector<FamilyTraits> table = {
      {.family = DecoderFamily::Llama,
       .model_type = "llama",
       .architecture = "LlamaForCausalLM",
       .spelling = {.attention_bias = true, .mlp_bias = true}},

      {.family = DecoderFamily::Mistral,
       .model_type = "mistral",
       .architecture = "MistralForCausalLM",
       .windows = WindowReading::EveryLayer,
       .spelling = {.attention_bias = true, .windows = WindowSpelling::SlidingWindow}},

      {.family = DecoderFamily::Qwen2,
       .model_type = "qwen2",
       .architecture = "Qwen2ForCausalLM",
       .qkv_bias_always = true,
       .spelling = {.windows = WindowSpelling::LayerTypes}},

      {.family = DecoderFamily::Qwen3,
       .model_type = "qwen3",
       .architecture = "Qwen3ForCausalLM",
       .qk_norm = QkNorm::PerHead,
       .spelling = {.attention_bias = true, .windows = WindowSpelling::LayerTypes}},

      {.family = DecoderFamily::Qwen3Moe,
       .model_type = "qwen3_moe",
       .architecture = "Qwen3MoeForCausalLM",
       .qk_norm = QkNorm::PerHead,
       .windows = WindowReading::AllOrNone,
       .moe = {.enabled = true,
               .own_expert_width = true,
               .reads_norm_topk_prob = true,
               .weights_in_model_dtype = true,
               .dense_layers_listed = true},
       .fields = rules({moe_fields(),
                        {accepted("moe_intermediate_size"), accepted("norm_topk_prob"),
                         accepted("decoder_sparse_step"), accepted("mlp_only_layers")}}),
       .spelling = {.attention_bias = true, .windows = WindowSpelling::UseSlidingWindow}},

      {.family = DecoderFamily::Mixtral,
       .model_type = "mixtral",
       .architecture = "MixtralForCausalLM",
       .windows = WindowReading::EveryLayer,
       .moe = {.enabled = true, .block_sparse_moe_names = true},
       .fields = rules({moe_fields(), every_layer_moe_fields()}),
       .spelling = {.windows = WindowSpelling::SlidingWindow}},

      // The released checkpoints' own fields are accepted when they say what transformers
      // computes. use_mtp, num_mtp_modules, mtp_transformer_layers: multi-token-prediction
      // heads beside the model, which the causal LM (what transformers builds) does not run.
      {.family = DecoderFamily::MiniMaxM2,
       .model_type = "minimax_m2",
       .architecture = "MiniMaxM2ForCausalLM",
       .qk_norm = QkNorm::AcrossHeads,
       .partial_rope = true,
       .windows = WindowReading::Ignored,
       .moe = {.enabled = true,
               .scoring = RouterScoring::SigmoidWithBias,
               .block_sparse_moe_names = true},
       .fields =
           rules({moe_fields(),
                  every_layer_moe_fields(),
                  {accepted("rotary_dim"), accepted("partial_rotary_factor"),
                   only("scoring_func", "sigmoid", "sigmoid router scores"),
                   only("use_routing_bias", true, "the e_score_correction_bias of each layer"),
                   only("use_qk_norm", true, "q and k RMS-normalised"),
                   only("qk_norm_type", "per_layer", "one norm across all heads"),
                   only("shared_intermediate_size", 0, "no shared expert"),
                   only_entries("attn_type_list", 1,
                                "full softmax attention; 0 is MiniMax-01's lightning "
                                "attention"),
                   accepted("use_mtp"), accepted("num_mtp_modules"),
                   accepted("mtp_transformer_layers")}}),
       .spelling = {.router_jitter_noise = true}},

      // The hybrids (Gated DeltaNet + gated attention). Qwen3.5/3.6 checkpoints are the
      // vision-language wrapper; a text-only one (model_type qwen3_5_text) is read too. A dense
      // Qwen3.5 layer list of MLP-only layers changes nothing (every layer is dense).
      {.family = DecoderFamily::Qwen3_5,
       .model_type = "qwen3_5",
       .architecture = "Qwen3_5ForConditionalGeneration",
       .qk_norm = QkNorm::PerHead,
       .partial_rope = true,
       .default_partial_rotary_factor = 0.25,
       .windows = WindowReading::Ignored,
       .hybrid = {.enabled = true,
                  .text_model_type = "qwen3_5_text",
                  .text_architecture = "Qwen3_5ForCausalLM"},
       .fields = rules(
           {hybrid_fields(),
            {only("attention_bias", false, "its projections have no bias"),
             only("mlp_bias", false, "its MLPs have no bias"), accepted("mlp_only_layers")}})},

      {.family = DecoderFamily::Qwen3_5Moe,
       .model_type = "qwen3_5_moe",
       .architecture = "Qwen3_5MoeForConditionalGeneration",
       .qk_norm = QkNorm::PerHead,
       .partial_rope = true,
       .default_partial_rotary_factor = 0.25,
       .windows = WindowReading::Ignored,
       .moe = {.enabled = true,
               .own_expert_width = true,
               .weights_in_model_dtype = true,
               .shared_expert = true},
       .hybrid = {.enabled = true,
                  .text_model_type = "qwen3_5_moe_text",
                  .text_architecture = "Qwen3_5MoeForCausalLM"},
       .fields = rules({moe_fields(),
                        hybrid_fields(),
                        hybrid_moe_fields(),
                        {only("attention_bias", false, "its projections have no bias"),
                         refused("decoder_sparse_step", "every layer has experts there"),
                         only("mlp_only_layers", json::array(), "every layer has experts"),
                         // transformers' router always renormalises the top-k here
                         accepted("norm_topk_prob")}})},

      {.family = DecoderFamily::Qwen3Next,
       .model_type = "qwen3_next",
       .architecture = "Qwen3NextForCausalLM",
       .qk_norm = QkNorm::PerHead,
       .partial_rope = true,
       .default_partial_rotary_factor = 0.25,
       .windows = WindowReading::Ignored,
       .moe = {.enabled = true,
               .own_expert_width = true,
               .reads_norm_topk_prob = true,
               .weights_in_model_dtype = true,
               .dense_layers_listed = true,
               .shared_expert = true},
       .hybrid = {.enabled = true, .fused_projections = true},
       .fields = rules({moe_fields(),
                        hybrid_fields(),
                        hybrid_moe_fields(),
                        {only("attention_bias", false, "its projections have no bias"),
                         accepted("norm_topk_prob"), accepted("decoder_sparse_step"),
                         accepted("mlp_only_layers")}})},

      // GLM-4.5/4.6 (and -Air): Llama-shaped attention with q/k/v biases, partial RoPE (half of
      // each head by default) of the rotate-half layout, optional per-head q/k norms; DeepSeek-V3's
      // sparse MLP. The checkpoints' MTP layer (model.layers.{num_hidden_layers}) is not read.
      // transformers' attention has no window: sliding_window is read and changes nothing.
      {.family = DecoderFamily::Glm4Moe,
       .model_type = "glm4_moe",
       .architecture = "Glm4MoeForCausalLM",
       .attention_bias_qkv_only = true,
       .mtp_layers_after_decoder = true,
       .qk_norm = QkNorm::PerHeadWhenUseQkNorm,
       .partial_rope = true,
       .default_partial_rotary_factor = 0.5,
       .windows = WindowReading::Ignored,
       .moe = {.enabled = true,
               .scoring = RouterScoring::GroupedSigmoid,
               .own_expert_width = true,
               .reads_norm_topk_prob = true,
               .deepseek_layout = true},
       .fields = rules(
           {deepseek_moe_fields(), {accepted("partial_rotary_factor"), accepted("use_qk_norm")}})},

      // DeepSeek-V3/R1 and Kimi-K2 (model_type kimi_k2, the same architecture): multi-head latent
      // attention on every layer (models/latent_attention.h), GLM-4.5's sparse MLP. The
      // checkpoints' MTP layer (model.layers.{num_hidden_layers}) is not read.
      {.family = DecoderFamily::DeepseekV3,
       .model_type = "deepseek_v3",
       .architecture = "DeepseekV3ForCausalLM",
       .alias_model_type = "kimi_k2",
       .mtp_layers_after_decoder = true,
       .latent_attention = true,
       .windows = WindowReading::Ignored,
       .moe = {.enabled = true,
               .scoring = RouterScoring::GroupedSigmoid,
               .own_expert_width = true,
               .reads_norm_topk_prob = true,
               .deepseek_layout = true},
       .fields =
           rules({deepseek_moe_fields(),
                  {accepted("q_lora_rank"), accepted("kv_lora_rank"), accepted("qk_nope_head_dim"),
                   accepted("qk_rope_head_dim"), accepted("v_head_dim"),
                   accepted("rope_interleave"), accepted("qk_head_dim"),
                   only("attention_bias", false, "its attention projections have no bias"),
                   only("moe_layer_freq", 1,
                        "experts on every layer after the first first_k_dense_replace"),
                   // Expert parallelism and the training-time auxiliary loss of the
                   // published configs: they change nothing in a forward.
                   accepted("ep_size"), accepted("aux_loss_alpha"), accepted("seq_aux")}})},

      // Gemma 3 (text decoder): Gemma's layers (FamilyTraits::gemma_layers), per-head q/k norms,
      // tied embeddings by default, sliding-window layers by layer_types or
      // sliding_window_pattern, each layer type with its RoPE.
      {.family = DecoderFamily::Gemma3,
       .model_type = "gemma3_text",
       .architecture = "Gemma3ForCausalLM",
       .wrapper_model_type = "gemma3",
       .wrapper_architecture = "Gemma3ForConditionalGeneration",
       .wrapped = {.decoder = "language_model.model.",
                   .lm_head = "language_model.lm_head.",
                   .not_read = {"vision_tower.", "multi_modal_projector."}},
       .gemma_layers = true,
       .qk_norm = QkNorm::PerHead,
       .windows = WindowReading::LayerTypesOrPattern,
       .fields = {accepted("query_pre_attn_scalar"), accepted("rope_local_base_freq"),
                  accepted("sliding_window_pattern"), accepted("_sliding_window_pattern"),
                  accepted("layer_types"), accepted("hidden_activation"),
                  accepted("cache_implementation"),
                  only("hidden_act", "gelu_pytorch_tanh", "GeGLU with the tanh GELU"),
                  only("attention_bias", false, "its attention projections have no bias"),
                  only("final_logit_softcapping", nullptr,
                       "no soft-capping of the logits (Gemma 3 sets none)"),
                  only("attn_logit_softcapping", nullptr,
                       "no soft-capping of the attention scores (Gemma 3 sets none)"),
                  only("use_bidirectional_attention", false, "causal attention")},
       // Gemma3TextConfig's defaults (transformers 5.23), those of Gemma 3 1B's shapes.
       .defaults = json::object({{"vocab_size", 262208},
                                 {"hidden_size", 2304},
                                 {"intermediate_size", 9216},
                                 {"num_hidden_layers", 26},
                                 {"num_attention_heads", 8},
                                 {"num_key_value_heads", 4},
                                 {"head_dim", 256},
                                 {"max_position_embeddings", 131072},
                                 {"rms_norm_eps", 1e-6},
                                 {"sliding_window", 4096},
                                 {"query_pre_attn_scalar", 256},
                                 {"tie_word_embeddings", true}})},

      // gpt-oss (20B, 120B): Llama-shaped attention with every projection biased and a sink
      // logit per head, sliding-window and full layers alternating (layer_types; transformers'
      // default starts with a sliding one), YaRN RoPE; every layer sparse: a biased router's
      // top-k, softmax over those k, experts with biases and the clamped SwiGLU. Published
      // checkpoints store the experts as MXFP4 (io/mxfp4.h).
      {.family = DecoderFamily::GptOss,
       .model_type = "gpt_oss",
       .architecture = "GptOssForCausalLM",
       .attention_sinks = true,
       .windows = WindowReading::LayerTypesOrPattern,
       .window_pattern = 2,
       .moe = {.enabled = true,
               .scoring = RouterScoring::SoftmaxOfTopK,
               .weights_in_model_dtype = true,
               .gpt_oss_experts = true},
       .fields = rules({moe_fields(),
                        {accepted("swiglu_limit"), accepted("swiglu_alpha"),
                         // the published configs' spelling of num_experts_per_tok (must agree)
                         accepted("experts_per_token"),
                         // the context the model was pretrained at: YaRN's
                         // original_max_position_embeddings says it to the RoPE
                         accepted("initial_context_length")}}),
       // GptOssConfig's defaults (transformers 5.23) where they differ from the common reader's;
       // its YaRN as rope_scaling, which rope_parameters (transformers 5's spelling) overrides.
       .defaults = json::object(
           {{"attention_bias", true},
            {"rope_theta", 150000.0},
            {"rope_scaling", json::object({{"rope_type", "yarn"},
                                           {"factor", 32.0},
                                           {"beta_fast", 32.0},
                                           {"beta_slow", 1.0},
                                           {"truncate", false},
                                           {"original_max_position_embeddings", 4096}})},
            {"sliding_window", 128},
            {"head_dim", 64},
            {"rms_norm_eps", 1e-5},
            {"swiglu_limit", 7.0},
            {"swiglu_alpha", 1.702}})},
  };
  return table;
}

const FieldRule* FamilyTraits::rule(const std::string& key) const {
  for (const FieldRule& field : fields)
    if (field.key == key) return &field;
  return nullptr;
}

const FamilyTraits& family_traits(DecoderFamily family) {
  for (const FamilyTraits& traits : family_table())
    if (traits.family == family) return traits;
  throw Error("[config] model family ", static_cast<int>(family), " has no entry in the table");
}

const FamilyTraits* find_family(const std::string& model_type) {
  for (const FamilyTraits& traits : family_table())
    if (model_type == traits.model_type ||
        (traits.alias_model_type && model_type == traits.alias_model_type) ||
        (traits.wrapper_model_type && model_type == traits.wrapper_model_type) ||
        (traits.hybrid.text_model_type && model_type == traits.hybrid.text_model_type))
      return &traits;
  return nullptr;
}

bool is_wrapper_type(const FamilyTraits& family, const std::string& model_type) {
  if (family.hybrid.text_model_type) return model_type == family.model_type;
  return family.wrapper_model_type != nullptr && model_type == family.wrapper_model_type;
}

const char* text_model_type(const FamilyTraits& family) {
  return family.hybrid.text_model_type ? family.hybrid.text_model_type : family.model_type;
}

std::string family_names(bool (*include)(const FamilyTraits&)) {
  std::vector<std::string> names;
  for (const FamilyTraits& traits : family_table())
    if (!include || include(traits)) names.push_back(traits.model_type);
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return out;
}

const char* family_name(DecoderFamily family) {
  for (const FamilyTraits& traits : family_table())
    if (traits.family == family) return traits.model_type;
  return "?";
}

const std::set<std::string>& common_config_fields() {
  static const std::set<std::string> fields = {
      // How the model was trained, cached or tokenised, never what it computes.
      "_name_or_path", "architectures", "model_type", "transformers_version", "initializer_range",
      "use_cache", "torch_dtype", "dtype", "bos_token_id", "eos_token_id", "pad_token_id",
      "output_attentions", "output_hidden_states", "return_dict", "is_decoder",
      "chunk_size_feed_forward", "id2label", "label2id", "problem_type", "tokenizer_class",
      "prefix", "task_specific_params", "finetuning_task", "bad_words_ids",
      "decoder_start_token_id", "sep_token_id",
      // The Python classes of a trust_remote_code checkpoint (DeepSeek-V3, Kimi-K2, MiniMax-M2):
      // tandem computes the family its model_type names, as transformers does.
      "auto_map",
      // The dense decoder's, read by DecoderConfig::from_json for every family.
      "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
      "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps", "rope_theta",
      "rope_scaling", "rope_parameters", "tie_word_embeddings", "attention_bias", "mlp_bias",
      "attention_dropout", "hidden_act", "pretraining_tp", "use_sliding_window",
      "max_window_layers", "sliding_window", "layer_types"};
  return fields;
}

}  // namespace tandem
