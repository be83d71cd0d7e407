#pragma once
// A training step's metrics on their way to the log: summed over the step's micro-batches as
// tensors (so nothing waits for the device mid-step), read to the host in one transfer, then
// summed over ranks.
#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tandem {

namespace dist {
class ProcessGroup;
}

/// The metrics as fp64 tensors (on the device, or the host for host-computed ones), summed by
/// name in order of first appearance.
class StepMetrics {
 public:
  void add(const std::vector<std::pair<std::string, at::Tensor>>& metrics);
  void add_host(const std::string& name, double value);
  /// The sums on the host, in order: one transfer from the device (the step's one wait).
  std::vector<std::pair<std::string, double>> read() const;

 private:
  std::vector<std::pair<std::string, at::Tensor>> values_;
  std::map<std::string, size_t> index_;
};

/// Removes the metric `name` from `metrics` and returns its value (0 when absent).
double take_metric(std::vector<std::pair<std::string, double>>& metrics, const std::string& name);

/// Several ranks: `metrics` summed over ranks in place, with every rank's stop request (a
/// SIGTERM on any rank stops all); returns whether any rank asked to stop. One all-reduce of
/// host values (over Gloo beside NCCL).
bool sum_over_ranks(dist::ProcessGroup& group, std::vector<std::pair<std::string, double>>& metrics,
                    bool stop);

}  // namespace tandem
