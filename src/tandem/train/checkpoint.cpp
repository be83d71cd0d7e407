#include "tandem/train/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string_view>
#include <utility>

#include "tandem/core/error.h"
#include "tandem/core/file_io.h"
#include "tandem/core/hash.h"
#include "tandem/io/safetensors.h"
#include "tandem/io/tensor_io.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

constexpr const char* kLatestName = "latest";
constexpr std::string_view kStepPrefix = "step-";
constexpr std::string_view kMessagePrefix = "[checkpoint] ";

/// Throws Error("[checkpoint] <path>: <parts>").
template <typename... Parts>
[[noreturn]] void fail(const std::string& path, const Parts&... parts) {
  throw Error(kMessagePrefix, path, ": ", parts...);
}

std::string errno_text() { return std::strerror(errno); }

/// `directory`/`name` as a string.
std::string join(const std::string& directory, const std::string& name) {
  return (fs::path(directory) / name).string();
}

/// Whether something (file, dir, dangling link) exists at `path`.
bool entry_exists(const std::string& path) {
  struct stat status;
  return ::lstat(path.c_str(), &status) == 0;
}

/// Creates (or truncates) `path` with `text`, fsyncs and closes it; any short write, ENOSPC,
/// EFBIG or EIO throws naming `path`.
void write_synced_file(const std::string& path, std::string_view text) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) fail(path, "cannot create: ", errno_text());
  write_all(fd.get(), text.data(), text.size(), path, "[checkpoint]");
  if (::fsync(fd.get()) != 0) fail(path, "fsync failed: ", errno_text());
  if (!fd.close()) fail(path, "close failed: ", errno_text());
}

/// fsyncs directory `path`, so renames into it survive a crash.
void sync_directory(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0 || ::fsync(fd.get()) != 0) fail(path, "cannot fsync directory: ", errno_text());
}

/// rename(2) that throws naming both paths.
void rename_or_fail(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    fail(to, "cannot rename ", from, " to it: ", errno_text());
  }
}

/// Removes `path` and everything under it; returns the error text, empty on success.
std::string remove_tree(const std::string& path) {
  std::error_code error;
  fs::remove_all(path, error);
  return error ? error.message() : std::string();
}

/// The digits of `text` as a non-negative number, or nullopt unless `text` is all digits.
std::optional<int64_t> parse_number(std::string_view text) {
  int64_t value = 0;
  if (text.empty() || text.size() > 18) return std::nullopt;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

/// N for the exact name checkpoint_dir_name(N); "step-42" or "step-x" are not checkpoints.
std::optional<int64_t> parse_step_dir_name(std::string_view name) {
  if (!name.starts_with(kStepPrefix)) return std::nullopt;
  const std::optional<int64_t> step = parse_number(name.substr(kStepPrefix.size()));
  if (!step || checkpoint_dir_name(*step) != name) return std::nullopt;
  return step;
}

/// A writer's private entry: ".<kind>-<what>-<pid>".
struct PrivateEntry {
  std::string kind;             // "tmp", "prev" or "trash"
  std::string what;             // "step-00000042" or "latest"
  std::optional<int64_t> step;  // parsed from `what` when it names a step dir
  int64_t pid;
};

/// The parts of a private entry name, or nullopt for any other name.
std::optional<PrivateEntry> parse_private_name(std::string_view name) {
  for (const char* kind : {"tmp", "prev", "trash"}) {
    const std::string prefix = std::string(".") + kind + "-";
    if (!name.starts_with(prefix)) continue;
    const size_t dash = name.find_last_of('-');
    if (dash < prefix.size()) return std::nullopt;
    const std::optional<int64_t> pid = parse_number(name.substr(dash + 1));
    if (!pid) return std::nullopt;
    PrivateEntry entry{kind, std::string(name.substr(prefix.size(), dash - prefix.size())),
                       std::nullopt, *pid};
    entry.step = parse_step_dir_name(entry.what);
    return entry;
  }
  return std::nullopt;
}

/// Whether process `pid` exists on this machine (EPERM: it exists, owned by someone else).
bool process_alive(int64_t pid) {
  if (pid <= 0 || pid > INT_MAX) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

/// Serialises, within this process, the writers' use of private entries: cleanup, staging and
/// commit. Staging dirs of live writers are registered so that cleanup spares them.
std::mutex& writers_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::set<std::string>& live_staging_dirs() {
  static std::set<std::string> dirs;
  return dirs;
}

/// Removes the private entries of `run_dir` that no live writer owns (see the header); a stale
/// `.prev-step-N` goes back to `step-N` when that is missing. Best effort: failures are left for
/// the next writer. Call with writers_mutex() held.
void clean_stale_entries(const std::string& run_dir) {
  std::error_code error;
  std::vector<std::string> names;
  for (const auto& item : fs::directory_iterator(run_dir, error)) {
    names.push_back(item.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  const int64_t own_pid = ::getpid();
  for (const std::string& name : names) {
    const std::optional<PrivateEntry> entry = parse_private_name(name);
    if (!entry) continue;
    const std::string path = join(run_dir, name);
    const bool stale =
        entry->pid == own_pid ? !live_staging_dirs().contains(path) : !process_alive(entry->pid);
    if (!stale) continue;
    if (entry->kind == "prev" && entry->step) {
      const std::string step_dir = join(run_dir, entry->what);
      if (!entry_exists(step_dir) && ::rename(path.c_str(), step_dir.c_str()) == 0) continue;
    }
    remove_tree(path);
  }
}

/// Renames step dir `path` out of sight, then deletes it; returns the error text, empty on
/// success. The rename makes the removal atomic for readers: a crash mid-delete leaves a
/// `.trash-*` entry, never a half-deleted step dir that readers would warn about.
std::string discard_step_dir(const std::string& run_dir, const std::string& path) {
  const std::string name = fs::path(path).filename().string();
  const std::string what = name.starts_with(".") ? name.substr(1) : name;
  const std::string trash = join(run_dir, ".trash-" + what + "-" + std::to_string(::getpid()));
  if (::rename(path.c_str(), trash.c_str()) != 0) {
    return "cannot rename to " + trash + ": " + errno_text();
  }
  const std::string removal_error = remove_tree(trash);
  return removal_error.empty() ? "" : "cannot remove " + trash + ": " + removal_error;
}

/// Reads the whole file `path`; throws naming it.
std::string read_whole_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) fail(path, "cannot open: ", errno_text());
  std::ostringstream content;
  content << file.rdbuf();
  if (file.bad()) fail(path, "read error");
  return content.str();
}

/// Parses and checks `dir`'s manifest.json (checkpoint_manifest.h).
CheckpointManifest parse_manifest(const std::string& dir) {
  const std::string path = join(dir, kManifestName);
  if (!entry_exists(path)) fail(path, "missing: the save did not finish");
  return parse_manifest_text(read_whole_file(path), path);
}

/// The step a directory name claims: step-N, or .prev-step-N-<pid>.
std::optional<int64_t> step_of_dir_name(const std::string& dir) {
  const std::string name = fs::path(dir).filename().string();
  if (std::optional<int64_t> step = parse_step_dir_name(name)) return step;
  const std::optional<PrivateEntry> entry = parse_private_name(name);
  return entry && entry->kind == "prev" ? entry->step : std::nullopt;
}

/// Throws unless `path` is a regular file of `expected.size` bytes (it says how it differs).
void check_size(const std::string& path, const CheckpointFile& expected) {
  struct stat status;
  if (::stat(path.c_str(), &status) != 0) {
    fail(path,
         errno == ENOENT ? "missing (listed in manifest.json)" : "cannot stat: " + errno_text());
  }
  if (!S_ISREG(status.st_mode)) fail(path, "not a regular file");
  const auto size = static_cast<uint64_t>(status.st_size);
  if (size < expected.size) {
    fail(path, "truncated: ", size, " bytes, manifest.json lists ", expected.size);
  }
  if (size > expected.size) fail(path, size, " bytes, manifest.json lists ", expected.size);
}

/// Verifies `dir` completely and returns its manifest; throws Error naming what is wrong.
CheckpointManifest verify_checkpoint(const std::string& dir) {
  struct stat status;
  if (::stat(dir.c_str(), &status) != 0) fail(dir, "cannot open: ", errno_text());
  if (!S_ISDIR(status.st_mode)) fail(dir, "not a directory");
  CheckpointManifest manifest = parse_manifest(dir);
  const std::optional<int64_t> named_step = step_of_dir_name(dir);
  if (named_step && *named_step != manifest.step) {
    fail(join(dir, kManifestName), "records step ", manifest.step,
         " but the directory is named for step ", *named_step);
  }
  for (const auto& [name, expected] : manifest.files) {
    const std::string path = join(dir, name);
    check_size(path, expected);
    const uint64_t actual = hash_file(path);
    if (actual != expected.xxh64) {
      fail(path, "checksum mismatch: XXH64 ", hex64(actual), ", manifest.json lists ",
           hex64(expected.xxh64));
    }
  }
  return manifest;
}

/// `message` without its leading "[checkpoint] ".
std::string without_prefix(const std::string& message) {
  return message.starts_with(kMessagePrefix) ? message.substr(kMessagePrefix.size()) : message;
}

}  // namespace

std::string checkpoint_dir_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(step));
  return name;
}

// ---------------------------------------------------------------------------------------------
// CheckpointWriter

CheckpointWriter::CheckpointWriter(std::string run_dir, int64_t step)
    : run_dir_(fs::absolute(run_dir).lexically_normal().string()), step_(step) {
  if (step_ < 0) fail(run_dir_, "checkpoint step must be >= 0, got ", step_);
  std::error_code error;
  fs::create_directories(run_dir_, error);
  if (error) fail(run_dir_, "cannot create the run directory: ", error.message());
  staging_dir_ =
      join(run_dir_, ".tmp-" + checkpoint_dir_name(step_) + "-" + std::to_string(::getpid()));
  std::lock_guard lock(writers_mutex());
  if (live_staging_dirs().contains(staging_dir_)) {
    fail(staging_dir_, "another writer of this process is already staging step ", step_);
  }
  clean_stale_entries(run_dir_);
  if (::mkdir(staging_dir_.c_str(), 0755) != 0) {
    fail(staging_dir_, "cannot create the staging directory: ", errno_text());
  }
  live_staging_dirs().insert(staging_dir_);
}

CheckpointWriter::~CheckpointWriter() {
  std::lock_guard lock(writers_mutex());
  if (!committed_) remove_tree(staging_dir_);
  live_staging_dirs().erase(staging_dir_);
}

std::string CheckpointWriter::claim(const std::string& name) {
  if (committed_) {
    fail(staging_dir_, "cannot add '", name, "': step ", step_, " is already committed");
  }
  check_file_name(name, staging_dir_);
  if (files_.contains(name)) fail(join(staging_dir_, name), "written twice in one checkpoint");
  return join(staging_dir_, name);
}

void CheckpointWriter::write_tensors(const std::string& name,
                                     const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                                     const std::map<std::string, std::string>& metadata) {
  const std::string path = claim(name);
  tandem::write_tensors(path, tensors, metadata);  // temp + fsync + rename; errors name `path`
  struct stat status;
  if (::stat(path.c_str(), &status) != 0) fail(path, "cannot stat after writing: ", errno_text());
  // Hashing the file read back covers exactly the bytes that the manifest vouches for.
  files_[name] = {static_cast<uint64_t>(status.st_size), hash_file(path)};
}

void CheckpointWriter::adopt_file(const std::string& name) {
  const std::string path = claim(name);
  struct stat status;
  if (::stat(path.c_str(), &status) != 0)
    fail(path, "was not written by the rank that owns it: ", errno_text());
  files_[name] = {static_cast<uint64_t>(status.st_size), hash_file(path)};
}

void CheckpointWriter::write_text(const std::string& name, const std::string& text) {
  const std::string path = claim(name);
  write_synced_file(path, text);
  files_[name] = {text.size(), xxh64(text.data(), text.size())};
}

CheckpointCommit CheckpointWriter::commit(int keep_last, int64_t keep_step) {
  if (committed_) fail(staging_dir_, "step ", step_, " is already committed");
  std::lock_guard lock(writers_mutex());
  const std::string dir_name = checkpoint_dir_name(step_);
  const std::string target = join(run_dir_, dir_name);
  const std::string pid = std::to_string(::getpid());
  const std::string latest_temp = join(run_dir_, ".tmp-latest-" + pid);
  const std::string latest = join(run_dir_, kLatestName);

  // Every byte is written and synced before the first rename, so a full disk or an I/O error
  // can only strike while nothing outside the staging area has changed.
  CheckpointManifest manifest;
  manifest.step = step_;
  manifest.files = files_;
  write_synced_file(join(staging_dir_, kManifestName), encode_manifest(manifest));
  sync_directory(staging_dir_);
  try {
    write_synced_file(latest_temp, dir_name + "\n");
  } catch (...) {
    ::unlink(latest_temp.c_str());
    throw;
  }

  // Move the staged dir into place. An existing step-N (a resumed run saving the same step
  // again) is swapped out atomically with RENAME_EXCHANGE; where the file system lacks it, the
  // old dir is renamed aside first (readers fall back to `.prev-step-N` while step-N is absent).
  enum class Placement { kNew, kExchanged, kAside } placement = Placement::kNew;
  const std::string aside = join(run_dir_, ".prev-" + dir_name + "-" + pid);
  std::string displaced;  // where the replaced checkpoint ended up
  try {
    if (!entry_exists(target)) {
      rename_or_fail(staging_dir_, target);
    } else if (::renameat2(AT_FDCWD, staging_dir_.c_str(), AT_FDCWD, target.c_str(),
                           RENAME_EXCHANGE) == 0) {
      placement = Placement::kExchanged, displaced = staging_dir_;
    } else if (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP) {
      rename_or_fail(target, aside);
      if (::rename(staging_dir_.c_str(), target.c_str()) != 0) {
        const std::string reason = errno_text();
        ::rename(aside.c_str(), target.c_str());
        fail(target, "cannot rename ", staging_dir_, " to it: ", reason);
      }
      placement = Placement::kAside, displaced = aside;
    } else {
      fail(target, "cannot exchange ", staging_dir_, " with it: ", errno_text());
    }
  } catch (...) {
    ::unlink(latest_temp.c_str());
    throw;
  }

  // Make the move durable, then publish `latest`; a failure puts the old state back.
  try {
    sync_directory(run_dir_);
    rename_or_fail(latest_temp, latest);
  } catch (...) {
    ::unlink(latest_temp.c_str());
    if (placement == Placement::kExchanged) {
      ::renameat2(AT_FDCWD, staging_dir_.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE);
    } else {
      ::rename(target.c_str(), staging_dir_.c_str());
      if (placement == Placement::kAside) ::rename(aside.c_str(), target.c_str());
    }
    ::fsync(UniqueFd(::open(run_dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)).get());
    throw;
  }
  committed_ = true;

  CheckpointCommit result{target, {}};
  try {
    sync_directory(run_dir_);
  } catch (const Error& e) {
    // The checkpoint is in place and found by step number; only `latest` may be lost.
    result.warnings.push_back(std::string(e.what()) + " (`latest` may not survive a crash)");
  }
  if (!displaced.empty()) {
    const std::string removal_error = remove_tree(displaced);
    if (!removal_error.empty()) {
      result.warnings.push_back("[checkpoint] cannot remove the replaced " + displaced + ": " +
                                removal_error);
    }
  }
  if (keep_last > 0) {
    std::vector<std::string> older;  // step dirs older than this one, newest first
    for (const auto& [step, path] : list_checkpoints(run_dir_)) {
      if (step < step_ && step != keep_step) older.insert(older.begin(), path);
    }
    for (size_t i = static_cast<size_t>(keep_last) - 1; i < older.size(); ++i) {
      const std::string prune_error = discard_step_dir(run_dir_, older[i]);
      if (!prune_error.empty()) {
        result.warnings.push_back("[checkpoint] cannot prune " + older[i] + ": " + prune_error);
      }
    }
  }
  return result;
}

// ---------------------------------------------------------------------------------------------
// CheckpointReader

CheckpointReader::CheckpointReader(std::string dir, CheckpointManifest manifest)
    : dir_(std::move(dir)), manifest_(std::move(manifest)) {}

CheckpointReader CheckpointReader::open(const std::string& dir) {
  return CheckpointReader(dir, verify_checkpoint(dir));
}

bool CheckpointReader::contains(const std::string& name) const {
  return manifest_.files.contains(name);
}

std::string CheckpointReader::checked_path(const std::string& name) const {
  const auto found = manifest_.files.find(name);
  if (found == manifest_.files.end()) {
    fail(join(dir_, name), "not in this checkpoint (manifest.json does not list it)");
  }
  const std::string path = join(dir_, name);
  check_size(path, found->second);
  return path;
}

std::map<std::string, at::Tensor> CheckpointReader::read_tensors(const std::string& name) const {
  const safetensors::File file = safetensors::File::open(checked_path(name));
  std::map<std::string, at::Tensor> tensors;
  for (const safetensors::TensorInfo& info : file.header().tensors) {
    tensors.emplace(info.name, read_tensor(file, info));
  }
  return tensors;
}

std::map<std::string, std::string> CheckpointReader::read_tensor_metadata(
    const std::string& name) const {
  return safetensors::File::open(checked_path(name)).header().metadata;
}

std::string CheckpointReader::read_text(const std::string& name) const {
  const std::string path = checked_path(name);
  std::string text = read_whole_file(path);
  const CheckpointFile& expected = manifest_.files.at(name);
  if (text.size() != expected.size || xxh64(text.data(), text.size()) != expected.xxh64) {
    fail(path, "changed since the checkpoint was verified");
  }
  return text;
}

// ---------------------------------------------------------------------------------------------
// Run directory queries

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& run_dir) {
  std::map<int64_t, std::string> by_step;
  std::map<int64_t, std::string> set_aside;  // .prev-step-N-<pid>, first by name
  std::error_code error;
  for (const auto& item : fs::directory_iterator(run_dir, error)) {
    const std::string name = item.path().filename().string();
    if (std::optional<int64_t> step = parse_step_dir_name(name)) {
      by_step[*step] = item.path().string();
    } else if (std::optional<PrivateEntry> entry = parse_private_name(name);
               entry && entry->kind == "prev" && entry->step) {
      auto [slot, inserted] = set_aside.emplace(*entry->step, item.path().string());
      if (!inserted && item.path().string() < slot->second) slot->second = item.path().string();
    }
  }
  for (const auto& [step, path] : set_aside) by_step.emplace(step, path);  // only if no step-N
  return {by_step.begin(), by_step.end()};
}

CheckpointSearch find_latest_valid(const std::string& run_dir,
                                   const std::function<void(const CheckpointReader&)>& load) {
  CheckpointSearch search;
  const std::vector<std::pair<int64_t, std::string>> candidates = list_checkpoints(run_dir);
  search.candidates = candidates.size();
  for (auto candidate = candidates.rbegin(); candidate != candidates.rend(); ++candidate) {
    const std::string& dir = candidate->second;
    std::optional<CheckpointReader> reader;
    try {
      reader = CheckpointReader::open(dir);
      if (load) load(*reader);
      search.checkpoint = std::move(reader);
      return search;
    } catch (const std::exception& e) {
      // "skipping run/step-N: model.safetensors: truncated ...", not the dir twice.
      std::string reason = without_prefix(e.what());
      if (reader) reason = "cannot be loaded: " + reason;
      if (reason.starts_with(dir + "/")) reason.erase(0, dir.size() + 1);
      search.warnings.push_back(std::string(kMessagePrefix) + "skipping " + dir + ": " + reason);
    }
  }
  return search;
}

std::vector<std::string> remove_checkpoints_after(const std::string& run_dir, int64_t step) {
  std::vector<std::string> removed;
  for (const auto& [candidate_step, path] : list_checkpoints(run_dir)) {
    if (candidate_step <= step) continue;
    const std::string removal_error = discard_step_dir(run_dir, path);
    if (!removal_error.empty()) fail(path, "cannot remove: ", removal_error);
    removed.push_back(path);
  }
  return removed;
}

std::string set_aside_checkpoints(const std::string& run_dir) {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &utc);
  std::string target = join(run_dir, std::string("unusable-") + stamp);
  for (int suffix = 2; fs::exists(target); ++suffix)
    target = join(run_dir, std::string("unusable-") + stamp + "-" + std::to_string(suffix));
  std::error_code error;
  fs::create_directory(target, error);
  if (error) fail(target, "cannot create: ", error.message());
  for (const auto& [step, path] : list_checkpoints(run_dir)) {
    fs::rename(path, join(target, fs::path(path).filename().string()), error);
    if (error) fail(path, "cannot move to ", target, ": ", error.message());
  }
  return target;
}

}  // namespace tandem
