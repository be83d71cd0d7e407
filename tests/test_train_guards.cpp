// What stops or refuses a `tandem train` run, end to end (issue 19): a non-finite loss or gradient
// norm (training.on_nonfinite), a second writer on the same run directory, a launcher that dies
// under its ranks, run directories whose checkpoints cannot be used, and data that fits no
// micro-batch (found when the data is read, before step 1).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "forked_ranks.h"
#include "tandem/core/config.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/training_data.h"
#include "test_util.h"
#include "tiny_train_job.h"

namespace {

namespace fs = std::filesystem;
using tandem::testing::run_command;
using tandem::testing::ScratchDir;
using tandem::testing::start_training;
using tandem::testing::train_command;
using tandem::testing::wait_for_step;
using tandem::testing::write_job;

// Every tensor of every committed checkpoint in `run_dir` is finite.
void expect_checkpoints_finite(const std::string& run_dir) {
  for (const auto& [step, path] : tandem::list_checkpoints(run_dir)) {
    const tandem::CheckpointReader reader = tandem::CheckpointReader::open(path);
    for (const char* file : {"model.safetensors", "optimizer.safetensors"})
      for (const auto& [name, tensor] : reader.read_tensors(file))
        if (tensor.is_floating_point())
          EXPECT_TRUE(at::isfinite(tensor).all().item<bool>())
              << path << "/" << file << ": " << name;
  }
}

// The per-step records of a run's metrics.jsonl (notes left out).
std::vector<nlohmann::json> step_records(const std::string& run_dir) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json record = nlohmann::json::parse(line);
    if (record.contains("step")) records.push_back(record);
  }
  return records;
}

// lr = 1e30 (finite, so accepted): step 1's update makes the weights ~1e30, step 2's forward
// overflows. `stop` saves nothing non-finite, keeps step 1's checkpoint, exits 3 naming the step.
TEST(TrainNonFinite, StopKeepsTheLastFiniteCheckpointAndExits3) {
  ScratchDir dir;
  const std::string config = write_job(dir, dir / "run", 6, 2);
  const auto result =
      run_command(train_command(config) + " training.lr=1e30 training.warmup_steps=0");
  EXPECT_EQ(result.exit_code, 3) << result.output;
  EXPECT_NE(result.output.find("[train] step 2: the "), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("not finite (training.on_nonfinite: stop): stopped without saving"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("step-00000001, is kept"), std::string::npos) << result.output;
  const auto search = tandem::find_latest_valid(dir / "run");
  ASSERT_TRUE(search.checkpoint.has_value());
  EXPECT_EQ(search.checkpoint->step(), 1);
  EXPECT_EQ(tandem::list_checkpoints(dir / "run").size(), 1u);
  expect_checkpoints_finite(dir / "run");
  EXPECT_FALSE(fs::exists(dir / "run/export"));
  const auto records = step_records(dir / "run");
  ASSERT_EQ(records.size(), 2u);  // the failing step is logged, its loss as null (not finite)
  EXPECT_TRUE(records[1].at("loss").is_null()) << records[1].dump();
}

// `skip_step`: non-finite steps leave the state as it was, are counted, and the run stops after
// max_consecutive_skips of them in a row; every checkpoint it wrote is finite.
TEST(TrainNonFinite, SkipStepDropsTheUpdateAndStopsAfterTooManyInARow) {
  ScratchDir dir;
  const std::string config = write_job(dir, dir / "run", 8, 0);
  const auto result =
      run_command(train_command(config) +
                  " training.lr=1e30 training.warmup_steps=0 "
                  "training.on_nonfinite=skip_step training.max_consecutive_skips=3");
  EXPECT_EQ(result.exit_code, 3) << result.output;
  EXPECT_NE(result.output.find("[train] step 4: 3 steps in a row had a non-finite loss"),
            std::string::npos)
      << result.output;
  const auto records = step_records(dir / "run");
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records[0].at("skipped").get<double>(), 0.0);
  for (int step = 1; step < 4; ++step) {
    EXPECT_EQ(records[step].at("skipped").get<double>(), 1.0) << records[step].dump();
    EXPECT_EQ(records[step].at("skipped_steps").get<double>(), step) << records[step].dump();
  }
  // Steps 2 and 3 were skipped and saved: their weights are step 1's, bit for bit.
  const auto step_1 = tandem::CheckpointReader::open(dir / "run/step-00000001");
  const auto step_3 = tandem::CheckpointReader::open(dir / "run/step-00000003");
  const auto before = step_1.read_tensors("model.safetensors");
  for (const auto& [name, tensor] : step_3.read_tensors("model.safetensors"))
    EXPECT_TRUE(tensor.equal(before.at(name))) << name << " changed in a skipped step";
  EXPECT_FALSE(fs::exists(dir / "run/step-00000004"));
  expect_checkpoints_finite(dir / "run");
  const auto state = nlohmann::json::parse(step_3.read_text("trainer_state.json"));
  EXPECT_EQ(state.at("skipped_steps").get<int64_t>(), 2);
  EXPECT_EQ(state.at("consecutive_skips").get<int64_t>(), 2);
}

// On finite steps, skip_step's extra check changes nothing: the same weights as `stop`.
TEST(TrainNonFinite, SkipStepOnAFiniteRunEqualsStop) {
  ScratchDir dir;
  const auto stop = run_command(train_command(write_job(dir, dir / "stop", 3, 1)));
  ASSERT_EQ(stop.exit_code, 0) << stop.output;
  const auto skip = run_command(train_command(write_job(dir, dir / "skip", 3, 1)) +
                                " training.on_nonfinite=skip_step");
  ASSERT_EQ(skip.exit_code, 0) << skip.output;
  const auto a =
      tandem::find_latest_valid(dir / "stop").checkpoint->read_tensors("model.safetensors");
  const auto b =
      tandem::find_latest_valid(dir / "skip").checkpoint->read_tensors("model.safetensors");
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, tensor] : a) EXPECT_TRUE(tensor.equal(b.at(name))) << name;
}

// A second `tandem train` on a run directory that a live one is writing is refused, naming the
// holder; the lock goes with its process, even one killed with SIGKILL.
TEST(TrainRunDir, OneWriterPerRunDirectory) {
  ScratchDir dir;
  const std::string config = write_job(dir, dir / "run", 400, 2);
  const pid_t first = start_training(config);
  ASSERT_TRUE(wait_for_step(dir / "run", 1));
  const auto second = run_command(train_command(config));
  EXPECT_EQ(second.exit_code, 1) << second.output;
  EXPECT_NE(second.output.find("is being written by another tandem train (pid " +
                               std::to_string(first) + ")"),
            std::string::npos)
      << second.output;
  kill(first, SIGKILL);
  int status = 0;
  waitpid(first, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the first run ended on its own";
  const auto third =
      run_command(train_command(config) + " training.steps=" +
                  std::to_string(tandem::find_latest_valid(dir / "run").checkpoint->step() + 1));
  EXPECT_EQ(third.exit_code, 0) << third.output;
  EXPECT_NE(third.output.find("resuming from"), std::string::npos) << third.output;
}

// A rank whose launcher is killed with SIGKILL gets SIGTERM from the kernel: it finishes its
// step, saves and exits instead of training on as an orphan. The launcher here is a shell with
// torchrun's variables for a job of one rank.
TEST(TrainRunDir, ARankWhoseLauncherDiesSavesAndExits) {
  ScratchDir dir;
  const std::string config = write_job(dir, dir / "run", 400, 2);
  const std::string pid_file = dir / "rank.pid";
  const std::string launcher =
      "RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
      std::to_string(tandem::testing::free_port()) + " " + train_command(config) +
      " 2>/dev/null & echo $! > " + pid_file + "; wait";
  // Orphans of our children are re-parented to us, not to init: their exit status is ours to read.
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  std::vector<std::string> args = {"/bin/sh", "-c", launcher};
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t shell = 0;
  ASSERT_EQ(posix_spawn(&shell, "/bin/sh", nullptr, nullptr, argv.data(), environ), 0);
  ASSERT_TRUE(wait_for_step(dir / "run", 1));
  pid_t rank = 0;
  std::ifstream(pid_file) >> rank;
  ASSERT_GT(rank, 0);
  kill(shell, SIGKILL);
  waitpid(shell, nullptr, 0);
  // This process is the subreaper (below), so the orphan is now our child: wait for it.
  int status = 0;
  pid_t waited = 0;
  for (int i = 0; i < 600 && waited == 0; ++i) {
    waited = waitpid(rank, &status, WNOHANG);
    if (waited == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (waited == 0) kill(rank, SIGKILL);
  ASSERT_EQ(waited, rank) << "the orphaned rank was still running 60 s after its launcher died";
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 75) << "SIGTERM's exit: the step saved";
  const auto search = tandem::find_latest_valid(dir / "run");
  ASSERT_TRUE(search.checkpoint.has_value());
  EXPECT_LT(search.checkpoint->step(), 400);
  const int64_t last_logged = step_records(dir / "run").back().at("step").get<int64_t>();
  EXPECT_EQ(search.checkpoint->step(), last_logged) << "the stop saved the step it finished";
}

// A manifest that lists no files verifies but cannot be loaded: skipped like a corrupt one.
TEST(TrainCheckpoints, OneThatCannotBeLoadedIsSkipped) {
  ScratchDir dir;
  const std::string config = write_job(dir, dir / "run", 2, 0);
  ASSERT_EQ(run_command(train_command(config)).exit_code, 0);
  {
    tandem::CheckpointWriter empty(dir / "run", 5);
    empty.commit(0);
  }
  const auto result = run_command(train_command(config) + " training.steps=3");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("skipping " + (dir / "run/step-00000005") + ": cannot be loaded"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("resuming from " + (dir / "run/step-00000002")), std::string::npos)
      << result.output;
}

// Best-fit packing's pending records in trainer_state.json: one outside the data makes the
// checkpoint unloadable (skipped, naming why); records pending under another packing mode are
// refused rather than dropped.
TEST(TrainCheckpoints, BestFitPendingRecordsAreCheckedOnResume) {
  ScratchDir dir;
  const std::string config =
      write_job(dir, dir / "run", 2, 0, "  packing: best_fit\n  packing_lookahead: 2\n");
  const auto first = run_command(train_command(config));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto step_2 = tandem::CheckpointReader::open(dir / "run/step-00000002");
  auto state = nlohmann::json::parse(step_2.read_text("trainer_state.json"));
  ASSERT_FALSE(state.at("pending").empty()) << state.dump();  // 40 records: the pass goes on
  // Another packing mode cannot take the pending records over.
  const auto other = run_command(train_command(config) + " training.steps=3 data.packing=packed");
  EXPECT_NE(other.exit_code, 0) << other.output;
  EXPECT_NE(other.output.find("records drawn ahead by data.packing: best_fit, but data.packing "
                              "is now packed"),
            std::string::npos)
      << other.output;
  EXPECT_FALSE(fs::exists(dir / "run/step-00000003"));
  {
    // Step 5: step 2's files with a pending record past the data's 40.
    tandem::CheckpointWriter bad(dir / "run", 5);
    for (const char* file : {"model.safetensors", "optimizer.safetensors", "rng.safetensors"}) {
      std::vector<std::pair<std::string, at::Tensor>> tensors;
      for (auto& entry : step_2.read_tensors(file)) tensors.push_back(entry);
      bad.write_tensors(file, tensors);
    }
    nlohmann::json broken = state;
    broken["pending"] = nlohmann::json::array({nlohmann::json::array({40, 0})});
    bad.write_text("trainer_state.json", broken.dump());
    bad.write_text("config.yaml", step_2.read_text("config.yaml"));
    bad.commit(0);
  }
  const auto resumed = run_command(train_command(config) + " training.steps=4");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("pending record [40,0] outside the sampler's 40 records"),
            std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("resuming from " + (dir / "run/step-00000002")), std::string::npos)
      << resumed.output;
}

// Checkpoints exist and none can be used: an error that touches nothing; --start-over moves them
// aside (nothing deleted) and trains from step 0.
TEST(TrainCheckpoints, NoneUsableIsAnErrorUnlessStartOver) {
  ScratchDir dir;
  const std::string config = write_job(dir, dir / "run", 2, 0);
  ASSERT_EQ(run_command(train_command(config)).exit_code, 0);
  for (const char* step : {"step-00000001", "step-00000002"})
    fs::resize_file(dir / "run" + "/" + step + "/model.safetensors", 100);
  const auto refused = run_command(train_command(config));
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_NE(refused.output.find("holds 2 checkpoint(s) and none can be used"), std::string::npos)
      << refused.output;
  EXPECT_EQ(tandem::list_checkpoints(dir / "run").size(), 2u);
  EXPECT_EQ(fs::file_size(dir / "run/step-00000002/model.safetensors"), 100u);

  const auto again = run_command(train_command(config) + " --start-over");
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("--start-over: the unusable checkpoints were moved to"),
            std::string::npos)
      << again.output;
  int set_aside = 0;
  for (const auto& entry : fs::directory_iterator(dir / "run"))
    if (entry.path().filename().string().starts_with("unusable-")) {
      EXPECT_TRUE(fs::exists(entry.path() / "step-00000001/model.safetensors"));
      EXPECT_EQ(fs::file_size(entry.path() / "step-00000002/model.safetensors"), 100u);
      ++set_aside;
    }
  EXPECT_EQ(set_aside, 1);
  EXPECT_EQ(tandem::find_latest_valid(dir / "run").checkpoint->step(), 2);
}

// Appends one pre-tokenized document of `length` tokens (ids 1, 2, ..., all trained) to the
// job's data; it becomes the last record.
void append_long_document(const ScratchDir& dir, int length) {
  std::ofstream data(dir / "data.jsonl", std::ios::app);
  data << "{\"input_ids\": [";
  for (int t = 0; t < length; ++t) data << (t ? "," : "") << 1 + t % 90;
  data << "], \"loss_mask\": [";
  for (int t = 0; t < length; ++t) data << (t ? "," : "") << 1;
  data << "]}\n";
}

// A document longer than a micro-batch (2 rows x 32 tokens) with overlong: split is cut into
// parts when the data is read; every token is drawn exactly once per pass, at its own offset.
TEST(TrainData, ADocumentLongerThanAMicroBatchIsSplitWhenRead) {
  ScratchDir dir;
  const std::string config = write_job(dir, dir / "run");
  append_long_document(dir, 150);
  const tandem::TrainingData data = tandem::read_training_data(tandem::Config::load(config));
  ASSERT_EQ(data.split_documents, 1);
  EXPECT_EQ(data.skipped_records, 0);
  ASSERT_EQ(data.num_records(), 40 + 3);  // 150 tokens: parts of 64, 64 and 22
  std::map<int64_t, int64_t> covered;     // first token -> length, of the long document's pieces
  for (int64_t next = 0; next < data.num_records();) {
    const tandem::PackedBatch batch = tandem::next_micro_batch_in_order(next, data);
    EXPECT_LE(batch.rows(), 2);
    for (const tandem::PackedDocument& document : batch.documents)
      if (document.dataset_index == 40) {
        EXPECT_TRUE(covered.emplace(document.source_begin, document.length).second);
        // The piece holds the document's own tokens from its offset on (ids 1 + t % 90).
        const at::Tensor ids =
            batch.input_ids[document.row].narrow(0, document.begin, document.length);
        EXPECT_EQ(ids[0].item<int64_t>(), 1 + document.source_begin % 90);
      }
  }
  int64_t end = 0;
  for (const auto& [begin, length] : covered) {
    EXPECT_EQ(begin, end);
    end = begin + length;
  }
  EXPECT_EQ(end, 150);
}

// The same job trains to the end (it used to fail at the step that drew the long document).
TEST(TrainData, ARunWithAnOverlongDocumentFinishes) {
  ScratchDir dir;
  const std::string config = write_job(dir, dir / "run", 30, 1);
  append_long_document(dir, 150);
  const auto result = run_command(train_command(config));
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("[data] 1 document(s) longer than a micro-batch (2 x 32 tokens) "
                               "split into parts"),
            std::string::npos)
      << result.output;
}

// overlong: error fails when the data is read, before step 1, naming the document; with
// on_error: skip the document is skipped and counted instead.
TEST(TrainData, OverlongErrorFailsBeforeStepOneOrSkipsWhenAsked) {
  ScratchDir dir;
  const std::string config = write_job(dir, dir / "run", 2, 1);
  append_long_document(dir, 40);
  const auto refused = run_command(train_command(config) + " data.overlong=error");
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_NE(refused.output.find("data.jsonl:41: a pretokenized record of 40 tokens, longer than "
                                "data.seq_len = 32 (data.overlong: error)"),
            std::string::npos)
      << refused.output;
  EXPECT_FALSE(fs::exists(dir / "run"));
  const auto skipped =
      run_command(train_command(config) + " data.overlong=error data.on_error=skip");
  EXPECT_EQ(skipped.exit_code, 0) << skipped.output;
  EXPECT_NE(skipped.output.find("1 record(s) that fit in no micro-batch skipped"),
            std::string::npos)
      << skipped.output;
}

// Sizes that would allocate without bound are refused at start-up, naming the key.
TEST(TrainData, MicroBatchSizesHaveStatedBounds) {
  ScratchDir dir;
  const std::string config = write_job(dir, dir / "run");
  for (const auto& [setting, message] : std::vector<std::pair<std::string, std::string>>{
           {"data.seq_len=300000000", "data.seq_len: must be in 1..1048576, got 300000000"},
           {"data.micro_batch_rows=100000000", "data.micro_batch_rows: must be in 1..65536"},
           {"data.micro_batch_rows=4096 data.seq_len=8192",
            "= 33554432 tokens per micro-batch, above the bound of 16777216"}}) {
    const auto result = run_command(train_command(config) + " " + setting);
    EXPECT_EQ(result.exit_code, 1) << setting << "\n" << result.output;
    EXPECT_NE(result.output.find(message), std::string::npos) << setting << "\n" << result.output;
  }
  EXPECT_FALSE(fs::exists(dir / "run"));
}

}  // namespace
