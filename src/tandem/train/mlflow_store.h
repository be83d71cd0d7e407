#pragma once
// MLflow's *file store* (an `mlruns/` directory), read and written from the format with no MLflow
// library; train/mlflow_sink.h logs training metrics through it. The layout, as
// mlflow/store/tracking/file_store.py keeps it:
//
//   mlruns/
//     .trash/                     deleted experiments (MLflow makes it with a new store)
//     0/meta.yaml                 the experiment "Default" (MLflow makes it with a new store)
//     <experiment_id>/meta.yaml   experiment_id, name, artifact_location, lifecycle_stage
//                                 ("active" or "deleted"), creation_time, last_update_time
//     <experiment_id>/<run_id>/
//       meta.yaml                 run_id (and run_uuid, the same id, as MLflow 2 writes it),
//                                 experiment_id, run_name, user_id, status (RUNNING 1,
//                                 FINISHED 3, FAILED 4, KILLED 5), start_time, end_time (null
//                                 while running), artifact_uri, lifecycle_stage, and the empty
//                                 source fields MLflow itself still writes
//       metrics/<key>             one line per logged value: "<timestamp_ms> <value> <step>",
//                                 the value as Python's repr(float) writes it (nan, inf, -inf)
//       params/<key>              the value, no newline
//       tags/<key>                the value (mlflow.runName, mlflow.user, mlflow.source.name, ...)
//       artifacts/                MLflow skips a run folder without metrics/, params/, artifacts/
//
// Times are ms since the epoch; ids are folder names (experiments: integers, random ones when
// MLflow makes them; runs: 32 hex digits). A key "a/b" is the file a/b under its folder, so a
// run cannot hold both a metric "loss" and a metric "loss/ce" (MLflow's own client fails there
// with NotADirectoryError): mlflow_metric_key() picks a key that fits.
//
// Keys (mlflow/utils/validation.py): letters, digits and "_-. /:" only; a path that normalises to
// itself (no empty, "." or ".." part, no leading "/"); at most 250 characters. Param values: at
// most 6000 characters (MLflow truncates longer ones by default, and so does this).
//
// Errors: Error("[mlflow] <path>: <what is wrong>").
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem {

/// `name` as MLflow accepts a metric, param or tag key: bytes outside letters, digits and
/// "_-. /:" become "_". Throws Error("[mlflow] <what> \"<name>\": ...") when the result is not a
/// clean relative path or is longer than 250 characters.
std::string mlflow_key(std::string_view name, std::string_view what);

/// A double as Python's repr() writes it, which is what MLflow writes in a metric line: the
/// shortest digits that round-trip; fixed notation for exponents -5 < e < 16, with ".0" when
/// integral; else "1e-05", "1.5e+16"; "nan", "inf", "-inf".
std::string format_mlflow_metric_value(double value);

/// A YAML config flattened to params: nested mappings give dotted keys ("training.lr"), scalars
/// their text, null "null", sequences their flow YAML ("[1, 2]"). `source` names it in errors.
std::vector<std::pair<std::string, std::string>> mlflow_params_from_yaml(const std::string& yaml,
                                                                         const std::string& source);

/// MLflow's id pattern, [a-zA-Z0-9][a-zA-Z0-9_-]{0,255}: also what keeps an id from reaching
/// outside the store when it becomes a folder name.
bool is_mlflow_id(std::string_view id);

/// A random UUID4 in 32 hex digits, as MLflow names runs.
std::string random_mlflow_run_id();

/// The file:// URI of an absolute path, percent-encoded as Python's Path.as_uri() does.
std::string mlflow_file_uri(const std::string& absolute_path);

struct MlflowExperiment {
  std::string id;
  std::string name;
  std::string artifact_location;
  bool deleted = false;   // in .trash/ or lifecycle_stage "deleted"
  std::string meta_path;  // its meta.yaml
};

/// Makes `tracking_dir` as MLflow makes a store: .trash/ and the "Default" experiment 0, its
/// artifacts under `artifact_root`/0.
void create_mlflow_store(const std::string& tracking_dir, const std::string& artifact_root,
                         int64_t time_ms);

/// Every experiment of the store, active and deleted, in path order. Like MLflow, a folder with
/// no meta.yaml is no experiment; unlike MLflow (which logs and skips it), a meta.yaml that is
/// not an experiment's (not YAML, no name or id, an id that is not its folder's) is an Error
/// naming the file, so that a name is never missed.
std::vector<MlflowExperiment> list_mlflow_experiments(const std::string& tracking_dir);

/// The active experiment `name`, or a new one under the next integer id after every integer id in
/// use (deleted experiments' too), its artifacts under `artifact_root`/<id>. A deleted experiment
/// of that name is an Error (restore it, or pick another name), as in MLflow.
MlflowExperiment find_or_create_mlflow_experiment(const std::string& tracking_dir,
                                                  const std::string& name,
                                                  const std::string& artifact_root,
                                                  int64_t time_ms);

/// The fields of a run's meta.yaml.
struct MlflowRunMeta {
  std::string run_id;
  std::string experiment_id;
  std::string run_name;
  std::string user_id;
  std::string artifact_uri;
  std::string lifecycle_stage = "active";
  int64_t start_time = 0;
  int64_t end_time = -1;  // -1 while running (null in the file)
  int status = 1;         // RUNNING 1, FINISHED 3, FAILED 4, KILLED 5
};

inline constexpr int kMlflowRunning = 1;
inline constexpr int kMlflowFinished = 3;
inline constexpr int kMlflowFailed = 4;

/// meta.yaml text, keys sorted as MLflow writes them.
std::string format_mlflow_run_meta(const MlflowRunMeta& run);
MlflowRunMeta read_mlflow_run_meta(const std::string& path);

/// Writes each param to params/<key> (key through mlflow_key, value cut to 6000 characters); two
/// params meeting at one key are an Error.
void write_mlflow_params(const std::string& run_path,
                         const std::vector<std::pair<std::string, std::string>>& params);
void write_mlflow_tags(const std::string& run_path,
                       const std::vector<std::pair<std::string, std::string>>& tags);

/// The key under `metrics_dir` for a metric `name` not logged yet: mlflow_key(name), unless the
/// files there rule it out (it is a folder, or a folder on its path is a metric file); then the
/// parts' "/" become "." ("loss/ce" beside a metric "loss" is "loss.ce"), and a group logged
/// after its parts gets ".value" ("eval" beside "eval/acc" is "eval.value"). The files decide, so
/// a resumed run finds the keys its earlier attempt chose.
std::string mlflow_metric_key(const std::string& metrics_dir, const std::string& name);

/// Drops the lines at steps >= `resume_step` from every metric file under `metrics_dir`, and a
/// torn last line (no newline) that a killed run can leave. A file is rewritten to a temp file
/// renamed over it, or removed when nothing is left (MLflow refuses an empty metric file); a temp
/// file that a crash left beside its metric file is removed (MLflow would read it as a metric).
/// A line that is not "<timestamp> <value> [<step>]" is an Error naming path:line.
void drop_mlflow_metric_lines(const std::string& metrics_dir, int64_t resume_step);

}  // namespace tandem
