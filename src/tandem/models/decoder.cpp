#include "tandem/models/decoder.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "tandem/core/error.h"
#include "tandem/dist/sharding.h"
#include "tandem/models/attention_sinks.h"
#include "tandem/models/key_bands.h"
#include "tandem/models/lean_layers.h"

namespace tandem {

AttentionLayout AttentionLayout::causal(int64_t batch, int64_t length, const at::Device& device) {
  at::Tensor positions = at::arange(length, at::TensorOptions().dtype(at::kLong).device(device));
  return {positions.unsqueeze(0).expand({batch, length}), at::Tensor()};
}

at::Tensor AttentionLayout::host_document_ids() const {
  if (document_ids_host.defined()) return document_ids_host;
  return document_ids.cpu();
}

AttentionImpl::AttentionImpl(const DecoderConfig& config, int64_t layer_index,
                             const at::TensorOptions& options, int64_t input_size)
    : num_heads(config.num_attention_heads),
      num_kv_heads(config.num_key_value_heads),
      head_dim(config.head_dim),
      query_scale(
          config.gemma.query_pre_attn_scalar > 0
              ? std::sqrt(static_cast<double>(config.head_dim) / config.gemma.query_pre_attn_scalar)
              : 1.0),
      norm_across_heads(config.qk_norm_across_heads),
      gated(config.gated_attention) {
  const int64_t hidden = config.hidden_size;
  const int64_t input = input_size > 0 ? input_size : hidden;
  q_proj = register_module(
      "q_proj", Linear(input, num_heads * head_dim * (gated ? 2 : 1), config.qkv_bias, options));
  k_proj =
      register_module("k_proj", Linear(input, num_kv_heads * head_dim, config.qkv_bias, options));
  v_proj =
      register_module("v_proj", Linear(input, num_kv_heads * head_dim, config.qkv_bias, options));
  o_proj = register_module("o_proj", Linear(num_heads * head_dim, hidden, config.o_bias, options));
  if (config.qk_norm) {
    const int64_t q_width = norm_across_heads ? num_heads * head_dim : head_dim;
    const int64_t k_width = norm_across_heads ? num_kv_heads * head_dim : head_dim;
    const bool centered = config.zero_centered_norms;
    q_norm = register_module("q_norm", RMSNorm(q_width, config.rms_norm_eps, options, centered));
    k_norm = register_module("k_norm", RMSNorm(k_width, config.rms_norm_eps, options, centered));
  }
  if (config.attention_sinks) sinks = register_parameter("sinks", at::empty({num_heads}, options));
}

QueryKeyValue AttentionImpl::project_key_value(const at::Tensor& x, const RopeTables& rope) const {
  const int64_t batch = x.size(0), length = x.size(1);
  at::Tensor k = k_proj->forward(x);
  if (k_norm && norm_across_heads) k = k_norm->forward(k);  // MiniMax-M2: all heads at once
  k = k.view({batch, length, num_kv_heads, head_dim});
  const at::Tensor v = v_proj->forward(x).view({batch, length, num_kv_heads, head_dim});
  if (k_norm && !norm_across_heads) k = k_norm->forward(k);  // Qwen3: each head, before RoPE
  return {at::Tensor(), apply_rope(k.transpose(1, 2), rope), v.transpose(1, 2)};
}

QueryKeyValue AttentionImpl::project(const at::Tensor& x, const RopeTables& rope) const {
  QueryKeyValue qkv = project_key_value(x, rope);
  const int64_t batch = x.size(0), length = x.size(1);
  at::Tensor q = q_proj->forward(x);
  if (gated) {  // per head: head_dim query values, then head_dim gate values
    const at::Tensor both = q.view({batch, length, num_heads, 2 * head_dim});
    qkv.gate = both.narrow(3, head_dim, head_dim).reshape({batch, length, num_heads * head_dim});
    q = both.narrow(3, 0, head_dim);
  }
  if (q_norm && norm_across_heads) q = q_norm->forward(q);
  q = q.reshape({batch, length, num_heads, head_dim});
  if (q_norm && !norm_across_heads) q = q_norm->forward(q);
  qkv.q = apply_rope(q.transpose(1, 2), rope);
  if (query_scale != 1.0) qkv.q = qkv.q * query_scale;
  if (sinks.defined()) {  // a frozen model's: gathered when sharded, never differentiated
    const FullParameters full({sinks});
    qkv.sinks = sinks.detach().clone();
  }
  return qkv;
}

at::Tensor AttentionImpl::output(const at::Tensor& attended, const at::Tensor& gate) const {
  const int64_t batch = attended.size(0), length = attended.size(2);
  at::Tensor flat = attended.transpose(1, 2).reshape({batch, length, num_heads * head_dim});
  if (gate.defined()) flat = flat * at::sigmoid(gate);
  return o_proj->forward(flat);
}

GatedDeltaNetImpl::GatedDeltaNetImpl(const DecoderConfig& config,
                                     const at::TensorOptions& options) {
  const LinearAttentionConfig& l = config.linear_attention;
  shape = {l.key_heads, l.value_heads, l.key_dim, l.value_dim, config.rms_norm_eps};
  const int64_t hidden = config.hidden_size, keys = l.key_heads * l.key_dim,
                values = l.value_heads * l.value_dim, channels = 2 * keys + values;
  // Registered in transformers' order, so parameters list as its modules do.
  if (l.fused_projections) {
    in_proj_qkvz =
        register_module("in_proj_qkvz", Linear(hidden, 2 * keys + 2 * values, false, options));
    in_proj_ba = register_module("in_proj_ba", Linear(hidden, 2 * l.value_heads, false, options));
  }
  conv1d = register_module("conv1d", std::make_shared<torch::nn::Module>());
  conv1d->register_parameter("weight", at::empty({channels, 1, l.conv_kernel}, options));
  dt_bias = register_parameter("dt_bias", at::empty({l.value_heads}, options));
  A_log = register_parameter("A_log", at::empty({l.value_heads}, options));
  norm = register_module("norm", RMSNorm(l.value_dim, config.rms_norm_eps, options));
  out_proj = register_module("out_proj", Linear(values, hidden, false, options));
  if (!l.fused_projections) {
    in_proj_qkv = register_module("in_proj_qkv", Linear(hidden, channels, false, options));
    in_proj_z = register_module("in_proj_z", Linear(hidden, values, false, options));
    in_proj_b = register_module("in_proj_b", Linear(hidden, l.value_heads, false, options));
    in_proj_a = register_module("in_proj_a", Linear(hidden, l.value_heads, false, options));
  }
}

at::Tensor GatedDeltaNetImpl::step(const at::Tensor& x, const at::Tensor& valid,
                                   GatedDeltaNetState& state, int64_t chunk_size) const {
  GatedDeltaOptions options;
  options.chunk_size = chunk_size;
  return with_weights(x, [&](const at::Tensor& in, const GatedDeltaNetWeights& w) {
    return gated_deltanet_step(in, valid, w, shape, state, options);
  });
}

namespace {

// The defined tensors of `w`, in a fixed order.
std::vector<at::Tensor*> weight_slots(GatedDeltaNetWeights& w) {
  std::vector<at::Tensor*> slots;
  for (at::Tensor* t : {&w.in_proj_qkv, &w.in_proj_z, &w.in_proj_b, &w.in_proj_a, &w.in_proj_qkvz,
                        &w.in_proj_ba, &w.conv1d, &w.dt_bias, &w.A_log, &w.norm, &w.out_proj})
    if (t->defined()) slots.push_back(t);
  return slots;
}

}  // namespace

at::Tensor GatedDeltaNetImpl::with_weights(
    const at::Tensor& x,
    const std::function<at::Tensor(const at::Tensor&, const GatedDeltaNetWeights&)>& body) const {
  GatedDeltaNetWeights stored = weights();
  std::vector<at::Tensor> parameters;
  for (at::Tensor* t : weight_slots(stored)) parameters.push_back(*t);
  return with_full_parameters(parameters, {x}, [&](const auto& in, const auto& full) {
    GatedDeltaNetWeights w = stored;
    const std::vector<at::Tensor*> slots = weight_slots(w);
    for (size_t i = 0; i < slots.size(); ++i) *slots[i] = full[i];
    return std::vector<at::Tensor>{body(in[0], w)};
  })[0];
}

GatedDeltaNetWeights GatedDeltaNetImpl::weights() const {
  GatedDeltaNetWeights w;
  if (in_proj_qkvz) {
    w.in_proj_qkvz = in_proj_qkvz->weight;
    w.in_proj_ba = in_proj_ba->weight;
  } else {
    w.in_proj_qkv = in_proj_qkv->weight;
    w.in_proj_z = in_proj_z->weight;
    w.in_proj_b = in_proj_b->weight;
    w.in_proj_a = in_proj_a->weight;
  }
  w.conv1d = conv1d->named_parameters(/*recurse=*/false)["weight"];
  w.dt_bias = dt_bias;
  w.A_log = A_log;
  w.norm = norm->weight;
  w.out_proj = out_proj->weight;
  return w;
}

at::Tensor GatedDeltaNetImpl::forward(const at::Tensor& x,
                                      const std::vector<std::vector<int64_t>>& bounds,
                                      int64_t chunk_size) const {
  GatedDeltaOptions options;
  options.chunk_size = chunk_size;
  return with_weights(x, [&](const at::Tensor& in, const GatedDeltaNetWeights& w) {
    return gated_deltanet_forward(in, w, shape, bounds, options);
  });
}

DecoderLayerImpl::DecoderLayerImpl(const DecoderConfig& config, int64_t layer_index,
                                   const at::TensorOptions& options, LayerInput input)
    : sliding_window(config.sliding_window.at(layer_index)) {
  const int64_t hidden = config.hidden_size;
  const int64_t attention_input = input == LayerInput::EmbeddingAndHidden ? 2 * hidden : 0;
  const bool centered = config.zero_centered_norms;
  if (config.linear_attention.at(layer_index))
    linear_attn = register_module("linear_attn", GatedDeltaNet(config, options));
  else if (config.latent_attention.enabled())
    latent_attn = register_module("self_attn", LatentAttention(config, options));
  else
    self_attn =
        register_module("self_attn", Attention(config, layer_index, options, attention_input));
  if (config.moe.enabled() && config.moe.sparse_layers.at(layer_index))
    experts = register_module("mlp", SparseMoe(config, options));
  else
    mlp = register_module("mlp", Mlp(hidden, config.intermediate_size, config.mlp_bias, options,
                                     config.mlp_activation));
  input_layernorm =
      register_module("input_layernorm", RMSNorm(hidden, config.rms_norm_eps, options, centered));
  // Registered between the two norms: the EAGLE-3 layer's parameter order (initialisation draws
  // and checkpoints follow it) is the one its exports have always had.
  if (input == LayerInput::EmbeddingAndHidden)
    hidden_norm = register_module("hidden_norm", RMSNorm(hidden, config.rms_norm_eps, options));
  post_attention_layernorm = register_module(
      "post_attention_layernorm", RMSNorm(hidden, config.rms_norm_eps, options, centered));
  if (config.gemma.sandwich_norms) {
    pre_feedforward_layernorm = register_module(
        "pre_feedforward_layernorm", RMSNorm(hidden, config.rms_norm_eps, options, centered));
    post_feedforward_layernorm = register_module(
        "post_feedforward_layernorm", RMSNorm(hidden, config.rms_norm_eps, options, centered));
  }
}

namespace {

// Every layer body after its token mixer (attention or Gated DeltaNet), whose output is `mixed`
// (B, T, H): the residual adds and the MLP, with Gemma 3's sandwich norms where the layer has them.
at::Tensor residual_body(const DecoderLayerImpl& layer, const at::Tensor& residual,
                         const at::Tensor& mixed, RouterLoad* load) {
  if (layer.pre_feedforward_layernorm) {
    const at::Tensor h = residual + layer.post_attention_layernorm->forward(mixed);
    return h + layer.post_feedforward_layernorm->forward(
                   layer.feed_forward(layer.pre_feedforward_layernorm->forward(h), load));
  }
  const at::Tensor h = residual + mixed;
  return h + layer.feed_forward(layer.post_attention_layernorm->forward(h), load);
}

}  // namespace

at::Tensor DecoderLayerImpl::forward_linear_cached(const at::Tensor& hidden,
                                                   const at::Tensor& valid,
                                                   GatedDeltaNetState& state,
                                                   int64_t chunk_size) const {
  return residual_body(
      *this, hidden, linear_attn->step(input_layernorm->forward(hidden), valid, state, chunk_size),
      nullptr);
}

at::Tensor DecoderLayerImpl::feed_forward(const at::Tensor& x, RouterLoad* load) const {
  return mlp ? mlp->forward(x) : experts->forward(x, load);
}

at::Tensor DecoderLayerImpl::run(const at::Tensor& residual, const at::Tensor& attention_input,
                                 const RopeTables& rope, const AttendFn& attend,
                                 RouterLoad* load) const {
  if (latent_attn)
    return residual_body(*this, residual,
                         latent_attn->output(attend(latent_attn->project(attention_input, rope))),
                         load);
  const QueryKeyValue qkv = self_attn->project(attention_input, rope);
  return residual_body(*this, residual, self_attn->output(attend(qkv), qkv.gate), load);
}

at::Tensor DecoderLayerImpl::forward_latent_cached(const at::Tensor& hidden, const RopeTables& rope,
                                                   const at::Tensor& mask, KvCache& cache,
                                                   int64_t layer) const {
  return residual_body(
      *this, hidden,
      latent_attn->forward_cached(input_layernorm->forward(hidden), rope, mask, cache, layer),
      nullptr);
}

at::Tensor DecoderLayerImpl::forward_linear(const at::Tensor& hidden,
                                            const std::vector<std::vector<int64_t>>& bounds,
                                            int64_t chunk_size, RouterLoad* load) const {
  return residual_body(*this, hidden,
                       linear_attn->forward(input_layernorm->forward(hidden), bounds, chunk_size),
                       load);
}

at::Tensor DecoderLayerImpl::forward(const at::Tensor& hidden, const RopeTables& rope,
                                     const AttendFn& attend, RouterLoad* load) const {
  return run(hidden, input_layernorm->forward(hidden), rope, attend, load);
}

DecoderModelImpl::DecoderModelImpl(const DecoderConfig& config, const at::TensorOptions& options) {
  embed_tokens =
      register_module("embed_tokens", Embedding(config.vocab_size, config.hidden_size, options));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.num_hidden_layers; ++i)
    layers->push_back(DecoderLayer(config, i, options));
  norm = register_module("norm", RMSNorm(config.hidden_size, config.rms_norm_eps, options,
                                         config.zero_centered_norms));
}

CausalLMImpl::CausalLMImpl(const DecoderConfig& config, const at::TensorOptions& options)
    : config_(config) {
  config_.validate("model config");
  model = register_module("model", DecoderModel(config, options));
  if (!config.tie_word_embeddings)
    lm_head =
        register_module("lm_head", Linear(config.hidden_size, config.vocab_size, false, options));
  inverse_frequencies_ =
      RopeFrequencies::of(config.rotated_dims(), config.rope_theta, config.rope_scaling);
  if (config.gemma.local_rope_theta > 0)
    local_frequencies_ =
        RopeFrequencies::of(config.rotated_dims(), config.gemma.local_rope_theta, RopeScaling());
}

LayerRopes CausalLMImpl::rope_tables_for(const at::Tensor& positions, c10::ScalarType dtype) const {
  LayerRopes ropes{rope_tables(inverse_frequencies_, positions, dtype), {}};
  if (local_frequencies_) ropes.sliding = rope_tables(*local_frequencies_, positions, dtype);
  return ropes;
}

at::Tensor CausalLMImpl::embed(const at::Tensor& ids) const {
  const at::Tensor embeddings = model->embed_tokens->forward(ids);
  if (!config_.gemma.scaled_embeddings) return embeddings;
  // transformers: sqrt(hidden_size) as an fp32 scalar, cast to the embeddings' dtype.
  const double scale = std::sqrt(static_cast<double>(config_.hidden_size));
  return embeddings * at::scalar_tensor(scale, at::kFloat).to(embeddings.scalar_type());
}

at::Tensor CausalLMImpl::forward_hidden(const at::Tensor& ids, const AttentionLayout& layout,
                                        const std::vector<int64_t>& capture_layers,
                                        std::map<int64_t, at::Tensor>* captured,
                                        RouterLoad* router_load) const {
  check(ids.dim() == 2, "[decoder] input ids must be (batch, length), got ", ids.sizes());
  check(layout.positions.sizes() == ids.sizes(), "[decoder] positions ", layout.positions.sizes(),
        " do not match ids ", ids.sizes());
  const int64_t num_layers = config_.num_hidden_layers;
  for (int64_t layer : capture_layers)
    check(layer >= 0 && layer < num_layers, "[decoder] cannot capture layer ", layer,
          ": the model has layers 0..", num_layers - 1);
  at::Tensor hidden = embed(ids);
  const LayerRopes ropes = rope_tables_for(layout.positions, hidden.scalar_type());
  // A hybrid's Gated DeltaNet layers restart their state at each document (read on the host).
  std::vector<std::vector<int64_t>> bounds;
  if (config_.hybrid() && layout.document_ids.defined())
    bounds = document_bounds(layout.host_document_ids());
  std::map<int64_t, CausalAttentionPlan> plans;  // one plan per distinct sliding window
  auto plan_for = [&](int64_t window) -> const CausalAttentionPlan& {
    auto plan = plans.find(window);
    if (plan == plans.end())
      plan = plans
                 .emplace(window, plan_causal_attention(layout, window, attention_options,
                                                        config_.attention_sinks))
                 .first;
    return plan->second;
  };
  for (int64_t i = 0; i < num_layers; ++i) {
    const auto& layer = model->layers->at<DecoderLayerImpl>(i);
    if (layer.linear_attn) {
      hidden = layer.forward_linear(hidden, bounds, attention_options.linear_chunk, router_load);
    } else {
      const CausalAttentionPlan& plan = plan_for(layer.sliding_window);
      hidden = layer.forward(
          hidden, ropes.of(layer),
          [&](const QueryKeyValue& qkv) { return causal_attention(qkv, plan); }, router_load);
    }
    if (captured &&
        std::find(capture_layers.begin(), capture_layers.end(), i) != capture_layers.end())
      (*captured)[i] = hidden;
  }
  return model->norm->forward(hidden);
}

at::Tensor CausalLMImpl::forward_cached(const at::Tensor& ids, const at::Tensor& positions,
                                        const at::Tensor& valid, KvCache& cache,
                                        const std::vector<int64_t>& capture_layers,
                                        std::map<int64_t, at::Tensor>* captured) const {
  check(ids.dim() == 2 && positions.sizes() == ids.sizes() && valid.sizes() == ids.sizes(),
        "[decoder] cached forward: ids ", ids.sizes(), ", positions ", positions.sizes(),
        " and valid ", valid.sizes(), " must all be (batch, new tokens)");
  const int64_t n = ids.size(1);
  const at::Tensor valid_slots = valid.to(at::kBool);
  cache.begin(valid_slots);
  const int64_t slots = cache.length() + n;
  // (B, 1, n, slots): new slot i (slot length + i) sees valid slots j <= length + i, and itself.
  const at::TensorOptions longs = ids.options().dtype(at::kLong);
  const at::Tensor query_slot = (at::arange(n, longs) + cache.length()).view({1, 1, n, 1});
  const at::Tensor key_slot = at::arange(slots, longs).view({1, 1, 1, slots});
  const at::Tensor visible =
      cache.valid_slots().view({ids.size(0), 1, 1, slots}).logical_and(key_slot <= query_slot);
  const at::Tensor itself = key_slot == query_slot;
  std::map<int64_t, at::Tensor> masks;  // one per distinct sliding window
  auto mask_for = [&](int64_t window) -> const at::Tensor& {
    auto found = masks.find(window);
    if (found != masks.end()) return found->second;
    at::Tensor mask = visible;
    if (window > 0) mask = mask.logical_and(query_slot - key_slot < window);
    return masks.emplace(window, mask.logical_or(itself)).first->second;
  };
  at::Tensor hidden = embed(ids);
  const LayerRopes ropes = rope_tables_for(positions, hidden.scalar_type());
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    const auto& layer = model->layers->at<DecoderLayerImpl>(i);
    if (layer.linear_attn)
      hidden = layer.forward_linear_cached(hidden, valid_slots, cache.linear_state(i),
                                           attention_options.linear_chunk);
    else if (layer.latent_attn)
      hidden = layer.forward_latent_cached(hidden, ropes.of(layer), mask_for(layer.sliding_window),
                                           cache, i);
    else
      hidden = layer.forward(hidden, ropes.of(layer), [&](const QueryKeyValue& qkv) {
        const auto [keys, values] = cache.append(i, qkv.k, qkv.v);
        if (qkv.sinks.defined())
          return masked_attention_with_sinks(qkv.q, keys, values, mask_for(layer.sliding_window),
                                             qkv.sinks);
        return sdpa(qkv.q, keys, values, mask_for(layer.sliding_window));
      });
    if (captured != nullptr &&
        std::find(capture_layers.begin(), capture_layers.end(), i) != capture_layers.end())
      (*captured)[i] = hidden;
  }
  cache.commit();
  return model->norm->forward(hidden);
}

at::Tensor CausalLMImpl::lm_head_weight() const {
  return lm_head ? lm_head->weight : model->embed_tokens->weight;
}

at::Tensor CausalLMImpl::logits(const at::Tensor& hidden) const {
  return apply_linear(hidden, lm_head_weight());
}

}  // namespace tandem
