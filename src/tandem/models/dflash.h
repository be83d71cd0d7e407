#pragma once
// The DFlash block-diffusion draft (docs/dflash.md): a small stack of Qwen3-style decoder layers
// (q/k norm) with no embedding and no lm_head of its own (the frozen target's serve). Module names
// are the z-lab export's (`fc`, `hidden_norm`, `layers.{i}.*`, `norm`), so named_parameters() are
// the exported keys.
//
//   context c = hidden_norm(fc(cat(target layers)))            (B, S, k * H_t) -> (B, S, H)
//   block     = target embeddings of [anchor token, MASK x (bs - 1)], per anchor
//   layer     x += o_proj(attn(Q = q_norm(q_proj(n)), K = k_norm(k_proj(cat(c, n))),
//                               V = v_proj(cat(c, n)))),  n = input_layernorm(x);
//             x += mlp(post_attention_layernorm(x))
//   output    norm(x)
// The context enters every layer as keys/values only (never through input_layernorm, never
// updated). RoPE: context token j at position_ids[j], slot k of the block of anchor a at
// position_ids[a] + k. Attention is non-causal within a block (models/dflash_attention.h).
//
// Visibility (the mask): a block of anchor a sees context token j iff j is in a's document, is a
// real token, and j < a STRICTLY (at inference the target has not yet produced a hidden state for
// the anchor); it sees its own bs slots both ways and no other block. A padded (invalid) anchor
// slot sees nothing and outputs zeros.
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <string>
#include <vector>

#include "tandem/models/attention_options.h"
#include "tandem/models/decoder.h"
#include "tandem/models/decoder_config.h"
#include "tandem/models/key_bands.h"
#include "tandem/models/layers.h"
#include "tandem/models/rope.h"

namespace tandem {

/// Draft sizes; 0 means "the target's".
struct DFlashDims {
  int64_t num_layers = 5;
  int64_t intermediate_size = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
};

struct DFlashConfig {
  DecoderConfig layer;  // Qwen3 family with qk_norm; num_hidden_layers = draft layers; the hidden
                        // size and vocab_size are the target's
  int64_t target_hidden_size = 0;
  // Target hidden states fed to `fc`: the OUTPUT of decoder layer i (0-based) = transformers'
  // hidden_states[i + 1], which is also DFlash's own `target_layer_ids` numbering.
  std::vector<int64_t> target_layer_ids;
  int64_t block_size = 16;
  int64_t mask_token_id = -1;

  /// z-lab's default for a target of N layers and a draft of L: one layer -> [N / 2]; else
  /// round(1 + i * (N - 4) / (L - 1)), i = 0..L-1 (evenly spaced from 1 to N - 3), rounding
  /// halves to even as Python's round() does.
  static std::vector<int64_t> default_target_layers(int64_t num_target_layers,
                                                    int64_t num_draft_layers);
  /// Draft config for `target`: hidden size, RoPE and eps copied from it, sizes from `dims`;
  /// empty `target_layer_ids` gives the default.
  static DFlashConfig for_target(const DecoderConfig& target, const DFlashDims& dims,
                                 std::vector<int64_t> target_layer_ids, int64_t block_size,
                                 int64_t mask_token_id);
  void validate(const std::string& where) const;
};

/// Where the blocks of a micro-batch sit: A anchor slots per row, valid ones first, ascending.
struct DFlashBlocks {
  int64_t block_size = 0;
  at::Tensor anchors;       // (B, A) int64 column of each anchor; 0 on invalid slots
  at::Tensor anchor_valid;  // (B, A) bool

  int64_t num_anchors() const { return anchors.size(1); }  // A
};

/// Block input ids: [input_ids[a], MASK x (bs - 1)] per anchor, all MASK for invalid slots.
/// input_ids (B, S) -> (B, A * bs), slot k of anchor i at column i * bs + k.
at::Tensor dflash_block_ids(const at::Tensor& input_ids, const DFlashBlocks& blocks,
                            int64_t mask_token_id);
/// Block RoPE positions position_ids[a] + k (k for invalid slots). (B, S) -> (B, A * bs).
at::Tensor dflash_block_positions(const at::Tensor& position_ids, const DFlashBlocks& blocks);
/// The context each block sees: [b, i, j] = anchor i valid, document_ids[j] == document_ids[a_i],
/// padding_mask[j] and j < a_i. document_ids, padding_mask (B, S) -> (B, A, S) bool. The dense
/// form of dflash_key_bands, for tests and the dense reference kernel.
at::Tensor dflash_context_mask(const at::Tensor& document_ids, const at::Tensor& padding_mask,
                               const DFlashBlocks& blocks);
/// The same visibility as one band per block query: slot k of block i sees context keys
/// [start of the anchor's document, a_i - 1] (nothing on invalid blocks). Packed rows keep
/// padding after the last real token, so the band never reaches it. document_ids (B, S) and the
/// blocks on the CPU -> bands (B, A * bs) on `device`.
KeyBands dflash_key_bands(const at::Tensor& document_ids_host, const DFlashBlocks& host_blocks,
                          const c10::Device& device);

class DFlashDraftImpl : public torch::nn::Module {
 public:
  DFlashDraftImpl(const DFlashConfig& config, const at::TensorOptions& options);

  /// hidden_norm(fc(features)): (B, S, k * H_t) -> (B, S, H).
  at::Tensor context(const at::Tensor& target_features) const;
  /// The draft on all blocks of a micro-batch. block_embeds (B, A * bs, H): the target's
  /// embeddings of dflash_block_ids; context (B, S, H); context_positions (B, S) and
  /// block_positions (B, A * bs) int64; context_bands (B, A * bs) from dflash_key_bands;
  /// anchor_valid (B, A) bool. Returns norm(final hidden) (B, A * bs, H), zeros on invalid blocks.
  at::Tensor forward(const at::Tensor& block_embeds, const at::Tensor& context,
                     const at::Tensor& context_positions, const at::Tensor& block_positions,
                     const KeyBands& context_bands, const at::Tensor& anchor_valid) const;
  const DFlashConfig& config() const { return config_; }

  AttentionOptions
      attention_options;  // the run's kernel and chunk sizes (config section `attention`)

  Linear fc{nullptr};  // (H, k * H_t), no bias
  RMSNorm hidden_norm{nullptr};
  torch::nn::ModuleList layers{nullptr};  // DecoderLayer: self_attn (q/k norm), mlp, two norms
  RMSNorm norm{nullptr};

 private:
  DFlashConfig config_;
  RopeFrequencies inverse_frequencies_;  // on the device of the last forward
};
TORCH_MODULE(DFlashDraft);

}  // namespace tandem
