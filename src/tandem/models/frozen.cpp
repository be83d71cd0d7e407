#include "tandem/models/frozen.h"

#include <ATen/ATen.h>

#include <mutex>
#include <set>

#include "tandem/core/error.h"
#include "tandem/models/load.h"

namespace tandem {

namespace {

// Storage of every live frozen model's weights; a tensor sharing one of these is frozen.
std::mutex registry_mutex;
std::multiset<const void*>& frozen_storages() {
  static std::multiset<const void*> storages;
  return storages;
}

const void* storage_key(const at::Tensor& tensor) {
  return tensor.storage().unsafeGetStorageImpl();
}

}  // namespace

FrozenModel::FrozenModel(std::string dir, CausalLM model)
    : dir_(std::move(dir)), model_(std::move(model)) {
  model_->eval();
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (auto& param : model_->parameters()) {
    param.set_requires_grad(false);
    frozen_storages().insert(storage_key(param));
  }
}

FrozenModel::~FrozenModel() {
  if (!model_) return;  // moved from
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (auto& param : model_->parameters()) {
    auto found = frozen_storages().find(storage_key(param));
    if (found != frozen_storages().end()) frozen_storages().erase(found);
  }
}

FrozenModel FrozenModel::load(const std::string& dir, c10::ScalarType dtype,
                              const at::Device& device) {
  return FrozenModel(dir, load_causal_lm(dir, dtype, device));
}

FrozenModel::Output FrozenModel::forward(const at::Tensor& ids, const AttentionLayout& layout,
                                         const std::vector<int64_t>& layers,
                                         bool with_logits) const {
  at::NoGradGuard no_grad;
  Output out;
  out.final_hidden = model_->forward_hidden(ids, layout, layers, &out.hidden);
  if (with_logits) out.logits = model_->logits(out.final_hidden);
  return out;
}

std::map<std::string, at::Tensor> FrozenModel::named_weights() const {
  std::map<std::string, at::Tensor> out;
  for (const auto& param : model_->named_parameters()) out[param.key()] = param.value();
  return out;
}

bool is_frozen(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.has_storage()) return false;
  std::lock_guard<std::mutex> lock(registry_mutex);
  return frozen_storages().count(storage_key(tensor)) > 0;
}

std::vector<std::pair<std::string, at::Tensor>> trainable_parameters(
    const torch::nn::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& param : module.named_parameters(/*recurse=*/true)) {
    if (is_frozen(param.value())) {
      check(!param.value().requires_grad(), "[frozen] parameter '", param.key(),
            "' is a frozen model's weight but requires grad; frozen models are never trained");
      continue;
    }
    if (param.value().requires_grad()) out.emplace_back(param.key(), param.value());
  }
  return out;
}

}  // namespace tandem
