#include "tandem/train/dry_run.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>

#include "tandem/core/device.h"
#include "tandem/core/error.h"
#include "tandem/data/datasets.h"
#include "tandem/models/frozen.h"
#include "tandem/objectives/objective.h"
#include "tandem/train/data_parallel.h"
#include "tandem/train/epoch_plan.h"
#include "tandem/train/training_data.h"
#include "tandem/train/training_options.h"

namespace tandem {

namespace {

// "12.34 GiB", or "0.38 MiB" below a GiB.
std::string bytes_text(double bytes) {
  constexpr double kMiB = 1024.0 * 1024.0, kGiB = 1024.0 * kMiB;
  char text[32];
  if (bytes >= kGiB)
    std::snprintf(text, sizeof text, "%.2f GiB", bytes / kGiB);
  else
    std::snprintf(text, sizeof text, "%.2f MiB", bytes / kMiB);
  return text;
}

// 1234567 -> "1,234,567".
std::string thousands(int64_t value) {
  std::string digits = std::to_string(value), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// "fp32", "bf16 + fp32", ... of `tensors`, by element count.
std::string dtypes_of(const std::vector<at::Tensor>& tensors) {
  std::map<std::string, int64_t> counts;
  for (const at::Tensor& tensor : tensors)
    counts[c10::toString(tensor.scalar_type())] += tensor.numel();
  std::string out;
  for (const auto& [name, count] : counts) out += (out.empty() ? "" : " + ") + name;
  return out.empty() ? "-" : out;
}

}  // namespace

void dry_run(const Config& config, std::ostream& out) {
  TrainingOptions options = read_training(config);
  const DistributedOptions distributed = read_distributed(config);
  const dist::LaunchEnv launch = dist::read_launch_env();
  const RunContext run = read_run_context(config, launch, /*dry_run=*/true);
  const auto [replicas, shards] = replicas_and_shards(distributed, launch.world_size);
  const TrainingData data = read_training_data(config);
  const std::optional<TrainingData> validation = read_validation_data(config);
  const StepShape shape{options.micro_batches, options.docs_per_step, launch.world_size,
                        distributed.mode != "ddp"};
  std::optional<EpochPlan> plan;  // training.epochs
  if (options.epochs > 0) {
    plan = plan_epochs(data, run_sampler_options(data, run.seed), options.epochs, shape);
    set_planned_steps(options, plan->steps);
  }
  std::unique_ptr<Objective> objective = make_objective(config, run);  // on the meta device
  config.check_all_used();
  objective->attach_data({data.dataset ? &*data.dataset : nullptr,
                          data.dataset ? nullptr : &data.rollouts, data.cache_dir,
                          data.packing.seq_len});

  out << "[dry-run] objective " << objective->name() << ", " << options.steps << " steps, run_dir "
      << options.run_dir << "\n";
  const bool visible = !run.device.is_cuda() || run.device.index() < cuda_device_count();
  out << "[dry-run] device " << run.device.str() << (visible ? "" : " (not visible here)") << ", "
      << launch.world_size << " rank" << (launch.world_size == 1 ? "" : "s") << " ("
      << distributed.mode << ": " << replicas << " replica" << (replicas == 1 ? "" : "s") << " x "
      << shards << " shard" << (shards == 1 ? "" : "s") << ")\n";

  // The trained model: trainable parameters carry a gradient, fp32 masters (unless fp32
  // already) and two fp32 AdamW moments; its frozen parameters (a draft's lm_head) only weights.
  std::vector<at::Tensor> trained_tensors;
  int64_t trained = 0, trainable = 0;
  double trained_bytes = 0;
  for (const at::Tensor& parameter : objective->trainable().parameters()) {
    if (is_frozen(parameter)) continue;  // a frozen model's weight shared into the draft
    trained_tensors.push_back(parameter);
    trained += parameter.numel();
    const double element = static_cast<double>(parameter.element_size());
    double bytes = element;
    if (parameter.requires_grad()) {
      trainable += parameter.numel();
      bytes += element + 8.0 + (parameter.scalar_type() == at::kFloat ? 0.0 : 4.0);
    }
    trained_bytes += bytes * static_cast<double>(parameter.numel());
  }
  int64_t frozen = 0;
  double frozen_bytes = 0;
  const std::vector<at::Tensor> frozen_tensors = frozen_weights();  // each tensor once
  for (const at::Tensor& weight : frozen_tensors) {
    frozen += weight.numel();
    frozen_bytes +=
        static_cast<double>(weight.numel()) * static_cast<double>(weight.element_size());
  }
  std::string frozen_names;
  for (const std::string& name : objective->frozen_models())
    frozen_names += (frozen_names.empty() ? "" : ", ") + name;
  out << "[dry-run] trained model: " << thousands(trained) << " parameters ("
      << thousands(trainable) << " trainable), " << dtypes_of(trained_tensors) << "\n";
  out << "[dry-run] frozen: " << (frozen_names.empty() ? "none" : frozen_names) << ", "
      << thousands(frozen) << " parameters, " << dtypes_of(frozen_tensors)
      << " (checked against the checkpoints' headers; no weight read)\n";
  const double per_rank_trained = trained_bytes / static_cast<double>(shards);
  const double per_rank_frozen = frozen_bytes / static_cast<double>(shards);
  out << "[dry-run] memory per rank: trained " << bytes_text(per_rank_trained)
      << " (weights, gradients, fp32 masters and AdamW moments), frozen "
      << bytes_text(per_rank_frozen) << ", total " << bytes_text(per_rank_trained + per_rank_frozen)
      << " (activations not counted)\n";

  // The data: records, tokens, and how many passes the run makes over them.
  int64_t tokens = 0, longest = 0, overlong = 0;
  for (int64_t record = 0; record < data.num_records(); ++record) {
    const int64_t length = data.record_tokens(record);
    tokens += length;
    longest = std::max(longest, length);
    if (length > data.packing.seq_len) ++overlong;
  }
  const int64_t step_tokens = options.micro_batches * data.rows * data.packing.seq_len;
  bool weighted = false;
  for (const DataFile& file : data.files) weighted |= file.weight != 1.0;
  out << "[dry-run] data: " << data.path << " (" << data_format_name(data.format) << "), "
      << thousands(data.num_records())
      << (weighted ? " draws per epoch (records x weights), " : " records, ") << thousands(tokens)
      << " tokens, longest " << longest << " (" << overlong << " longer than seq_len "
      << data.packing.seq_len << ")\n";
  bool held_out = false;
  for (const int64_t count : data.file_passed_over) held_out |= count > 0;
  if (data.files.size() > 1 || held_out || weighted)
    for (size_t k = 0; k < data.files.size(); ++k) {
      out << "[dry-run]   " << data.files[k].path << ": " << thousands(data.file_records[k])
          << " records";
      if (held_out) out << " (" << thousands(data.file_passed_over[k]) << " held out)";
      out << ", weight " << data.files[k].weight << ": " << thousands(data.file_draws[k])
          << " draws per epoch\n";
    }
  char epochs[200];
  if (plan)
    std::snprintf(epochs, sizeof epochs,
                  "%lld epoch%s: %lld steps planned (%lld micro-batches, %lld tokens, %.1f%% of "
                  "their row slots real tokens)",
                  static_cast<long long>(options.epochs), options.epochs == 1 ? "" : "s",
                  static_cast<long long>(plan->steps), static_cast<long long>(plan->micro_batches),
                  static_cast<long long>(plan->tokens),
                  100.0 * static_cast<double>(plan->tokens) / static_cast<double>(plan->slots));
  else if (options.docs_per_step > 0)
    std::snprintf(epochs, sizeof epochs, "%lld documents per step: %.2f epochs",
                  static_cast<long long>(options.docs_per_step),
                  static_cast<double>(options.steps * options.docs_per_step) /
                      static_cast<double>(data.num_records() * data.documents_per_record()));
  else
    std::snprintf(epochs, sizeof epochs,
                  "%lld micro-batches of %lld x %lld tokens per step: at most %.2f epochs",
                  static_cast<long long>(options.micro_batches), static_cast<long long>(data.rows),
                  static_cast<long long>(data.packing.seq_len),
                  static_cast<double>(options.steps * step_tokens) / static_cast<double>(tokens));
  out << "[dry-run] " << epochs << "\n";
  if (validation)
    out << "[dry-run] validation: " << validation->path << ", "
        << thousands(validation->num_records()) << " records, "
        << (options.eval_every > 0 ? "every " + std::to_string(options.eval_every) + " steps and "
                                   : std::string())
        << "at the last step; best checkpoint by " << options.best_metric << "\n";
  out << "[dry-run] ok: the config is valid and its checkpoints match; nothing was trained\n";
}

}  // namespace tandem
