#pragma once
// Llama-family causal LM (Llama 2/3/3.x, Mistral, Qwen2, Qwen3) and the mixture-of-experts
// decoders built from the same parts (Qwen3-MoE, Mixtral, MiniMax-M2, GLM-4.5, DeepSeek-V3
// with its latent attention, models/latent_attention.h; the sparse MLP is models/moe.h):
// embeddings, RMSNorm, RoPE (full or partial), grouped-query attention with optional q/k norms, a
// SwiGLU MLP or experts, tied or untied lm_head. The hybrids (Qwen3.5/3.6, Qwen3-Next) mix in Gated
// DeltaNet layers (models/gated_deltanet.h) and gate their attention. Module names are
// transformers', so `named_parameters()` yields its keys
// (`model.layers.0.self_attn.q_proj.weight`, `model.layers.0.mlp.experts.gate_up_proj`, ...;
// models/stored_weights.h maps the expert ones to what checkpoints store).
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "tandem/models/attention_options.h"
#include "tandem/models/causal_attention.h"
#include "tandem/models/decoder_config.h"
#include "tandem/models/gated_deltanet.h"
#include "tandem/models/kv_cache.h"
#include "tandem/models/latent_attention.h"
#include "tandem/models/layers.h"
#include "tandem/models/moe.h"
#include "tandem/models/rope.h"

namespace tandem {

/// Which keys each query may attend to. Plain causal attention when `document_ids` is undefined;
/// with packing, tokens attend only within their own document.
/// Documents are contiguous runs of a row (data/packing.h).
struct AttentionLayout {
  at::Tensor positions;     // (B, T) int64 RoPE positions (restart per document when packed)
  at::Tensor document_ids;  // (B, T) int64, optional: attention never crosses documents
  // document_ids on the CPU when they live on a GPU (a batch's host copy): the kernels read the
  // boundaries there without waiting for the device. Optional.
  at::Tensor document_ids_host;

  /// Positions 0..T-1 for every row and no document boundaries.
  static AttentionLayout causal(int64_t batch, int64_t length, const at::Device& device);
  /// document_ids on the CPU: the host copy, or a copy made now (a device wait on a GPU).
  at::Tensor host_document_ids() const;
};

/// Queries, keys and values of one attention call, RoPE applied.
struct QueryKeyValue {
  at::Tensor q;     // (B, heads, T, head_dim)
  at::Tensor k;     // (B, kv_heads, T, head_dim)
  at::Tensor v;     // (B, kv_heads, T, head_dim)
  at::Tensor gate;  // gated attention: (B, T, heads * head_dim), before the sigmoid; else undefined
  at::Tensor sinks;  // attention sinks (gpt-oss): (heads,), the full values; else undefined
};

class AttentionImpl : public torch::nn::Module {
 public:
  /// `input_size` is what q/k/v project from: hidden_size (0) for a decoder layer, 2 * hidden for
  /// the EAGLE-3 draft layer (embedding and hidden state side by side).
  AttentionImpl(const DecoderConfig& config, int64_t layer_index, const at::TensorOptions& options,
                int64_t input_size = 0);
  /// x (B, T, input_size) -> q, k, v with q/k norms (Qwen3 per head, MiniMax-M2 across heads)
  /// and RoPE applied; gated attention (Qwen3.5, Qwen3-Next) also the output gate, from the
  /// second half of each head's q_proj rows; a layer with attention sinks (gpt-oss) its sinks.
  QueryKeyValue project(const at::Tensor& x, const RopeTables& rope) const;
  /// The same without the query (left undefined): keys and values of tokens that ask nothing
  /// (the DFlash draft's context).
  QueryKeyValue project_key_value(const at::Tensor& x, const RopeTables& rope) const;
  /// Attention output (B, heads, T, head_dim) -> (B, T, H) through o_proj, multiplied by
  /// sigmoid(gate) first when `gate` (QueryKeyValue::gate) is given.
  at::Tensor output(const at::Tensor& attended, const at::Tensor& gate = {}) const;
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};  // Qwen3 (head_dim), MiniMax-M2 (heads * head_dim)
  at::Tensor sinks;  // (heads,): gpt-oss's per-head sink logits (models/attention_sinks.h)
  int64_t num_heads, num_kv_heads, head_dim;
  // q is multiplied by it after RoPE: sqrt(head_dim / query_pre_attn_scalar) makes the kernels'
  // head_dim^-0.5 Gemma 3's query_pre_attn_scalar^-0.5. 1 elsewhere.
  double query_scale = 1.0;
  bool norm_across_heads;
  bool gated;  // q_proj (heads * 2 * head_dim, input): per head, its query then its gate
};
TORCH_MODULE(Attention);

/// The Gated DeltaNet token mixer of a hybrid's linear-attention layer (models/gated_deltanet.h),
/// with the checkpoint's names: in_proj_qkv, in_proj_z, in_proj_b, in_proj_a (Qwen3.5) or
/// in_proj_qkvz, in_proj_ba (Qwen3-Next), conv1d.weight, dt_bias, A_log, norm.weight, out_proj.
class GatedDeltaNetImpl : public torch::nn::Module {
 public:
  GatedDeltaNetImpl(const DecoderConfig& config, const at::TensorOptions& options);
  /// x (B, T, H) -> (B, T, H); `bounds`: per row, its document bounds [0, ..., T] (empty: one
  /// document per row); `chunk_size`: tokens per chunk of the gated delta rule.
  at::Tensor forward(const at::Tensor& x, const std::vector<std::vector<int64_t>>& bounds,
                     int64_t chunk_size) const;
  /// Generation: x (B, n, H) of n new slots continuing `state` (models/kv_cache.h); `valid`
  /// (B, n) bool marks real tokens. -> (B, n, H).
  at::Tensor step(const at::Tensor& x, const at::Tensor& valid, GatedDeltaNetState& state,
                  int64_t chunk_size) const;
  /// The tensors, as gated_deltanet_forward takes them (sharded ones hold no values outside
  /// with_weights).
  GatedDeltaNetWeights weights() const;
  /// body(x, the full weights) (dist/sharding.h with_full_parameters: a sharded frozen target's
  /// weights gathered for the call).
  at::Tensor with_weights(
      const at::Tensor& x,
      const std::function<at::Tensor(const at::Tensor&, const GatedDeltaNetWeights&)>& body) const;
  Linear in_proj_qkv{nullptr}, in_proj_z{nullptr}, in_proj_b{nullptr}, in_proj_a{nullptr};
  Linear in_proj_qkvz{nullptr}, in_proj_ba{nullptr};
  std::shared_ptr<torch::nn::Module> conv1d;  // holds `weight` (channels, 1, kernel)
  at::Tensor dt_bias, A_log;                  // (Hv,)
  RMSNorm norm{nullptr};                      // the gated norm's weight (V,), plain (not 1 + w)
  Linear out_proj{nullptr};
  GatedDeltaNetShape shape;
};
TORCH_MODULE(GatedDeltaNet);

/// Attention inside a layer body: the layer's q, k, v (projected, normed, RoPE applied) -> the
/// attended values (B, heads, Tq, head_dim), before o_proj. The caller decides what each query
/// sees: causal within its document (CausalLM::forward_hidden), the cached slots
/// (forward_cached), the target context plus its own block (the DFlash draft), the unroll's
/// step keys (the EAGLE-3 draft). It may also keep the keys and values (a cache, an unroll).
using AttendFn = std::function<at::Tensor(const QueryKeyValue& qkv)>;

/// What a layer's attention projects from.
enum class LayerInput {
  Hidden,              // input_layernorm(hidden): (B, T, H)
  EmbeddingAndHidden,  // EAGLE-3: cat(input_layernorm(embeds), hidden_norm(hidden)): (B, T, 2H)
};

class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const DecoderConfig& config, int64_t layer_index,
                   const at::TensorOptions& options, LayerInput input = LayerInput::Hidden);
  /// The one residual body every layer runs (plain, cached, DFlash, EAGLE-3):
  ///   h = residual + o_proj(attend(project(attention_input))),
  ///   out = h + feed_forward(post_attention_layernorm(h))
  /// (Gemma 3: h = residual + post_attention_layernorm(o_proj(...)),
  ///   out = h + post_feedforward_layernorm(feed_forward(pre_feedforward_layernorm(h)))).
  /// residual (B, T, H), attention_input (B, T, H or 2H) -> (B, T, H). A sparse layer adds its
  /// router's logits to `load` when given.
  at::Tensor run(const at::Tensor& residual, const at::Tensor& attention_input,
                 const RopeTables& rope, const AttendFn& attend, RouterLoad* load = nullptr) const;
  /// A pre-norm decoder layer: run(hidden, input_layernorm(hidden), ...). (B, T, H) -> (B, T, H).
  at::Tensor forward(const at::Tensor& hidden, const RopeTables& rope, const AttendFn& attend,
                     RouterLoad* load = nullptr) const;
  /// A hybrid's linear-attention layer: the same residual body with Gated DeltaNet in place of
  /// attention. hidden (B, T, H) -> (B, T, H); `bounds` as GatedDeltaNetImpl::forward takes them.
  at::Tensor forward_linear(const at::Tensor& hidden,
                            const std::vector<std::vector<int64_t>>& bounds, int64_t chunk_size,
                            RouterLoad* load = nullptr) const;
  /// A latent attention layer on n new slots of a cache: hidden (B, n, H), `mask` (B, 1, n,
  /// slots) -> (B, n, H) (LatentAttentionImpl::forward_cached).
  at::Tensor forward_latent_cached(const at::Tensor& hidden, const RopeTables& rope,
                                   const at::Tensor& mask, KvCache& cache, int64_t layer) const;
  /// The same on n new slots of a cache (GatedDeltaNetImpl::step).
  at::Tensor forward_linear_cached(const at::Tensor& hidden, const at::Tensor& valid,
                                   GatedDeltaNetState& state, int64_t chunk_size) const;
  /// The MLP part: the dense MLP, or the experts. (B, T, H) -> (B, T, H).
  at::Tensor feed_forward(const at::Tensor& x, RouterLoad* load = nullptr) const;
  Attention self_attn{nullptr};          // null in a linear-attention or latent attention layer
  LatentAttention latent_attn{nullptr};  // DeepSeek-V3: registered as "self_attn"
  GatedDeltaNet linear_attn{nullptr};    // a hybrid's linear-attention layer only
  Mlp mlp{nullptr};                      // a dense layer (null in a sparse one)
  SparseMoe experts{nullptr};  // a sparse layer: registered as "mlp" (null in a dense one)
  // Pre-norm layers: input_layernorm before the token mixer, post_attention_layernorm before the
  // MLP. Gemma 3 (sandwich norms): post_attention_layernorm on the attention's output, and
  // pre_/post_feedforward_layernorm around the MLP (GemmaLayers).
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  RMSNorm pre_feedforward_layernorm{nullptr}, post_feedforward_layernorm{nullptr};
  RMSNorm hidden_norm{nullptr};  // LayerInput::EmbeddingAndHidden only
  int64_t sliding_window;        // 0: full causal attention
};
TORCH_MODULE(DecoderLayer);

/// The `model.` part of an HF causal LM: embeddings, decoder layers, final norm.
class DecoderModelImpl : public torch::nn::Module {
 public:
  DecoderModelImpl(const DecoderConfig& config, const at::TensorOptions& options);
  Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};
};
TORCH_MODULE(DecoderModel);

/// The RoPE tables of one forward: the model's, and Gemma 3's sliding-window layers' own.
struct LayerRopes {
  RopeTables full;
  RopeTables sliding;  // undefined: every layer uses `full`
  /// The tables `layer` rotates with.
  const RopeTables& of(const DecoderLayerImpl& layer) const {
    return layer.sliding_window > 0 && sliding.cos.defined() ? sliding : full;
  }
};

class CausalLMImpl : public torch::nn::Module {
 public:
  CausalLMImpl(const DecoderConfig& config, const at::TensorOptions& options);

  /// Runs the decoder on ids (B, T) and returns the final-normed hidden states (B, T, H).
  /// For each i in `capture_layers`, `captured[i]` receives the raw output of decoder layer i
  /// (transformers' hidden_states[i + 1], before any final norm). A mixture-of-experts model adds
  /// each sparse layer's router logits to `router_load` when given (the load-balancing loss).
  at::Tensor forward_hidden(const at::Tensor& ids, const AttentionLayout& layout,
                            const std::vector<int64_t>& capture_layers = {},
                            std::map<int64_t, at::Tensor>* captured = nullptr,
                            RouterLoad* router_load = nullptr) const;
  /// Generation (models/kv_cache.h): runs ids (B, n) as the next n slots of `cache`, at RoPE
  /// `positions` (B, n) int64; `valid` (B, n) bool marks real tokens (false: a padding slot).
  /// Each slot attends to the valid slots up to itself within the layer's sliding window (a
  /// padding slot to itself only, so nothing is ever empty). Returns the final-normed hidden
  /// states (B, n, H); `captured[i]` receives the raw output (B, n, H) of each decoder layer i in
  /// `capture_layers`, as forward_hidden does. Call it under NoGradGuard.
  at::Tensor forward_cached(const at::Tensor& ids, const at::Tensor& positions,
                            const at::Tensor& valid, KvCache& cache,
                            const std::vector<int64_t>& capture_layers = {},
                            std::map<int64_t, at::Tensor>* captured = nullptr) const;
  /// The first layer's input: embed_tokens(ids), times sqrt(hidden_size) rounded to the
  /// embeddings' dtype for Gemma 3 (as transformers). (B, T) -> (B, T, H)
  at::Tensor embed(const at::Tensor& ids) const;
  /// Full-vocabulary logits (B, T, V) of final hidden states (B, T, H).
  at::Tensor logits(const at::Tensor& hidden) const;
  /// The output projection (V, H): lm_head.weight, or the embedding when tied.
  at::Tensor lm_head_weight() const;
  const DecoderConfig& config() const { return config_; }

  DecoderModel model{nullptr};
  Linear lm_head{nullptr};  // null when tie_word_embeddings
  AttentionOptions
      attention_options;  // the run's kernel and chunk sizes (config section `attention`)

 private:
  /// The RoPE tables for `positions` (B, T), in `dtype`.
  LayerRopes rope_tables_for(const at::Tensor& positions, c10::ScalarType dtype) const;

  DecoderConfig config_;
  RopeFrequencies inverse_frequencies_;  // on the device of the last forward
  // Gemma 3's sliding-window layers' RoPE (GemmaLayers::local_rope_theta); unset elsewhere.
  std::optional<RopeFrequencies> local_frequencies_;
};
TORCH_MODULE(CausalLM);

}  // namespace tandem
