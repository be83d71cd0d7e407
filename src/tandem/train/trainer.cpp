#include "tandem/train/trainer.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "tandem/core/error.h"
#include "tandem/data/packing.h"
#include "tandem/data/sampler.h"
#include "tandem/data/token_cache.h"
#include "tandem/dist/launch.h"
#include "tandem/models/decoder.h"
#include "tandem/models/frozen.h"
#include "tandem/objectives/objective.h"
#include "tandem/text/tokenizer.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/data_parallel.h"
#include "tandem/train/training_data.h"
#include "tandem/train/metrics.h"
#include "tandem/train/optimizer.h"
#include "tandem/train/schedule.h"

namespace tandem {

namespace {

std::atomic<bool> stop_requested{false};

extern "C" void request_stop(int) { stop_requested.store(true); }

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double peak_rss_mib() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;
}

struct TrainingOptions {
  std::string run_dir;
  int64_t steps = 0;
  uint64_t seed = 0;
  int64_t micro_batches = 1;  // fixed accumulation, unless docs_per_step > 0
  int64_t docs_per_step = 0;
  ScheduleOptions schedule;
  AdamWOptions adamw;
  int64_t save_every = 0;  // 0: only at the end (and on preemption)
  int64_t keep_last = 3;
  int64_t log_every = 10;
  bool export_at_end = true;
};

TrainingOptions read_training(const Config& config) {
  const Config training = config.section("training");
  TrainingOptions options;
  options.run_dir = training.get_string("run_dir");
  options.steps = training.get_int("steps");
  check(options.steps > 0, "[train] ", training.where("steps"), ": must be positive");
  options.seed = static_cast<uint64_t>(training.get_int("seed", 0));
  options.micro_batches = training.get_int("micro_batches", 1);
  options.docs_per_step = training.get_int("docs_per_step", 0);
  check(options.micro_batches > 0, "[train] ", training.where("micro_batches"), ": must be positive");
  check(options.docs_per_step >= 0, "[train] ", training.where("docs_per_step"),
        ": must be >= 0 (0: use micro_batches)");
  options.schedule.kind = training.get_choice("schedule", {"constant", "cosine"}, "cosine");
  options.schedule.lr = training.get_double("lr");
  options.schedule.min_lr_ratio = training.get_double("min_lr_ratio", 0.0);
  options.schedule.warmup_steps = training.get_int("warmup_steps", -1);
  options.schedule.warmup_ratio = training.get_double("warmup_ratio", 0.0);
  options.schedule.total_steps = options.steps;
  validate(options.schedule, training.where("schedule"));
  const Config optimizer = config.section("optimizer");
  options.adamw.beta1 = optimizer.get_double("beta1", 0.9);
  options.adamw.beta2 = optimizer.get_double("beta2", 0.95);
  options.adamw.eps = optimizer.get_double("eps", 1e-8);
  options.adamw.weight_decay = optimizer.get_double("weight_decay", 0.0);
  options.adamw.max_grad_norm = optimizer.get_double("max_grad_norm", 1.0);
  options.save_every = training.get_int("save_every", 0);
  options.keep_last = training.get_int("keep_last", 3);
  options.log_every = training.get_int("log_every", 10);
  options.export_at_end = training.get_bool("export", true);
  return options;
}

struct Counters {
  int64_t step = 0;            // optimizer steps done
  int64_t documents_seen = 0;  // cumulative documents trained on
  int64_t tokens_seen = 0;     // cumulative real tokens
};

nlohmann::json counters_json(const Counters& counters, const SamplerState& sampler) {
  return {{"step", counters.step},
          {"documents_seen", counters.documents_seen},
          {"tokens_seen", counters.tokens_seen},
          {"sampler", sampler}};
}

void save_checkpoint(const TrainingOptions& options, const Config& config,
                     const MixedPrecisionAdamW& optimizer, const torch::nn::Module& model_module,
                     const Counters& counters, const Sampler& sampler) {
  CheckpointWriter writer(options.run_dir, counters.step);
  const std::vector<std::pair<std::string, at::Tensor>> model = model_state(model_module);
  writer.write_tensors("model.safetensors", model);
  writer.write_tensors("optimizer.safetensors", optimizer.state());
  writer.write_tensors("rng.safetensors",
                       {{"cpu_generator", at::detail::getDefaultCPUGenerator().get_state()}});
  writer.write_text("trainer_state.json", counters_json(counters, sampler.state()).dump(2) + "\n");
  writer.write_text("config.yaml", config.resolved_yaml() + "\n");
  for (const std::string& warning : writer.commit(static_cast<int>(options.keep_last)).warnings)
    std::cerr << "[train] warning: " << warning << "\n";
}

Counters counters_from_json(const nlohmann::json& state, Sampler& sampler) {
  Counters counters;
  counters.step = state.at("step").get<int64_t>();
  counters.documents_seen = state.at("documents_seen").get<int64_t>();
  counters.tokens_seen = state.at("tokens_seen").get<int64_t>();
  sampler.restore(state.at("sampler").get<SamplerState>());
  return counters;
}

// Restores everything a checkpoint holds; returns the counters it was saved with.
Counters restore_checkpoint(const CheckpointReader& reader, MixedPrecisionAdamW& optimizer,
                            const torch::nn::Module& model_module, Sampler& sampler) {
  const std::string& dir = reader.dir();
  const auto model = reader.read_tensors("model.safetensors");
  {
    at::NoGradGuard no_grad;
    for (const auto& [name, parameter] : model_state(model_module)) {
      auto found = model.find(name);
      check(found != model.end(), "[train] ", dir, "/model.safetensors: missing '", name, "'");
      check(found->second.sizes() == parameter.sizes() &&
                found->second.scalar_type() == parameter.scalar_type(),
            "[train] ", dir, "/model.safetensors: '", name,
            "' does not match the model being trained (shape or dtype changed?)");
      parameter.detach().copy_(found->second);
    }
  }
  optimizer.load_state(reader.read_tensors("optimizer.safetensors"), dir + "/optimizer.safetensors");
  const auto rng = reader.read_tensors("rng.safetensors");
  at::Generator generator = at::detail::getDefaultCPUGenerator();  // a handle to the global one
  generator.set_state(rng.at("cpu_generator"));
  return counters_from_json(nlohmann::json::parse(reader.read_text("trainer_state.json")), sampler);
}

// Data parallel resume: rank 0 restored the checkpoint; every other rank takes its weights,
// optimizer state, random generator, counters and sampler position.
Counters share_resumed_state(dist::ProcessGroup& group, MixedPrecisionAdamW& optimizer,
                             const torch::nn::Module& model_module, const Counters& counters,
                             Sampler& sampler) {
  std::vector<at::Tensor> weights;
  for (const auto& [name, tensor] : model_state(model_module)) weights.push_back(tensor.detach());
  broadcast_tensors_from_rank0(group, weights, "the trained model's tensors");
  const MixedPrecisionAdamW::NamedTensors state = optimizer.state();
  std::vector<at::Tensor> values;
  for (const auto& entry : state) values.push_back(entry.second.contiguous().clone());
  broadcast_tensors_from_rank0(group, values, "the optimizer state's tensors");
  std::vector<at::Tensor> rng{at::detail::getDefaultCPUGenerator().get_state()};
  broadcast_tensors_from_rank0(group, rng, "the random generator state");
  std::string text = counters_json(counters, sampler.state()).dump();
  group.broadcast_text(text, 0);
  if (group.rank() == 0) return counters;
  std::map<std::string, at::Tensor> named;
  for (size_t i = 0; i < state.size(); ++i) named[state[i].first] = values[i];
  optimizer.load_state(named, "rank 0's optimizer state");
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  generator.set_state(rng[0]);
  return counters_from_json(nlohmann::json::parse(text), sampler);
}

void copy_tokenizer_files(const std::string& tokenizer_dir, const std::string& export_dir) {
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}) {
    const std::filesystem::path source = std::filesystem::path(tokenizer_dir) / name;
    if (std::filesystem::exists(source))
      std::filesystem::copy_file(source, std::filesystem::path(export_dir) / name,
                                 std::filesystem::copy_options::overwrite_existing);
  }
}

void export_trained_model(const Objective& objective, const TrainingData& data,
                          const std::string& dir) {
  objective.export_model(dir);
  if (!data.tokenizer_dir.empty()) copy_tokenizer_files(data.tokenizer_dir, dir);
}

}  // namespace

void install_preemption_handlers() {
  std::signal(SIGTERM, request_stop);
  std::signal(SIGINT, request_stop);
}

TrainResult train(const Config& config) {
  const TrainingOptions options = read_training(config);
  const DistributedOptions distributed = read_distributed(config);
  const int64_t world = dist::read_launch_env().world_size;  // checked before connecting
  check(options.docs_per_step > 0 || options.micro_batches % world == 0, "[train] ",
        config.section("training").where("micro_batches"), " = ", options.micro_batches,
        " is not a multiple of the ", world, " ranks (each rank runs micro_batches / ranks)");
  const std::shared_ptr<dist::ProcessGroup> group = join_job(distributed);
  const bool lead = group->rank() == 0;  // writes checkpoints, metrics and exports
  // Rank 0 tokenizes into the data cache first; the others then read what it wrote.
  if (!lead) group->barrier();
  TrainingData data = read_training_data(config);
  if (lead) group->barrier();
  std::optional<RankZeroLoading> rank_zero_loading;  // only rank 0 opens weight files
  if (world > 1) rank_zero_loading.emplace(group);
  std::unique_ptr<Objective> objective = make_objective(config);
  config.check_all_used();  // every key of the file was understood, before any work
  objective->attach_data({data.dataset ? &*data.dataset : nullptr,
                          data.dataset ? nullptr : &data.rollouts, data.cache_dir,
                          data.packing.seq_len});

  at::manual_seed(options.seed);
  SamplerOptions sampler_options;
  sampler_options.dataset_size = data.num_records();
  sampler_options.seed = options.seed;
  Sampler sampler(sampler_options);
  MixedPrecisionAdamW optimizer(trainable_parameters(objective->trainable()), options.adamw);

  Counters counters;
  std::string resumed;  // the checkpoint rank 0 resumed from
  if (lead) {
    const CheckpointSearch search = find_latest_valid(options.run_dir);
    for (const std::string& warning : search.warnings) std::cerr << warning << "\n";
    if (search.checkpoint) {
      counters = restore_checkpoint(*search.checkpoint, optimizer, objective->trainable(), sampler);
      resumed = search.checkpoint->dir();
    }
  }
  if (world > 1) {
    group->broadcast_text(resumed, 0);
    if (!resumed.empty())
      counters = share_resumed_state(*group, optimizer, objective->trainable(), counters, sampler);
  }
  if (lead && !resumed.empty())
    std::cerr << "[train] resuming from " << resumed << " (step " << counters.step << ")\n";
  std::optional<MetricsLogger> metrics;  // rank 0 only
  if (lead) {
    std::filesystem::create_directories(options.run_dir);
    MetricsOptions metrics_options;
    metrics_options.run_dir = options.run_dir;
    metrics_options.total_steps = options.steps;
    metrics_options.resume_step = counters.step + 1;  // steps after the checkpoint are redone
    metrics_options.log_every = options.log_every;
    metrics.emplace(metrics_options);
  }

  TrainResult result;
  result.run_dir = options.run_dir;
  while (counters.step < options.steps) {
    const auto step_start = Clock::now();
    // 1. Data: the step's micro-batches, then its totals (known before any backward).
    std::vector<PackedBatch> batches;
    int64_t step_documents = 0;
    // Every rank draws the same micro-batches (train/data_parallel.h); at least one per rank.
    while (true) {
      batches.push_back(next_micro_batch(sampler, data));
      step_documents += batches.back().total_documents();
      const int64_t drawn = static_cast<int64_t>(batches.size());
      if (options.docs_per_step > 0
              ? step_documents >= options.docs_per_step && drawn >= world
              : drawn >= options.micro_batches)
        break;
    }
    StepTotals totals;
    int64_t step_tokens = 0;
    for (const PackedBatch& batch : batches) {
      totals.add(objective->count(batch));
      step_tokens += batch.num_tokens;
    }
    const double data_seconds = seconds_since(step_start);

    // 2. Forward and backward, micro-batch by micro-batch (this rank's share of them).
    double forward_seconds = 0, backward_seconds = 0;
    std::map<std::string, double> summed;
    std::vector<std::string> metric_order;
    group->reset_bytes();
    for (size_t index = 0; index < batches.size(); ++index) {
      if (!owns_micro_batch(*group, static_cast<int64_t>(index))) continue;
      const PackedBatch& batch = batches[index];
      const auto forward_start = Clock::now();
      ObjectiveOutput output = objective->compute(batch, totals);
      forward_seconds += seconds_since(forward_start);
      const auto backward_start = Clock::now();
      output.loss.backward();
      optimizer.accumulate_gradients();
      backward_seconds += seconds_since(backward_start);
      for (const auto& [name, value] : output.metrics) {
        if (!summed.count(name)) metric_order.push_back(name);
        summed[name] += value;
      }
    }

    // 3. Data parallel: the ranks' gradients summed, their metrics summed, any stop request.
    bool stop = stop_requested.load();
    const auto reduce_start = Clock::now();
    if (world > 1) {
      optimizer.reduce_gradients([&](at::Tensor& buffer) { group->all_reduce_sum(buffer); });
      const int64_t count = static_cast<int64_t>(metric_order.size());
      at::Tensor values = at::zeros({count + 1}, at::kDouble);
      for (int64_t i = 0; i < count; ++i) values[i] = summed[metric_order[i]];
      values[count] = stop ? 1.0 : 0.0;
      group->all_reduce_sum(values);
      for (int64_t i = 0; i < count; ++i) summed[metric_order[i]] = values[i].item<double>();
      stop = values[count].item<double>() > 0;
    }
    const double reduce_seconds = seconds_since(reduce_start);

    // 4. Optimizer.
    const auto optimizer_start = Clock::now();
    const double lr = learning_rate(options.schedule, counters.step);
    const double grad_norm = optimizer.step(lr);
    optimizer.zero_grad();
    const double optimizer_seconds = seconds_since(optimizer_start);

    counters.step += 1;
    counters.documents_seen += step_documents;
    counters.tokens_seen += step_tokens;
    const double step_seconds = seconds_since(step_start);
    MetricsRecord record;
    record.step = counters.step;
    for (const std::string& name : metric_order) record.values.emplace_back(name, summed[name]);
    objective->finish_metrics(record.values);
    record.values.emplace_back("lr", lr);
    record.values.emplace_back("grad_norm", grad_norm);
    record.values.emplace_back("tokens_per_s", step_tokens / step_seconds);
    record.values.emplace_back("time/step", step_seconds);
    record.values.emplace_back("time/data", data_seconds);
    record.values.emplace_back("time/forward", forward_seconds);
    record.values.emplace_back("time/backward", backward_seconds);
    record.values.emplace_back("time/optimizer", optimizer_seconds);
    if (world > 1) {
      record.values.emplace_back("time/reduce", reduce_seconds);
      record.values.emplace_back("collective_bytes", static_cast<double>(group->bytes().total()));
    }
    record.values.emplace_back("peak_rss_mib", peak_rss_mib());
    record.values.emplace_back("loss_tokens", static_cast<double>(totals.loss_tokens));
    record.values.emplace_back("num_documents", static_cast<double>(step_documents));
    record.values.emplace_back("documents_seen", static_cast<double>(counters.documents_seen));
    record.values.emplace_back("tokens_seen", static_cast<double>(counters.tokens_seen));
    if (metrics) metrics->log(record);

    const bool last = counters.step == options.steps;
    const bool due = options.save_every > 0 && counters.step % options.save_every == 0;
    if ((due || last || stop) && lead) {
      save_checkpoint(options, config, optimizer, objective->trainable(), counters, sampler);
      if (!last) metrics->note("saved " + checkpoint_dir_name(counters.step));
      if (objective->export_at_checkpoints() && !(last && options.export_at_end))
        export_trained_model(*objective, data, options.run_dir + "/export");
    }
    if (due || last || stop) group->barrier();  // the checkpoint is complete before anyone goes on
    if (stop && !last) {
      if (metrics) metrics->close();
      std::cerr << "[train] stop requested: saved step " << counters.step << " in "
                << options.run_dir << "; rerun the same command to resume\n";
      result.final_step = counters.step;
      result.preempted = true;
      return result;
    }
  }
  result.final_step = counters.step;
  if (options.export_at_end) {
    result.export_dir = options.run_dir + "/export";
    if (lead) export_trained_model(*objective, data, result.export_dir);
  }
  group->barrier();  // rank 0's export is done (or its failure reaches every rank)
  if (world > 1)  // one write: ranks share the terminal or torchrun's pipe
    std::cerr << ("[train] rank " + std::to_string(group->rank()) + " of " +
                  std::to_string(world) + ": peak RSS " + std::to_string(peak_rss_mib()) +
                  " MiB\n");
  return result;
}

}  // namespace tandem
