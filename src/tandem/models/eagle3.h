#pragma once
// The EAGLE-3 draft (docs/eagle3.md): `fc` folds three target hidden states into one, a single
// decoder layer reads the token embedding and that hidden state side by side (2H -> q/k/v), and an
// lm_head projects onto a reduced draft vocabulary. Module names are the SGLang/HF export's
// (`fc`, `midlayer.*`, `norm`, `lm_head`, and EAGLE-3.1's `fc_norm.{j}`), so named_parameters()
// are the exported keys.
//
// Test-time-training unroll: step 0 reads fc(aux hidden states); step i >= 1 reads the layer's
// own output of step i-1 and the token ids shifted once more, at RoPE positions + i, attending
// to the step-0 keys causally plus its own earlier steps' keys at the same position
// (models/ttt_attention.h).
//
// EAGLE-3.1 is two switches, as speculators, SpecForge and vLLM name them (docs/eagle3.md):
//   fc_norm      an RMSNorm per captured hidden state (target width, the draft's eps) before the
//                concat and fc: fc(cat_j fc_norm.j(aux_j));
//   norm_output  each step's output goes through `norm` before it is carried: the next step reads
//                norm(out) (as hidden input and residual), and lm_head reads that same state.
// Without them (EAGLE-3): fc(cat_j aux_j); the next step reads out itself; lm_head reads norm(out).
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
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
  bool fc_norm = false;      // EAGLE-3.1: an RMSNorm per aux hidden state before fc
  bool norm_output = false;  // EAGLE-3.1: the normed output is carried to the next step

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
  /// an empty `state` is step 0 (its keys become the context). Returns the next step's hidden
  /// input (B, Tq, H): the layer output, normed by `norm` with norm_output.
  at::Tensor step(const at::Tensor& embeds, const at::Tensor& hidden, const at::Tensor& positions,
                  const KeyBands& context_bands, TttState& state) const;
  /// Step 0 for positions appended to a context that `state` already holds (cached decoding):
  /// their keys/values join state's context, and each new query attends causally to the context
  /// keys up to its own position. host_positions (B, Tq) int64 ON THE HOST must continue the
  /// context (the first is the context length) and `state` must hold no later step. Returns what
  /// step() returns (B, Tq, H).
  at::Tensor extend_context(const at::Tensor& embeds, const at::Tensor& hidden,
                            const at::Tensor& host_positions, TttState& state) const;
  /// Step 0's hidden input from the captured target states: fc(aux), or with fc_norm
  /// fc(cat_j fc_norm.j(aux_j)). (B, T, 3 * H_target) -> (B, T, H)
  at::Tensor fuse(const at::Tensor& aux) const;
  /// What lm_head reads for a step's return value: norm(out), or out itself with norm_output
  /// (the step normed it already). (B, T, H) -> (B, T, H)
  at::Tensor head_input(const at::Tensor& out) const;
  /// lm_head(head_input(out)): (B, T, H) -> draft-vocab logits (B, T, D).
  at::Tensor logits(const at::Tensor& out) const;
  /// Target ids of draft ids: i + d2t[i]. (D,) int64
  at::Tensor draft_to_target() const;
  const Eagle3Config& config() const { return config_; }

  torch::nn::ModuleList fc_norm{nullptr};  // fc_norm only: 3 RMSNorm(H_target)
  Linear fc{nullptr};                      // (H, 3 * H_target)
  DecoderLayer midlayer{nullptr};          // LayerInput::EmbeddingAndHidden: q/k/v read 2H
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
  /// The layer output as the next step reads it: norm(out) with norm_output, else out.
  at::Tensor carried(const at::Tensor& out) const;

  Eagle3Config config_;
  RopeFrequencies inverse_frequencies_;  // on the device of the last forward
};
TORCH_MODULE(Eagle3Draft);

}  // namespace tandem
