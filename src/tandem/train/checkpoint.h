#pragma once
// Training checkpoints on disk, storage only: the caller decides which files a checkpoint holds.
//
// Layout of a run directory:
//   run_dir/step-00000042/          one committed checkpoint (step zero-padded to 8 digits)
//     model.safetensors ...         files written by the caller (flat names, no '/')
//     manifest.json                 written last: format, version, step, every file's size and
//                                   XXH64, "complete": true
//   run_dir/latest                  "step-00000042\n": the newest commit, for people and tools
//   run_dir/.tmp-step-<N>-<pid>/    a checkpoint being staged (never read)
//   run_dir/.tmp-latest-<pid>       the next `latest`, renamed over it
//   run_dir/.prev-step-<N>-<pid>/   the old step-N while a re-save replaces it (rename fallback)
//   run_dir/.trash-step-<N>-<pid>/  a pruned checkpoint being deleted
//
// Rules:
// - Readers trust step numbers, not `latest`: find_latest_valid() verifies step dirs newest
//   step first and takes the first that verifies. `latest` is written after the step dir is in
//   place, so a crash between the two leaves it one commit behind; it is never read here.
// - Entries starting with '.' are never read as checkpoints, with one exception: a
//   `.prev-step-N-<pid>` dir stands in for step N while no `step-N` exists (a crash between the
//   two renames of a replacement on a file system without RENAME_EXCHANGE).
// - One writing process per run_dir (with several ranks, one rank commits). A new writer
//   removes the `.tmp-*`/`.prev-*`/`.trash-*` entries left by processes that are no longer alive
//   (kill(pid, 0) fails with ESRCH), and those of its own pid that no live writer of this
//   process owns (pids repeat across container restarts); a stale `.prev-step-N` whose
//   `step-N` is missing is renamed back instead. Entries of another live pid are left alone.
// - Any failure while saving throws tandem::Error naming the file, and leaves the previous
//   checkpoints and `latest` as they were; the staged files are removed when the writer dies.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tandem/train/checkpoint_manifest.h"

namespace tandem {

/// "step-00000042" for step 42.
std::string checkpoint_dir_name(int64_t step);

/// What a writer's commit() did.
struct CheckpointCommit {
  std::string dir;                    // the committed run_dir/step-<N>
  std::vector<std::string> warnings;  // after the commit point: pruning, removing the replaced
                                      // dir or syncing `latest` failed
};

/// Stages one checkpoint in run_dir/.tmp-step-<N>-<pid> and commits it as run_dir/step-<N>.
/// Destroyed without commit() (an error, an exception), it removes everything it staged.
class CheckpointWriter {
 public:
  /// Creates run_dir if needed, cleans stale staging entries, creates the staging dir.
  CheckpointWriter(std::string run_dir, int64_t step);
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  /// Writes `tensors` (any device) as the safetensors file `name`, fsynced, and checksums it.
  void write_tensors(const std::string& name,
                     const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                     const std::map<std::string, std::string>& metadata = {});
  /// Lists the file `name` that another process (a rank writing its shard) has already written
  /// and fsynced in staging_dir(), checksummed here.
  void adopt_file(const std::string& name);
  /// Writes `text` as the file `name` (JSON, YAML, ...), fsynced, and checksums it.
  void write_text(const std::string& name, const std::string& text);

  /// Writes manifest.json, moves the staging dir to step-<N> (replacing an existing one without
  /// ever leaving neither), points `latest` at it, then prunes step dirs older than it so that
  /// `keep_last` remain counting this one (keep_last <= 0 keeps all). Newer step dirs (from an
  /// abandoned run, see remove_checkpoints_after) are never pruned. Failures before `latest` is
  /// replaced undo the move; pruning failures are returned as warnings, not thrown. The step dir
  /// of `keep_step` (the best checkpoint; -1: none) is never pruned and not counted.
  CheckpointCommit commit(int keep_last, int64_t keep_step = -1);

  /// The step being written.
  int64_t step() const { return step_; }
  /// The staging directory (run_dir/.tmp-step-<N>-<pid>).
  const std::string& staging_dir() const { return staging_dir_; }

 private:
  /// Validates `name` as a new file of this checkpoint and returns its staged path.
  std::string claim(const std::string& name);

  std::string run_dir_;
  int64_t step_;
  std::string staging_dir_;
  std::map<std::string, CheckpointFile> files_;
  bool committed_ = false;
};

/// A checkpoint directory whose manifest and files have been verified.
class CheckpointReader {
 public:
  /// Verifies `dir`: manifest.json present, parseable, complete, of a known version, its step
  /// matching the dir name, every listed file present with the listed size and XXH64 (files not
  /// listed are ignored). Throws Error("[checkpoint] <dir>: <file>: <what is wrong>").
  static CheckpointReader open(const std::string& dir);

  /// The directory read.
  const std::string& dir() const { return dir_; }
  /// The step recorded in the manifest.
  int64_t step() const { return manifest_.step; }
  /// The verified manifest.
  const CheckpointManifest& manifest() const { return manifest_; }
  /// Whether the manifest lists a file `name`.
  bool contains(const std::string& name) const;

  /// Every tensor of the safetensors file `name`, as CPU tensors in their stored dtypes.
  std::map<std::string, at::Tensor> read_tensors(const std::string& name) const;
  /// The `__metadata__` of the safetensors file `name`.
  std::map<std::string, std::string> read_tensor_metadata(const std::string& name) const;
  /// The content of the text file `name`.
  std::string read_text(const std::string& name) const;

 private:
  CheckpointReader(std::string dir, CheckpointManifest manifest);
  /// The path of listed file `name`, after checking its size still matches (a file truncated
  /// since open() would otherwise fault when mapped).
  std::string checked_path(const std::string& name) const;

  std::string dir_;
  CheckpointManifest manifest_;
};

/// The result of find_latest_valid.
struct CheckpointSearch {
  std::optional<CheckpointReader> checkpoint;  // the newest that verifies, if any
  std::vector<std::string> warnings;  // "[checkpoint] skipping <dir>: <reason>", newest first
  size_t candidates = 0;              // step dirs found, usable or not
};

/// Verifies the step dirs of `run_dir` from the highest step down and returns the first valid
/// one, with a warning for each newer one skipped. With `load`, a checkpoint is valid only once
/// `load` (which reads what the caller needs from it) returns: one it throws on is skipped like
/// a corrupt one ("cannot be loaded: ..."). A missing run_dir gives no checkpoint and no
/// warning. Reads nothing else: `latest` is ignored, stale entries are not touched.
CheckpointSearch find_latest_valid(
    const std::string& run_dir, const std::function<void(const CheckpointReader&)>& load = nullptr);

/// The step dirs of `run_dir` as (step, path), ascending, verified or not; includes a
/// `.prev-step-N-<pid>` for step N when no `step-N` exists.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& run_dir);

/// Deletes the step dirs of `run_dir` with a step above `step`: after resuming from `step`, they
/// belong to an abandoned timeline, and one that verifies would win the next newest-first
/// search. Returns the removed paths; throws when one cannot be removed.
std::vector<std::string> remove_checkpoints_after(const std::string& run_dir, int64_t step);

/// Moves every step dir of `run_dir` (list_checkpoints) into a new run_dir/unusable-<time>/
/// (renames, nothing deleted) and returns its path: `tandem train --start-over` when none of
/// them can be used.
std::string set_aside_checkpoints(const std::string& run_dir);

}  // namespace tandem
