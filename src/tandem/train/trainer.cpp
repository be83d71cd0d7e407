#include "tandem/train/trainer.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "tandem/core/device.h"
#include "tandem/core/error.h"
#include "tandem/core/run_context.h"
#include "tandem/data/packing.h"
#include "tandem/data/sampler.h"
#include "tandem/data/token_cache.h"
#include "tandem/dist/launch.h"
#include "tandem/dist/process_group.h"
#include "tandem/dist/sharding.h"
#include "tandem/models/decoder.h"
#include "tandem/models/frozen.h"
#include "tandem/objectives/objective.h"
#include "tandem/text/tokenizer.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/data_parallel.h"
#include "tandem/train/training_data.h"
#include "tandem/train/metrics.h"
#include "tandem/train/optimizer.h"
#include "tandem/train/phase_timer.h"
#include "tandem/train/schedule.h"
#include "tandem/train/sharded_model.h"

namespace tandem {

namespace {

std::atomic<bool> stop_requested{false};

extern "C" void request_stop(int) { stop_requested.store(true); }

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The device's random generator (CUDA), next to the CPU one that at::manual_seed also seeds.
std::optional<at::Generator> device_generator(const at::Device& device) {
  if (!device.is_cuda()) return std::nullopt;
  return at::detail::getCUDAHooks().getDefaultGenerator(device.index());
}

// The random generators' states by name: "cpu_generator", and "cuda_generator" on a GPU.
std::vector<std::pair<std::string, at::Tensor>> generator_states(const at::Device& device) {
  std::vector<std::pair<std::string, at::Tensor>> states{
      {"cpu_generator", at::detail::getDefaultCPUGenerator().get_state()}};
  if (auto generator = device_generator(device))
    states.emplace_back("cuda_generator", generator->get_state());
  return states;
}

// Restores what `states` holds; a checkpoint from another device type keeps this device's
// generator as seeded (its draws then differ from the original run's, which had none).
void restore_generators(const std::map<std::string, at::Tensor>& states, const at::Device& device) {
  at::Generator cpu = at::detail::getDefaultCPUGenerator();  // a handle to the global one
  cpu.set_state(states.at("cpu_generator"));
  auto generator = device_generator(device);
  auto saved = states.find("cuda_generator");
  if (generator && saved != states.end()) generator->set_state(saved->second);
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
  std::string mfu = "auto";  // auto: measure the matmul peak and report MFU on GPUs only
};

// training.device and training.deterministic, on this rank's launch (LOCAL_RANK picks the GPU).
RunContext read_run_context(const Config& config, const dist::LaunchEnv& launch) {
  const Config training = config.section("training");
  RunContext run;
  run.device = resolve_device(training.get_string("device", "auto"), launch.local_rank,
                              training.where("device"));
  run.deterministic = training.get_bool("deterministic", false);
  use_deterministic_algorithms(run.deterministic);
  return run;
}

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
  options.mfu = training.get_choice("mfu", {"auto", "true", "false"}, "auto");
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

// Every rank calls it. Rank 0 stages and commits; with a sharded model, the ranks of the first
// replica write their shard files into rank 0's staging directory first.
void save_checkpoint(const TrainingOptions& options, const Config& config,
                     const MixedPrecisionAdamW& optimizer, const torch::nn::Module& model_module,
                     const ShardedModel* sharded, const ParallelGroups& groups,
                     const Counters& counters, const Sampler& sampler, const at::Device& device) {
  dist::ProcessGroup& world = *groups.world;
  std::optional<CheckpointWriter> staged;
  std::string staging_dir;
  if (world.rank() == 0) {
    staged.emplace(options.run_dir, counters.step);
    staging_dir = staged->staging_dir();
  }
  if (sharded) {
    world.broadcast_text(staging_dir, 0);
    if (groups.replicate->rank() == 0) sharded->write_shard(staging_dir, optimizer);
    world.barrier();  // every shard file is in place (or a rank failed and this throws)
  }
  if (world.rank() != 0) return;
  CheckpointWriter& writer = *staged;
  if (sharded) {
    sharded->finish_checkpoint(writer, optimizer);
  } else {
    writer.write_tensors("model.safetensors", model_state(model_module));
    writer.write_tensors("optimizer.safetensors", optimizer.state());
  }
  writer.write_tensors("rng.safetensors", generator_states(device));
  writer.write_text("trainer_state.json", counters_json(counters, sampler.state()).dump(2) + "\n");
  writer.write_text("config.yaml", config.resolved_yaml() + "\n");
  for (const std::string& warning : writer.commit(static_cast<int>(options.keep_last)).warnings)
    std::cerr << "[train] warning: " << warning << "\n";
}

Counters counters_from_json(const nlohmann::json& state, Sampler& sampler);

// The random generators, counters and sampler position of a checkpoint.
Counters restore_trainer_state(const CheckpointReader& reader, Sampler& sampler,
                               const at::Device& device) {
  restore_generators(reader.read_tensors("rng.safetensors"), device);
  return counters_from_json(nlohmann::json::parse(reader.read_text("trainer_state.json")), sampler);
}

Counters counters_from_json(const nlohmann::json& state, Sampler& sampler) {
  Counters counters;
  counters.step = state.at("step").get<int64_t>();
  counters.documents_seen = state.at("documents_seen").get<int64_t>();
  counters.tokens_seen = state.at("tokens_seen").get<int64_t>();
  sampler.restore(state.at("sampler").get<SamplerState>());
  return counters;
}

// Restores everything a checkpoint holds (either layout, sharded_model.h) into an unsharded
// model; returns the counters it was saved with.
Counters restore_checkpoint(const CheckpointReader& reader, MixedPrecisionAdamW& optimizer,
                            const torch::nn::Module& model_module, Sampler& sampler,
                            const at::Device& device) {
  const std::string& dir = reader.dir();
  const auto model = read_full_checkpoint_tensors(reader, "model");
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
  optimizer.load_state(read_full_checkpoint_tensors(reader, "optimizer"), dir + " optimizer state");
  return restore_trainer_state(reader, sampler, device);
}

// Data parallel resume: rank 0 restored the checkpoint; every other rank takes its weights,
// optimizer state, random generator, counters and sampler position.
Counters share_trainer_state(dist::ProcessGroup& group, const Counters& counters,
                             Sampler& sampler, const at::Device& device);

Counters share_resumed_state(dist::ProcessGroup& group, MixedPrecisionAdamW& optimizer,
                             const torch::nn::Module& model_module, const Counters& counters,
                             Sampler& sampler, const at::Device& device) {
  std::vector<at::Tensor> weights;
  for (const auto& [name, tensor] : model_state(model_module)) weights.push_back(tensor.detach());
  broadcast_tensors_from_rank0(group, weights, "the trained model's tensors");
  const MixedPrecisionAdamW::NamedTensors state = optimizer.state();
  std::vector<at::Tensor> values;
  for (const auto& entry : state) values.push_back(entry.second.contiguous().clone());
  broadcast_tensors_from_rank0(group, values, "the optimizer state's tensors");
  if (group.rank() != 0) {
    std::map<std::string, at::Tensor> named;
    for (size_t i = 0; i < state.size(); ++i) named[state[i].first] = values[i];
    optimizer.load_state(named, "rank 0's optimizer state");
  }
  return share_trainer_state(group, counters, sampler, device);
}

// Every rank takes rank 0's random generators, counters and sampler position.
Counters share_trainer_state(dist::ProcessGroup& group, const Counters& counters,
                             Sampler& sampler, const at::Device& device) {
  const auto states = generator_states(device);
  std::vector<at::Tensor> rng;
  for (const auto& entry : states) rng.push_back(entry.second);
  broadcast_tensors_from_rank0(group, rng, "the random generator states");
  std::string text = counters_json(counters, sampler.state()).dump();
  group.broadcast_text(text, 0);
  if (group.rank() == 0) return counters;
  std::map<std::string, at::Tensor> received;
  for (size_t i = 0; i < states.size(); ++i) received[states[i].first] = rng[i];
  restore_generators(received, device);
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

// Every rank calls it; rank 0 writes. A sharded trainable model is gathered for it (the frozen
// models are not: an export holds the trained model only).
void export_trained_model(const Objective& objective, const TrainingData& data,
                          const ShardedModel* sharded, const dist::ProcessGroup& world,
                          const std::string& dir) {
  std::optional<FullParameters> full;
  if (sharded) full.emplace(sharded->full_parameters());
  if (world.rank() != 0) return;
  objective.export_model(dir);
  if (!data.tokenizer_dir.empty()) copy_tokenizer_files(data.tokenizer_dir, dir);
}

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// A step's metrics as fp64 tensors (on the device, or the host for host-computed ones), summed
// over its micro-batches by name in order of first appearance; read() copies them to the host
// in one transfer: the step's one wait for the device.
class StepMetrics {
 public:
  void add(const std::vector<std::pair<std::string, at::Tensor>>& metrics) {
    for (const auto& [name, value] : metrics) {
      const at::Tensor wide = value.detach().to(at::kDouble).reshape({});
      auto [found, fresh] = index_.try_emplace(name, values_.size());
      if (fresh)
        values_.emplace_back(name, wide);
      else
        values_[found->second].second = values_[found->second].second + wide;
    }
  }

  void add_host(const std::string& name, double value) {
    add({{name, at::scalar_tensor(value, at::kDouble)}});
  }

  std::vector<std::pair<std::string, double>> read() const {
    std::vector<at::Tensor> on_device;
    for (const auto& entry : values_)
      if (!entry.second.is_cpu()) on_device.push_back(entry.second);
    const at::Tensor device_values =
        on_device.empty() ? at::Tensor() : at::stack(on_device).cpu().contiguous();
    std::vector<std::pair<std::string, double>> out;
    int64_t next = 0;
    for (const auto& [name, value] : values_)
      out.emplace_back(name, value.is_cpu() ? value.item<double>()
                                            : device_values.data_ptr<double>()[next++]);
    return out;
  }

 private:
  std::vector<std::pair<std::string, at::Tensor>> values_;
  std::map<std::string, size_t> index_;
};

// Removes the metric `name` from `metrics` and returns its value (0 when absent).
double take_metric(std::vector<std::pair<std::string, double>>& metrics, const std::string& name) {
  for (auto it = metrics.begin(); it != metrics.end(); ++it)
    if (it->first == name) {
      const double value = it->second;
      metrics.erase(it);
      return value;
    }
  return 0;
}

// Several ranks: `metrics` summed over ranks in place, with every rank's stop request (a
// SIGTERM on any rank stops all): one all-reduce of host values (Gloo beside NCCL).
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

}  // namespace

void install_preemption_handlers() {
  std::signal(SIGTERM, request_stop);
  std::signal(SIGINT, request_stop);
}

TrainResult train(const Config& config) {
  const TrainingOptions options = read_training(config);
  const DistributedOptions distributed = read_distributed(config);
  const dist::LaunchEnv launch = dist::read_launch_env();
  const int64_t world = launch.world_size;  // checked before connecting
  RunContext run = read_run_context(config, launch);  // the device, decided once
  check(options.docs_per_step > 0 || options.micro_batches % world == 0, "[train] ",
        config.section("training").where("micro_batches"), " = ", options.micro_batches,
        " is not a multiple of the ", world, " ranks (each rank runs micro_batches / ranks)");
  replicas_and_shards(distributed, world);  // checks hybrid's dp sizes before connecting
  const std::shared_ptr<dist::ProcessGroup> group = join_job(distributed, run.device);
  const ParallelGroups groups = parallel_groups(group, distributed);
  const bool lead = group->rank() == 0;  // writes checkpoints, metrics and exports
  // Rank 0 tokenizes into the data cache first; the others then read what it wrote.
  if (!lead) group->barrier();
  TrainingData data = read_training_data(config);
  if (lead) group->barrier();
  std::optional<RankZeroLoading> rank_zero_loading;  // only rank 0 opens weight files
  if (world > 1) run.rank_zero = &rank_zero_loading.emplace(group, run.device);
  std::optional<ParameterShards> load_shards;  // shard, hybrid: loaded models split as they load
  if (groups.sharded) run.shard_on_load = &load_shards.emplace(groups.shard);
  if (lead)
    std::cerr << "[train] device " << run.device.str()
              << (run.deterministic ? " (deterministic algorithms)" : "") << "\n";
  std::unique_ptr<Objective> objective = make_objective(config, run);
  config.check_all_used();  // every key of the file was understood, before any work
  objective->attach_data({data.dataset ? &*data.dataset : nullptr,
                          data.dataset ? nullptr : &data.rollouts, data.cache_dir,
                          data.packing.seq_len});

  std::optional<ShardedModel> sharded;  // modes shard and hybrid
  if (groups.sharded) sharded.emplace(objective->trainable(), groups.shard, *load_shards);
  const ShardedModel* sharded_model = sharded ? &*sharded : nullptr;

  at::manual_seed(options.seed);
  SamplerOptions sampler_options;
  sampler_options.dataset_size = data.num_records();
  sampler_options.seed = options.seed;
  Sampler sampler(sampler_options);
  MixedPrecisionAdamW optimizer =
      sharded ? MixedPrecisionAdamW(sharded->optimizer_parameters(), options.adamw, sharded->decays())
              : MixedPrecisionAdamW(trainable_parameters(objective->trainable()), options.adamw);
  if (sharded && groups.shard->size() > 1)  // the clipping norm sums the squares of all slices
    optimizer.set_norm_reduction([&groups](const at::Tensor& local_sum) {
      at::Tensor total = local_sum.detach().clone();
      groups.shard->all_reduce_sum(total);
      return total;
    });

  Counters counters;
  std::string resumed;  // the checkpoint rank 0 resumed from
  std::optional<CheckpointReader> resume_from;
  if (lead) {
    CheckpointSearch search = find_latest_valid(options.run_dir);
    for (const std::string& warning : search.warnings) std::cerr << warning << "\n";
    if (search.checkpoint) {
      resume_from.emplace(std::move(*search.checkpoint));
      resumed = resume_from->dir();
    }
  }
  if (world > 1) group->broadcast_text(resumed, 0);
  if (!resumed.empty() && sharded) {
    // Rank 0 reads the checkpoint (either layout) at full shape; each rank keeps its slices.
    std::map<std::string, at::Tensor> model, optimizer_state;
    if (lead) {
      model = read_full_checkpoint_tensors(*resume_from, "model");
      optimizer_state = read_full_checkpoint_tensors(*resume_from, "optimizer");
      counters = restore_trainer_state(*resume_from, sampler, run.device);
    }
    sharded->restore(*group, model, optimizer_state, optimizer);
    if (world > 1) counters = share_trainer_state(*group, counters, sampler, run.device);
  } else if (!resumed.empty()) {
    if (lead)
      counters = restore_checkpoint(*resume_from, optimizer, objective->trainable(), sampler,
                                    run.device);
    if (world > 1)
      counters = share_resumed_state(*group, optimizer, objective->trainable(), counters, sampler,
                                     run.device);
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
  PhaseTimer phases(run.device);  // device time of forward, backward, optimizer
  // MFU's denominator: the matmul peak of this device, measured now (bf16 on a GPU, fp32 on the
  // CPU, where the benchmarks measure it too).
  double matmul_peak = 0;
  if (options.mfu == "true" || (options.mfu == "auto" && run.device.is_cuda())) {
    const bool gpu = run.device.is_cuda();
    matmul_peak = measure_matmul_peak(run.device, gpu ? at::kBFloat16 : at::kFloat,
                                      gpu ? 8192 : 1024, gpu ? 10 : 3);
    if (lead)
      std::cerr << "[train] " << (gpu ? "bf16" : "fp32") << " matmul peak on "
                << run.device.str() << ": " << matmul_peak / 1e12 << " TFLOP/s (the MFU denominator)\n";
  }
  while (counters.step < options.steps) {
    reset_peak_memory(run.device);
    const auto step_start = Clock::now();
    // 1. Data: the step's micro-batches, then its totals (known before any backward).
    std::vector<PackedBatch> batches;
    int64_t step_documents = 0;
    // Every rank draws the same micro-batches (train/data_parallel.h); at least one per rank.
    while (true) {
      batches.push_back(next_micro_batch(sampler, data));
      step_documents += batches.back().total_documents();
      const int64_t drawn = static_cast<int64_t>(batches.size());
      // Sharded: every rank must run as many micro-batches (their layer calls pair up).
      if (options.docs_per_step > 0
              ? step_documents >= options.docs_per_step && drawn >= world &&
                    (!sharded || drawn % world == 0)
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

    // 2. Forward and backward, micro-batch by micro-batch (this rank's share of them). Nothing
    // here waits for the device: the metrics stay tensors until step 5.
    StepMetrics step_metrics;
    for (const auto* part : {&groups.world, &groups.shard, &groups.replicate}) (*part)->reset_bytes();
    for (size_t index = 0; index < batches.size(); ++index) {
      if (!owns_micro_batch(*group, static_cast<int64_t>(index))) continue;
      phases.begin();
      const PackedBatch batch = batches[index].to(run.device);  // one copy per micro-batch
      ObjectiveOutput output = objective->compute(batch, totals);
      phases.end("forward");
      phases.begin();
      output.loss.backward();
      optimizer.accumulate_gradients();
      phases.end("backward");
      step_metrics.add(output.metrics);
      if (matmul_peak > 0) step_metrics.add_host("model_flops", objective->model_flops(batch));
    }

    // 3. Data parallel: the ranks' gradients summed (shard groups reduce-scattered already).
    const auto reduce_start = Clock::now();
    if (groups.replicate->size() > 1)
      optimizer.reduce_gradients(
          [&](at::Tensor& buffer) { groups.replicate->all_reduce_sum(buffer); });
    const double reduce_seconds = seconds_since(reduce_start);

    // 4. Optimizer.
    phases.begin();
    const double lr = learning_rate(options.schedule, counters.step);
    step_metrics.add({{"grad_norm", optimizer.step(lr)}});
    optimizer.zero_grad();
    phases.end("optimizer");

    // 5. The step's one wait for the device: its metrics read to the host, then (several
    // ranks) summed over ranks together with any stop request.
    std::vector<std::pair<std::string, double>> summed = step_metrics.read();
    const double grad_norm = take_metric(summed, "grad_norm");  // global already: not summed
    bool stop = stop_requested.load();
    if (world > 1) stop = sum_over_ranks(*group, summed, stop);
    const double model_flops = take_metric(summed, "model_flops");  // all ranks' micro-batches
    const std::map<std::string, double> phase_seconds = phases.take();

    counters.step += 1;
    counters.documents_seen += step_documents;
    counters.tokens_seen += step_tokens;
    const double step_seconds = seconds_since(step_start);
    MetricsRecord record;
    record.step = counters.step;
    for (const auto& entry : summed) record.values.push_back(entry);
    objective->finish_metrics(record.values);
    record.values.emplace_back("lr", lr);
    record.values.emplace_back("grad_norm", grad_norm);
    record.values.emplace_back("tokens_per_s", step_tokens / step_seconds);
    if (matmul_peak > 0)  // the ranks' mean: each rank's FLOPs against its own device's peak
      record.values.emplace_back("mfu", model_flops / static_cast<double>(world) / step_seconds /
                                            matmul_peak);
    record.values.emplace_back("time/step", step_seconds);
    record.values.emplace_back("time/data", data_seconds);
    for (const char* phase : {"forward", "backward", "optimizer"}) {
      const auto found = phase_seconds.find(phase);
      record.values.emplace_back(std::string("time/") + phase,
                                 found == phase_seconds.end() ? 0.0 : found->second);
    }
    if (world > 1) {
      record.values.emplace_back("time/reduce", reduce_seconds);
      int64_t bytes = group->bytes().total();  // a group of one moves nothing
      if (groups.shard != group && groups.shard->size() > 1) bytes += groups.shard->bytes().total();
      if (groups.replicate != group && groups.replicate->size() > 1)
        bytes += groups.replicate->bytes().total();
      record.values.emplace_back("collective_bytes", static_cast<double>(bytes));
    }
    record.values.emplace_back("peak_rss_mib", peak_rss_mib());
    if (run.device.is_cuda()) {  // the caching allocator's figures for this step
      const DeviceMemory memory = device_memory(run.device);
      record.values.emplace_back("cuda/peak_allocated_mib", mib(memory.peak_allocated));
      record.values.emplace_back("cuda/peak_reserved_mib", mib(memory.peak_reserved));
      record.values.emplace_back("cuda/allocated_mib", mib(memory.allocated));
      record.values.emplace_back("cuda/reserved_mib", mib(memory.reserved));
    }
    record.values.emplace_back("loss_tokens", static_cast<double>(totals.loss_tokens));
    record.values.emplace_back("num_documents", static_cast<double>(step_documents));
    record.values.emplace_back("documents_seen", static_cast<double>(counters.documents_seen));
    record.values.emplace_back("tokens_seen", static_cast<double>(counters.tokens_seen));
    if (metrics) metrics->log(record);

    const bool last = counters.step == options.steps;
    const bool due = options.save_every > 0 && counters.step % options.save_every == 0;
    if (due || last || stop) {
      save_checkpoint(options, config, optimizer, objective->trainable(), sharded_model, groups,
                      counters, sampler, run.device);
      if (!last && lead) metrics->note("saved " + checkpoint_dir_name(counters.step));
      if (objective->export_at_checkpoints() && !(last && options.export_at_end))
        export_trained_model(*objective, data, sharded_model, *group, options.run_dir + "/export");
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
    export_trained_model(*objective, data, sharded_model, *group, result.export_dir);
  }
  group->barrier();  // rank 0's export is done (or its failure reaches every rank)
  // What this rank holds: trainable state = parameters (slices when sharded) + fp32 masters and
  // AdamW moments; frozen = the frozen models' weights (slices when sharded).
  int64_t trainable_bytes = optimizer.state_bytes(), frozen_bytes = 0;
  for (const at::Tensor& parameter : objective->trainable().parameters())
    if (!is_frozen(parameter)) trainable_bytes += held_bytes(parameter);
  for (const at::Tensor& weight : frozen_weights()) frozen_bytes += held_bytes(weight);
  char line[256];  // one write: ranks share the terminal or torchrun's pipe
  std::snprintf(line, sizeof line,
                "[train] rank %lld of %lld: peak RSS %.1f MiB, trainable state %.3f MiB, frozen "
                "weights %.3f MiB\n",
                static_cast<long long>(group->rank()), static_cast<long long>(world),
                peak_rss_mib(), mib(trainable_bytes), mib(frozen_bytes));
  std::cerr << line;
  return result;
}

}  // namespace tandem
