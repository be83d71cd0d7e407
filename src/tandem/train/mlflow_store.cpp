#include "tandem/train/mlflow_store.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "tandem/core/error.h"
#include "tandem/core/file_io.h"

namespace tandem {

namespace {

namespace fs = std::filesystem;

constexpr const char* kComponent = "[mlflow]";
constexpr size_t kMaxKeyLength = 250;          // MLflow's MAX_ENTITY_KEY_LENGTH
constexpr size_t kMaxParamValueLength = 6000;  // MLflow's MAX_PARAM_VAL_LENGTH, in characters
constexpr int kSourceTypeLocal = 4;            // mlflow.entities.SourceType.LOCAL
constexpr const char* kMetaFile = "meta.yaml";
constexpr const char* kTrashDir = ".trash";
constexpr const char* kModelsDir = "models";  // MLflow's model registry, not an experiment
constexpr const char* kDefaultExperimentId = "0";

bool is_ascii_alnum(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// A YAML scalar for `text`: plain when nothing could read it as another type, else a JSON string
// (a valid YAML double-quoted scalar).
std::string yaml_string(std::string_view text) {
  bool plain = !text.empty() &&
               (std::isalpha(static_cast<unsigned char>(text[0])) || text[0] == '_') &&
               text.back() != ' ';
  for (char c : text)
    plain =
        plain && (is_ascii_alnum(c) || c == '_' || c == '-' || c == '.' || c == '/' || c == ' ');
  if (plain) {  // YAML 1.1 booleans and null
    std::string lower(text);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    for (const char* word : {"y", "n", "yes", "no", "true", "false", "on", "off", "null"})
      plain = plain && lower != word;
  }
  if (plain) return std::string(text);
  return nlohmann::json(std::string(text))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void make_directories(const fs::path& dir) {
  std::error_code error;
  fs::create_directories(dir, error);
  check(!error, kComponent, " ", dir.string(), ": cannot create the directory: ", error.message());
}

std::string read_text_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  check(in.is_open(), kComponent, " ", path.string(), ": cannot open for reading");
  std::ostringstream content;
  content << in.rdbuf();
  check(!in.bad(), kComponent, " ", path.string(), ": read failed");
  return content.str();
}

// Params and tags: small files, written once per run attempt.
void write_text_file(const fs::path& path, std::string_view content) {
  make_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  out.close();
  check(out.good(), kComponent, " ", path.string(), ": write failed");
}

// The first `max_characters` UTF-8 characters of `text` (MLflow counts Python characters).
std::string truncate_characters(const std::string& text, size_t max_characters) {
  size_t characters = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) continue;  // continuation byte
    if (characters++ == max_characters) return text.substr(0, i);
  }
  return text;
}

bool parse_int64(std::string_view text, int64_t& value) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size();
}

// ---- meta.yaml ----

YAML::Node read_meta_yaml(const fs::path& path) {
  YAML::Node meta;
  try {
    meta = YAML::Load(read_text_file(path));
  } catch (const YAML::Exception& error) {
    throw Error(kComponent, " ", path.string(), ": malformed meta.yaml: ", error.what());
  }
  check(meta.IsMap(), kComponent, " ", path.string(), ": malformed meta.yaml: not a mapping");
  return meta;
}

std::string meta_string(const YAML::Node& meta, const char* key, const fs::path& path) {
  const YAML::Node value = meta[key];
  check(value && value.IsScalar(), kComponent, " ", path.string(), ": malformed meta.yaml: no \"",
        key, "\"");
  return value.Scalar();
}

int64_t meta_int(const YAML::Node& meta, const char* key, const fs::path& path) {
  const std::string text = meta_string(meta, key, path);
  int64_t value = 0;
  check(parse_int64(text, value), kComponent, " ", path.string(), ": malformed meta.yaml: \"", key,
        "\" is not an integer: ", text);
  return value;
}

// An experiment's meta.yaml, keys sorted as MLflow writes them.
std::string format_experiment_meta(const std::string& id, const std::string& name,
                                   const std::string& artifact_location, int64_t time_ms) {
  std::string meta;
  meta += "artifact_location: " + yaml_string(artifact_location) + "\n";
  meta += "creation_time: " + std::to_string(time_ms) + "\n";
  meta += "experiment_id: " + yaml_string(id) + "\n";
  meta += "last_update_time: " + std::to_string(time_ms) + "\n";
  meta += "lifecycle_stage: active\n";
  meta += "name: " + yaml_string(name) + "\n";
  return meta;
}

// ---- experiments ----

// A new experiment `name` under the first free id from `first_id`. The folder is made first
// (mkdir is atomic: two processes never take the same id), its meta.yaml written whole by a
// rename, so a reader never sees half of one.
MlflowExperiment create_experiment(const fs::path& root, const std::string& name, int64_t first_id,
                                   const std::string& artifact_root, int64_t time_ms) {
  for (int64_t id = first_id;; ++id) {
    const fs::path dir = root / std::to_string(id);
    std::error_code error;
    if (!fs::create_directory(dir, error)) {
      check(!error, kComponent, " ", dir.string(),
            ": cannot create the directory: ", error.message());
      continue;  // taken meanwhile
    }
    MlflowExperiment experiment{std::to_string(id), name, artifact_root + "/" + std::to_string(id),
                                false, (dir / kMetaFile).string()};
    replace_file(experiment.meta_path,
                 format_experiment_meta(experiment.id, name, experiment.artifact_location, time_ms),
                 kComponent);
    return experiment;
  }
}

// ---- metric files ----

// The step of one metric line, "<timestamp> <value> [<step> [<dataset> <digest>]]" (MLflow reads
// step 0 when it is absent).
int64_t metric_line_step(std::string_view line, const std::string& where) {
  std::vector<std::string_view> fields;
  for (size_t begin = 0; begin <= line.size();) {
    const size_t end = std::min(line.find(' ', begin), line.size());
    fields.push_back(line.substr(begin, end - begin));
    begin = end + 1;
  }
  check(fields.size() == 2 || fields.size() == 3 || fields.size() == 5, kComponent, " ", where,
        ": not a metric line \"<timestamp> <value> <step>\": ", line);
  int64_t step = 0;
  check(fields.size() == 2 || parse_int64(fields[2], step), kComponent, " ", where,
        ": the step is not an integer: ", line);
  return step;
}

// Whether `key` cannot be a metric file under `metrics_dir`: it is a folder, or a folder on its
// path is a metric file.
bool metric_key_conflicts(const fs::path& metrics_dir, const std::string& key) {
  if (fs::is_directory(metrics_dir / key)) return true;
  for (size_t slash = key.find('/'); slash != std::string::npos; slash = key.find('/', slash + 1))
    if (fs::is_regular_file(metrics_dir / key.substr(0, slash))) return true;
  return false;
}

void flatten_yaml(const YAML::Node& node, const std::string& key, const std::string& source,
                  std::vector<std::pair<std::string, std::string>>& params) {
  if (node.IsMap()) {
    for (const auto& entry : node) {
      check(entry.first.IsScalar(), kComponent, " ", source, ": a key under \"", key,
            "\" is not a scalar");
      const std::string name = entry.first.Scalar();
      flatten_yaml(entry.second, key.empty() ? name : key + "." + name, source, params);
    }
  } else if (node.IsNull()) {
    params.emplace_back(key, "null");
  } else if (node.IsScalar()) {
    params.emplace_back(key, node.Scalar());
  } else {
    YAML::Emitter flow;
    flow << YAML::Flow << node;
    params.emplace_back(key, flow.c_str());
  }
}

}  // namespace

// ---- keys and values ----

std::string mlflow_key(std::string_view name, std::string_view what) {
  std::string key(name);
  for (char& c : key)
    if (!is_ascii_alnum(c) && c != '_' && c != '-' && c != '.' && c != ' ' && c != '/' && c != ':')
      c = '_';
  // MLflow's test: posixpath.normpath(key) == key, and not ".", "..*" or "/*".
  bool clean = !key.empty() && key.front() != '/' && key.rfind("..", 0) != 0;
  for (size_t begin = 0; clean && begin <= key.size();) {
    const size_t end = std::min(key.find('/', begin), key.size());
    const std::string_view part(key.data() + begin, end - begin);
    clean = !part.empty() && part != "." && part != "..";
    begin = end + 1;
  }
  check(clean, kComponent, " ", what, " \"", name,
        "\": MLflow needs a relative path with no empty, \".\" or \"..\" part");
  check(key.size() <= kMaxKeyLength, kComponent, " ", what, " \"", name, "\": longer than ",
        kMaxKeyLength, " characters");
  return key;
}

std::string format_mlflow_metric_value(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // The shortest round-trip digits, from "d.ddde±x".
  char buffer[64];
  const auto result =
      std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  const std::string_view text(buffer, result.ptr - buffer);
  const size_t exponent_at = text.find('e');
  std::string_view mantissa = text.substr(0, exponent_at);
  const int exponent = std::stoi(std::string(text.substr(exponent_at + 1)));
  std::string sign;
  if (mantissa.front() == '-') {
    sign = "-";
    mantissa.remove_prefix(1);
  }
  std::string digits(1, mantissa.front());
  if (mantissa.size() > 2) digits.append(mantissa.substr(2));  // after "d."
  // Python's repr: scientific when the decimal point would sit more than 4 places left of the
  // first digit or 16 or more right of it.
  if (exponent < -4 || exponent >= 16) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exponent_text[16];
    std::snprintf(exponent_text, sizeof(exponent_text), "e%c%02d", exponent < 0 ? '-' : '+',
                  std::abs(exponent));
    return out + exponent_text;
  }
  if (exponent < 0) return sign + "0." + std::string(-exponent - 1, '0') + digits;
  const size_t integer_digits = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= integer_digits)
    return sign + digits + std::string(integer_digits - digits.size(), '0') + ".0";
  return sign + digits.substr(0, integer_digits) + "." + digits.substr(integer_digits);
}

std::vector<std::pair<std::string, std::string>> mlflow_params_from_yaml(
    const std::string& yaml, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& error) {
    throw Error(kComponent, " ", source, ": not YAML: ", error.what());
  }
  std::vector<std::pair<std::string, std::string>> params;
  if (root.IsNull()) return params;
  check(root.IsMap(), kComponent, " ", source, ": not a mapping");
  flatten_yaml(root, "", source, params);
  return params;
}

bool is_mlflow_id(std::string_view id) {
  if (id.empty() || id.size() > 256 || !is_ascii_alnum(id[0])) return false;
  return std::all_of(id.begin(), id.end(),
                     [](char c) { return is_ascii_alnum(c) || c == '_' || c == '-'; });
}

std::string random_mlflow_run_id() {
  std::random_device device;
  std::array<uint8_t, 16> bytes{};
  for (auto& byte : bytes) byte = static_cast<uint8_t>(device());
  bytes[6] = static_cast<uint8_t>((bytes[6] & 0x0F) | 0x40);  // version 4
  bytes[8] = static_cast<uint8_t>((bytes[8] & 0x3F) | 0x80);  // RFC 4122 variant
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id;
  for (uint8_t byte : bytes) id.append({kHex[byte >> 4], kHex[byte & 0x0F]});
  return id;
}

std::string mlflow_file_uri(const std::string& absolute_path) {
  std::string uri = "file://";
  for (unsigned char c : absolute_path) {
    if (is_ascii_alnum(static_cast<char>(c)) || c == '-' || c == '.' || c == '_' || c == '~' ||
        c == '/') {
      uri.push_back(static_cast<char>(c));
    } else {
      static constexpr char kHex[] = "0123456789ABCDEF";
      uri.append({'%', kHex[c >> 4], kHex[c & 0x0F]});
    }
  }
  return uri;
}

// ---- experiments ----

void create_mlflow_store(const std::string& tracking_dir, const std::string& artifact_root,
                         int64_t time_ms) {
  const fs::path root(tracking_dir);
  make_directories(root / kTrashDir);
  const fs::path default_dir = root / kDefaultExperimentId;
  make_directories(default_dir);
  replace_file((default_dir / kMetaFile).string(),
               format_experiment_meta(kDefaultExperimentId, "Default",
                                      artifact_root + "/" + kDefaultExperimentId, time_ms),
               kComponent);
}

std::vector<MlflowExperiment> list_mlflow_experiments(const std::string& tracking_dir) {
  const fs::path root(tracking_dir);
  std::vector<MlflowExperiment> experiments;
  for (const fs::path& parent : {root, root / kTrashDir}) {
    std::error_code error;
    if (!fs::is_directory(parent, error)) continue;
    for (const auto& entry : fs::directory_iterator(parent)) {
      const std::string folder = entry.path().filename().string();
      if (!entry.is_directory() || folder == kTrashDir || folder == kModelsDir) continue;
      const fs::path meta_path = entry.path() / kMetaFile;
      if (!fs::exists(meta_path)) continue;
      const YAML::Node meta = read_meta_yaml(meta_path);
      MlflowExperiment experiment;
      experiment.id = meta_string(meta, "experiment_id", meta_path);
      experiment.name = meta_string(meta, "name", meta_path);
      experiment.artifact_location = meta_string(meta, "artifact_location", meta_path);
      const YAML::Node stage = meta["lifecycle_stage"];
      experiment.deleted =
          parent != root || (stage && stage.IsScalar() && stage.Scalar() == "deleted");
      experiment.meta_path = meta_path.string();
      check(experiment.id == folder, kComponent, " ", meta_path.string(),
            ": malformed meta.yaml: experiment_id '", experiment.id, "' differs from its folder '",
            folder, "'");
      experiments.push_back(std::move(experiment));
    }
  }
  std::sort(experiments.begin(), experiments.end(),
            [](const MlflowExperiment& a, const MlflowExperiment& b) {
              return a.meta_path < b.meta_path;
            });
  return experiments;
}

MlflowExperiment find_or_create_mlflow_experiment(const std::string& tracking_dir,
                                                  const std::string& name,
                                                  const std::string& artifact_root,
                                                  int64_t time_ms) {
  const std::vector<MlflowExperiment> experiments = list_mlflow_experiments(tracking_dir);
  int64_t next_id = 1;  // 0 is "Default"
  for (const MlflowExperiment& experiment : experiments) {
    if (experiment.name == name) {
      check(!experiment.deleted, kComponent, " ", experiment.meta_path, ": experiment \"", name,
            "\" is deleted: restore it (mlflow experiments restore) or log to another name");
      return experiment;
    }
    int64_t id = 0;
    if (parse_int64(experiment.id, id) && id >= 0 && id < INT64_MAX)
      next_id = std::max(next_id, id + 1);
  }
  return create_experiment(tracking_dir, name, next_id, artifact_root, time_ms);
}

// ---- runs ----

std::string format_mlflow_run_meta(const MlflowRunMeta& run) {
  // The fields MLflow 2.22 writes, in its order: run_uuid repeats run_id, and the source fields
  // and `tags: []` are left from older MLflow versions.
  const std::string end_time = run.end_time < 0 ? "null" : std::to_string(run.end_time);
  std::string meta;
  meta += "artifact_uri: " + yaml_string(run.artifact_uri) + "\n";
  meta += "end_time: " + end_time + "\n";
  meta += "entry_point_name: \"\"\n";
  meta += "experiment_id: " + yaml_string(run.experiment_id) + "\n";
  meta += "lifecycle_stage: " + yaml_string(run.lifecycle_stage) + "\n";
  meta += "run_id: " + yaml_string(run.run_id) + "\n";
  meta += "run_name: " + yaml_string(run.run_name) + "\n";
  meta += "run_uuid: " + yaml_string(run.run_id) + "\n";
  meta += "source_name: \"\"\n";
  meta += "source_type: " + std::to_string(kSourceTypeLocal) + "\n";
  meta += "source_version: \"\"\n";
  meta += "start_time: " + std::to_string(run.start_time) + "\n";
  meta += "status: " + std::to_string(run.status) + "\n";
  meta += "tags: []\n";
  meta += "user_id: " + yaml_string(run.user_id) + "\n";
  return meta;
}

MlflowRunMeta read_mlflow_run_meta(const std::string& path) {
  const YAML::Node meta = read_meta_yaml(path);
  MlflowRunMeta run;
  run.run_id = meta_string(meta, "run_id", path);
  run.experiment_id = meta_string(meta, "experiment_id", path);
  const YAML::Node run_name = meta["run_name"];
  run.run_name = run_name && run_name.IsScalar() ? run_name.Scalar() : "";
  run.user_id = meta_string(meta, "user_id", path);
  run.artifact_uri = meta_string(meta, "artifact_uri", path);
  run.lifecycle_stage = meta_string(meta, "lifecycle_stage", path);
  run.start_time = meta_int(meta, "start_time", path);
  const YAML::Node end_time = meta["end_time"];
  run.end_time = end_time && !end_time.IsNull() ? meta_int(meta, "end_time", path) : -1;
  run.status = static_cast<int>(meta_int(meta, "status", path));
  return run;
}

void write_mlflow_params(const std::string& run_path,
                         const std::vector<std::pair<std::string, std::string>>& params) {
  std::set<std::string> keys;
  for (const auto& [name, value] : params) {
    const std::string key = mlflow_key(name, "param");
    check(keys.insert(key).second, kComponent, " param \"", name, "\": its key \"", key,
          "\" is taken by another param");
    write_text_file(fs::path(run_path) / "params" / key,
                    truncate_characters(value, kMaxParamValueLength));
  }
}

void write_mlflow_tags(const std::string& run_path,
                       const std::vector<std::pair<std::string, std::string>>& tags) {
  for (const auto& [name, value] : tags)
    write_text_file(fs::path(run_path) / "tags" / mlflow_key(name, "tag"), value);
}

// ---- metric files ----

std::string mlflow_metric_key(const std::string& metrics_dir, const std::string& name) {
  const std::string key = mlflow_key(name, "metric");
  if (!metric_key_conflicts(metrics_dir, key)) return key;
  std::string fallback = key;
  std::replace(fallback.begin(), fallback.end(), '/', '.');
  if (fallback == key) fallback += ".value";
  check(!metric_key_conflicts(metrics_dir, fallback), kComponent, " ", metrics_dir, ": metric \"",
        name, "\" fits neither the key \"", key, "\" nor \"", fallback,
        "\" beside the metrics there");
  return fallback;
}

void drop_mlflow_metric_lines(const std::string& metrics_dir, int64_t resume_step) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(metrics_dir))
    if (entry.is_regular_file()) files.push_back(entry.path());
  for (const fs::path& path : files) {
    if (path.extension() == ".tmp" && fs::exists(fs::path(path).replace_extension())) {
      fs::remove(path);  // replace_file's temp, left by a crash
      continue;
    }
    const std::string content = read_text_file(path);
    std::string kept;
    bool dropped = false;
    int64_t line_number = 0;
    for (size_t begin = 0; begin < content.size();) {
      const size_t newline = content.find('\n', begin);
      ++line_number;
      if (newline == std::string::npos) {  // torn
        dropped = true;
        break;
      }
      const std::string_view line(content.data() + begin, newline - begin);
      begin = newline + 1;
      if (metric_line_step(line, path.string() + ":" + std::to_string(line_number)) >= resume_step)
        dropped = true;
      else
        kept.append(line).push_back('\n');
    }
    if (kept.empty())
      fs::remove(path);
    else if (dropped)
      replace_file(path.string(), kept, kComponent);
  }
}

}  // namespace tandem
