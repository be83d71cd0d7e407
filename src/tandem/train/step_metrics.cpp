#include "tandem/train/step_metrics.h"

#include <ATen/ATen.h>

#include "tandem/core/host_read.h"
#include "tandem/dist/process_group.h"

namespace tandem {

void StepMetrics::add(const std::vector<std::pair<std::string, at::Tensor>>& metrics) {
  for (const auto& [name, value] : metrics) {
    const at::Tensor wide = value.detach().to(at::kDouble).reshape({});
    auto [found, fresh] = index_.try_emplace(name, values_.size());
    if (fresh)
      values_.emplace_back(name, wide);
    else
      values_[found->second].second = values_[found->second].second + wide;
  }
}

void StepMetrics::add_host(const std::string& name, double value) {
  add({{name, at::scalar_tensor(value, at::kDouble)}});
}

std::vector<std::pair<std::string, double>> StepMetrics::read() const {
  std::vector<at::Tensor> on_device;
  for (const auto& entry : values_)
    if (!entry.second.is_cpu()) on_device.push_back(entry.second);
  const at::Tensor device_values =
      on_device.empty() ? at::Tensor()
                        : read_on_host(at::stack(on_device), HostRead::StepMetrics).contiguous();
  std::vector<std::pair<std::string, double>> out;
  int64_t next = 0;
  for (const auto& [name, value] : values_)
    out.emplace_back(
        name, value.is_cpu() ? value.item<double>() : device_values.data_ptr<double>()[next++]);
  return out;
}

double take_metric(std::vector<std::pair<std::string, double>>& metrics, const std::string& name) {
  for (auto it = metrics.begin(); it != metrics.end(); ++it)
    if (it->first == name) {
      const double value = it->second;
      metrics.erase(it);
      return value;
    }
  return 0;
}

bool sum_over_ranks(dist::ProcessGroup& group, std::vector<std::pair<std::string, double>>& metrics,
                    bool stop) {
  const int64_t count = static_cast<int64_t>(metrics.size());
  at::Tensor values = at::zeros({count + 1}, at::kDouble);
  double* data = values.data_ptr<double>();
  for (int64_t i = 0; i < count; ++i) data[i] = metrics[i].second;
  data[count] = stop ? 1.0 : 0.0;
  group.all_reduce_sum(values);
  for (int64_t i = 0; i < count; ++i) metrics[i].second = data[i];
  return data[count] > 0;
}

}  // namespace tandem
