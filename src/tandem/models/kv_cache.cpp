#include "tandem/models/kv_cache.h"

#include <ATen/ATen.h>

#include "tandem/core/error.h"

namespace tandem {

KvCache::KvCache(const DecoderConfig& config, int64_t batch, int64_t capacity,
                 const at::TensorOptions& options)
    : batch_(batch), capacity_(capacity) {
  check(batch >= 1 && capacity >= 1, "[kv_cache] batch and capacity must be positive, got ", batch,
        " and ", capacity);
  const std::vector<int64_t> shape = {batch, config.num_key_value_heads, capacity, config.head_dim};
  const LinearAttentionConfig& linear = config.linear_attention;
  const GatedDeltaNetShape linear_shape = {linear.key_heads, linear.value_heads, linear.key_dim,
                                           linear.value_dim, config.rms_norm_eps};
  for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
    if (linear.at(layer)) {  // no keys: the conv window and the recurrent state
      keys_.emplace_back();
      values_.emplace_back();
      linear_.push_back(
          GatedDeltaNetState::zeros(batch, linear_shape, linear.conv_kernel, options));
      continue;
    }
    linear_.emplace_back();
    if (config.latent_attention.enabled()) {  // the latent alone
      const LatentAttentionConfig& mla = config.latent_attention;
      keys_.push_back(
          at::zeros({batch, 1, capacity, mla.kv_lora_rank + mla.qk_rope_head_dim}, options));
      values_.emplace_back();
      continue;
    }
    keys_.push_back(at::zeros(shape, options));
    values_.push_back(at::zeros(shape, options));
  }
  valid_ = at::zeros({batch, capacity}, options.dtype(at::kBool));
}

int64_t KvCache::bytes() const {
  int64_t total = valid_.nbytes();
  for (size_t i = 0; i < keys_.size(); ++i)
    total += linear_[i] ? linear_[i]->bytes()
                        : keys_[i].nbytes() + (values_[i].defined() ? values_[i].nbytes() : 0);
  return total;
}

void KvCache::truncate(int64_t length) {
  check(pending_ == 0, "[kv_cache] truncate during a forward");
  check(length >= 0 && length <= length_, "[kv_cache] cannot truncate to ", length,
        " slots: ", length_, " are filled");
  if (length == length_) return;
  for (auto& state : linear_) {
    if (!state) continue;
    check(length >= last_begin_ && state->pending == length_ - last_begin_, "[kv_cache] ",
          "a hybrid model's cache rolls back only into its last forward of at most ",
          GatedDeltaNetState::kRollbackSlots, " slots: truncating ", length_, " slots to ", length,
          ", the last forward began at ", last_begin_);
    rollback_gated_deltanet(*state, length - last_begin_);
  }
  length_ = length;
}

GatedDeltaNetState& KvCache::linear_state(int64_t layer) {
  check(layer >= 0 && layer < static_cast<int64_t>(linear_.size()) && linear_[layer],
        "[kv_cache] layer ", layer, " is not a Gated DeltaNet layer");
  return *linear_[layer];
}

void KvCache::begin(const at::Tensor& valid) {
  check(pending_ == 0, "[kv_cache] a forward is already in progress");
  check(valid.dim() == 2 && valid.size(0) == batch_, "[kv_cache] validity flags ", valid.sizes(),
        " for a batch of ", batch_);
  const int64_t n = valid.size(1);
  check(length_ + n <= capacity_, "[kv_cache] ", length_, " + ", n,
        " slots exceed the capacity of ", capacity_,
        " (prompt + max_new_tokens must fit the cache)");
  valid_.narrow(1, length_, n).copy_(valid);
  pending_ = n;
  last_begin_ = length_;
}

std::pair<at::Tensor, at::Tensor> KvCache::append(int64_t layer, const at::Tensor& keys,
                                                  const at::Tensor& values) {
  check(layer >= 0 && layer < static_cast<int64_t>(keys_.size()), "[kv_cache] no layer ", layer);
  check(values_[layer].defined(), "[kv_cache] layer ", layer,
        " holds a latent: append_latent, not append");
  check(keys.size(2) == pending_ && values.size(2) == pending_, "[kv_cache] layer ", layer,
        " appends ", keys.size(2), " slots, the forward began with ", pending_);
  keys_[layer].narrow(2, length_, pending_).copy_(keys);
  values_[layer].narrow(2, length_, pending_).copy_(values);
  return {keys_[layer].narrow(2, 0, length_ + pending_),
          values_[layer].narrow(2, 0, length_ + pending_)};
}

at::Tensor KvCache::append_latent(int64_t layer, const at::Tensor& latent) {
  check(layer >= 0 && layer < static_cast<int64_t>(keys_.size()) && keys_[layer].defined() &&
            !values_[layer].defined(),
        "[kv_cache] layer ", layer, " holds no latent");
  check(latent.dim() == 4 && latent.size(0) == batch_ && latent.size(1) == 1 &&
            latent.size(2) == pending_ && latent.size(3) == keys_[layer].size(3),
        "[kv_cache] layer ", layer, " appends a latent of ", latent.sizes(), ", expected [", batch_,
        ", 1, ", pending_, ", ", keys_[layer].size(3), "]");
  keys_[layer].narrow(2, length_, pending_).copy_(latent);
  return keys_[layer].narrow(2, 0, length_ + pending_);
}

void KvCache::commit() {
  length_ += pending_;
  pending_ = 0;
}

at::Tensor KvCache::valid_slots() const { return valid_.narrow(1, 0, length_ + pending_); }

}  // namespace tandem
