#include "tandem/train/trainer.h"

#include <ATen/ATen.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>

#include "tandem/core/config_schema.h"
#include "tandem/core/device.h"
#include "tandem/core/error.h"
#include "tandem/core/host_read.h"
#include "tandem/core/run_context.h"
#include "tandem/data/packing.h"
#include "tandem/dist/launch.h"
#include "tandem/dist/process_group.h"
#include "tandem/dist/sharding.h"
#include "tandem/dist/weight_checksum.h"
#include "tandem/models/frozen.h"
#include "tandem/objectives/description.h"
#include "tandem/objectives/objective.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/data_parallel.h"
#include "tandem/train/epoch_plan.h"
#include "tandem/train/export_run.h"
#include "tandem/train/metrics.h"
#include "tandem/train/mlflow_sink.h"
#include "tandem/train/optimizer.h"
#include "tandem/train/phase_timer.h"
#include "tandem/train/run_dir_lock.h"
#include "tandem/train/run_state.h"
#include "tandem/train/schedule.h"
#include "tandem/train/sharded_model.h"
#include "tandem/train/step_metrics.h"
#include "tandem/train/training_data.h"
#include "tandem/train/training_options.h"
#include "tandem/train/validation.h"
#include "tandem/train/warm_start.h"

namespace tandem {

namespace {

// distributed.check_frozen_weights: each rank's frozen weights (their full values, gathered one
// by one when sharded) against rank 0's, by checksum; every rank stops if any differs.
void check_frozen_weights_agree(dist::ProcessGroup& world) {
  const std::vector<at::Tensor> weights = frozen_weights();
  char mine[32];
  std::snprintf(mine, sizeof mine, "%016llx",
                static_cast<unsigned long long>(weights_checksum(weights)));
  char line[160];
  std::snprintf(line, sizeof line, "[load] rank %lld: frozen weights checksum %s (%zu tensors)\n",
                static_cast<long long>(world.rank()), mine, weights.size());
  std::cerr << line;
  std::string lead = mine;
  world.broadcast_text(lead);
  const int64_t differing = world.all_reduce_int64(lead == mine ? 0 : 1);
  check(differing == 0, "[dist] the frozen weights differ between ranks after loading: ", differing,
        " rank(s) disagree with rank 0's checksum ", lead);
}

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

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// A step's micro-batches (this rank's share runs) and what they add up to.
struct StepData {
  std::vector<PackedBatch> batches;
  StepTotals totals;
  int64_t documents = 0, tokens = 0;
  double seconds = 0;  // drawing and counting them
};

// One run of `tandem train`, as named phases: set_up (join the job, data, models, optimizer),
// resume (the newest valid checkpoint, if any), step (one optimizer step and its metrics),
// checkpoint (save, and export drafts), finish (the final export and what this rank held).
class TrainingRun {
 public:
  TrainingRun(const Config& config, bool start_over) : config_(config), start_over_(start_over) {}

  void set_up();
  void resume();
  /// One optimizer step; returns whether a stop was requested (on any rank).
  bool step();
  void checkpoint(bool stop);
  TrainResult finish(bool preempted);
  bool done() const { return counters_.step >= options_.steps; }

 private:
  StepData draw_step();
  void plan_epochs_into_steps();
  std::vector<std::pair<std::string, double>> validate_if_due();
  bool all_finite(const at::Tensor& loss, const at::Tensor& grad_norm) const;
  void check_state_finite() const;
  std::string kept_checkpoint() const;
  MetricsRecord step_record(const StepData& step,
                            std::vector<std::pair<std::string, double>> summed, double lr,
                            double grad_norm, double model_flops, double reduce_seconds,
                            const std::map<std::string, double>& phase_seconds,
                            double step_seconds) const;
  void export_trained_model(const std::string& dir) const;
  void report_memory() const;
  bool lead() const { return group_->rank() == 0; }  // writes checkpoints, metrics and exports
  int64_t world() const { return group_->size(); }

  const Config& config_;
  const bool start_over_;  // checkpoints exist but none is usable: set them aside, start at 0
  TrainingOptions options_;
  RunContext run_;
  std::shared_ptr<dist::ProcessGroup> group_;
  ParallelGroups groups_;
  std::optional<TrainingData> data_;
  std::optional<Validation> validation_;  // data.validation
  bool larger_is_better_ = false;         // training.best_metric's direction
  bool best_now_ = false;                 // this step's validation is the best so far: save it
  StepShape step_shape_;
  std::optional<RankZeroLoading> rank_zero_loading_;  // only rank 0 opens weight files
  std::optional<ParameterShards> load_shards_;  // shard, hybrid: loaded models split as they load
  std::unique_ptr<Objective> objective_;
  std::optional<ShardedModel> sharded_;  // modes shard and hybrid
  std::optional<DataCursor> cursor_;     // the sampler and best-fit's pool
  std::optional<MixedPrecisionAdamW> optimizer_;
  std::optional<RunDirLock> run_dir_lock_;  // rank 0 only, held until the run ends
  std::optional<MetricsLogger> metrics_;    // rank 0 only
  std::optional<PhaseTimer> phases_;        // device time of forward, backward, optimizer
  double matmul_peak_ = 0;                  // FLOP/s: MFU's denominator (0: MFU not reported)
  Counters counters_;
  int64_t saved_step_ = -1;  // the newest checkpoint this run resumed from or wrote (-1: none)
};

void TrainingRun::set_up() {
  options_ = read_training(config_);
  const DistributedOptions distributed = read_distributed(config_);
  const dist::LaunchEnv launch = dist::read_launch_env();
  dist::exit_with_launcher(launch);          // an orphaned rank stops (SIGTERM: save and exit)
  run_ = read_run_context(config_, launch);  // the device, decided once
  check(options_.docs_per_step > 0 || options_.micro_batches % launch.world_size == 0, "[train] ",
        keys::training::micro_batches.where(config_), " = ", options_.micro_batches,
        " is not a multiple of the ", launch.world_size,
        " ranks (each rank runs micro_batches / ranks)");
  replicas_and_shards(distributed, launch.world_size);  // hybrid's dp sizes, before connecting
  group_ = join_job(distributed, run_.device);
  groups_ = parallel_groups(group_, distributed);
  // Rank 0 tokenizes into the data cache first; the others then read what it wrote.
  if (!lead()) group_->barrier();
  data_.emplace(read_training_data(config_));
  std::optional<TrainingData> validation_data = read_validation_data(config_);
  if (lead()) group_->barrier();
  step_shape_ = {options_.micro_batches, options_.docs_per_step, world(), groups_.sharded};
  if (options_.epochs > 0) plan_epochs_into_steps();
  if (world() > 1) run_.rank_zero = &rank_zero_loading_.emplace(group_, run_.device);
  if (groups_.sharded) run_.shard_on_load = &load_shards_.emplace(groups_.shard);
  if (lead())
    std::cerr << "[train] device " << run_.device.str()
              << (run_.deterministic ? " (deterministic algorithms)" : "") << "\n";
  objective_ = make_objective(config_, run_);
  const ObjectiveDescription& description = configured_objective(config_);
  std::string init_from_where;
  const std::string init_from = read_init_from(config_, description, init_from_where);
  config_.check_all_used();  // every key of the file was understood, before any work
  objective_->attach_data({data_->dataset ? &*data_->dataset : nullptr,
                           data_->dataset ? nullptr : &data_->rollouts, data_->cache_dir,
                           data_->packing.seq_len});
  // Before sharding and the optimizer: the weights it starts from (after attach_data, which may
  // set buffers such as a vocabulary map that the source then overrides with its own).
  if (!init_from.empty()) {
    const std::string line =
        warm_start(objective_->trainable(), init_from, description, init_from_where);
    if (lead()) std::cerr << line << "\n";
  }
  if (validation_data) {
    const std::string refusal = objective_->cannot_validate();
    check(refusal.empty(), "[train] ", keys::data::validation.where(config_), ": ", refusal);
    validation_.emplace(std::move(*validation_data), *objective_);
    larger_is_better_ = larger_is_better(options_.best_metric, options_.best_mode);
    if (lead())
      std::cerr << "[train] validation: " << validation_->data().path << ", "
                << validation_->records() << " records in " << validation_->micro_batches()
                << " micro-batches, "
                << (options_.eval_every > 0
                        ? "every " + std::to_string(options_.eval_every) + " steps and "
                        : std::string())
                << "at the last step; best checkpoint by " << options_.best_metric << " ("
                << (larger_is_better_ ? "largest" : "smallest") << ")\n";
  }
  if (groups_.sharded) sharded_.emplace(objective_->trainable(), groups_.shard, *load_shards_);
  if (distributed.check_frozen_weights) check_frozen_weights_agree(*group_);

  at::manual_seed(run_.seed);
  cursor_.emplace(run_sampler_options(*data_, run_.seed));
  if (sharded_)
    optimizer_.emplace(sharded_->optimizer_parameters(), options_.adamw, sharded_->decays());
  else
    optimizer_.emplace(trainable_parameters(objective_->trainable()), options_.adamw);
  if (sharded_ && groups_.shard->size() > 1)  // the clipping norm sums the squares of all slices
    optimizer_->set_norm_reduction([this](const at::Tensor& local_sum) {
      at::Tensor total = local_sum.detach().clone();
      groups_.shard->all_reduce_sum(total);
      return total;
    });
  phases_.emplace(run_.device);
  // MFU's denominator: this device's matmul peak, measured now (bf16 on a GPU; fp32 on the CPU,
  // where the benchmarks measure it too).
  if (options_.mfu == "true" || (options_.mfu == "auto" && run_.device.is_cuda())) {
    const bool gpu = run_.device.is_cuda();
    matmul_peak_ = measure_matmul_peak(run_.device, gpu ? at::kBFloat16 : at::kFloat,
                                       gpu ? 8192 : 1024, gpu ? 10 : 3);
    if (lead())
      std::cerr << "[train] " << (gpu ? "bf16" : "fp32") << " matmul peak on " << run_.device.str()
                << ": " << matmul_peak_ / 1e12 << " TFLOP/s (the MFU denominator)\n";
  }
}

void TrainingRun::resume() {
  std::string resumed;  // the checkpoint rank 0 resumes from
  std::string refused;  // why the run cannot start (rank 0 found only unusable checkpoints)
  std::optional<RunCheckpoint> loaded;
  if (lead()) {
    try {
      run_dir_lock_.emplace(options_.run_dir);  // one writer per run directory
    } catch (const Error& e) {
      refused = e.what();
    }
  }
  if (lead() && refused.empty()) {
    // Newest first; one that does not verify or cannot be read is skipped like a corrupt one.
    CheckpointSearch search = find_latest_valid(
        options_.run_dir,
        [&loaded](const CheckpointReader& reader) { loaded.emplace(read_run_checkpoint(reader)); });
    for (const std::string& warning : search.warnings) std::cerr << warning << "\n";
    if (search.checkpoint) {
      resumed = search.checkpoint->dir();
    } else if (search.candidates > 0 && !start_over_) {
      refused = "[train] " + options_.run_dir + " holds " + std::to_string(search.candidates) +
                " checkpoint(s) and none can be used (each is named above with what is wrong); "
                "nothing was changed. Rerun with --start-over to move them to " +
                options_.run_dir + "/unusable-<time>/ and train from step 0";
    } else if (search.candidates > 0) {
      const std::string moved = set_aside_checkpoints(options_.run_dir);
      std::cerr << "[train] --start-over: the unusable checkpoints were moved to " << moved
                << "; training from step 0\n";
    }
  }
  if (world() > 1) {
    group_->broadcast_text(refused, 0);
    group_->broadcast_text(resumed, 0);
  }
  if (!refused.empty()) throw Error(lead() ? refused : "rank 0 refused to start: " + refused);
  if (!resumed.empty() && sharded_) {
    // Rank 0 read the checkpoint (either layout) at full shape; each rank keeps its slices.
    std::map<std::string, at::Tensor> none;
    if (lead()) counters_ = restore_trainer_state(*loaded, *cursor_, run_.device);
    sharded_->restore(*group_, lead() ? loaded->model : none, lead() ? loaded->optimizer : none,
                      *optimizer_);
    if (world() > 1) counters_ = share_trainer_state(*group_, counters_, *cursor_, run_.device);
  } else if (!resumed.empty()) {
    if (lead())
      counters_ =
          restore_checkpoint(*loaded, *optimizer_, objective_->trainable(), *cursor_, run_.device);
    if (world() > 1)
      counters_ = share_resumed_state(*group_, *optimizer_, objective_->trainable(), counters_,
                                      *cursor_, run_.device);
  }
  loaded.reset();  // the host copy of the checkpoint
  if (!resumed.empty()) saved_step_ = counters_.step;
  if (!lead()) return;
  if (!resumed.empty())
    std::cerr << "[train] resuming from " << resumed << " (step " << counters_.step << ")\n";
  // best.json follows the checkpoint resumed from: one written after it (an abandoned timeline)
  // or lost in a crash after the commit is put right.
  if (counters_.best_step >= 0)
    write_best_marker(options_.run_dir, counters_.best_step, options_.best_metric,
                      larger_is_better_, counters_.best_value);
  else
    std::filesystem::remove(options_.run_dir + "/best.json");
  MetricsOptions metrics_options;  // run_dir exists: the lock above created it
  metrics_options.run_dir = options_.run_dir;
  metrics_options.total_steps = options_.steps;
  metrics_options.resume_step = counters_.step + 1;  // steps after the checkpoint are redone
  metrics_options.log_every = options_.log_every;
  metrics_.emplace(metrics_options);
  if (options_.mlflow) {
    MlflowOptions mlflow;
    mlflow.tracking_dir =
        options_.mlflow_dir.empty() ? options_.run_dir + "/mlruns" : options_.mlflow_dir;
    mlflow.experiment = options_.mlflow_experiment;
    mlflow.run_name = options_.mlflow_run_name;
    mlflow.run_dir = options_.run_dir;
    mlflow.resume_step = metrics_options.resume_step;
    mlflow.params = mlflow_params_from_yaml(config_.resolved_yaml(), "the run's config");
    auto sink = std::make_unique<MlflowSink>(std::move(mlflow));
    std::cerr << "[train] MLflow: run " << sink->run_id() << " in " << sink->run_path() << "\n";
    metrics_->add_sink(std::move(sink));
  }
}

// training.epochs: the steps those passes take, drawn from the lengths as the run will draw them.
void TrainingRun::plan_epochs_into_steps() {
  const EpochPlan plan =
      plan_epochs(*data_, run_sampler_options(*data_, run_.seed), options_.epochs, step_shape_);
  set_planned_steps(options_, plan.steps);
  if (lead())
    std::cerr << "[train] " << options_.epochs << " epoch" << (options_.epochs == 1 ? "" : "s")
              << " of " << data_->num_records() << " records: " << plan.steps << " steps ("
              << plan.micro_batches << " micro-batches, " << plan.tokens << " tokens)\n";
}

// Validation when due (every eval_every steps and at the last), on every rank; notes a new best.
std::vector<std::pair<std::string, double>> TrainingRun::validate_if_due() {
  best_now_ = false;
  const bool last = counters_.step == options_.steps;
  const bool due = options_.eval_every > 0 && counters_.step % options_.eval_every == 0;
  if (!validation_ || !(due || last)) return {};
  const auto start = Clock::now();
  std::vector<std::pair<std::string, double>> values =
      validation_->run(*objective_, run_.device, *group_);
  const double* value = nullptr;
  for (const auto& [name, number] : values)
    if (name == options_.best_metric) value = &number;
  if (value == nullptr) {
    std::string names;
    for (const auto& entry : values) names += (names.empty() ? "" : ", ") + entry.first;
    throw Error("[train] training.best_metric = ", options_.best_metric,
                " is not a validation metric of ", objective_->name(), " (these are: ", names, ")");
  }
  const bool better =
      counters_.best_step < 0 ||
      (larger_is_better_ ? *value > counters_.best_value : *value < counters_.best_value);
  if (std::isfinite(*value) && better) {
    counters_.best_step = counters_.step;
    counters_.best_value = *value;
    best_now_ = true;
  }
  values.emplace_back("time/validation", seconds_since(start));
  return values;
}

// The step's micro-batches, then its totals (known before any backward). Every rank draws the
// same micro-batches (train/data_parallel.h); at least one per rank.
StepData TrainingRun::draw_step() {
  const auto start = Clock::now();
  StepData step;
  while (true) {
    step.batches.push_back(next_micro_batch(*cursor_, *data_));
    step.documents += step.batches.back().total_documents();
    const int64_t drawn = static_cast<int64_t>(step.batches.size());
    if (step_shape_.complete(drawn, step.documents)) break;
  }
  for (const PackedBatch& batch : step.batches) {
    step.totals.add(objective_->count(batch));
    step.tokens += batch.num_tokens;
  }
  step.seconds = seconds_since(start);
  return step;
}

bool TrainingRun::step() {
  reset_peak_memory(run_.device);
  const auto start = Clock::now();
  const StepData step = draw_step();

  // Forward and backward, micro-batch by micro-batch (this rank's share of them). Nothing here
  // waits for the device: the metrics stay tensors until they are read below.
  StepMetrics step_metrics;
  at::Tensor loss;  // this rank's share of the step's loss, fp64 on the device
  for (const auto* part : {&groups_.world, &groups_.shard, &groups_.replicate})
    (*part)->reset_bytes();
  for (size_t index = 0; index < step.batches.size(); ++index) {
    if (!owns_micro_batch(*group_, static_cast<int64_t>(index))) continue;
    phases_->begin();
    const PackedBatch batch = step.batches[index].to(run_.device);  // one copy per micro-batch
    ObjectiveOutput output = objective_->compute(batch, step.totals);
    phases_->end("forward");
    // The next micro-batch of this rank, read ahead (offline features) while this one's forward
    // and backward run on the device.
    for (size_t next = index + 1; next < step.batches.size(); ++next)
      if (owns_micro_batch(*group_, static_cast<int64_t>(next))) {
        objective_->prefetch(step.batches[next]);
        break;
      }
    const at::Tensor part = output.loss.detach().to(at::kDouble);
    loss = loss.defined() ? loss + part : part;
    phases_->begin();
    output.loss.backward();
    optimizer_->accumulate_gradients();
    phases_->end("backward");
    step_metrics.add(output.metrics);
    if (matmul_peak_ > 0) step_metrics.add_host("model_flops", objective_->model_flops(batch));
  }

  // Data parallel: the ranks' gradients summed (shard groups reduce-scattered them already).
  const auto reduce_start = Clock::now();
  if (groups_.replicate->size() > 1)
    optimizer_->reduce_gradients(
        [this](at::Tensor& buffer) { groups_.replicate->all_reduce_sum(buffer); });
  const double reduce_seconds = seconds_since(reduce_start);

  phases_->begin();
  const double lr = learning_rate(options_.schedule, counters_.step);
  if (!loss.defined())
    loss = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(run_.device));
  const at::Tensor grad_norm_tensor = optimizer_->gradient_norm();
  // skip_step must see the loss and norm before the update (one read from the device); stop
  // updates without waiting and stops below, before anything is saved.
  const bool skipped = options_.on_nonfinite == "skip_step" && !all_finite(loss, grad_norm_tensor);
  if (!skipped) optimizer_->update(lr);
  optimizer_->zero_grad();
  step_metrics.add({{"grad_norm", grad_norm_tensor}, {"step_loss", loss}});
  phases_->end("optimizer");

  // The step's one wait for the device: its metrics read to the host, then (several ranks)
  // summed over ranks together with any stop request.
  std::vector<std::pair<std::string, double>> summed = step_metrics.read();
  const double grad_norm = take_metric(summed, "grad_norm");  // global already: not summed
  bool stop = stop_requested.load();
  if (world() > 1) stop = sum_over_ranks(*group_, summed, stop);
  const double model_flops = take_metric(summed, "model_flops");  // all ranks' micro-batches
  const double step_loss = take_metric(summed, "step_loss");      // all ranks' shares
  const std::map<std::string, double> phase_seconds = phases_->take();

  counters_.step += 1;
  counters_.documents_seen += step.documents;
  counters_.tokens_seen += step.tokens;
  counters_.skipped_steps += skipped ? 1 : 0;
  counters_.consecutive_skips = skipped ? counters_.consecutive_skips + 1 : 0;
  const double step_seconds = seconds_since(start);
  const std::vector<std::pair<std::string, double>> validation = validate_if_due();
  if (metrics_) {
    MetricsRecord record = step_record(step, std::move(summed), lr, grad_norm, model_flops,
                                       reduce_seconds, phase_seconds, step_seconds);
    record.values.insert(record.values.end(), validation.begin(), validation.end());
    if (options_.on_nonfinite == "skip_step") {
      record.values.emplace_back("skipped", skipped ? 1.0 : 0.0);
      record.values.emplace_back("skipped_steps", static_cast<double>(counters_.skipped_steps));
    }
    metrics_->log(record);
    if (skipped)
      metrics_->note("step " + std::to_string(counters_.step) +
                     ": non-finite loss or gradient "
                     "norm, update skipped (training.on_nonfinite: skip_step)");
  }
  // Every rank holds the same summed loss and global norm, so every rank stops here together.
  const bool loss_bad = !std::isfinite(step_loss), norm_bad = !std::isfinite(grad_norm);
  if (!skipped && (loss_bad || norm_bad)) {
    std::ostringstream what;
    what << "[train] step " << counters_.step << ": ";
    if (loss_bad) what << "the loss (" << step_loss << ")" << (norm_bad ? " and " : "");
    if (norm_bad) what << "the gradient norm (" << grad_norm << ")";
    what << (loss_bad && norm_bad ? " are" : " is")
         << " not finite (training.on_nonfinite: stop): stopped without saving; "
         << kept_checkpoint() << ". Lower training.lr, check the data, or set "
         << "training.on_nonfinite: skip_step";
    throw NonFiniteStop(what.str());
  }
  if (skipped && counters_.consecutive_skips >= options_.max_consecutive_skips)
    throw NonFiniteStop("[train] step " + std::to_string(counters_.step) + ": " +
                        std::to_string(counters_.consecutive_skips) +
                        " steps in a row had a non-finite loss or gradient norm and were skipped "
                        "(training.max_consecutive_skips = " +
                        std::to_string(options_.max_consecutive_skips) + "): stopped; " +
                        kept_checkpoint() + ". Lower training.lr or check the data");
  return stop;
}

// skip_step's test, before the update: whether the step's loss and gradient norm are finite on
// every rank (one read from the device; several ranks agree through one all-reduce).
bool TrainingRun::all_finite(const at::Tensor& loss, const at::Tensor& grad_norm) const {
  at::Tensor values = read_on_host(
      at::stack({loss.reshape({}), grad_norm.reshape({})}).to(at::kDouble), HostRead::StepMetrics);
  if (world() > 1) group_->all_reduce_sum(values);  // a NaN or infinity on any rank survives
  return at::isfinite(values).all().item<bool>();
}

// Before a save: the trained state (parameters, masters, moments; this rank's slices when
// sharded) must be finite on every rank, or nothing is written.
void TrainingRun::check_state_finite() const {
  const std::vector<std::string> bad = optimizer_->nonfinite_state();
  at::Tensor count = at::full({1}, static_cast<double>(bad.size()), at::kDouble);
  if (world() > 1) group_->all_reduce_sum(count);
  if (count.item<double>() == 0) return;
  std::string names;
  for (size_t i = 0; i < bad.size() && i < 3; ++i) names += (i ? ", " : "") + bad[i];
  if (bad.size() > 3) names += ", ...";
  throw NonFiniteStop("[train] step " + std::to_string(counters_.step) +
                      ": the trained parameters or optimizer state hold NaN or infinite values (" +
                      (names.empty() ? "on another rank" : names) + "): stopped without saving; " +
                      kept_checkpoint() + ". Lower training.lr or check the data");
}

// What a stopped run leaves behind, for its message.
std::string TrainingRun::kept_checkpoint() const {
  if (saved_step_ < 0) return "no checkpoint had been written in " + options_.run_dir;
  return "the newest checkpoint, " + options_.run_dir + "/" + checkpoint_dir_name(saved_step_) +
         ", is kept";
}

MetricsRecord TrainingRun::step_record(const StepData& step,
                                       std::vector<std::pair<std::string, double>> summed,
                                       double lr, double grad_norm, double model_flops,
                                       double reduce_seconds,
                                       const std::map<std::string, double>& phase_seconds,
                                       double step_seconds) const {
  MetricsRecord record;
  record.step = counters_.step;
  record.values = std::move(summed);
  objective_->finish_metrics(record.values);
  auto add = [&record](const std::string& name, double value) {
    record.values.emplace_back(name, value);
  };
  add("lr", lr);
  add("grad_norm", grad_norm);
  add("tokens_per_s", step.tokens / step_seconds);
  if (matmul_peak_ > 0)  // the ranks' mean: each rank's FLOPs against its own device's peak
    add("mfu", model_flops / static_cast<double>(world()) / step_seconds / matmul_peak_);
  add("time/step", step_seconds);
  add("time/data", step.seconds);
  for (const char* phase : {"forward", "backward", "optimizer"}) {
    const auto found = phase_seconds.find(phase);
    add(std::string("time/") + phase, found == phase_seconds.end() ? 0.0 : found->second);
  }
  if (world() > 1) {
    add("time/reduce", reduce_seconds);
    // What this rank handed to the collectives this step, by kind (a group of one moves
    // nothing): ddp all-reduces gradients, shard gathers weights and reduce-scatters gradients.
    dist::CollectiveBytes bytes = group_->bytes();
    for (const auto* part : {&groups_.shard, &groups_.replicate})
      if (*part != group_ && (*part)->size() > 1) bytes += (*part)->bytes();
    add("collective_bytes", static_cast<double>(bytes.total()));
    add("collective_bytes/all_reduce", static_cast<double>(bytes.all_reduce));
    add("collective_bytes/all_gather", static_cast<double>(bytes.all_gather));
    add("collective_bytes/reduce_scatter", static_cast<double>(bytes.reduce_scatter));
    add("collective_bytes/broadcast", static_cast<double>(bytes.broadcast));
  }
  add("peak_rss_mib", peak_rss_mib());
  if (run_.device.is_cuda()) {  // the caching allocator's figures for this step
    const DeviceMemory memory = device_memory(run_.device);
    add("cuda/peak_allocated_mib", mib(memory.peak_allocated));
    add("cuda/peak_reserved_mib", mib(memory.peak_reserved));
    add("cuda/allocated_mib", mib(memory.allocated));
    add("cuda/reserved_mib", mib(memory.reserved));
  }
  add("loss_tokens", static_cast<double>(step.totals.loss_tokens));
  add("num_documents", static_cast<double>(step.documents));
  add("documents_seen", static_cast<double>(counters_.documents_seen));
  add("tokens_seen", static_cast<double>(counters_.tokens_seen));
  return record;
}

// Saves when due (save_every), at the last step and on a stop request; drafts are exported at
// every checkpoint. Every rank calls it.
void TrainingRun::checkpoint(bool stop) {
  const bool last = counters_.step == options_.steps;
  const bool due = options_.save_every > 0 && counters_.step % options_.save_every == 0;
  if (!(due || last || stop || best_now_)) return;
  check_state_finite();
  save_checkpoint(options_, config_, *optimizer_, objective_->trainable(),
                  sharded_ ? &*sharded_ : nullptr, groups_, counters_, *cursor_, run_.device);
  saved_step_ = counters_.step;
  if (best_now_ && lead()) {
    write_best_marker(options_.run_dir, counters_.step, options_.best_metric, larger_is_better_,
                      counters_.best_value);
    metrics_->note("best " + options_.best_metric + " = " +
                   format_metric_value(counters_.best_value) + ": " +
                   checkpoint_dir_name(counters_.step) + " (best.json)");
  }
  if (!last && lead()) metrics_->note("saved " + checkpoint_dir_name(counters_.step));
  if (objective_->export_at_checkpoints() && !(last && options_.export_at_end))
    export_trained_model(options_.run_dir + "/export");
  group_->barrier();  // the checkpoint is complete before anyone goes on
}

// Every rank calls it; rank 0 writes. A sharded trainable model is gathered for it (the frozen
// models are not: an export holds the trained model only).
void TrainingRun::export_trained_model(const std::string& dir) const {
  std::optional<FullParameters> full;
  if (sharded_) full.emplace(sharded_->full_parameters());
  if (!lead()) return;
  objective_->export_model(dir);
  if (!data_->tokenizer_dir.empty()) copy_tokenizer_files(data_->tokenizer_dir, dir);
}

TrainResult TrainingRun::finish(bool preempted) {
  TrainResult result;
  result.run_dir = options_.run_dir;
  result.final_step = counters_.step;
  result.preempted = preempted;
  if (preempted) {
    if (metrics_) metrics_->close();
    std::cerr << "[train] stop requested: saved step " << counters_.step << " in "
              << options_.run_dir << "; rerun the same command to resume\n";
    return result;
  }
  if (options_.export_at_end) {
    result.export_dir = options_.run_dir + "/export";
    export_trained_model(result.export_dir);
  }
  group_->barrier();  // rank 0's export is done (or its failure reaches every rank)
  report_memory();
  return result;
}

// What this rank holds: trainable state = parameters (slices when sharded) + fp32 masters and
// AdamW moments; frozen = the frozen models' weights (slices when sharded).
void TrainingRun::report_memory() const {
  int64_t trainable_bytes = optimizer_->state_bytes(), frozen_bytes = 0;
  for (const at::Tensor& parameter : objective_->trainable().parameters())
    if (!is_frozen(parameter)) trainable_bytes += held_bytes(parameter);
  for (const at::Tensor& weight : frozen_weights()) frozen_bytes += held_bytes(weight);
  char line[256];  // one write: ranks share the terminal or torchrun's pipe
  std::snprintf(line, sizeof line,
                "[train] rank %lld of %lld: peak RSS %.1f MiB, trainable state %.3f MiB, frozen "
                "weights %.3f MiB\n",
                static_cast<long long>(group_->rank()), static_cast<long long>(world()),
                peak_rss_mib(), mib(trainable_bytes), mib(frozen_bytes));
  std::cerr << line;
}

}  // namespace

void install_preemption_handlers() {
  std::signal(SIGTERM, request_stop);
  std::signal(SIGINT, request_stop);
}

TrainResult train(const Config& config, bool start_over) {
  TrainingRun run(config, start_over);
  run.set_up();
  run.resume();
  while (!run.done()) {
    const bool stop = run.step();
    run.checkpoint(stop);
    if (stop && !run.done()) return run.finish(/*preempted=*/true);
  }
  return run.finish(/*preempted=*/false);
}

}  // namespace tandem
