#pragma once
// The data jobs (regenerate, capture, eval, reference-logprobs) on every rank of a torchrun or
// srun job, one device each, with no collective: the input is cut into units the one-process job
// already has (regenerate's batches, capture's shards, reference-logprobs' micro-batches, eval's
// prompts), unit u goes to rank u % W, each rank writes its units to a part of its own (resumable
// as the one-process output is), and the last rank to finish merges the parts into exactly the
// file one process writes. The parts live in one folder on a file system every rank sees:
//   DIR/rank-R-of-W<suffix>       rank R's part files (suffixes chosen by the job)
//   DIR/rank-R-of-W.done          written once rank R's part is complete
//   DIR/merge.lock                held while a rank checks whether all parts are done and merges
// A folder holding parts of another number of ranks is refused (its units were dealt otherwise).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tandem {

/// This process's place among the ranks of a data job (one process: rank 0 of 1).
struct DataRank {
  int64_t rank = 0;
  int64_t ranks = 1;

  /// From the launcher's environment: torchrun's RANK/WORLD_SIZE, or inside an srun step
  /// SLURM_PROCID/SLURM_STEP_NUM_TASKS (a batch script's own process is one rank of one).
  static DataRank from_launch();
  bool parallel() const { return ranks > 1; }
  /// Whether unit `unit` (0, 1, 2, ... in the one-process job's order) is this rank's.
  bool owns(int64_t unit) const { return unit % ranks == rank; }
  /// "rank 1 of 2".
  std::string name() const;
  /// "units 1, 3, 5, ... (every 2nd from unit 1)", naming `unit_name` ("batches", "shards").
  std::string share(const std::string& unit_name) const;
};

class RankParts {
 public:
  /// The parts folder `dir` of a job on `rank` (created). Refuses a folder holding parts of a
  /// job with another number of ranks, naming them; `component` ("[regenerate]") starts errors.
  RankParts(std::string dir, DataRank rank, std::string component);

  const std::string& dir() const { return dir_; }
  const DataRank& rank() const { return rank_; }
  /// DIR/rank-R-of-W<suffix> for this rank, or for `rank`.
  std::string path(const std::string& suffix) const { return path_of(rank_.rank, suffix); }
  std::string path_of(int64_t rank, const std::string& suffix) const;

  /// Whether this rank's part was marked complete (by this run or an earlier one).
  bool done() const;
  /// Marks this rank's part complete.
  void mark_done() const;
  /// After mark_done(), under the merge lock: when every rank's part is complete, runs `merge`
  /// (which must write the final output atomically), removes the done marks, then the parts
  /// folder; returns whether it did. A rank that finishes before the others returns false and
  /// leaves the merge to the last one.
  bool merge_if_all_done(const std::function<void()>& merge) const;

 private:
  std::string dir_;
  DataRank rank_;
  std::string component_;
};

/// For one process: refuses to start when `dir` holds the parts of a job run on several ranks
/// (finishing them takes as many ranks); `start_over` names what to delete instead.
void check_no_rank_parts(const std::string& dir, const std::string& start_over,
                         const std::string& component);

/// Merges JSONL `parts` (each in ascending order of `key`, an integer every line has) into `out`,
/// written atomically: the lines in ascending key order, copied byte for byte (a key seen twice
/// is an error naming both parts). Returns the lines written.
int64_t merge_sorted_jsonl(const std::vector<std::string>& parts,
                           const std::function<int64_t(const std::string& line)>& key,
                           const std::string& out, const std::string& component);

}  // namespace tandem
