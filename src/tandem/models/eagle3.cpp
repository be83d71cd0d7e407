#include "tandem/models/eagle3.h"

#include <ATen/ATen.h>

#include "tandem/core/device.h"
#include "tandem/core/error.h"
#include "tandem/models/rope.h"
#include "tandem/models/ttt_attention.h"

namespace tandem {

std::vector<int64_t> Eagle3Config::default_aux_layers(int64_t num_layers) {
  return {1, num_layers / 2 - 1, num_layers - 4};
}

Eagle3Config Eagle3Config::for_target(const DecoderConfig& target,
                                      std::vector<int64_t> aux_layer_ids, int64_t draft_vocab_size,
                                      int64_t intermediate_size, const DraftHeads& heads) {
  Eagle3Config config;
  // The draft layer is a Llama layer in every engine.
  config.layer = target.draft_layers(DecoderFamily::Llama, 1, heads);
  if (intermediate_size > 0) config.layer.intermediate_size = intermediate_size;
  check(config.layer.intermediate_size > 0, "[eagle3] the ", family_name(target.family),
        " target has no dense MLP width (intermediate_size: every layer has experts); set "
        "draft.intermediate_size");
  config.target_hidden_size = target.hidden_size;
  config.draft_vocab_size = draft_vocab_size;
  config.aux_layer_ids = aux_layer_ids.empty() ? default_aux_layers(target.num_hidden_layers)
                                               : std::move(aux_layer_ids);
  return config;
}

void Eagle3Config::validate(const std::string& where) const {
  layer.validate(where);
  check(aux_layer_ids.size() == 3, "[eagle3] ", where, ": EAGLE-3 reads 3 target layers, got ",
        aux_layer_ids.size());
  check(draft_vocab_size > 0 && draft_vocab_size <= layer.vocab_size, "[eagle3] ", where,
        ": draft_vocab_size ", draft_vocab_size, " must be in 1..", layer.vocab_size,
        " (the target's vocab)");
  check(target_hidden_size > 0 && target_hidden_size <= (int64_t{1} << 16), "[eagle3] ", where,
        ": target_hidden_size must be in 1..65536, got ", target_hidden_size);
}

Eagle3DraftImpl::Eagle3DraftImpl(const Eagle3Config& config, const at::TensorOptions& options)
    : config_(config) {
  config_.validate("draft config");
  const int64_t hidden = config.layer.hidden_size;
  if (config.fc_norm) {
    fc_norm = register_module("fc_norm", torch::nn::ModuleList());
    for (size_t j = 0; j < config.aux_layer_ids.size(); ++j)
      fc_norm->push_back(RMSNorm(config.target_hidden_size, config.layer.rms_norm_eps, options));
  }
  fc = register_module("fc", Linear(3 * config.target_hidden_size, hidden, false, options));
  midlayer = register_module(
      "midlayer", DecoderLayer(config.layer, 0, options, LayerInput::EmbeddingAndHidden));
  norm = register_module("norm", RMSNorm(hidden, config.layer.rms_norm_eps, options));
  lm_head = register_module("lm_head", Linear(hidden, config.draft_vocab_size, false, options));
  // Until a vocab map is set: the first D target ids.
  const at::TensorOptions ids = options.dtype(at::kLong).requires_grad(false);
  d2t = register_buffer("d2t", at::zeros({config.draft_vocab_size}, ids));
  t2d = register_buffer("t2d", at::arange(config.layer.vocab_size, ids) < config.draft_vocab_size);
  inverse_frequencies_ = RopeFrequencies::of(config.layer.head_dim, config.layer.rope_theta,
                                             config.layer.rope_scaling);
}

at::Tensor Eagle3DraftImpl::run_layer(const at::Tensor& embeds, const at::Tensor& hidden,
                                      const at::Tensor& positions, const AttendFn& attend) const {
  const DecoderLayerImpl& layer = *midlayer;
  const at::Tensor input = at::cat(
      {layer.input_layernorm->forward(embeds), layer.hidden_norm->forward(hidden)}, -1);  // 2H
  const RopeTables rope = rope_tables(inverse_frequencies_, positions, hidden.scalar_type());
  // The residual is the raw hidden state, not its norm (norm_before_residual: false).
  return layer.run(hidden, input, rope, attend);
}

at::Tensor Eagle3DraftImpl::carried(const at::Tensor& out) const {
  return config_.norm_output ? norm->forward(out) : out;
}

at::Tensor Eagle3DraftImpl::fuse(const at::Tensor& aux) const {
  if (!config_.fc_norm) return fc->forward(aux);
  std::vector<at::Tensor> parts = aux.split(config_.target_hidden_size, -1);  // 3 x (B, T, H_t)
  check(parts.size() == fc_norm->size(), "[eagle3] fuse: ", parts.size(),
        " aux hidden states of width ", config_.target_hidden_size, ", the draft has ",
        fc_norm->size(), " fc_norm weights");
  for (size_t j = 0; j < parts.size(); ++j)
    parts[j] = fc_norm->at<RMSNormImpl>(j).forward(parts[j]);
  return fc->forward(at::cat(parts, -1));
}

at::Tensor Eagle3DraftImpl::head_input(const at::Tensor& out) const {
  return config_.norm_output ? out : norm->forward(out);
}

at::Tensor Eagle3DraftImpl::step(const at::Tensor& embeds, const at::Tensor& hidden,
                                 const at::Tensor& positions, const KeyBands& context_bands,
                                 TttState& state) const {
  return carried(run_layer(embeds, hidden, positions, [&](const QueryKeyValue& qkv) {
    if (!state.context_k.defined()) {
      state.context_k = qkv.k;
      state.context_v = qkv.v;
    } else {
      state.step_k.push_back(qkv.k);
      state.step_v.push_back(qkv.v);
    }
    return ttt_attention(qkv.q, state.context_k, state.context_v, context_bands, state.step_k,
                         state.step_v, attention_options);
  }));
}

at::Tensor Eagle3DraftImpl::extend_context(const at::Tensor& embeds, const at::Tensor& hidden,
                                           const at::Tensor& host_positions,
                                           TttState& state) const {
  check(state.step_k.empty(), "[eagle3] extend_context after a later unroll step");
  check(host_positions.is_cpu(), "[eagle3] extend_context reads its positions on the host");
  const int64_t before = state.context_k.defined() ? state.context_k.size(2) : 0;
  const at::Tensor& last = host_positions;  // query at position p sees keys 0..p
  check(last.size(1) > 0 && last[0][0].item<int64_t>() == before,
        "[eagle3] extend_context: the new positions must start at the context length ", before);
  const at::Device device = embeds.device();
  const KeyBands causal = KeyBands::from_host(at::zeros_like(last), last, device);
  const at::Tensor positions = to_device(host_positions, device);
  return carried(run_layer(embeds, hidden, positions, [&](const QueryKeyValue& qkv) {
    state.context_k = before == 0 ? qkv.k : at::cat({state.context_k, qkv.k}, 2);
    state.context_v = before == 0 ? qkv.v : at::cat({state.context_v, qkv.v}, 2);
    return ttt_attention(qkv.q, state.context_k, state.context_v, causal, {}, {},
                         attention_options);
  }));
}

at::Tensor Eagle3DraftImpl::logits(const at::Tensor& out) const {
  return lm_head->forward(head_input(out));
}

at::Tensor Eagle3DraftImpl::draft_to_target() const {
  return at::arange(d2t.size(0), d2t.options()) + d2t;
}

}  // namespace tandem
