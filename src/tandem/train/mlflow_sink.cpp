#include "tandem/train/mlflow_sink.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tandem/core/error.h"
#include "tandem/core/file_io.h"
#include "tandem/core/json_file.h"

namespace tandem {

namespace {

namespace fs = std::filesystem;

constexpr const char* kComponent = "[mlflow]";
constexpr const char* kRunStateFile = "mlflow_run.json";

int64_t system_clock_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Who runs this, found as Python's getpass.getuser() finds it (MLflow's user_id).
std::string user_name() {
  for (const char* variable : {"LOGNAME", "USER", "LNAME", "USERNAME"})
    if (const char* value = std::getenv(variable); value && *value) return value;
  if (const passwd* entry = getpwuid(getuid()); entry && entry->pw_name) return entry->pw_name;
  return "unknown";
}

// `dir` absolute and normalised, without a trailing "/".
fs::path absolute_dir(const std::string& dir) {
  fs::path path = fs::absolute(dir).lexically_normal();
  if (!path.has_filename() && path != path.root_path()) path = path.parent_path();
  return path;
}

void make_directories(const fs::path& dir) {
  std::error_code error;
  fs::create_directories(dir, error);
  check(!error, kComponent, " ", dir.string(), ": cannot create the directory: ", error.message());
}

std::string without_trailing_slashes(std::string uri) {
  while (uri.size() > 1 && uri.back() == '/') uri.pop_back();
  return uri;
}

}  // namespace

MlflowSink::MlflowSink(MlflowOptions options) : options_(std::move(options)) {
  check(!options_.tracking_dir.empty(), kComponent, " no tracking directory (the mlruns/ root)");
  check(!options_.run_dir.empty(), kComponent, " no run directory (for ", kRunStateFile, ")");
  check(!options_.experiment.empty(), kComponent, " ", options_.tracking_dir,
        ": an experiment needs a name");
  const fs::path root = absolute_dir(options_.tracking_dir);
  const fs::path run_dir = absolute_dir(options_.run_dir);
  if (options_.run_name.empty()) options_.run_name = run_dir.filename().string();
  if (options_.user.empty()) options_.user = user_name();
  if (options_.artifact_root.empty()) options_.artifact_root = mlflow_file_uri(root.string());
  options_.artifact_root = without_trailing_slashes(options_.artifact_root);
  const int64_t now = now_ms();
  if (!fs::exists(root)) create_mlflow_store(root.string(), options_.artifact_root, now);
  check(fs::is_directory(root), kComponent, " ", root.string(), ": not a directory");
  make_directories(run_dir);

  const std::string state_path = (run_dir / kRunStateFile).string();
  if (!resume_run(root.string(), state_path, now)) create_run(root.string(), state_path, now);
  run_meta_.run_name = options_.run_name;
  run_meta_.status = kMlflowRunning;
  run_meta_.end_time = -1;
  write_mlflow_params(run_path_, options_.params);
  write_mlflow_tags(run_path_, {{"mlflow.runName", run_meta_.run_name},
                                {"mlflow.user", run_meta_.user_id},
                                {"mlflow.source.name", "tandem"},
                                {"mlflow.source.type", "LOCAL"}});
  write_run_meta();  // last: MLflow lists the run once its meta.yaml is there
}

bool MlflowSink::resume_run(const std::string& tracking_dir, const std::string& state_path,
                            int64_t now) {
  if (!fs::exists(state_path)) return false;
  const nlohmann::json state = read_json_file(state_path, "mlflow");
  const auto field = [&](const char* key) {
    check(state.is_object() && state.contains(key) && state[key].is_string() &&
              is_mlflow_id(state[key].get<std::string>()),
          kComponent, " ", state_path, ": no valid \"", key, "\"");
    return state[key].get<std::string>();
  };
  const std::string experiment_id = field("experiment_id");
  const std::string run_id = field("run_id");
  const fs::path run_path = fs::path(tracking_dir) / experiment_id / run_id;
  const std::string meta_path = (run_path / "meta.yaml").string();
  if (!fs::exists(meta_path)) return false;  // another store, or the run was removed: a new run
  run_meta_ = read_mlflow_run_meta(meta_path);
  check(run_meta_.run_id == run_id && run_meta_.experiment_id == experiment_id, kComponent, " ",
        meta_path, ": run_id or experiment_id differs from ", state_path);
  run_path_ = run_path.string();
  make_directories(run_path / "metrics");
  drop_mlflow_metric_lines((run_path / "metrics").string(), options_.resume_step);
  if (options_.resume_step == 0) run_meta_.start_time = now;  // a fresh start
  return true;
}

void MlflowSink::create_run(const std::string& tracking_dir, const std::string& state_path,
                            int64_t now) {
  const MlflowExperiment experiment = find_or_create_mlflow_experiment(
      tracking_dir, options_.experiment, options_.artifact_root, now);
  run_meta_ = MlflowRunMeta{};
  run_meta_.run_id = options_.run_id.empty() ? random_mlflow_run_id() : options_.run_id;
  check(is_mlflow_id(run_meta_.run_id), kComponent, " run id \"", run_meta_.run_id,
        "\": MLflow needs [a-zA-Z0-9][a-zA-Z0-9_-]*");
  run_meta_.experiment_id = experiment.id;
  run_meta_.user_id = options_.user;
  run_meta_.start_time = now;
  run_meta_.artifact_uri = without_trailing_slashes(experiment.artifact_location) + "/" +
                           run_meta_.run_id + "/artifacts";
  const fs::path run_path = fs::path(experiment.meta_path).parent_path() / run_meta_.run_id;
  std::error_code error;
  check(fs::create_directory(run_path, error), kComponent, " ", run_path.string(),
        error ? ": cannot create the directory: " + error.message() : ": already exists");
  for (const char* folder : {"metrics", "params", "artifacts", "tags"})
    make_directories(run_path / folder);
  run_path_ = run_path.string();
  nlohmann::ordered_json state;
  state["tracking_dir"] = tracking_dir;  // for people: the run is found by the ids below
  state["experiment_id"] = run_meta_.experiment_id;
  state["run_id"] = run_meta_.run_id;
  replace_file(state_path, state.dump(2) + "\n", kComponent);
}

int64_t MlflowSink::now_ms() const {
  return options_.clock_ms ? options_.clock_ms() : system_clock_ms();
}

void MlflowSink::write_run_meta() const {
  replace_file((fs::path(run_path_) / "meta.yaml").string(), format_mlflow_run_meta(run_meta_),
               kComponent);
}

MlflowSink::MetricFile& MlflowSink::open_metric_file(const std::string& name) {
  const fs::path metrics_dir = fs::path(run_path_) / "metrics";
  const std::string key = mlflow_metric_key(metrics_dir.string(), name);
  const auto [taken, inserted] = metric_names_.emplace(key, name);
  check(inserted, kComponent, " metrics \"", taken->second, "\" and \"", name,
        "\" both become the MLflow key \"", key, "\"");
  const fs::path path = metrics_dir / key;
  make_directories(path.parent_path());
  MetricFile& file = metric_files_[name];
  file.path = path.string();
  file.out.open(path, std::ios::binary | std::ios::app);  // made now: later keys see it
  check(file.out.is_open(), kComponent, " ", file.path, ": cannot open for appending");
  return file;
}

void MlflowSink::write(const MetricsRecord& record) {
  check(!closed_, kComponent, " ", run_path_, ": write() after close()");
  // Names new in this record are opened in sorted order, so that a group ("loss") takes its own
  // key before its parts ("loss/ce") logged beside it.
  std::vector<std::string> new_names;
  for (const auto& [name, value] : record.values)
    if (!metric_files_.count(name)) new_names.push_back(name);
  std::sort(new_names.begin(), new_names.end());
  for (const std::string& name : new_names) open_metric_file(name);

  const std::string timestamp = std::to_string(now_ms()) + " ";
  const std::string step = " " + std::to_string(record.step) + "\n";
  for (const auto& [name, value] : record.values) {
    MetricFile& file = metric_files_.at(name);
    const std::string line = timestamp + format_mlflow_metric_value(value) + step;
    file.out.write(line.data(), static_cast<std::streamsize>(line.size()));
    file.out.flush();
    check(file.out.good(), kComponent, " ", file.path, ": write failed");
  }
}

void MlflowSink::close() {
  if (closed_) return;
  closed_ = true;
  for (auto& [name, file] : metric_files_) file.out.close();
  run_meta_.status = std::uncaught_exceptions() > 0 ? kMlflowFailed : kMlflowFinished;
  run_meta_.end_time = now_ms();
  write_run_meta();
}

}  // namespace tandem
