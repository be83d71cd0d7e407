// The checkpoint store: round trips, `latest`, keep-last pruning, the newest-valid search with
// one test per kind of damage, re-saving a step, stale staging entries, and real write failures
// (a forked child saving under a lowered RLIMIT_FSIZE, so that write(2) fails with EFBIG).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/train/checkpoint.h"
#include "test_util.h"

namespace fs = std::filesystem;
using tandem::CheckpointReader;
using tandem::CheckpointWriter;
using tandem::find_latest_valid;
using tandem::testing::ScratchDir;

namespace {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

/// Tensors of many dtypes and layouts, with values that depend on `seed`; floats include NaN,
/// infinities and -0 so that "equal" can only mean bit-identical.
NamedTensors sample_tensors(int seed) {
  at::manual_seed(seed);
  at::Tensor specials = at::randn({4, 5});
  specials[0][0] = std::numeric_limits<float>::quiet_NaN();
  specials[0][1] = std::numeric_limits<float>::infinity();
  specials[0][2] = -std::numeric_limits<float>::infinity();
  specials[0][3] = -0.0f;
  return {
      {"weight.f32", specials},
      {"weight.bf16", at::randn({3, 7}).to(at::kBFloat16)},
      {"weight.f16", at::randn({2, 3, 4}).to(at::kHalf)},
      {"moment.f64", at::randn({5}, at::kDouble)},
      {"rng.i64", at::randint(-(1LL << 62), 1LL << 62, {6}, at::kLong)},
      {"ids.i32", at::randint(-1000, 1000, {8}, at::kInt)},
      {"ids.i8", at::randint(-128, 127, {9}, at::kChar)},
      {"bytes.u8", at::randint(0, 255, {10}, at::kByte)},
      {"mask.bool", at::randint(0, 2, {11}).to(at::kBool)},
      {"scalar", at::scalar_tensor(seed + 0.5, at::kFloat)},
      {"empty", at::zeros({0, 3})},
      {"transposed", at::randn({3, 4}).t()},  // not contiguous
  };
}

/// Whether `a` and `b` have the same dtype, shape and bytes.
bool bit_identical(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || !a.sizes().equals(b.sizes())) return false;
  const at::Tensor left = a.contiguous(), right = b.contiguous();
  return std::memcmp(left.data_ptr(), right.data_ptr(), left.nbytes()) == 0;
}

std::string read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), {});
}

void write_file(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
}

/// The names in `dir`, sorted.
std::set<std::string> entries(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& item : fs::directory_iterator(dir)) names.insert(item.path().filename());
  return names;
}

std::string step_dir(const ScratchDir& run, int64_t step) {
  return run / tandem::checkpoint_dir_name(step);
}

/// Saves a small checkpoint for `step`: a tensor file, trainer state and config text.
tandem::CheckpointCommit save(const ScratchDir& run, int64_t step, int keep_last = 0) {
  CheckpointWriter writer(run.path(), step);
  writer.write_tensors("model.safetensors", sample_tensors(static_cast<int>(step)),
                       {{"step", std::to_string(step)}});
  writer.write_text("trainer_state.json", "{\"step\": " + std::to_string(step) + "}\n");
  writer.write_text("config.yaml", "lr: 0.001\n");
  return writer.commit(keep_last);
}

/// The step of the checkpoint find_latest_valid picks, -1 for none.
int64_t latest_valid_step(const ScratchDir& run) {
  const tandem::CheckpointSearch search = find_latest_valid(run.path());
  return search.checkpoint ? search.checkpoint->step() : -1;
}

/// Saves steps 10 and 20, damages step 20 with `damage`, and checks that the search skips it
/// with one warning naming the directory and containing each of `reasons`, and that opening it
/// directly throws the same reasons.
void expect_skipped(const std::function<void(const std::string& dir)>& damage,
                    const std::vector<std::string>& reasons) {
  ScratchDir run;
  save(run, 10);
  save(run, 20);
  damage(step_dir(run, 20));
  const tandem::CheckpointSearch search = find_latest_valid(run.path());
  ASSERT_TRUE(search.checkpoint);
  EXPECT_EQ(search.checkpoint->step(), 10);
  EXPECT_EQ(search.checkpoint->dir(), step_dir(run, 10));
  ASSERT_EQ(search.warnings.size(), 1u);
  const std::string& warning = search.warnings[0];
  std::cout << "  warning: " << warning << "\n";
  EXPECT_NE(warning.find("skipping " + step_dir(run, 20)), std::string::npos) << warning;
  for (const std::string& reason : reasons) {
    EXPECT_NE(warning.find(reason), std::string::npos) << warning << "\nlacks: " << reason;
  }
  try {
    CheckpointReader::open(step_dir(run, 20));
    ADD_FAILURE() << "a damaged checkpoint opened";
  } catch (const tandem::Error& e) {
    for (const std::string& reason : reasons) {
      EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
    }
  }
}

/// Exit codes of forked savers.
constexpr int kSaved = 0;
constexpr int kSaveThrewError = 3;
constexpr int kSaveThrewOther = 4;

struct ChildResult {
  int exit_code;
  std::string message;  // what() of the exception the child caught
};

/// Runs `save_body` in a forked child process that reports a tandem::Error through its exit
/// code and a pipe. The child leaves with _exit, so nothing of the parent's state runs twice.
ChildResult run_in_child(const std::function<void()>& save_body) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::close(pipe_fds[0]);
    int code = kSaved;
    std::string message;
    try {
      save_body();
    } catch (const tandem::Error& e) {
      code = kSaveThrewError, message = e.what();
    } catch (const std::exception& e) {
      code = kSaveThrewOther, message = e.what();
    }
    [[maybe_unused]] ssize_t written = ::write(pipe_fds[1], message.data(), message.size());
    ::_exit(code);
  }
  ::close(pipe_fds[1]);
  std::string message;
  char buffer[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof(buffer))) > 0;) message.append(buffer, n);
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!message.empty()) std::cout << "  child: " << message << "\n";
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, message};
}

/// Makes every later write(2) past `max_bytes` of a file fail with EFBIG (instead of SIGXFSZ).
void limit_file_size(rlim_t max_bytes) {
  ::signal(SIGXFSZ, SIG_IGN);
  const rlimit limit{max_bytes, max_bytes};
  if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) throw std::runtime_error("setrlimit failed");
}

/// Checks the state a failed save must leave: step `good_step` is the newest valid checkpoint,
/// `latest` names it, and nothing else in the run dir verifies or was left behind.
void expect_intact(const ScratchDir& run, int64_t good_step, int good_seed) {
  const tandem::CheckpointSearch search = find_latest_valid(run.path());
  ASSERT_TRUE(search.checkpoint);
  EXPECT_EQ(search.checkpoint->step(), good_step);
  EXPECT_TRUE(search.warnings.empty()) << search.warnings[0];
  EXPECT_EQ(read_file(run / "latest"), tandem::checkpoint_dir_name(good_step) + "\n");
  const auto tensors = search.checkpoint->read_tensors("model.safetensors");
  EXPECT_TRUE(bit_identical(tensors.at("weight.f32"), sample_tensors(good_seed)[0].second));
  for (const std::string& name : entries(run.path())) {
    if (name == "latest" || name == tandem::checkpoint_dir_name(good_step)) continue;
    ADD_FAILURE() << "left behind: " << name;
    EXPECT_THROW(CheckpointReader::open(run / name), tandem::Error) << name << " verifies";
  }
}

/// A big tensor file's worth of data: 1 MiB of float32.
NamedTensors big_tensors() { return {{"big", at::randn({256, 1024})}}; }

/// A pid that no process has: a child that has exited and been reaped.
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

}  // namespace

TEST(Checkpoint, RoundTripIsBitIdentical) {
  ScratchDir run;
  const NamedTensors tensors = sample_tensors(7);
  const std::string state = "{\"step\": 7, \"documents_seen\": 123456789012}\n";
  const std::string config = "model:\n  hidden: 64\nname: \"déjà vu ✓\"\n";
  CheckpointWriter writer(run.path(), 7);
  writer.write_tensors("model.safetensors", tensors, {{"kind", "model"}});
  writer.write_tensors("empty.safetensors", {});
  writer.write_text("trainer_state.json", state);
  writer.write_text("config.yaml", config);
  writer.write_text("empty.txt", "");
  const tandem::CheckpointCommit commit = writer.commit(3);
  EXPECT_EQ(commit.dir, step_dir(run, 7));
  EXPECT_TRUE(commit.warnings.empty());

  const CheckpointReader reader = CheckpointReader::open(step_dir(run, 7));
  EXPECT_EQ(reader.step(), 7);
  EXPECT_EQ(reader.manifest().version, tandem::kCheckpointFormatVersion);
  EXPECT_EQ(reader.manifest().files.size(), 5u);
  const auto read = reader.read_tensors("model.safetensors");
  ASSERT_EQ(read.size(), tensors.size());
  for (const auto& [name, tensor] : tensors) {
    ASSERT_TRUE(read.contains(name)) << name;
    EXPECT_TRUE(bit_identical(read.at(name), tensor)) << name;
  }
  EXPECT_EQ(reader.read_tensor_metadata("model.safetensors").at("kind"), "model");
  EXPECT_TRUE(reader.read_tensors("empty.safetensors").empty());
  EXPECT_EQ(reader.read_text("trainer_state.json"), state);
  EXPECT_EQ(reader.read_text("config.yaml"), config);
  EXPECT_EQ(reader.read_text("empty.txt"), "");
  EXPECT_TRUE(reader.contains("config.yaml"));
  EXPECT_FALSE(reader.contains("manifest.json"));

  // The manifest is readable JSON with the agreed fields.
  const std::string manifest = read_file(step_dir(run, 7) + "/manifest.json");
  for (const char* field : {"\"format\": \"tandem-checkpoint\"", "\"version\": 1", "\"step\": 7",
                            "\"complete\": true", "\"xxh64\"", "\"config.yaml\""}) {
    EXPECT_NE(manifest.find(field), std::string::npos) << field << " in\n" << manifest;
  }
  // Asking for a file the checkpoint lacks names it.
  try {
    reader.read_text("absent.json");
    ADD_FAILURE() << "read an absent file";
  } catch (const tandem::Error& e) {
    EXPECT_NE(std::string(e.what()).find("absent.json"), std::string::npos) << e.what();
  }
  EXPECT_EQ(entries(run.path()), (std::set<std::string>{"latest", "step-00000007"}));
}

TEST(Checkpoint, LatestNamesTheNewestCommit) {
  ScratchDir run;
  save(run, 10);
  EXPECT_EQ(read_file(run / "latest"), "step-00000010\n");
  save(run, 20);
  EXPECT_EQ(read_file(run / "latest"), "step-00000020\n");
  EXPECT_EQ(entries(run.path()),
            (std::set<std::string>{"latest", "step-00000010", "step-00000020"}));
}

TEST(Checkpoint, SearchGoesByStepNumberNotLatest) {
  ScratchDir run;
  save(run, 9);
  save(run, 100'000'000);  // nine digits still sort by number
  save(run, 10);
  EXPECT_EQ(read_file(run / "latest"), "step-00000010\n");
  EXPECT_EQ(latest_valid_step(run), 100'000'000);
  write_file(run / "latest", "step-00000009\n");
  EXPECT_EQ(latest_valid_step(run), 100'000'000);
  // Names that are not exactly step-<8+ digits> are not checkpoints.
  fs::create_directory(run / "step-11");
  fs::create_directory(run / "step-x");
  EXPECT_EQ(tandem::list_checkpoints(run.path()).size(), 3u);
}

TEST(Checkpoint, KeepLastPrunesTheOldest) {
  ScratchDir run;
  for (int step = 1; step <= 5; ++step) save(run, step, 2);
  EXPECT_EQ(entries(run.path()),
            (std::set<std::string>{"latest", "step-00000004", "step-00000005"}));
  save(run, 6, 1);  // only the new one is kept
  EXPECT_EQ(entries(run.path()), (std::set<std::string>{"latest", "step-00000006"}));
  for (int step = 7; step <= 9; ++step) save(run, step, 0);  // <= 0 keeps all
  EXPECT_EQ(entries(run.path()).size(), 5u);
  // Newer step dirs (an abandoned timeline) are not pruned; older ones count from the new one.
  save(run, 50);
  save(run, 11, 2);
  EXPECT_EQ(entries(run.path()),
            (std::set<std::string>{"latest", "step-00000009", "step-00000011", "step-00000050"}));
  EXPECT_EQ(tandem::remove_checkpoints_after(run.path(), 11),
            std::vector<std::string>{step_dir(run, 50)});
  EXPECT_EQ(latest_valid_step(run), 11);
}

TEST(Checkpoint, SkipsTruncatedTensorFile) {
  expect_skipped(
      [](const std::string& dir) {
        fs::resize_file(dir + "/model.safetensors", fs::file_size(dir + "/model.safetensors") / 2);
      },
      {"model.safetensors", "truncated"});
}

TEST(Checkpoint, SkipsFlippedByte) {
  expect_skipped(
      [](const std::string& dir) {
        std::string bytes = read_file(dir + "/model.safetensors");
        bytes[bytes.size() - 3] ^= 0x10;  // inside the tensor data, size unchanged
        write_file(dir + "/model.safetensors", bytes);
      },
      {"model.safetensors", "checksum mismatch"});
}

TEST(Checkpoint, SkipsMissingManifest) {
  expect_skipped([](const std::string& dir) { fs::remove(dir + "/manifest.json"); },
                 {"manifest.json", "missing"});
}

TEST(Checkpoint, SkipsManifestNotMarkedComplete) {
  expect_skipped(
      [](const std::string& dir) {
        std::string manifest = read_file(dir + "/manifest.json");
        const size_t at = manifest.find("\"complete\": true");
        ASSERT_NE(at, std::string::npos);
        manifest.replace(at, 16, "\"complete\": false");
        write_file(dir + "/manifest.json", manifest);
      },
      {"manifest.json", "complete"});
}

TEST(Checkpoint, SkipsTruncatedManifest) {
  expect_skipped(
      [](const std::string& dir) {
        fs::resize_file(dir + "/manifest.json", fs::file_size(dir + "/manifest.json") / 2);
      },
      {"manifest.json", "not valid JSON"});
}

TEST(Checkpoint, SkipsMissingFile) {
  expect_skipped([](const std::string& dir) { fs::remove(dir + "/trainer_state.json"); },
                 {"trainer_state.json", "missing"});
}

TEST(Checkpoint, SkipsManifestOfAnotherStep) {
  expect_skipped(
      [](const std::string& dir) {
        fs::remove_all(dir);
        fs::copy(fs::path(dir).parent_path() / "step-00000010", dir);
      },
      {"manifest.json", "records step 10", "named for step 20"});
}

TEST(Checkpoint, SearchReportsEverySkippedCheckpointNewestFirst) {
  ScratchDir run;
  EXPECT_FALSE(find_latest_valid(run / "absent").checkpoint);
  EXPECT_TRUE(find_latest_valid(run / "absent").warnings.empty());
  save(run, 1);
  save(run, 2);
  save(run, 3);
  fs::remove(step_dir(run, 3) + "/manifest.json");
  fs::remove(step_dir(run, 2) + "/config.yaml");
  tandem::CheckpointSearch search = find_latest_valid(run.path());
  ASSERT_TRUE(search.checkpoint);
  EXPECT_EQ(search.checkpoint->step(), 1);
  ASSERT_EQ(search.warnings.size(), 2u);
  EXPECT_NE(search.warnings[0].find("step-00000003"), std::string::npos) << search.warnings[0];
  EXPECT_NE(search.warnings[1].find("config.yaml"), std::string::npos) << search.warnings[1];
  fs::remove(step_dir(run, 1) + "/model.safetensors");
  search = find_latest_valid(run.path());
  EXPECT_FALSE(search.checkpoint);
  EXPECT_EQ(search.warnings.size(), 3u);
}

TEST(Checkpoint, ResavingAStepReplacesIt) {
  ScratchDir run;
  save(run, 10);
  save(run, 20);
  // A run resumed from step 10 saves step 20 again, with different contents.
  CheckpointWriter writer(run.path(), 20);
  writer.write_tensors("model.safetensors", sample_tensors(99));
  writer.write_text("trainer_state.json", "resaved");
  EXPECT_EQ(writer.commit(0).dir, step_dir(run, 20));
  const CheckpointReader reader = CheckpointReader::open(step_dir(run, 20));
  EXPECT_EQ(reader.read_text("trainer_state.json"), "resaved");
  EXPECT_FALSE(reader.contains("config.yaml"));
  EXPECT_TRUE(bit_identical(reader.read_tensors("model.safetensors").at("weight.bf16"),
                            sample_tensors(99)[1].second));
  EXPECT_EQ(read_file(run / "latest"), "step-00000020\n");
  EXPECT_EQ(entries(run.path()),
            (std::set<std::string>{"latest", "step-00000010", "step-00000020"}));
}

TEST(Checkpoint, WriterDestroyedWithoutCommitLeavesNothing) {
  ScratchDir run;
  save(run, 10);
  {
    CheckpointWriter writer(run.path(), 20);
    writer.write_tensors("model.safetensors", sample_tensors(20));
    writer.write_text("config.yaml", "x: 1\n");
    EXPECT_TRUE(fs::is_directory(writer.staging_dir()));
    EXPECT_EQ(fs::path(writer.staging_dir()).filename(),
              ".tmp-step-00000020-" + std::to_string(::getpid()));
  }
  try {
    CheckpointWriter writer(run.path(), 30);
    writer.write_text("config.yaml", "x: 1\n");
    writer.write_text("config.yaml", "x: 2\n");  // the same name twice is an error
    ADD_FAILURE() << "wrote a name twice";
  } catch (const tandem::Error& e) {
    EXPECT_NE(std::string(e.what()).find("written twice"), std::string::npos) << e.what();
  }
  EXPECT_EQ(entries(run.path()), (std::set<std::string>{"latest", "step-00000010"}));
  EXPECT_EQ(read_file(run / "latest"), "step-00000010\n");
}

TEST(Checkpoint, RejectsBadNamesAndUseAfterCommit) {
  ScratchDir run;
  CheckpointWriter writer(run.path(), 1);
  for (const char* name : {"", "a/b", ".hidden", "manifest.json", "..", "."}) {
    EXPECT_THROW(writer.write_text(name, "x"), tandem::Error) << name;
  }
  writer.write_text("ok.txt", "x");
  writer.commit(0);
  EXPECT_THROW(writer.write_text("late.txt", "x"), tandem::Error);
  EXPECT_THROW(writer.commit(0), tandem::Error);
  EXPECT_THROW(CheckpointWriter(run.path(), -1), tandem::Error);
}

TEST(Checkpoint, StaleEntriesAreIgnoredThenCleanedUp) {
  ScratchDir run;
  save(run, 10);
  // A crashed process's entries: a complete-looking staged step 30, a staged `latest`, trash.
  const std::string dead = std::to_string(dead_pid());
  fs::copy(step_dir(run, 10), run / (".tmp-step-00000030-" + dead));
  write_file(run / (".tmp-latest-" + dead), "step-00000030\n");
  fs::copy(step_dir(run, 10), run / (".trash-step-00000005-" + dead));
  // This process's own pid, from an earlier life (pids repeat across container restarts).
  fs::create_directory(run / (".tmp-step-00000040-" + std::to_string(::getpid())));
  // A live process's staging dir (pid 1 always exists) is not ours to remove.
  fs::create_directory(run / ".tmp-step-00000050-1");
  EXPECT_EQ(latest_valid_step(run), 10);
  EXPECT_TRUE(find_latest_valid(run.path()).warnings.empty());

  save(run, 20);
  EXPECT_EQ(entries(run.path()), (std::set<std::string>{".tmp-step-00000050-1", "latest",
                                                        "step-00000010", "step-00000020"}));
}

TEST(Checkpoint, SetAsideStepStandsInUntilRestored) {
  // The state a crash leaves between the two renames of a re-save on a file system without
  // RENAME_EXCHANGE: the old step-20 renamed aside, the new one not yet in place.
  ScratchDir run;
  save(run, 10);
  save(run, 20);
  const std::string dead = std::to_string(dead_pid());
  fs::rename(step_dir(run, 20), run / (".prev-step-00000020-" + dead));
  const tandem::CheckpointSearch search = find_latest_valid(run.path());
  ASSERT_TRUE(search.checkpoint);
  EXPECT_EQ(search.checkpoint->step(), 20);
  EXPECT_EQ(search.checkpoint->dir(), run / (".prev-step-00000020-" + dead));
  // The next writer puts it back where it belongs.
  CheckpointWriter writer(run.path(), 30);
  EXPECT_EQ(entries(run.path()).count("step-00000020"), 1u);
  EXPECT_EQ(latest_valid_step(run), 20);
}

TEST(Checkpoint, CrashedSaverLeavesNothingValid) {
  ScratchDir run;
  save(run, 10);
  const NamedTensors tensors = sample_tensors(20);
  // The child stages a whole checkpoint and dies without committing or cleaning up.
  const ChildResult child = run_in_child([&] {
    auto* writer = new CheckpointWriter(run.path(), 20);
    writer->write_tensors("model.safetensors", tensors);
    writer->write_text("config.yaml", "x: 1\n");
    ::_exit(kSaved);
  });
  ASSERT_EQ(child.exit_code, kSaved) << child.message;
  EXPECT_EQ(entries(run.path()).size(), 3u);  // latest, step-10 and the orphaned staging dir
  EXPECT_EQ(latest_valid_step(run), 10);
  save(run, 30);
  EXPECT_EQ(entries(run.path()),
            (std::set<std::string>{"latest", "step-00000010", "step-00000030"}));
}

TEST(Checkpoint, WriteFailureInATensorFileKeepsThePreviousCheckpoint) {
  ScratchDir run;
  save(run, 100);
  const NamedTensors tensors = big_tensors();  // made before fork: the child runs no kernels
  const ChildResult child = run_in_child([&] {
    limit_file_size(64 << 10);  // the 1 MiB file fails partway, after a short write
    CheckpointWriter writer(run.path(), 200);
    writer.write_text("config.yaml", "lr: 0.001\n");
    writer.write_tensors("model.safetensors", tensors);
    writer.commit(1);
  });
  ASSERT_EQ(child.exit_code, kSaveThrewError) << child.message;
  EXPECT_NE(child.message.find("model.safetensors"), std::string::npos) << child.message;
  EXPECT_NE(child.message.find(std::strerror(EFBIG)), std::string::npos) << child.message;
  expect_intact(run, 100, 100);
}

TEST(Checkpoint, WriteFailureInTheManifestKeepsThePreviousCheckpoint) {
  ScratchDir run;
  save(run, 100);
  const NamedTensors tiny = {{"x", at::ones({2}, at::kChar)}};
  const ChildResult child = run_in_child([&] {
    limit_file_size(150);  // the data files fit, the manifest (over 200 bytes) does not
    CheckpointWriter writer(run.path(), 200);
    writer.write_tensors("model.safetensors", tiny);
    writer.write_text("config.yaml", "lr: 0.001\n");
    writer.commit(1);
  });
  ASSERT_EQ(child.exit_code, kSaveThrewError) << child.message;
  EXPECT_NE(child.message.find("manifest.json"), std::string::npos) << child.message;
  EXPECT_NE(child.message.find(std::strerror(EFBIG)), std::string::npos) << child.message;
  expect_intact(run, 100, 100);
}

TEST(Checkpoint, WriteFailureWhileResavingAStepKeepsTheOldOne) {
  ScratchDir run;
  save(run, 100);
  const NamedTensors tensors = big_tensors();
  const ChildResult child = run_in_child([&] {
    limit_file_size(64 << 10);
    CheckpointWriter writer(run.path(), 100);
    writer.write_tensors("model.safetensors", tensors);
    writer.commit(1);
  });
  ASSERT_EQ(child.exit_code, kSaveThrewError) << child.message;
  EXPECT_NE(child.message.find("model.safetensors"), std::string::npos) << child.message;
  expect_intact(run, 100, 100);
}
