#pragma once
// The keys and values a decoder has computed for a batch of sequences, so generation runs each
// new token through the model once instead of re-running the whole prefix.
//
// Rows are left-aligned in time: every row has the same number of slots, and slot t of a row
// holds either a real token or padding (`valid`); a prompt shorter than the longest one starts
// with padding slots, and RoPE positions count real tokens only. Memory is fixed at construction:
// 2 (keys, values) x layers x batch x kv_heads x capacity x head_dim elements of the model's
// dtype (`bytes()`), and appending past `capacity` is an error. A latent attention layer
// (DeepSeek-V3, models/latent_attention.h) keeps its latent instead: batch x capacity x
// (kv_lora_rank + qk_rope_head_dim) elements per layer.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "tandem/models/decoder_config.h"
#include "tandem/models/gated_deltanet.h"

namespace tandem {

class KvCache {
 public:
  KvCache(const DecoderConfig& config, int64_t batch, int64_t capacity,
          const at::TensorOptions& options);

  int64_t batch() const { return batch_; }
  int64_t capacity() const { return capacity_; }
  /// Slots filled (the same for every row).
  int64_t length() const { return length_; }
  /// Memory held: keys and values of every layer (conv windows and recurrent states of Gated
  /// DeltaNet layers), plus the validity flags.
  int64_t bytes() const;

  /// Forgets the slots from `length` on (speculative decoding rolls back rejected tokens).
  void truncate(int64_t length);

  // Continuous batching (eval/continuous_generation.h) keeps each live row's valid slots as one
  // run ending at length(), and reuses a finished row for the next sequence:
  /// Forgets row `row`: no valid slot, a zero Gated DeltaNet state.
  void clear_row(int64_t row);
  /// Moves every slot by the same offset so that the last filled slot becomes slot
  /// `new_length` - 1 (earlier: frees slots; later: makes room for a longer sequence to be
  /// placed); slots it would drop must be invalid, and new ones are invalid.
  void shift(int64_t new_length);
  /// Puts row `source_row` of `source` (a cache of the same model, its slots [0, L)) into row
  /// `row` as its slots [length() - L, length()); the row's other slots become invalid.
  void place_row(int64_t row, const KvCache& source, int64_t source_row);
  /// Reallocates to `capacity` slots (no fewer than length()), keeping every slot.
  void grow(int64_t capacity);

  /// A Gated DeltaNet layer's state (an Error for an attention layer).
  GatedDeltaNetState& linear_state(int64_t layer);

  /// Called by the model for the new slots [length, length + n): stores `valid` (B, n) once per
  /// forward, before the layers append.
  void begin(const at::Tensor& valid);
  /// Stores layer `layer`'s keys/values (B, kv_heads, n, d) of the new slots and returns the
  /// layer's keys and values over all slots [0, length + n) (views).
  std::pair<at::Tensor, at::Tensor> append(int64_t layer, const at::Tensor& keys,
                                           const at::Tensor& values);
  /// A latent attention layer's append: stores `latent` (B, 1, n, kv_lora_rank + qk_rope) of the
  /// new slots and returns the layer's latents over all slots [0, length + n) (a view).
  at::Tensor append_latent(int64_t layer, const at::Tensor& latent);
  /// Ends the forward begun by begin(): length grows by n.
  void commit();

  /// (B, length + n) bool: which slots hold real tokens, during a forward (after begin()).
  at::Tensor valid_slots() const;
  /// Slots being filled by the current forward.
  int64_t pending() const { return pending_; }

 private:
  int64_t batch_, capacity_, length_ = 0, pending_ = 0;
  int64_t last_begin_ = 0;  // length when the last forward began
  // Per layer (B, kv_heads, capacity, head_dim); a latent attention layer's latents are its
  // keys_ (B, 1, capacity, kv_lora_rank + qk_rope) and its values_ undefined.
  std::vector<at::Tensor> keys_, values_;
  std::vector<std::optional<GatedDeltaNetState>> linear_;  // per layer: Gated DeltaNet only
  at::Tensor valid_;                                       // (B, capacity) bool
};

}  // namespace tandem
