// The MLflow file store (train/mlflow_store.h) and its sink: the layout and files, resuming into
// the same run, finding and making experiments, refusing malformed stores, keys and values as
// MLflow writes them, and a golden store (tests/fixtures/mlflow/) that MLflow's own client read
// back (tools/check_mlflow_store.py).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>

#include "tandem/core/error.h"
#include "tandem/train/metrics.h"
#include "tandem/train/mlflow_sink.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using tandem::MetricsRecord;
using tandem::MlflowOptions;
using tandem::MlflowSink;
using tandem::testing::error_of;
using tandem::testing::ScratchDir;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr const char* kRunId = "5f2b7c3a9d1e4f60a8b7c6d5e4f3a2b1";

std::string read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream content;
  content << file.rdbuf();
  return content.str();
}

void write_file(const std::string& path, const std::string& content) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << content;
}

// A clock that moves 250 ms at each reading, from 1700000000500 ms.
std::function<int64_t()> stepping_clock() {
  auto now = std::make_shared<int64_t>(1700000000500 - 250);
  return [now] { return *now += 250; };
}

// Options with everything fixed: the store under `dir`/mlruns, the run directory `dir`/run.
MlflowOptions fixed_options(const std::string& dir) {
  MlflowOptions options;
  options.tracking_dir = dir + "/mlruns";
  options.run_dir = dir + "/run";
  options.experiment = "tandem";
  options.run_name = "golden";
  options.clock_ms = stepping_clock();
  options.run_id = kRunId;
  options.user = "tandem-test";
  // A fixed artifact root keeps the golden store free of this machine's paths.
  options.artifact_root = "file:///fixture/mlruns";
  return options;
}

// The records behind the golden store: names with "/", an eval record at a step already logged,
// NaN, inf and -inf, a zero, a step past 2^31, values in fixed and scientific notation.
std::vector<MetricsRecord> golden_records() {
  return {{1,
           {{"loss", 2.5},
            {"loss/ce", 2.25},
            {"lr", 3e-4},
            {"grad_norm", 1.0},
            {"tokens_per_s", 12345.5},
            {"time/forward", 0.125}}},
          {2,
           {{"loss", 2.0},
            {"loss/ce", 1.75},
            {"lr", 0.0},
            {"grad_norm", kNaN},
            {"tokens_per_s", kInf},
            {"time/forward", 0.1}}},
          {2, {{"val/loss", 2.125}}},
          {3000000000,
           {{"loss", -1.5},
            {"loss/ce", 0.1},
            {"lr", 1e-5},
            {"grad_norm", 0.5},
            {"tokens_per_s", -kInf},
            {"time/forward", 1e16}}}};
}

constexpr const char* kGoldenConfig = R"(training:
  lr: 3e-4
  total_steps: 100
model:
  path: models/tiny llama
data:
  paths: [a.jsonl, b.jsonl]
  template: "{{ messages }}"
seed: ~
)";

// The golden records through a MetricsLogger into `dir`/mlruns and `dir`/metrics.jsonl.
void write_golden_store(const std::string& dir, const std::string& run_dir) {
  MlflowOptions options = fixed_options(dir);
  options.run_dir = run_dir;
  options.params = tandem::mlflow_params_from_yaml(kGoldenConfig, "golden config");
  std::vector<std::unique_ptr<tandem::MetricsSink>> sinks;
  sinks.push_back(std::make_unique<tandem::JsonlSink>(dir + "/metrics.jsonl", 0));
  sinks.push_back(std::make_unique<MlflowSink>(options));
  tandem::MetricsLogger logger(std::move(sinks));
  for (const auto& record : golden_records()) logger.log(record);
  logger.close();
}

// Files by path relative to `root` with their content, and every folder. A ".gitkeep" (what
// keeps an empty folder in git) stands for its folder only.
struct Tree {
  std::map<std::string, std::string> files;
  std::set<std::string> dirs;
};

Tree read_tree(const std::string& root) {
  Tree tree;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    const std::string relative = fs::relative(entry.path(), root).string();
    if (entry.is_directory())
      tree.dirs.insert(relative);
    else if (entry.path().filename() != ".gitkeep")
      tree.files[relative] = read_file(entry.path().string());
  }
  return tree;
}

std::string run_path(const std::string& dir, const std::string& experiment_id = "1") {
  return dir + "/mlruns/" + experiment_id + "/" + kRunId;
}

// --- layout ---

TEST(MlflowSink, WritesTheFileStoreLayout) {
  ScratchDir dir;
  MlflowOptions options = fixed_options(dir.path());
  options.params = {
      {"training.lr", "0.0003"}, {"data.template", "{{ x }}"}, {"long", std::string(7000, 'v')}};
  MlflowSink sink(options);
  EXPECT_EQ(sink.experiment_id(), "1");
  EXPECT_EQ(sink.run_id(), kRunId);
  const std::string run = run_path(dir.path());
  EXPECT_EQ(sink.run_path(), run);

  // A new store starts as MLflow starts one: .trash/ and the Default experiment 0.
  EXPECT_TRUE(fs::is_directory(dir / "mlruns/.trash"));
  EXPECT_EQ(read_file(dir / "mlruns/0/meta.yaml"),
            "artifact_location: \"file:///fixture/mlruns/0\"\n"
            "creation_time: 1700000000500\n"
            "experiment_id: \"0\"\n"
            "last_update_time: 1700000000500\n"
            "lifecycle_stage: active\n"
            "name: Default\n");
  EXPECT_EQ(read_file(dir / "mlruns/1/meta.yaml"),
            "artifact_location: \"file:///fixture/mlruns/1\"\n"
            "creation_time: 1700000000500\n"
            "experiment_id: \"1\"\n"
            "last_update_time: 1700000000500\n"
            "lifecycle_stage: active\n"
            "name: tandem\n");
  const std::string running_meta = read_file(run + "/meta.yaml");
  EXPECT_EQ(running_meta, "artifact_uri: \"file:///fixture/mlruns/1/" + std::string(kRunId) +
                              "/artifacts\"\n"
                              "end_time: null\n"
                              "entry_point_name: \"\"\n"
                              "experiment_id: \"1\"\n"
                              "lifecycle_stage: active\n"
                              "run_id: \"" +
                              kRunId +
                              "\"\n"
                              "run_name: golden\n"
                              "run_uuid: \"" +
                              kRunId +
                              "\"\n"
                              "source_name: \"\"\n"
                              "source_type: 4\n"
                              "source_version: \"\"\n"
                              "start_time: 1700000000500\n"
                              "status: 1\n"
                              "tags: []\n"
                              "user_id: tandem-test\n");
  for (const char* folder : {"metrics", "params", "artifacts", "tags"})
    EXPECT_TRUE(fs::is_directory(run + "/" + folder)) << folder;
  EXPECT_EQ(read_file(run + "/params/training.lr"), "0.0003");
  EXPECT_EQ(read_file(run + "/params/data.template"), "{{ x }}");
  EXPECT_EQ(read_file(run + "/params/long"), std::string(6000, 'v'));  // MLflow's limit
  EXPECT_EQ(read_file(run + "/tags/mlflow.runName"), "golden");
  EXPECT_EQ(read_file(run + "/tags/mlflow.user"), "tandem-test");
  EXPECT_EQ(read_file(run + "/tags/mlflow.source.name"), "tandem");
  EXPECT_EQ(read_file(run + "/tags/mlflow.source.type"), "LOCAL");
  EXPECT_EQ(read_file(dir / "run/mlflow_run.json"), "{\n  \"tracking_dir\": \"" + dir / "mlruns" +
                                                        "\",\n  \"experiment_id\": \"1\",\n" +
                                                        "  \"run_id\": \"" + kRunId + "\"\n}\n");

  sink.write({1, {{"loss", 2.5}, {"time/forward", 0.125}, {"grad_norm", kNaN}}});
  // Flushed per record: the lines are in the files before the next one.
  EXPECT_EQ(read_file(run + "/metrics/loss"), "1700000000750 2.5 1\n");
  sink.write({3000000000, {{"loss", -1.5}, {"time/forward", 1e16}, {"grad_norm", -kInf}}});
  EXPECT_EQ(read_file(run + "/metrics/loss"),
            "1700000000750 2.5 1\n1700000001000 -1.5 3000000000\n");
  EXPECT_EQ(read_file(run + "/metrics/time/forward"),  // "time/forward" in a subfolder
            "1700000000750 0.125 1\n1700000001000 1e+16 3000000000\n");
  EXPECT_EQ(read_file(run + "/metrics/grad_norm"),
            "1700000000750 nan 1\n1700000001000 -inf 3000000000\n");

  sink.close();
  const std::string finished_meta = read_file(run + "/meta.yaml");
  EXPECT_NE(finished_meta.find("end_time: 1700000001250\n"), std::string::npos) << finished_meta;
  EXPECT_NE(finished_meta.find("status: 3\n"), std::string::npos) << finished_meta;
  EXPECT_FALSE(fs::exists(run + "/meta.yaml.tmp"));
  sink.close();  // once only
  EXPECT_EQ(read_file(run + "/meta.yaml"), finished_meta);
  EXPECT_NE(error_of([&] {
              sink.write({4, {{"loss", 1}}});
            }).find("write() after close()"),
            std::string::npos);
}

// --- resume ---

TEST(MlflowSink, ResumeDropsLaterStepsAndKeepsTheRun) {
  ScratchDir dir;
  MlflowOptions options = fixed_options(dir.path());
  options.run_id = "";  // a random one, which the resumed attempt must find again
  std::string run_id;
  {
    MlflowSink sink(options);
    run_id = sink.run_id();
    EXPECT_EQ(run_id.size(), 32u);
    for (int64_t step = 1; step <= 6; ++step) sink.write({step, {{"loss", 1.0 / step}}});
    sink.write({5, {{"val/loss", 0.5}}});  // only at a step that the resume drops
    // Killed: never closed.
  }
  const std::string run = dir / ("mlruns/1/" + run_id);
  EXPECT_NE(read_file(run + "/meta.yaml").find("status: 1\n"), std::string::npos);
  EXPECT_NE(read_file(run + "/meta.yaml").find("end_time: null\n"), std::string::npos);
  std::ofstream(run + "/metrics/loss", std::ios::app) << "1700000009999 0.1";  // torn line
  write_file(run + "/metrics/loss.tmp", "left by a crash during a rewrite");

  options.resume_step = 4;
  options.clock_ms = [] { return int64_t{1800000000000}; };
  {
    MlflowSink sink(options);
    EXPECT_EQ(sink.run_id(), run_id);
    EXPECT_EQ(read_file(run + "/metrics/loss"),
              "1700000000750 1.0 1\n1700000001000 0.5 2\n1700000001250 0.3333333333333333 3\n");
    EXPECT_FALSE(fs::exists(run + "/metrics/val/loss"));  // emptied: removed, as MLflow needs
    EXPECT_FALSE(fs::exists(run + "/metrics/loss.tmp"));
    sink.write({4, {{"loss", 0.25}}});
    sink.close();
  }
  EXPECT_EQ(read_file(run + "/metrics/loss"),
            "1700000000750 1.0 1\n1700000001000 0.5 2\n1700000001250 0.3333333333333333 3\n"
            "1800000000000 0.25 4\n");
  const std::string meta = read_file(run + "/meta.yaml");
  EXPECT_NE(meta.find("start_time: 1700000000500\n"), std::string::npos) << meta;  // kept
  EXPECT_NE(meta.find("status: 3\n"), std::string::npos) << meta;
  // One experiment, one run.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir / "mlruns/1"), fs::directory_iterator()), 2);

  // A fresh start (resume step 0) in the same run directory empties the same run.
  options.resume_step = 0;
  { MlflowSink sink(options); }
  EXPECT_FALSE(fs::exists(run + "/metrics/loss"));
  EXPECT_NE(read_file(run + "/meta.yaml").find("start_time: 1800000000000\n"), std::string::npos);

  // A store that lost the run: a new run, recorded in mlflow_run.json.
  fs::remove_all(run);
  options.run_id = kRunId;
  MlflowSink sink(options);
  EXPECT_EQ(sink.run_id(), kRunId);
  EXPECT_NE(read_file(dir / "run/mlflow_run.json").find(kRunId), std::string::npos);
}

TEST(MlflowSink, MalformedMetricLineIsRefusedNamingFileAndLine) {
  ScratchDir dir;
  MlflowOptions options = fixed_options(dir.path());
  { MlflowSink sink(options); }
  write_file(run_path(dir.path()) + "/metrics/loss", "1 2.5 1\n1 2.5 x\n");
  options.resume_step = 2;
  EXPECT_NE(error_of([&] {
              MlflowSink sink(options);
            }).find("[mlflow] " + run_path(dir.path()) + "/metrics/loss:2: the step is not an"),
            std::string::npos);
}

TEST(MlflowSink, ClosedWhileAnExceptionUnwindsIsFailed) {
  // Training that throws: MetricsLogger's destructor closes the sinks while the exception unwinds.
  ScratchDir dir;
  try {
    std::vector<std::unique_ptr<tandem::MetricsSink>> sinks;
    sinks.push_back(std::make_unique<MlflowSink>(fixed_options(dir.path())));
    tandem::MetricsLogger logger(std::move(sinks));
    logger.log({1, {{"loss", 2.5}}});
    throw std::runtime_error("training failed");
  } catch (const std::runtime_error&) {
  }
  const std::string meta = read_file(run_path(dir.path()) + "/meta.yaml");
  EXPECT_NE(meta.find("status: 4\n"), std::string::npos) << meta;
  EXPECT_NE(meta.find("end_time: 1700000001000\n"), std::string::npos) << meta;
}

// --- experiments ---

TEST(MlflowSink, TwoRunsShareAnExperiment) {
  ScratchDir dir;
  MlflowOptions first = fixed_options(dir.path());
  MlflowOptions second = fixed_options(dir.path());
  second.run_dir = dir / "run2";
  second.run_id = "";
  MlflowSink first_sink(first);
  MlflowSink second_sink(second);
  EXPECT_EQ(first_sink.experiment_id(), "1");
  EXPECT_EQ(second_sink.experiment_id(), "1");
  EXPECT_NE(first_sink.run_id(), second_sink.run_id());
  EXPECT_TRUE(fs::exists(dir / ("mlruns/1/" + second_sink.run_id() + "/meta.yaml")));
  EXPECT_NE(read_file(dir / "run2/mlflow_run.json").find(second_sink.run_id()), std::string::npos);
  std::set<std::string> experiments;
  for (const auto& entry : fs::directory_iterator(dir / "mlruns"))
    experiments.insert(entry.path().filename().string());
  EXPECT_EQ(experiments, (std::set<std::string>{".trash", "0", "1"}));
}

// Experiments as MLflow writes them (single-quoted ids, its newer fields).
void write_mlflow_experiment(const std::string& dir, const std::string& id, const std::string& name,
                             const std::string& stage = "active") {
  write_file(dir + "/meta.yaml", "artifact_location: file:///elsewhere/mlruns/" + id +
                                     "\ncreation_time: 1\neffective_trace_archival_retention: "
                                     "null\nexperiment_id: '" +
                                     id + "'\nlast_update_time: 1\nlifecycle_stage: " + stage +
                                     "\nname: " + name +
                                     "\ntrace_location: null\nworkspace: "
                                     "default\n");
}

TEST(MlflowSink, FindsAnExperimentByNameAndNumbersNewOnesAfterTheLast) {
  ScratchDir dir;
  write_mlflow_experiment(dir / "mlruns/0", "0", "Default");
  write_mlflow_experiment(dir / "mlruns/7", "7", "other");
  write_mlflow_experiment(dir / "mlruns/12", "12", "tandem");
  write_mlflow_experiment(dir / "mlruns/.trash/30", "30", "old", "deleted");
  fs::create_directories(dir / "mlruns/models");   // the model registry
  fs::create_directories(dir / "mlruns/scratch");  // no meta.yaml: no experiment
  MlflowOptions options = fixed_options(dir.path());
  options.artifact_root = "";
  {
    MlflowSink sink(options);
    EXPECT_EQ(sink.experiment_id(), "12");
    // The run's artifacts go where the experiment's artifact_location says.
    EXPECT_NE(read_file(sink.run_path() + "/meta.yaml")
                  .find("artifact_uri: \"file:///elsewhere/mlruns/12/" + std::string(kRunId) +
                        "/artifacts\""),
              std::string::npos);
  }
  options.experiment = "new";
  options.run_dir = dir / "run-new";
  options.run_id = "";
  {
    MlflowSink sink(options);
    EXPECT_EQ(sink.experiment_id(), "31");  // after the deleted 30 too
    // No artifact_root given: the file URI of the store.
    EXPECT_NE(read_file(dir / "mlruns/31/meta.yaml")
                  .find("artifact_location: \"file://" + dir / "mlruns/31\""),
              std::string::npos);
  }
  options.experiment = "old";
  options.run_dir = dir / "run-old";
  EXPECT_NE(
      error_of([&] {
        MlflowSink sink(options);
      }).find("[mlflow] " + dir / "mlruns/.trash/30/meta.yaml" + ": experiment \"old\" is deleted"),
      std::string::npos);
}

TEST(MlflowSink, MalformedExperimentMetaIsRefusedNamingTheFile) {
  ScratchDir dir;
  write_mlflow_experiment(dir / "mlruns/0", "0", "Default");
  const std::string meta = dir / "mlruns/3/meta.yaml";
  const auto refusal = [&] {
    return error_of([&] { MlflowSink sink(fixed_options(dir.path())); });
  };

  write_file(meta, "name: [unclosed\n");
  EXPECT_NE(refusal().find("[mlflow] " + meta + ": malformed meta.yaml"), std::string::npos)
      << refusal();
  write_file(meta, "experiment_id: '3'\nartifact_location: x\n");
  EXPECT_NE(refusal().find("[mlflow] " + meta + ": malformed meta.yaml: no \"name\""),
            std::string::npos)
      << refusal();
  write_file(meta, "- a list\n");
  EXPECT_NE(refusal().find(meta + ": malformed meta.yaml: not a mapping"), std::string::npos)
      << refusal();
  write_mlflow_experiment(dir / "mlruns/3", "4", "x");
  EXPECT_NE(refusal().find(meta + ": malformed meta.yaml: experiment_id '4' differs from its "
                                  "folder '3'"),
            std::string::npos)
      << refusal();
  EXPECT_FALSE(fs::exists(dir / "run/mlflow_run.json"));  // nothing made
}

// --- keys, values, params ---

TEST(MlflowKeys, SanitisedOrRefused) {
  EXPECT_EQ(tandem::mlflow_key("time/forward", "metric"), "time/forward");
  EXPECT_EQ(tandem::mlflow_key("eval/acc: top-1 .5", "metric"), "eval/acc: top-1 .5");
  EXPECT_EQ(tandem::mlflow_key("accept@k[2]", "metric"), "accept_k_2_");
  EXPECT_EQ(tandem::mlflow_key("caf\xc3\xa9", "param"), "caf__");
  for (const char* bad : {"", "/loss", "loss/", "a//b", "./a", "a/./b", "a/../b", "..", "..a"})
    EXPECT_NE(error_of([&] { tandem::mlflow_key(bad, "metric"); }).find("[mlflow] metric \""),
              std::string::npos)
        << bad;
  EXPECT_EQ(tandem::mlflow_key(std::string(250, 'k'), "param").size(), 250u);
  EXPECT_NE(
      error_of([] { tandem::mlflow_key(std::string(251, 'k'), "param"); }).find("longer than 250"),
      std::string::npos);
}

TEST(MlflowSink, MetricNamesMeetingAtOneKeyAreRefused) {
  ScratchDir dir;
  MlflowSink sink(fixed_options(dir.path()));
  sink.write({1, {{"acc@1", 0.5}}});
  EXPECT_NE(error_of([&] {
              sink.write({2, {{"acc#1", 0.5}}});
            }).find("metrics \"acc@1\" and \"acc#1\" both become the MLflow key \"acc_1\""),
            std::string::npos);
}

TEST(MlflowSink, GroupAndPartNamesGetKeysMlflowCanHold) {
  // MLflow keeps "a/b" in metrics/a/b: "loss" and "loss/ce" cannot both keep their names.
  ScratchDir dir;
  MlflowOptions options = fixed_options(dir.path());
  const std::string metrics = run_path(dir.path()) + "/metrics/";
  {
    MlflowSink sink(options);
    sink.write({1, {{"loss/ce", 1.5}, {"loss", 2.0}, {"eval/acc", 0.5}, {"time/forward", 0.1}}});
    sink.write({2, {{"eval", 0.25}, {"loss/aux", 0.5}}});
  }
  EXPECT_EQ(read_file(metrics + "loss"), "1700000000750 2.0 1\n");  // the group keeps its name
  EXPECT_EQ(read_file(metrics + "loss.ce"), "1700000000750 1.5 1\n");
  EXPECT_EQ(read_file(metrics + "loss.aux"), "1700000001000 0.5 2\n");
  EXPECT_EQ(read_file(metrics + "eval/acc"), "1700000000750 0.5 1\n");
  EXPECT_EQ(read_file(metrics + "eval.value"), "1700000001000 0.25 2\n");  // after its part
  EXPECT_EQ(read_file(metrics + "time/forward"), "1700000000750 0.1 1\n");

  // A resumed attempt (the clock goes on) finds the same keys in the files.
  options.resume_step = 2;
  {
    MlflowSink sink(options);
    sink.write({2, {{"loss/aux", 0.75}, {"eval", 0.5}, {"loss/ce", 1.25}}});
  }
  EXPECT_EQ(read_file(metrics + "loss.aux"), "1700000001500 0.75 2\n");
  EXPECT_EQ(read_file(metrics + "eval.value"), "1700000001500 0.5 2\n");
  EXPECT_EQ(read_file(metrics + "loss.ce"), "1700000000750 1.5 1\n1700000001500 1.25 2\n");
  EXPECT_FALSE(fs::exists(metrics + "loss/aux"));
}

TEST(MlflowMetricValue, FormatsLikePythonRepr) {
  // Left: the value; right: Python's repr() of it (which MLflow writes).
  const std::pair<double, const char*> cases[] = {
      {0.0, "0.0"},
      {-0.0, "-0.0"},
      {1.0, "1.0"},
      {2.5, "2.5"},
      {3e-4, "0.0003"},
      {1e-4, "0.0001"},
      {1e-5, "1e-05"},
      {1.5e-5, "1.5e-05"},
      {0.1 + 0.2, "0.30000000000000004"},
      {12345.5, "12345.5"},
      {3e9, "3000000000.0"},
      {1e15, "1000000000000000.0"},
      {1e16, "1e+16"},
      {1.5e16, "1.5e+16"},
      {123456789012345680.0, "1.2345678901234568e+17"},
      {-1.5, "-1.5"},
      {1e100, "1e+100"},
      {5e-324, "5e-324"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
      {9.5367431640625e-07, "9.5367431640625e-07"},
      {100.0, "100.0"},
      {kNaN, "nan"},
      {kInf, "inf"},
      {-kInf, "-inf"}};
  for (const auto& [value, repr] : cases)
    EXPECT_EQ(tandem::format_mlflow_metric_value(value), repr) << repr;
}

TEST(MlflowParams, FlattensYamlToDottedKeys) {
  const auto params = tandem::mlflow_params_from_yaml(kGoldenConfig, "config.yaml");
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"training.lr", "3e-4"},
      {"training.total_steps", "100"},
      {"model.path", "models/tiny llama"},
      {"data.paths", "[a.jsonl, b.jsonl]"},
      {"data.template", "{{ messages }}"},
      {"seed", "null"}};
  EXPECT_EQ(params, expected);
  EXPECT_TRUE(tandem::mlflow_params_from_yaml("", "empty").empty());
  EXPECT_NE(error_of([] {
              tandem::mlflow_params_from_yaml("[1, 2]", "list.yaml");
            }).find("[mlflow] list.yaml: not a mapping"),
            std::string::npos);
}

// --- the golden store ---

// The golden store is written by the code under test, so no test rewrites it: this one does,
// only when asked by name (scripts/update_goldens.sh), and the diff then goes to review with
// MLflow's read-back of tests/fixtures/mlflow/README.md.
TEST(Goldens, DISABLED_RewriteMlflowGoldens) {
  const std::string fixture = tandem::testing::source_path("tests/fixtures/mlflow");
  fs::remove_all(fixture + "/mlruns");
  fs::remove(fixture + "/metrics.jsonl");
  fs::create_directories(fixture);
  ScratchDir run_dir;
  write_golden_store(fixture, run_dir.path());
  // Git keeps no empty folder, and MLflow needs artifacts/ (and makes .trash/ when missing).
  std::vector<fs::path> empty;
  for (const auto& entry : fs::recursive_directory_iterator(fixture + "/mlruns"))
    if (entry.is_directory() && fs::is_empty(entry.path())) empty.push_back(entry.path());
  for (const fs::path& folder : empty) write_file((folder / ".gitkeep").string(), "");
}

TEST(MlflowSink, WriterReproducesGoldenStore) {
  ScratchDir dir;
  write_golden_store(dir.path(), dir / "run");
  const std::string fixture = tandem::testing::source_path("tests/fixtures/mlflow");
  EXPECT_EQ(read_file(dir / "metrics.jsonl"), read_file(fixture + "/metrics.jsonl"));
  const Tree written = read_tree(dir / "mlruns");
  const Tree golden = read_tree(fixture + "/mlruns");
  EXPECT_EQ(written.dirs, golden.dirs);
  for (const auto& [path, content] : golden.files) {
    const auto found = written.files.find(path);
    ASSERT_NE(found, written.files.end()) << path << " not written";
    EXPECT_EQ(found->second, content) << path << " differs from " << fixture;
  }
  for (const auto& [path, content] : written.files)
    EXPECT_TRUE(golden.files.count(path)) << path << " is not in " << fixture;
}

}  // namespace
