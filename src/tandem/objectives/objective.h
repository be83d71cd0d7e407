#pragma once
// The one interface between the trainer and an algorithm. An objective owns its trainable model
// and its frozen models, turns a packed micro-batch into a loss, and exports what it trained.
// The trainer knows none of that: it pulls micro-batches, asks for normalisation units, runs
// backward and the optimizer, and saves checkpoints. Adding an algorithm = one folder under
// objectives/ plus a line in objectives/registry.cpp.
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tandem/core/run_context.h"
#include "tandem/data/packing.h"

namespace tandem {

class Config;

/// How the losses of a step are normalised: by its global number of loss tokens (token-level
/// objectives), or by its global number of documents (sequence-level ones).
enum class Normalization { Tokens, Documents };

/// The step's global totals, known before any backward of the step: every micro-batch loss is
/// divided by these, so accumulation and packing never re-weight anything.
struct StepTotals {
  int64_t loss_tokens = 0;
  int64_t documents = 0;
  // Objectives that unroll several prediction steps (EAGLE-3's test-time training): positions
  // with a target at each step i. Empty for the others.
  std::vector<int64_t> unroll_tokens;

  /// Adds `other` field by field (micro-batches of a step; later, ranks).
  void add(const StepTotals& other);
};

class TokenizedDataset;
struct RolloutSample;

/// What an objective may need to know about the training data before training starts.
struct DataContext {
  const TokenizedDataset* dataset = nullptr;             // every format but rollout
  const std::vector<RolloutSample>* rollouts = nullptr;  // rollout files
  std::string cache_dir;  // where derived data (e.g. the draft vocab map) may be cached
  int64_t seq_len = 0;

  /// The tokenized dataset; throws naming `objective` when the data are rollouts.
  const TokenizedDataset& documents(const std::string& objective) const;
};

struct ObjectiveOutput {
  at::Tensor loss;  // 0-dim, this micro-batch's share of the step loss (already normalised)
  /// Named 0-dim values (on the run's device or the host), summed over the step's micro-batches
  /// by the trainer, which reads them once per step: an objective never waits for the device.
  std::vector<std::pair<std::string, at::Tensor>> metrics;

  /// Adds a metric (a 0-dim tensor, detached) / a host number.
  void add_metric(const std::string& name, const at::Tensor& value);
  void add_metric(const std::string& name, double value);
  /// The metrics read as numbers (waits for the device): for tests and tools.
  std::map<std::string, double> metric_values() const;
};

class Objective {
 public:
  virtual ~Objective() = default;
  virtual std::string name() const = 0;
  /// The frozen models it holds (target, teacher, reference), by config section; SFT has none.
  virtual std::vector<std::string> frozen_models() const { return {}; }
  /// The model whose trainable parameters the optimizer receives.
  virtual torch::nn::Module& trainable() = 0;
  virtual Normalization normalization() const { return Normalization::Tokens; }
  /// This micro-batch's contribution to StepTotals (computed from the batch, no forward).
  virtual StepTotals count(const PackedBatch& batch) const = 0;
  /// Forward on one micro-batch, whose tensors are on the run's device (the trainer copies each
  /// micro-batch there once); `totals` are the step's global totals.
  virtual ObjectiveOutput compute(const PackedBatch& batch, const StepTotals& totals) = 0;
  /// Writes the trained model in its serving format (HF directory for causal LMs).
  virtual void export_model(const std::string& dir) const = 0;

  /// A hint that `upcoming` (a host batch) is the next micro-batch this rank computes: an
  /// objective may start reading what it needs for it (offline features) while the device works
  /// on the current one. Never changes results.
  virtual void prefetch(const PackedBatch& upcoming) { (void)upcoming; }
  /// Called once with the training data, before the optimizer is built (e.g. to build the
  /// draft vocabulary from the data's token counts, or check captured features against it).
  virtual void attach_data(const DataContext& data) { (void)data; }
  /// Adds metrics that are not sums over micro-batches, from the step's summed metrics.
  virtual void finish_metrics(std::vector<std::pair<std::string, double>>& step_metrics) const {
    (void)step_metrics;
  }
  /// Why this objective cannot validate on data.validation ("" when it can): checked before
  /// step 1.
  virtual std::string cannot_validate() const { return ""; }
  /// Whether an export is written at every checkpoint (drafts: serving engines pick them up).
  virtual bool export_at_checkpoints() const { return false; }
  /// Model FLOPs of forward + backward on `batch` (models/flops.h), frozen forwards included:
  /// the numerator of the trainer's MFU. 0 = not counted.
  virtual double model_flops(const PackedBatch& batch) const {
    (void)batch;
    return 0;
  }
};

/// Builds the objective named by `training.objective` from the config's model sections, its
/// models placed and loaded as `run` says (device, rank-0 loading, sharding on load).
std::unique_ptr<Objective> make_objective(const Config& config, const RunContext& run);

}  // namespace tandem
