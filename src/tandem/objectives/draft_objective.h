#pragma once
// What every speculative-decoding draft objective shares (EAGLE-3, DFlash, and the next draft):
// the frozen target it trains against and the source of the target's layer features, online
// (the whole target runs on each micro-batch, no autograd) or offline (data.capture: only the
// target's embedding, final norm and lm_head are loaded and the features are read from a
// `tandem capture` directory); which target layers a draft may read at all; the simulated
// acceptance length; exports at every checkpoint. A draft objective derives from DraftObjective
// and writes only its model, its loss and its export (docs/adding-a-draft.md).
#include <c10/core/ScalarType.h>

#include <future>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tandem/core/run_context.h"
#include "tandem/data/capture.h"
#include "tandem/models/decoder_config.h"
#include "tandem/models/frozen.h"
#include "tandem/objectives/objective.h"

namespace tandem {

/// Where a draft's target comes from (the `target` section and data.capture).
struct DraftTargetSource {
  std::string path;         // target.path: an HF checkpoint directory
  c10::ScalarType dtype;    // target.dtype
  std::string capture_dir;  // data.capture: offline features when set
  RunContext run;
};

class DraftObjective : public Objective {
 public:
  std::vector<std::string> frozen_models() const override { return {"target"}; }
  bool export_at_checkpoints() const override { return true; }
  /// Appends sim_accept_length = sum_k prod_{i<=k} acc_i over acceptance_metrics() in order:
  /// the expected number of draft tokens accepted per verification (the bonus not included).
  void finish_metrics(std::vector<std::pair<std::string, double>>& step_metrics) const override;

  /// True when the features come from a capture directory.
  bool offline() const { return capture_.has_value(); }
  /// Offline, the target's features come from the capture, which holds none for validation data.
  std::string cannot_validate() const override;
  /// Offline, with prefetching on: reads `upcoming`'s captured features on a thread of its own,
  /// so the forward on it takes them without waiting for the disk. One read ahead at a time.
  void prefetch(const PackedBatch& upcoming) override;
  /// Prefetching is on by default on a GPU, where the host is free while the device computes; on
  /// the CPU the read would take cores from the step's own work. Tests turn it on to compare.
  void set_prefetch(bool on) { prefetch_on_ = on; }
  /// Whether a read ahead is pending (started by prefetch(), not yet taken by a forward).
  bool reading_ahead() const { return pending_.has_value(); }
  const DecoderConfig& target_config() const { return target_config_; }

 protected:
  /// Loads the target (online: the whole model; offline: its head) and opens the capture.
  explicit DraftObjective(const DraftTargetSource& source);

  /// Refuses target layers the target does not have, or whose output a serving engine cannot
  /// give the draft: vLLM and SGLang capture layer inputs (the output of layer i is the input
  /// of layer i + 1), so the last layer's output never exists at inference. `what` names one
  /// layer in errors ("aux layer"), `key` the config key that chose them.
  void check_servable_layers(const std::vector<int64_t>& layers, const std::string& what,
                             const std::string& key) const;
  /// Offline: checks the capture holds `layers` (and the last layer's output when
  /// `needs_last`). Does nothing online.
  void check_capture_layers(const std::vector<int64_t>& layers, bool needs_last) const;
  /// Offline: checks the capture was made from these documents at this seq_len.
  void check_capture_data(const DataContext& data) const;
  /// The outputs of `layers` concatenated as `aux` (B, T, k * H_t) and, when `with_last`, the
  /// last layer's raw output as `last` (B, T, H_t): from the target or the capture. No autograd.
  TargetFeatures read_target_features(const PackedBatch& batch, const std::vector<int64_t>& layers,
                                      bool with_last) const;
  /// The per-position accuracy metrics in draft order (acc_0.., or acc_1.. for DFlash).
  virtual std::vector<std::string> acceptance_metrics() const = 0;
  /// "[eagle3]": what starts this objective's errors (its name()).
  std::string error_tag() const;

  DraftTargetSource source_;
  DecoderConfig target_config_;
  std::optional<FrozenModel> target_;  // online only
  std::unique_ptr<FrozenHead> head_;   // online: shares the target's tensors
  std::optional<CaptureStore> capture_;

 private:
  // A read started by prefetch(): the batch it is for (its documents) and the features to come.
  struct PendingRead {
    std::vector<int64_t> batch_key;
    std::future<CapturedBatch> features;
  };
  /// The captured features of `batch`: the pending read when it is for this batch, else read now
  /// (after any other pending read has finished: the capture is read by one thread at a time).
  CapturedBatch captured_features(const PackedBatch& batch) const;

  bool prefetch_on_ = false;
  mutable std::optional<PendingRead> pending_;
};

}  // namespace tandem
