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

namespace {

// Slot dimension of a cache tensor: keys, values and latents are (B, heads, slots, dim), the
// validity flags (B, slots).
int64_t slot_dim(const at::Tensor& tensor) { return tensor.dim() == 2 ? 1 : 2; }

}  // namespace

void KvCache::clear_row(int64_t row) {
  check(pending_ == 0 && row >= 0 && row < batch_, "[kv_cache] clear_row(", row, ") of ", batch_,
        " rows, outside a forward");
  valid_[row].fill_(false);
  for (auto& state : linear_) {
    if (!state) continue;
    state->conv_window[row].zero_();
    state->recurrent[row].zero_();
    state->pending = 0;  // the last forward can no longer be rolled back
  }
}

void KvCache::shift(int64_t new_length) {
  check(pending_ == 0, "[kv_cache] shift during a forward");
  check(new_length >= 0 && new_length <= capacity_, "[kv_cache] cannot shift to ", new_length,
        " slots: the capacity is ", capacity_);
  if (new_length == length_) return;
  const int64_t offset = new_length - length_;  // where slot s goes: s + offset
  if (offset < 0)
    check(!valid_.narrow(1, 0, -offset).any().item<bool>(), "[kv_cache] shifting ", length_,
          " slots to ", new_length, " would drop real tokens");
  auto move = [&](at::Tensor& tensor) {
    if (!tensor.defined()) return;
    const int64_t dim = slot_dim(tensor);
    const int64_t kept = std::min(length_, new_length);
    const at::Tensor from = tensor.narrow(dim, std::max<int64_t>(0, -offset), kept).clone();
    tensor.narrow(dim, std::max<int64_t>(0, offset), kept).copy_(from);
    if (offset > 0) tensor.narrow(dim, 0, offset).zero_();
  };
  for (size_t layer = 0; layer < keys_.size(); ++layer) {
    move(keys_[layer]);
    move(values_[layer]);
  }
  move(valid_);
  length_ = new_length;
}

void KvCache::place_row(int64_t row, const KvCache& source, int64_t source_row) {
  const int64_t n = source.length_;
  check(pending_ == 0 && source.pending_ == 0, "[kv_cache] place_row during a forward");
  check(row >= 0 && row < batch_ && source_row >= 0 && source_row < source.batch_,
        "[kv_cache] place_row: row ", row, " of ", batch_, ", source row ", source_row, " of ",
        source.batch_);
  check(n <= length_, "[kv_cache] place_row: ", n, " slots do not fit before slot ", length_,
        " (shift first)");
  check(source.keys_.size() == keys_.size(), "[kv_cache] place_row: a cache of another model");
  const int64_t first = length_ - n;
  valid_[row].fill_(false);
  valid_[row].narrow(0, first, n).copy_(source.valid_[source_row].narrow(0, 0, n));
  for (size_t layer = 0; layer < keys_.size(); ++layer) {
    if (linear_[layer]) {
      linear_[layer]->conv_window[row].copy_(source.linear_[layer]->conv_window[source_row]);
      linear_[layer]->recurrent[row].copy_(source.linear_[layer]->recurrent[source_row]);
      linear_[layer]->pending = 0;
      continue;
    }
    keys_[layer][row].narrow(1, first, n).copy_(source.keys_[layer][source_row].narrow(1, 0, n));
    if (values_[layer].defined())
      values_[layer][row]
          .narrow(1, first, n)
          .copy_(source.values_[layer][source_row].narrow(1, 0, n));
  }
}

void KvCache::grow(int64_t capacity) {
  check(pending_ == 0, "[kv_cache] grow during a forward");
  if (capacity <= capacity_) return;
  auto regrow = [&](at::Tensor& tensor) {
    if (!tensor.defined()) return;
    const int64_t dim = slot_dim(tensor);
    std::vector<int64_t> shape = tensor.sizes().vec();
    shape[dim] = capacity;
    at::Tensor bigger = at::zeros(shape, tensor.options());
    bigger.narrow(dim, 0, length_).copy_(tensor.narrow(dim, 0, length_));
    tensor = bigger;
  };
  for (size_t layer = 0; layer < keys_.size(); ++layer) {
    regrow(keys_[layer]);
    regrow(values_[layer]);
  }
  regrow(valid_);
  capacity_ = capacity;
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
