#include "tandem/train/validation.h"

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

#include "tandem/core/error.h"
#include "tandem/core/file_io.h"
#include "tandem/core/json_file.h"
#include "tandem/dist/process_group.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/run_state.h"
#include "tandem/train/step_metrics.h"

namespace tandem {

Validation::Validation(TrainingData data, const Objective& objective) : data_(std::move(data)) {
  for (int64_t next = 0; next < data_.num_records();) {
    starts_.push_back(next);
    totals_.add(objective.count(next_micro_batch_in_order(next, data_)));
  }
}

PackedBatch Validation::batch(int64_t index) const {
  int64_t next = starts_.at(static_cast<size_t>(index));
  return next_micro_batch_in_order(next, data_);
}

std::vector<std::pair<std::string, double>> Validation::run(Objective& objective,
                                                            const at::Device& device,
                                                            dist::ProcessGroup& world) const {
  const auto generators = generator_states(device);
  std::map<std::string, at::Tensor> saved(generators.begin(), generators.end());
  StepMetrics metrics;
  {
    at::NoGradGuard no_gradients;
    const int64_t count = micro_batches(), ranks = world.size();
    const int64_t rounds = (count + ranks - 1) / ranks;
    for (int64_t round = 0; round < rounds; ++round) {
      const int64_t index = round * ranks + world.rank();
      const bool spare = index >= count;  // this rank's turn is past the last micro-batch
      ObjectiveOutput output =
          objective.compute(batch(spare ? count - 1 : index).to(device), totals_);
      if (spare)
        for (auto& [name, value] : output.metrics) value = value * 0;
      metrics.add(output.metrics);
    }
  }
  restore_generators(saved, device);
  std::vector<std::pair<std::string, double>> values = metrics.read();
  if (world.size() > 1) sum_over_ranks(world, values, false);
  objective.finish_metrics(values);
  std::vector<std::pair<std::string, double>> named;
  for (const auto& [name, value] : values) named.emplace_back("val/" + name, value);
  named.emplace_back("val/records", static_cast<double>(records()));
  return named;
}

bool larger_is_better(const std::string& metric, const std::string& mode) {
  if (mode != "auto") return mode == "max";
  return metric.find("acc") != std::string::npos || metric.find("accept") != std::string::npos;
}

void write_best_marker(const std::string& run_dir, int64_t step, const std::string& metric,
                       bool larger_better, double value) {
  const nlohmann::json best = {{"checkpoint", checkpoint_dir_name(step)},
                               {"step", step},
                               {"metric", metric},
                               {"mode", larger_better ? "max" : "min"},
                               {"value", value}};
  replace_file(run_dir + "/best.json", best.dump(2) + "\n", "train");
}

int64_t read_best_step(const std::string& run_dir) {
  const std::string path = run_dir + "/best.json";
  const nlohmann::json best = read_json_file(path, "export");
  check(best.is_object() && best.contains("step") && best["step"].is_number_integer(), "[export] ",
        path, ": no integer \"step\" (a run with data.validation writes it)");
  return best["step"].get<int64_t>();
}

}  // namespace tandem
