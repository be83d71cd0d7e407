#pragma once
// Training metrics into an MLflow file store (train/mlflow_store.h has its layout), so that
// `mlflow ui --backend-store-uri RUN_DIR/mlruns`, or a shared mlruns/, shows tandem's runs.
// MLflow 3 opens a file store only with MLFLOW_ALLOW_FILE_STORE=true in its environment.
//
// One tandem run directory is one MLflow run: its id is kept in RUN_DIR/mlflow_run.json, so an
// attempt resumed from a checkpoint logs into the same run, and what an earlier attempt logged at
// steps >= resume_step is dropped first, as metrics.jsonl drops it (train/metrics.h); a fresh
// start (resume_step 0) empties the run. The experiment is found by name, or made.
//
// Names: a metric "time/forward" is the key "time/forward" (MLflow groups charts by the part
// before "/"); beside a metric "loss", "loss/ce" is the key "loss.ce" (mlflow_metric_key()).
// Values: as Python's repr() writes them, NaN and infinities included (nan, inf, -inf).
//
// Status: RUNNING from the start; close() sets FINISHED, or FAILED when it runs while an
// exception unwinds (MetricsLogger's destructor, when training throws). A run that never closes
// (a crash, a kill) stays RUNNING, which is what MLflow shows for one.
#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tandem/train/metrics.h"
#include "tandem/train/mlflow_store.h"

namespace tandem {

struct MlflowOptions {
  std::string tracking_dir;  // the mlruns/ root; made (as MLflow makes one) if absent
  std::string experiment = "Default";
  std::string run_name;     // empty: the run directory's folder name
  std::string run_dir;      // tandem's run directory: mlflow_run.json goes here
  int64_t resume_step = 0;  // as MetricsOptions::resume_step
  std::vector<std::pair<std::string, std::string>> params;  // e.g. mlflow_params_from_yaml()
  // Fixed in tests (the golden store); unset or empty means the real thing.
  std::function<int64_t()> clock_ms;  // ms since the epoch; unset = the system clock
  std::string run_id;                 // a new run's id; empty = a random UUID4 in hex
  std::string user;                   // empty = $LOGNAME, $USER, ... as Python's getpass
  std::string artifact_root;          // a new experiment's artifacts go under <artifact_root>/<id>;
                                      // empty = the file:// URI of the absolute tracking_dir
};

/// Appends each record's values to the run's metric files, flushed per record.
class MlflowSink : public MetricsSink {
 public:
  /// Opens (or makes) the store, the experiment and the run, drops what an earlier attempt logged
  /// at steps >= resume_step, and writes params and tags. Errors: Error("[mlflow] <path>: ...").
  explicit MlflowSink(MlflowOptions options);

  void write(const MetricsRecord& record) override;
  /// end_time and status FINISHED (FAILED while an exception unwinds) in the run's meta.yaml.
  void close() override;

  const std::string& experiment_id() const { return run_meta_.experiment_id; }
  const std::string& run_id() const { return run_meta_.run_id; }
  /// tracking_dir/<experiment_id>/<run_id>
  const std::string& run_path() const { return run_path_; }

 private:
  struct MetricFile {
    std::string path;
    std::ofstream out;
  };

  int64_t now_ms() const;
  /// The run of mlflow_run.json when the store still has it, emptied from resume_step on.
  bool resume_run(const std::string& tracking_dir, const std::string& state_path, int64_t now);
  void create_run(const std::string& tracking_dir, const std::string& state_path, int64_t now);
  MetricFile& open_metric_file(const std::string& name);
  void write_run_meta() const;

  MlflowOptions options_;
  MlflowRunMeta run_meta_;
  std::string run_path_;
  std::map<std::string, MetricFile> metric_files_;   // by tandem's name
  std::map<std::string, std::string> metric_names_;  // MLflow key -> tandem's name
  bool closed_ = false;
};

}  // namespace tandem
