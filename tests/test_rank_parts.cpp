// The parts of a data job split across ranks (data/rank_parts.h): how units are dealt, the refusal
// of parts of another number of ranks, the merge run once by the last rank to finish (also when
// two processes finish at the same moment), and the k-way merge of sorted JSONL parts.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "tandem/data/rank_parts.h"
#include "test_util.h"

namespace {

using tandem::DataRank;
using tandem::RankParts;
using tandem::testing::error_of;

std::string fresh_dir(const std::string& name) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("tandem-rank-parts-" + name + "-" + std::to_string(::getpid())))
                              .string();
  std::filesystem::remove_all(dir);
  return dir;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(DataRank, DealsUnitsRoundRobin) {
  const DataRank one;
  EXPECT_FALSE(one.parallel());
  EXPECT_TRUE(one.owns(0) && one.owns(7));
  const DataRank second{1, 3};
  EXPECT_TRUE(second.parallel());
  EXPECT_EQ(second.name(), "rank 1 of 3");
  std::vector<int64_t> owned;
  for (int64_t unit = 0; unit < 10; ++unit)
    if (second.owns(unit)) owned.push_back(unit);
  EXPECT_EQ(owned, (std::vector<int64_t>{1, 4, 7}));
  EXPECT_EQ(second.share("batches"), "batches 1, 4, 7, ... (counting from 0, every 3)");
}

// Sets environment variables for one scope, then restores them.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::string>& vars) {
    for (const auto& [name, value] : vars) {
      const char* old = std::getenv(name.c_str());
      saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
      ::setenv(name.c_str(), value.c_str(), 1);
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_)
      value ? ::setenv(name.c_str(), value->c_str(), 1) : ::unsetenv(name.c_str());
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(DataRank, ASlurmBatchScriptIsOneRankAnSrunStepItsTasks) {
  ASSERT_EQ(std::getenv("RANK"), nullptr) << "run outside torchrun";
  const std::map<std::string, std::string> allocation = {{"SLURM_PROCID", "1"},
                                                         {"SLURM_NTASKS", "2"},
                                                         {"MASTER_ADDR", "127.0.0.1"},
                                                         {"MASTER_PORT", "29511"}};
  {
    const ScopedEnv batch_script(allocation);  // sbatch --ntasks=2: its own process, alone
    const DataRank rank = DataRank::from_launch();
    EXPECT_EQ(rank.rank, 0);
    EXPECT_EQ(rank.ranks, 1);
  }
  std::map<std::string, std::string> step = allocation;
  step["SLURM_STEP_NUM_TASKS"] = "2";
  const ScopedEnv srun_step(step);  // srun --ntasks=2: task 1 of 2
  const DataRank rank = DataRank::from_launch();
  EXPECT_EQ(rank.rank, 1);
  EXPECT_EQ(rank.ranks, 2);
}

TEST(RankParts, RefusesPartsOfAnotherNumberOfRanks) {
  const std::string dir = fresh_dir("refuse");
  {
    const RankParts parts(dir, {0, 2}, "[test]");
    EXPECT_EQ(parts.path(".jsonl"), dir + "/rank-0-of-2.jsonl");
    EXPECT_EQ(parts.path_of(1, ".done"), dir + "/rank-1-of-2.done");
    write(parts.path(".jsonl"), "{}\n");
  }
  EXPECT_NO_THROW(RankParts(dir, {1, 2}, "[test]"));  // the same job's other rank
  const std::string error = error_of([&] { RankParts(dir, {0, 3}, "[test]"); });
  EXPECT_NE(error.find("holds the parts of a job of 2 ranks (rank-0-of-2.jsonl)"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("rerun it with 2 ranks"), std::string::npos) << error;
  std::filesystem::remove_all(dir);
}

TEST(RankParts, TheLastRankToFinishMergesOnce) {
  const std::string dir = fresh_dir("last");
  const RankParts first(dir, {0, 2}, "[test]"), second(dir, {1, 2}, "[test]");
  int merges = 0;
  first.mark_done();
  EXPECT_TRUE(first.done());
  EXPECT_FALSE(second.done());
  EXPECT_FALSE(first.merge_if_all_done([&] { ++merges; }));  // rank 1 is not done
  EXPECT_EQ(merges, 0);
  second.mark_done();
  EXPECT_TRUE(second.merge_if_all_done([&] { ++merges; }));
  EXPECT_EQ(merges, 1);
  EXPECT_FALSE(std::filesystem::exists(dir));  // the parts are removed once merged
  EXPECT_FALSE(first.merge_if_all_done([&] { ++merges; }));
  EXPECT_EQ(merges, 1);
}

TEST(RankParts, AStragglerAfterTheMergeCleansUpAndDoesNotMergeAgain) {
  const std::string dir = fresh_dir("straggler");
  const RankParts first(dir, {0, 2}, "[test]"), second(dir, {1, 2}, "[test]");
  first.mark_done();
  second.mark_done();
  int merges = 0;
  EXPECT_TRUE(second.merge_if_all_done([&] { ++merges; }));
  // What a rank that opened the lock while the folder was being removed leaves behind.
  std::filesystem::create_directories(dir);
  write(dir + "/merge.lock", "");
  EXPECT_FALSE(first.merge_if_all_done([&] { ++merges; }));
  EXPECT_EQ(merges, 1);
  EXPECT_FALSE(std::filesystem::exists(dir));
}

TEST(RankParts, AFailedMergeKeepsTheParts) {
  const std::string dir = fresh_dir("failed");
  const RankParts only(dir, {0, 2}, "[test]"), other(dir, {1, 2}, "[test]");
  only.mark_done();
  other.mark_done();
  EXPECT_THROW(only.merge_if_all_done([] { throw tandem::Error("disk full"); }), tandem::Error);
  EXPECT_TRUE(std::filesystem::exists(only.path(".done")));  // a rerun merges again
  int merges = 0;
  EXPECT_TRUE(other.merge_if_all_done([&] { ++merges; }));
  EXPECT_EQ(merges, 1);
}

TEST(RankParts, TwoProcessesFinishingTogetherMergeOnce) {
  const std::string dir = fresh_dir("race");
  std::filesystem::create_directories(dir);
  const std::string log = dir + ".merges";
  std::filesystem::remove(log);
  for (int round = 0; round < 20; ++round) {
    std::filesystem::remove_all(dir);
    std::vector<pid_t> children;
    for (int64_t rank = 0; rank < 2; ++rank) {
      const pid_t pid = ::fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        const RankParts parts(dir, {rank, 2}, "[test]");
        parts.mark_done();
        parts.merge_if_all_done([&] { std::ofstream(log, std::ios::app) << rank << "\n"; });
        ::_exit(0);
      }
      children.push_back(pid);
    }
    for (pid_t pid : children) {
      int status = 0;
      ::waitpid(pid, &status, 0);
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
  }
  const std::string merges = read_all(log);
  EXPECT_EQ(std::count(merges.begin(), merges.end(), '\n'), 20) << merges;  // once per round
  std::filesystem::remove(log);
  std::filesystem::remove_all(dir);
}

int64_t key_of(const std::string& line) {
  return std::stoll(line.substr(line.find("\"k\": ") + 5));
}

TEST(MergeSortedJsonl, InterleavesByKeyKeepingEachLineByteForByte) {
  const std::string dir = fresh_dir("merge");
  std::filesystem::create_directories(dir);
  write(dir + "/a", "{\"z\": 0, \"k\": 1}\n{\"k\": 4}\n\n{\"k\": 5}\n");
  write(dir + "/b", "{\"k\": 2, \"a\": [1,  2]}\n{\"k\": 3}\n{\"k\": 9}\n");
  write(dir + "/c", "");
  const int64_t written =
      tandem::merge_sorted_jsonl({dir + "/a", dir + "/b", dir + "/c"}, key_of, dir + "/out", "[t]");
  EXPECT_EQ(written, 6);
  EXPECT_EQ(read_all(dir + "/out"),
            "{\"z\": 0, \"k\": 1}\n{\"k\": 2, \"a\": [1,  2]}\n{\"k\": 3}\n{\"k\": 4}\n"
            "{\"k\": 5}\n{\"k\": 9}\n");
  std::filesystem::remove_all(dir);
}

TEST(MergeSortedJsonl, OverlappingOrUnsortedPartsAreErrors) {
  const std::string dir = fresh_dir("bad-merge");
  std::filesystem::create_directories(dir);
  write(dir + "/a", "{\"k\": 1}\n{\"k\": 3}\n");
  write(dir + "/b", "{\"k\": 3}\n");
  std::string error = error_of([&] {
    tandem::merge_sorted_jsonl({dir + "/a", dir + "/b"}, key_of, dir + "/out", "[t]");
  });
  EXPECT_NE(error.find("both hold key 3"), std::string::npos) << error;
  write(dir + "/b", "{\"k\": 8}\n{\"k\": 2}\n");
  error = error_of([&] {
    tandem::merge_sorted_jsonl({dir + "/a", dir + "/b"}, key_of, dir + "/out", "[t]");
  });
  EXPECT_NE(error.find("/b: lines out of order (key 2 after 8)"), std::string::npos) << error;
  EXPECT_FALSE(std::filesystem::exists(dir + "/out"));  // nothing half-written in its place
  std::filesystem::remove_all(dir);
}

}  // namespace
