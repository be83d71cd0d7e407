#pragma once
// The EAGLE-3 draft (docs/eagle3.md): `fc` folds three target hidden states into one, a single
// decoder layer reads the token embedding and that hidden state side by side (2H -> q/k/v), and an
// lm_head projects onto a reduced draft vocabulary. Module names are the SGLang/HF export's
// (`fc`, `midlayer.*`, `norm`, `lm_head`), so named_parameters() are the exported keys.
//
// Test-time-training unroll: step 0 reads fc(aux hidden states); step i >= 1 reads the layer's
// own output of step i-1 and the token ids shifted once more, at RoPE positions + i, attending
// to the step-0 keys causally plus its own earlier steps' keys at the same position
// (models/ttt_attention.h).
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <vector>

#include "tandem/models/attention_options.h"
#include "tandem/models/decoder.h"
#include "tandem/models/decoder_config.h"
#include "tandem/models/key_bands.h"
#include "tandem/models/layers.h"
#include "tandem/models/rope.h"

namespace tandem {

struct Eagle3Config {
  DecoderConfig layer;  // the draft layer's dims, RoPE and eps; vocab_size = the TARGET's vocab
  int64_t target_hidden_size = 0;
  int64_t draft_vocab_size = 0;
  // Target hidden states fed to `fc`, tandem's one convention: the OUTPUT of decoder layer i
  // (0-based) = transformers' hidden_states[i + 1]. Exports convert (docs/eagle3.md).
  std::vector<int64_t> aux_layer_ids;

  /// The default (docs/eagle3.md) for a target of `num_layers` layers: outputs of [1, N/2 - 1, N -
  /// 4].
  static std::vector<int64_t> default_aux_layers(int64_t num_layers);
  /// Draft config for `target`: hidden size, heads, RoPE and eps copied from it (the heads as
  /// DecoderConfig::draft_layers gives them, or `heads` where set).
  static Eagle3Config for_target(const DecoderConfig& target, std::vector<int64_t> aux_layer_ids,
                                 int64_t draft_vocab_size, int64_t intermediate_size,
                                 const DraftHeads& heads = {});
  void validate(const std::string& where) const;
};

/// The keys and values an unroll has produced so far.
struct TttState {
  at::Tensor context_k, context_v;         // step 0: (B, kv_heads, Tk, d)
  std::vector<at::Tensor> step_k, step_v;  // steps 1..i: (B, kv_heads, Tq, d)
};

class Eagle3DraftImpl : public torch::nn::Module {
 public:
  Eagle3DraftImpl(const Eagle3Config& config, const at::TensorOptions& options);

  /// One unroll step. embeds (B, Tq, H): target embeddings of the step's input ids; hidden
  /// (B, Tq, H): fc(aux) at step 0, the previous step's output after; positions (B, Tq) already
  /// offset by the step; context_bands (B, Tq) over the step-0 keys. The first call on
  /// an empty `state` is step 0 (its keys become the context). Returns the layer output (B, Tq, H),
  /// before the final norm (the next step's hidden input).
  at::Tensor step(const at::Tensor& embeds, const at::Tensor& hidden, const at::Tensor& positions,
                  const KeyBands& context_bands, TttState& state) const;
  /// Step 0 for positions appended to a context that `state` already holds (cached decoding):
  /// their keys/values join state's context, and each new query attends causally to the context
  /// keys up to its own position. host_positions (B, Tq) int64 ON THE HOST must continue the
  /// context (the first is the context length) and `state` must hold no later step. Returns the
  /// layer output (B, Tq, H).
  at::Tensor extend_context(const at::Tensor& embeds, const at::Tensor& hidden,
                            const at::Tensor& host_positions, TttState& state) const;
  /// lm_head(norm(out)): (B, T, H) -> draft-vocab logits (B, T, D).
  at::Tensor logits(const at::Tensor& out) const;
  /// Target ids of draft ids: i + d2t[i]. (D,) int64
  at::Tensor draft_to_target() const;
  const Eagle3Config& config() const { return config_; }

  Linear fc{nullptr};              // (H, 3 * H_target)
  DecoderLayer midlayer{nullptr};  // LayerInput::EmbeddingAndHidden: q/k/v read 2H
  RMSNorm norm{nullptr};
  Linear lm_head{nullptr};  // (D, H)
  AttentionOptions
      attention_options;  // the run's kernel and chunk sizes (config section `attention`)
  at::Tensor d2t;         // (D,) int64 buffer: target id = i + d2t[i]
  at::Tensor t2d;         // (V,) bool buffer

 private:
  /// The layer body (DecoderLayerImpl::run) on the 2H input, around `attend`.
  at::Tensor run_layer(const at::Tensor& embeds, const at::Tensor& hidden,
                       const at::Tensor& positions, const AttendFn& attend) const;

  Eagle3Config config_;
  RopeFrequencies inverse_frequencies_;  // on the device of the last forward
};
TORCH_MODULE(Eagle3Draft);

}  // namespace tandem
