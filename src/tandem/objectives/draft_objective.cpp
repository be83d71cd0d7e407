#include "tandem/objectives/draft_objective.h"

#include "tandem/core/error.h"

namespace tandem {

namespace {

// What identifies a micro-batch's captured features: its shape and, per document, where it sits
// and which dataset tokens it holds.
std::vector<int64_t> features_key(const PackedBatch& batch) {
  std::vector<int64_t> key = {batch.rows(), batch.seq_len()};
  for (const PackedDocument& document : batch.documents)
    key.insert(key.end(), {document.dataset_index, document.source_begin, document.row,
                           document.begin, document.length});
  return key;
}

}  // namespace

DraftObjective::DraftObjective(const DraftTargetSource& source)
    : source_(source), prefetch_on_(source.run.device.is_cuda()) {
  target_config_ = DecoderConfig::from_dir(source.path);
  load_draft_target(source.path, source.dtype, !source.capture_dir.empty(), source.run, target_,
                    head_);
  if (!source.capture_dir.empty()) capture_.emplace(CaptureStore::open(source.capture_dir));
}

std::string DraftObjective::error_tag() const {
  std::string tag = "[";
  tag.append(name()).append("]");
  return tag;
}

void DraftObjective::check_servable_layers(const std::vector<int64_t>& layers,
                                           const std::string& what, const std::string& key) const {
  const int64_t last_layer = target_config_.num_hidden_layers - 1;
  for (int64_t layer : layers) {
    check(layer >= 0 && layer <= last_layer, error_tag(), " ", what, " ", layer,
          " does not exist: the target ", source_.path, " has layers 0..", last_layer);
    check(layer < last_layer, error_tag(), " ", what, " ", layer,
          " is the target's last layer: vLLM and SGLang capture the outputs of layers 0..",
          last_layer - 1, " only, so a draft reading it could not be served; choose ", key,
          " below ", last_layer);
  }
}

void DraftObjective::check_capture_layers(const std::vector<int64_t>& layers,
                                          bool needs_last) const {
  if (capture_)
    check_capture_features(*capture_, layers, target_config_.hidden_size, needs_last, error_tag());
}

void DraftObjective::check_capture_data(const DataContext& data) const {
  if (capture_)
    check_capture_matches_data(*capture_, data.documents(name()), data.seq_len, error_tag());
}

TargetFeatures DraftObjective::read_target_features(const PackedBatch& batch,
                                                    const std::vector<int64_t>& layers,
                                                    bool with_last) const {
  if (target_) return target_features(*target_, batch.input_ids, batch.layout(), layers, with_last);
  CapturedBatch captured = captured_features(batch);
  TargetFeatures features;
  features.aux = std::move(captured.aux);
  if (with_last) features.last = std::move(captured.last);
  return features;
}

void DraftObjective::prefetch(const PackedBatch& upcoming) {
  if (!capture_ || !prefetch_on_ || source_.run.dry_run) return;
  if (pending_) pending_->features.wait();  // one read of the capture at a time
  const PackedBatch host = upcoming.on_host();
  const CaptureStore* capture = &*capture_;
  const c10::ScalarType dtype = source_.dtype;
  const c10::Device device = source_.run.device;
  const std::string who = error_tag();
  pending_ = PendingRead{features_key(host),
                         std::async(std::launch::async, [capture, host, dtype, device, who] {
                           return read_captured_batch(*capture, host, dtype, device, who);
                         })};
}

CapturedBatch DraftObjective::captured_features(const PackedBatch& batch) const {
  if (pending_) {
    PendingRead pending = std::move(*pending_);
    pending_.reset();
    if (pending.batch_key == features_key(batch.on_host()))
      return pending.features.get();  // rethrows what the read threw
    pending.features.wait();          // another batch's read: let it finish, then read this one
  }
  return read_captured_batch(*capture_, batch, source_.dtype, error_tag());
}

std::string DraftObjective::cannot_validate() const {
  if (!offline()) return "";
  return "an offline draft (data.capture) reads its target's features from the capture, which "
         "holds none for the validation records: validate in an online run (without "
         "data.capture), where the target computes them";
}

void DraftObjective::finish_metrics(
    std::vector<std::pair<std::string, double>>& step_metrics) const {
  double product = 1.0, accepted = 0.0;
  for (const std::string& name : acceptance_metrics()) {
    for (const auto& [key, value] : step_metrics)
      if (key == name) product *= value;
    accepted += product;
  }
  step_metrics.emplace_back("sim_accept_length", accepted);
}

}  // namespace tandem
