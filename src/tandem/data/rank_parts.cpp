#include "tandem/data/rank_parts.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <set>

#include "tandem/core/error.h"
#include "tandem/core/file_io.h"
#include "tandem/dist/launch.h"

namespace tandem {

DataRank DataRank::from_launch() {
  const dist::LaunchEnv env = dist::read_launch_env();
  if (env.launcher == "slurm") {
    // SLURM_PROCID and SLURM_NTASKS are also set in a batch script outside srun, where this
    // process is alone: only an srun step's own task count deals the units.
    const char* step_tasks = std::getenv("SLURM_STEP_NUM_TASKS");
    const int64_t ranks = step_tasks ? std::atoll(step_tasks) : 1;
    if (ranks <= 1) return {0, 1};
    check(ranks == env.world_size, "[dist] SLURM_STEP_NUM_TASKS=", ranks,
          " differs from SLURM_NTASKS=", env.world_size);
  }
  return {env.rank, env.world_size};
}

std::string DataRank::name() const {
  return "rank " + std::to_string(rank) + " of " + std::to_string(ranks);
}

std::string DataRank::share(const std::string& unit_name) const {
  if (ranks == 1) return "all " + unit_name;
  return unit_name + " " + std::to_string(rank) + ", " + std::to_string(rank + ranks) + ", " +
         std::to_string(rank + 2 * ranks) + ", ... (counting from 0, every " +
         std::to_string(ranks) + ")";
}

RankParts::RankParts(std::string dir, DataRank rank, std::string component)
    : dir_(std::move(dir)), rank_(rank), component_(std::move(component)) {
  std::error_code error;
  std::filesystem::create_directories(dir_, error);
  check(!error, component_, " ", dir_, ": cannot create the parts folder: ", error.message());
  // Parts of another number of ranks dealt the units otherwise: continuing would mix them.
  static const std::regex part_name(R"(rank-(\d+)-of-(\d+)(\..*)?)");
  std::set<int64_t> other_counts;
  std::string example;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    std::smatch match;
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, match, part_name)) continue;
    const int64_t ranks = std::stoll(match[2].str());
    if (ranks != rank_.ranks && other_counts.insert(ranks).second) example = name;
  }
  if (!other_counts.empty()) {
    const int64_t begun = *other_counts.begin();
    throw Error(component_, " ", dir_, " holds the parts of a job of ", begun, " ranks (", example,
                "), and this job has ", rank_.ranks, ": rerun it with ", begun,
                " ranks to finish it, or delete ", dir_, " to start over");
  }
}

std::string RankParts::path_of(int64_t rank, const std::string& suffix) const {
  return dir_ + "/rank-" + std::to_string(rank) + "-of-" + std::to_string(rank_.ranks) + suffix;
}

bool RankParts::done() const { return std::filesystem::exists(path(".done")); }

void RankParts::mark_done() const { replace_file(path(".done"), "done\n", component_.c_str()); }

bool RankParts::merge_if_all_done(const std::function<void()>& merge) const {
  const std::string lock_path = dir_ + "/merge.lock";
  // A rank that finished while another merged finds the folder gone: nothing left to do.
  if (!std::filesystem::exists(dir_)) return false;
  UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (lock.get() < 0 && errno == ENOENT) return false;  // removed by the merging rank just now
  check(lock.get() >= 0, component_, " ", lock_path, ": cannot open: ", std::strerror(errno));
  check(::flock(lock.get(), LOCK_EX) == 0, component_, " ", lock_path,
        ": cannot lock: ", std::strerror(errno));
  std::error_code error;
  if (!done()) {  // this rank marked its part done, and a merge has removed the mark since
    std::filesystem::remove_all(dir_, error);  // what a straggler like this one left there
    return false;
  }
  for (int64_t rank = 0; rank < rank_.ranks; ++rank)
    if (!std::filesystem::exists(path_of(rank, ".done"))) return false;
  merge();
  // The marks go first, still under the lock: a rank that opens a new lock file while the folder
  // is being removed finds no mark and cannot merge a second time.
  for (int64_t rank = 0; rank < rank_.ranks; ++rank)
    std::filesystem::remove(path_of(rank, ".done"), error);
  std::filesystem::remove_all(dir_, error);  // the output is whole; the parts are spent
  return true;
}

void check_no_rank_parts(const std::string& dir, const std::string& start_over,
                         const std::string& component) {
  check(!std::filesystem::exists(dir), component, " ", dir,
        " holds the parts of a job run on several ranks: rerun it under torchrun with as many "
        "ranks to finish it, or delete ",
        start_over, " to start over");
}

int64_t merge_sorted_jsonl(const std::vector<std::string>& parts,
                           const std::function<int64_t(const std::string& line)>& key,
                           const std::string& out, const std::string& component) {
  struct Cursor {
    std::ifstream in;
    std::string line;
    std::optional<int64_t> key;  // nullopt: this part is exhausted
    int64_t previous = -1;
  };
  std::vector<Cursor> cursors(parts.size());
  auto advance = [&](size_t i) {
    Cursor& cursor = cursors[i];
    cursor.key.reset();
    while (std::getline(cursor.in, cursor.line)) {
      if (cursor.line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const int64_t next = key(cursor.line);
      check(next > cursor.previous, component, " ", parts[i], ": lines out of order (key ", next,
            " after ", cursor.previous, "): not a part this job wrote");
      cursor.previous = next;
      cursor.key = next;
      return;
    }
  };
  for (size_t i = 0; i < parts.size(); ++i) {
    cursors[i].in.open(parts[i], std::ios::binary);
    check(cursors[i].in.good(), component, " ", parts[i], ": cannot open");
    advance(i);
  }
  const std::string temp = out + ".tmp";
  int64_t written = 0;
  try {
    UniqueFd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    check(fd.get() >= 0, component, " ", temp, ": cannot open for writing: ", std::strerror(errno));
    std::string buffer;
    for (;;) {
      std::optional<size_t> smallest;
      for (size_t i = 0; i < cursors.size(); ++i) {
        if (!cursors[i].key) continue;
        if (smallest && *cursors[i].key == *cursors[*smallest].key)
          throw Error(component, " ", parts[*smallest], " and ", parts[i], " both hold key ",
                      *cursors[i].key,
                      ": parts of one job never overlap; delete them to start over");
        if (!smallest || *cursors[i].key < *cursors[*smallest].key) smallest = i;
      }
      if (!smallest) break;
      buffer += cursors[*smallest].line;
      buffer += '\n';
      ++written;
      if (buffer.size() > (8u << 20)) {
        write_all(fd.get(), buffer.data(), buffer.size(), temp, component.c_str());
        buffer.clear();
      }
      advance(*smallest);
    }
    write_all(fd.get(), buffer.data(), buffer.size(), temp, component.c_str());
    check(::fsync(fd.get()) == 0 && fd.close(), component, " ", temp,
          ": write failed: ", std::strerror(errno));
  } catch (...) {
    ::unlink(temp.c_str());  // nothing half-merged is left beside the output
    throw;
  }
  check(::rename(temp.c_str(), out.c_str()) == 0, component, " ", out,
        ": cannot replace: ", std::strerror(errno));
  return written;
}

}  // namespace tandem
