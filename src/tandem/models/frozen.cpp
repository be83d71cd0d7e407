#include "tandem/models/frozen.h"

#include <ATen/ATen.h>

#include <map>
#include <mutex>
#include <set>

#include "tandem/core/error.h"
#include "tandem/dist/sharding.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/models/load.h"
#include "tandem/models/stored_weights.h"

namespace tandem {

namespace {

// Every live frozen model's weights, by storage; a tensor sharing one of these storages is frozen.
// Each entry keeps its registration number: frozen_weights() lists them in loading order, the
// same on every rank (storage addresses are not).
struct FrozenEntry {
  uint64_t order;
  at::Tensor tensor;
};
std::mutex registry_mutex;
uint64_t registrations = 0;
std::multimap<const void*, FrozenEntry>& frozen_storages() {
  static std::multimap<const void*, FrozenEntry> storages;
  return storages;
}

const void* storage_key(const at::Tensor& tensor) {
  return tensor.storage().unsafeGetStorageImpl();
}

void register_frozen(const at::Tensor& tensor) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  frozen_storages().emplace(storage_key(tensor), FrozenEntry{registrations++, tensor});
}

void unregister_frozen(const at::Tensor& tensor) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto found = frozen_storages().find(storage_key(tensor));
  if (found != frozen_storages().end()) frozen_storages().erase(found);
}

}  // namespace

GatheredWeight::GatheredWeight(at::Tensor weight)
    : weight_(std::move(weight)),
      gathered_(std::make_unique<FullParameters>(std::vector{weight_})) {}
GatheredWeight::GatheredWeight(GatheredWeight&& other) noexcept = default;
GatheredWeight::~GatheredWeight() = default;

FrozenHead::FrozenHead(at::Tensor embed_tokens, at::Tensor final_norm, double rms_norm_eps,
                       at::Tensor lm_head, bool zero_centered_norm)
    : embed_tokens_(std::move(embed_tokens)),
      final_norm_(std::move(final_norm)),
      lm_head_(std::move(lm_head)),
      rms_norm_eps_(rms_norm_eps),
      zero_centered_norm_(zero_centered_norm) {
  for (const at::Tensor* tensor : {&embed_tokens_, &final_norm_, &lm_head_}) {
    const_cast<at::Tensor&>(*tensor).set_requires_grad(false);
    register_frozen(*tensor);
  }
}

FrozenHead::FrozenHead(const FrozenHead& other)
    : FrozenHead(other.embed_tokens_, other.final_norm_, other.rms_norm_eps_, other.lm_head_,
                 other.zero_centered_norm_) {}

FrozenHead::~FrozenHead() {
  for (const at::Tensor* tensor : {&embed_tokens_, &final_norm_, &lm_head_})
    unregister_frozen(*tensor);
}

FrozenHead FrozenHead::load(const std::string& dir, c10::ScalarType dtype, const RunContext& run) {
  const DecoderConfig config = DecoderConfig::from_dir(dir);
  const HfCheckpoint checkpoint = HfCheckpoint::open(dir, run.rank_zero);
  auto read = [&](const std::string& name, std::vector<int64_t> shape) {
    const auto& stored = checkpoint.info(name).shape;
    check(stored == shape, "[frozen] ", dir, ": '", name, "' has shape ", at::IntArrayRef(stored),
          ", config.json implies ", at::IntArrayRef(shape));
    if (run.dry_run) return at::empty(shape, at::TensorOptions().dtype(dtype).device(at::kMeta));
    return checkpoint.read_weight(name).to(run.device, dtype);
  };
  const int64_t vocab = config.vocab_size, hidden = config.hidden_size;
  const auto stored = [&](const char* name) { return checkpoint_name(name, config); };
  at::Tensor embed = read(stored("model.embed_tokens.weight"), {vocab, hidden});
  at::Tensor lm_head =
      config.tie_word_embeddings ? embed : read(stored("lm_head.weight"), {vocab, hidden});
  at::Tensor final_norm = read(stored("model.norm.weight"), {hidden});
  for (const at::Tensor& weight : {embed, lm_head, final_norm})  // before they are registered
    shard_on_load(run.shard_on_load, weight);
  return FrozenHead(embed, final_norm, config.rms_norm_eps, lm_head, config.zero_centered_norms);
}

at::Tensor FrozenHead::embed(const at::Tensor& ids) const {
  return apply_embedding(embed_tokens_, ids);
}

at::Tensor FrozenHead::final_norm(const at::Tensor& last_hidden) const {
  return apply_rms_norm(last_hidden, final_norm_, rms_norm_eps_, zero_centered_norm_);
}

FrozenHead FrozenModel::head() const {
  return FrozenHead(embed_tokens(), final_norm_weight(), config().rms_norm_eps, lm_head_weight(),
                    config().zero_centered_norms);
}

FrozenModel::FrozenModel(std::string dir, CausalLM model)
    : dir_(std::move(dir)), model_(std::move(model)) {
  model_->eval();
  for (auto& param : model_->parameters()) {
    param.set_requires_grad(false);
    register_frozen(param);
  }
}

FrozenModel::~FrozenModel() {
  if (!model_) return;  // moved from
  for (auto& param : model_->parameters()) unregister_frozen(param);
}

FrozenModel FrozenModel::load(const std::string& dir, c10::ScalarType dtype,
                              const RunContext& run) {
  return FrozenModel(dir, load_causal_lm(dir, dtype, run));
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

TargetFeatures target_features(const FrozenModel& target, const at::Tensor& ids,
                               const AttentionLayout& layout, const std::vector<int64_t>& layers,
                               bool with_last) {
  const int64_t last_layer = target.config().num_hidden_layers - 1;
  std::vector<int64_t> wanted = layers;
  if (with_last) wanted.push_back(last_layer);
  const FrozenModel::Output out = target.forward(ids, layout, wanted, /*with_logits=*/false);
  std::vector<at::Tensor> parts;
  for (int64_t layer : layers) parts.push_back(out.hidden.at(layer));
  TargetFeatures features;
  features.aux = at::cat(parts, -1);
  if (with_last) features.last = out.hidden.at(last_layer);
  return features;
}

at::Tensor FrozenModel::forward_cached(const at::Tensor& ids, const at::Tensor& positions,
                                       const at::Tensor& valid, KvCache& cache,
                                       const std::vector<int64_t>& capture_layers,
                                       std::map<int64_t, at::Tensor>* captured) const {
  at::NoGradGuard no_grad;
  return model_->forward_cached(ids, positions, valid, cache, capture_layers, captured);
}

KvCache FrozenModel::new_cache(int64_t batch, int64_t capacity) const {
  return KvCache(config(), batch, capacity, embed_tokens().options());
}

std::map<std::string, at::Tensor> FrozenModel::named_weights() const {
  std::map<std::string, at::Tensor> out;
  for (const auto& param : model_->named_parameters()) out[param.key()] = param.value();
  return out;
}

std::vector<at::Tensor> frozen_weights() {
  std::lock_guard<std::mutex> lock(registry_mutex);
  std::map<uint64_t, at::Tensor> in_order;
  std::set<const c10::TensorImpl*> seen;
  for (const auto& entry : frozen_storages())
    if (seen.insert(entry.second.tensor.unsafeGetTensorImpl()).second)
      in_order.emplace(entry.second.order, entry.second.tensor);
  std::vector<at::Tensor> out;
  for (auto& [order, tensor] : in_order) out.push_back(std::move(tensor));
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

std::vector<std::pair<std::string, at::Tensor>> model_state(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& param : module.named_parameters(/*recurse=*/true))
    if (!is_frozen(param.value())) out.emplace_back(param.key(), param.value());
  for (const auto& buffer : module.named_buffers(/*recurse=*/true))
    out.emplace_back(buffer.key(), buffer.value());
  return out;
}

void load_draft_target(const std::string& dir, c10::ScalarType dtype, bool offline,
                       const RunContext& run, std::optional<FrozenModel>& target,
                       std::unique_ptr<FrozenHead>& head) {
  if (offline) {
    head = std::make_unique<FrozenHead>(FrozenHead::load(dir, dtype, run));
    return;
  }
  target.emplace(FrozenModel::load(dir, dtype, run));
  head = std::make_unique<FrozenHead>(target->head());
}

}  // namespace tandem
