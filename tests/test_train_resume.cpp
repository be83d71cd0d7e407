// End-to-end runs of `tandem train`: a run killed with SIGKILL at a random step, or stopped by
// SIGTERM, then resumed, ends bit-identical to an uninterrupted run (weights, optimizer state,
// sampler position, metrics); unknown config keys fail before any work.
#include <ATen/ATen.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "step_configs.h"
#include "tandem/core/device.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/train/checkpoint.h"
#include "test_util.h"
#include "tiny_train_job.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using tandem::testing::run_command;
using tandem::testing::ScratchDir;

constexpr int kLongSteps = 80;  // SIGTERM test: long enough that the signal lands mid-run
using tandem::testing::kSteps;
using tandem::testing::start_training;
using tandem::testing::train_command;
using tandem::testing::wait_for_step;
using tandem::testing::write_job;

std::map<std::string, at::Tensor> final_tensors(const std::string& run_dir, int steps) {
  const auto search = tandem::find_latest_valid(run_dir);
  EXPECT_TRUE(search.checkpoint.has_value());
  EXPECT_EQ(search.checkpoint->step(), steps);
  std::map<std::string, at::Tensor> out;
  for (const char* file : {"model.safetensors", "optimizer.safetensors", "rng.safetensors"})
    for (auto& [name, tensor] : search.checkpoint->read_tensors(file))
      out[std::string(file) + ":" + name] = tensor;
  return out;
}

// metrics.jsonl without wall-clock fields, which legitimately differ between runs.
std::vector<std::string> deterministic_metrics(const std::string& run_dir) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    auto json = nlohmann::json::parse(line);
    for (const char* timing :
         {"tokens_per_s", "time/step", "time/data", "time/forward", "time/backward",
          "time/optimizer", "time/validation", "peak_rss_mib"})
      json.erase(timing);
    lines.push_back(json.dump());
  }
  return lines;
}

void expect_identical_runs(const std::string& a, const std::string& b, int steps = kSteps) {
  const auto first = final_tensors(a, steps), second = final_tensors(b, steps);
  ASSERT_EQ(first.size(), second.size());
  for (const auto& [name, tensor] : first) {
    ASSERT_TRUE(second.count(name)) << name;
    EXPECT_TRUE(tensor.sizes() == second.at(name).sizes() &&
                tensor.scalar_type() == second.at(name).scalar_type() &&
                std::memcmp(tensor.data_ptr(), second.at(name).data_ptr(), tensor.nbytes()) == 0)
        << name << " differs after resume";
  }
  const auto metrics_a = deterministic_metrics(a), metrics_b = deterministic_metrics(b);
  EXPECT_EQ(metrics_a.size(), static_cast<size_t>(steps));
  EXPECT_EQ(metrics_a, metrics_b);
  const auto state_a = tandem::find_latest_valid(a).checkpoint->read_text("trainer_state.json");
  const auto state_b = tandem::find_latest_valid(b).checkpoint->read_text("trainer_state.json");
  EXPECT_EQ(state_a, state_b);  // step, documents_seen, tokens_seen, sampler position
}

// `job(run_dir)` writes a config of kSteps steps, each saved, and returns its path: run straight,
// and killed with SIGKILL after a random committed step then resumed, the two give the same
// bytes (weights, optimizer, RNG, metrics, trainer state).
void expect_sigkill_resume_is_bit_identical(
    const ScratchDir& dir, const std::function<std::string(const std::string&)>& job) {
  const std::string straight = job(dir / "straight");
  const auto uninterrupted = run_command(train_command(straight));
  ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.output;

  const std::string killed = job(dir / "killed");
  // The kill point: reproducible from a seed (TANDEM_TEST_SEED to replay one, printed below).
  const char* seed_env = std::getenv("TANDEM_TEST_SEED");
  const unsigned seed = seed_env ? static_cast<unsigned>(std::stoul(seed_env))
                                 : static_cast<unsigned>(std::random_device{}());
  std::mt19937 random(seed);
  // In the first half, so that half the run (steps that each save) is still ahead of the kill.
  const int64_t kill_after = 1 + static_cast<int64_t>(random() % (kSteps / 2));
  std::printf("[resume] TANDEM_TEST_SEED=%u: kill after step %ld is committed\n", seed,
              static_cast<long>(kill_after));
  const pid_t pid = start_training(killed);
  ASSERT_TRUE(wait_for_step(dir / "killed", kill_after));
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  // The kill must have landed on a running trainer, before its last step was saved: otherwise
  // the resume below would test nothing.
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "the run ended on its own before the kill (exit status " << status << ")";
  const auto interrupted = tandem::find_latest_valid(dir / "killed").checkpoint;
  ASSERT_TRUE(interrupted.has_value());
  ASSERT_LT(interrupted->step(), kSteps) << "the kill landed after the run's last checkpoint";
  const auto resumed = run_command(train_command(killed));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resuming from"), std::string::npos) << resumed.output;
  std::printf("[resume] killed at step %ld (>= %ld)\n", static_cast<long>(interrupted->step()),
              static_cast<long>(kill_after));
  expect_identical_runs(dir / "straight", dir / "killed");
}

TEST(TrainResume, SigkillAtRandomStepThenResumeIsBitIdentical) {
  ScratchDir dir;
  expect_sigkill_resume_is_bit_identical(
      dir, [&](const std::string& run_dir) { return write_job(dir, run_dir); });
}

// A draft objective: DSpark against the fixture target, its anchors drawn per document and epoch.
TEST(TrainResume, SigkillThenResumeIsBitIdenticalForADSparkDraft) {
  ScratchDir dir;
  const tandem::testing::StepConfigs configs;
  expect_sigkill_resume_is_bit_identical(dir, [&](const std::string& run_dir) {
    const std::string path = run_dir + ".yaml";
    std::ofstream(path) << configs.config("dspark", "run_dir: " + run_dir +
                                                        ", steps: " + std::to_string(kSteps) +
                                                        ", save_every: 1, lr: 1.0e-3, "
                                                        "export: false");
    return path;
  });
}

// With validation every step and the best checkpoint kept: the validation metrics, best.json and
// the kept checkpoints come out the same after a kill.
TEST(TrainResume, SigkillThenResumeIsBitIdenticalWithValidation) {
  ScratchDir dir;
  const tandem::testing::StepConfigs configs;
  expect_sigkill_resume_is_bit_identical(dir, [&](const std::string& run_dir) {
    const std::string path = run_dir + ".yaml";
    std::ofstream(path) << configs.config(
        "dspark",
        "run_dir: " + run_dir + ", steps: " + std::to_string(kSteps) +
            ", save_every: 1, keep_last: 2, lr: 1.0e-3, export: false, eval_every: 1, "
            "best_metric: val/sim_accept_length",
        ", validation: " + configs.docs_path());
    return path;
  });
  std::ifstream straight(dir / "straight/best.json"), killed(dir / "killed/best.json");
  const std::string a{std::istreambuf_iterator<char>(straight), {}};
  const std::string b{std::istreambuf_iterator<char>(killed), {}};
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, b);
  std::vector<int64_t> kept_a, kept_b;
  for (const auto& entry : tandem::list_checkpoints(dir / "straight"))
    kept_a.push_back(entry.first);
  for (const auto& entry : tandem::list_checkpoints(dir / "killed")) kept_b.push_back(entry.first);
  EXPECT_EQ(kept_a, kept_b);
}

// Best-fit packing: the records drawn ahead of the sampler (the pool) are saved with every
// checkpoint and restored, so the resumed run packs the same micro-batches.
TEST(TrainResume, SigkillThenResumeIsBitIdenticalWithBestFitPacking) {
  ScratchDir dir;
  expect_sigkill_resume_is_bit_identical(dir, [&](const std::string& run_dir) {
    return write_job(dir, run_dir, kSteps, 0, "  packing: best_fit\n  packing_lookahead: 2\n");
  });
  // The pool held records at most saved steps (it empties only at the end of a pass), so the
  // resume above restored one.
  int holding = 0;
  for (const auto& entry : tandem::list_checkpoints(dir / "straight")) {
    const auto state = nlohmann::json::parse(
        tandem::CheckpointReader::open(entry.second).read_text("trainer_state.json"));
    holding += state.at("pending").empty() ? 0 : 1;
  }
  EXPECT_GE(holding, kSteps / 2);
}

TEST(TrainResume, SigtermSavesExitsWithCode75AndResumesBitIdentical) {
  ScratchDir dir;
  const std::string straight = write_job(dir, dir / "straight", kLongSteps, 2);
  ASSERT_EQ(run_command(train_command(straight)).exit_code, 0);

  const std::string stopped = write_job(dir, dir / "stopped", kLongSteps, 2);
  const pid_t pid = start_training(stopped);
  ASSERT_TRUE(wait_for_step(dir / "stopped", 2));
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 75) << "SIGTERM must save and exit with 75";
  const auto stopped_at = tandem::find_latest_valid(dir / "stopped").checkpoint->step();
  EXPECT_LT(stopped_at, kLongSteps);
  const auto resumed = run_command(train_command(stopped));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  expect_identical_runs(dir / "straight", dir / "stopped", kLongSteps);
}

// docs_per_step: each step keeps drawing micro-batches until it has at least that many
// documents, and the step's loss is still normalised by its own total loss tokens.
TEST(TrainResume, DocsPerStepDrawsMicroBatchesUntilTheTarget) {
  ScratchDir dir;
  const std::string config = write_job(dir, dir / "docs");
  const auto result =
      run_command(train_command(config) + " training.docs_per_step=9 training.steps=4");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  std::ifstream in(dir / "docs/metrics.jsonl");
  int steps = 0;
  int64_t seen = 0;
  for (std::string line; std::getline(in, line); ++steps) {
    const auto json = nlohmann::json::parse(line);
    const int64_t documents = json.at("num_documents").get<int64_t>();
    EXPECT_GE(documents, 9) << line;
    seen += documents;
    EXPECT_EQ(json.at("documents_seen").get<int64_t>(), seen) << line;
  }
  EXPECT_EQ(steps, 4);
}

// Settings out of range are refused at start-up, naming the key (issue 19, class 9).
TEST(TrainResume, OutOfRangeSettingsFailBeforeAnyWork) {
  ScratchDir dir;
  const std::string config = write_job(dir, dir / "run");
  for (const auto& [setting, message] : std::vector<std::pair<std::string, std::string>>{
           {"optimizer.beta1=2", "optimizer.beta1: must be in [0, 1), got 2"},
           {"optimizer.beta2=1", "optimizer.beta2: must be in [0, 1), got 1"},
           {"optimizer.eps=0", "optimizer.eps: must be a finite number > 0"},
           {"training.lr=.inf", "training.lr: must be a finite number >= 0"},
           {"training.save_every=-1", "training.save_every: must be >= 0"},
           {"training.keep_last=-2", "training.keep_last: must be >= 0"}}) {
    const auto result = run_command(train_command(config) + " " + setting);
    EXPECT_EQ(result.exit_code, 1) << setting << "\n" << result.output;
    EXPECT_NE(result.output.find(message), std::string::npos) << setting << "\n" << result.output;
  }
  EXPECT_FALSE(fs::exists(dir / "run"));
}

TEST(TrainResume, UnknownConfigKeyFailsBeforeAnyWork) {
  ScratchDir dir;
  const std::string config = write_job(dir, dir / "run");
  const auto result = run_command(train_command(config) + " training.learning_rate=1");
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("unknown key training.learning_rate"), std::string::npos)
      << result.output;
  EXPECT_FALSE(fs::exists(dir / "run"));
}

// training.device names a GPU this machine lacks: an error naming the key, before any work.
TEST(TrainDevice, AMissingGpuFailsBeforeAnyWork) {
  if (tandem::cuda_device_count() > 0) GTEST_SKIP() << "a GPU is visible: cuda is not missing here";
  ScratchDir dir;
  const std::string config = write_job(dir, dir / "run");
  const auto result = run_command(train_command(config) + " training.device=cuda");
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("training.device = cuda: no CUDA device is visible"),
            std::string::npos)
      << result.output;
  EXPECT_FALSE(fs::exists(dir / "run"));
}

// training.mfu=true on the CPU: the matmul peak is measured at start and every step logs its
// model FLOP utilisation, a fraction of that peak.
TEST(TrainDevice, MfuIsLoggedAgainstTheMeasuredPeakWhenAsked) {
  ScratchDir dir;
  const std::string config = write_job(dir, dir / "run", 2);
  const auto result = run_command(train_command(config) + " training.device=cpu training.mfu=true");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("fp32 matmul peak on cpu"), std::string::npos) << result.output;
  std::ifstream in(dir / "run/metrics.jsonl");
  int steps = 0;
  for (std::string line; std::getline(in, line); ++steps) {
    const double mfu = nlohmann::json::parse(line).at("mfu").get<double>();
    EXPECT_GT(mfu, 0.0) << line;
    EXPECT_LT(mfu, 1.0) << line;
  }
  EXPECT_EQ(steps, 2);
}

// --dry-run: the plan of a run, checked against its data and checkpoints, and nothing trained.
// The model of write_job: embeddings and lm_head 97 x 32 each, 2 layers of q/o 32 x 32, k/v 32 x
// 16, MLP 3 x 32 x 64 and two norms, a final norm: 24,800 parameters, fp32; each carries a
// gradient and two AdamW moments (16 bytes): 0.38 MiB.
TEST(TrainDryRun, PrintsThePlanAndTrainsNothing) {
  ScratchDir dir;
  const std::string config = write_job(dir, dir / "run");
  const auto result = run_command(train_command(config) + " --dry-run training.device=cpu");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  for (const char* line :
       {"trained model: 24,800 parameters (24,800 trainable), Float", "frozen: none, 0 parameters",
        "memory per rank: trained 0.38 MiB", "data: ", "40 records",
        "device cpu, 1 rank (ddp: 1 replica x 1 shard)", "nothing was trained"})
    EXPECT_NE(result.output.find(line), std::string::npos) << line << "\n" << result.output;
  EXPECT_FALSE(fs::exists(dir / "run"));
}

// Drafts against mixture-of-experts targets plan on the meta device like any other (the EAGLE-3
// draft used to copy its vocab map into memory it does not have there). The MiniMax-M2 fixture's
// frozen parameters by hand: embeddings and lm_head 512 x 64 each + final norm 64 = 65,600; per
// layer q/o 128 x 64 each, k/v 64 x 64 each, q_norm 128, k_norm 64, two norms 128, router 8 x 64,
// experts 8 x 64 x 64 + 8 x 64 x 32 = 74,560; 4 layers: 363,840.
TEST(TrainDryRun, DraftsAgainstMixtureOfExpertsTargets) {
  ScratchDir dir;
  {
    std::ofstream docs(dir / "docs.jsonl");
    for (int d = 0; d < 8; ++d) {
      nlohmann::json ids = nlohmann::json::array(), mask = nlohmann::json::array();
      for (int t = 0; t < 20; ++t) ids.push_back(3 + (d * 37 + t * 11) % 500), mask.push_back(1);
      docs << nlohmann::json{{"input_ids", ids}, {"loss_mask", mask}}.dump() << "\n";
    }
  }
  const std::string data =
      "data: {path: " + (dir / "docs.jsonl") +
      ", format: pretokenized, seq_len: 32, micro_batch_rows: 2, cache_dir: " + (dir / "cache") +
      "}\n";
  struct Case {
    std::string objective, fixture, draft, frozen;
  };
  for (const Case& c :
       {Case{"eagle3", "qwen3_moe", "{aux_layer_ids: [0, 1, 2], draft_vocab_size: 64}",
             "frozen: target, "},
        Case{"dflash", "minimax_m2", "{num_layers: 2, block_size: 4}",
             "frozen: target, 363,840 parameters"},
        Case{"dspark", "qwen3_moe",
             "{num_layers: 2, block_size: 4, markov_rank: 8, mask_token_id: 511}",
             "frozen: target, "}}) {
    const std::string config = dir / (c.objective + ".yaml");
    std::ofstream(config) << "target: {path: " << tandem::testing::model_fixture(c.fixture)
                          << ", dtype: fp32}\ndraft: " << c.draft << "\n"
                          << data << "training: {objective: " << c.objective
                          << ", run_dir: " << (dir / (c.objective + "-run"))
                          << ", steps: 2, lr: 1.0e-3}\n";
    const auto result = run_command(train_command(config) + " --dry-run");
    ASSERT_EQ(result.exit_code, 0) << c.objective << "\n" << result.output;
    for (const std::string& line : {c.frozen, std::string("nothing was trained")})
      EXPECT_NE(result.output.find(line), std::string::npos) << line << "\n" << result.output;
    EXPECT_FALSE(fs::exists(dir / (c.objective + "-run")));
  }
}

// A checkpoint that does not fit its config fails the dry run, naming the tensor.
TEST(TrainDryRun, AMismatchedCheckpointIsAnErrorNamingTheTensor) {
  ScratchDir dir;
  const std::string config = write_job(dir, dir / "run");
  const std::string fixture = tandem::testing::model_fixture("llama3");
  fs::create_directories(dir / "model");
  fs::copy_file(fixture + "/model.safetensors", dir / "model/model.safetensors");
  std::ifstream in(fixture + "/config.json");
  nlohmann::json model = nlohmann::json::parse(in);
  model["intermediate_size"] = 96;  // the stored MLP is 128 wide
  std::ofstream(dir / "model/config.json") << model.dump();
  // The same job, starting from that checkpoint instead of a fresh model.
  std::ifstream job(config);
  std::string text((std::istreambuf_iterator<char>(job)), std::istreambuf_iterator<char>());
  const std::string fresh = "  config: " + (dir / "model.json");
  ASSERT_NE(text.find(fresh), std::string::npos);
  text.replace(text.find(fresh), fresh.size(), "  path: " + (dir / "model"));
  std::ofstream(dir / "from_checkpoint.yaml") << text;
  const auto result = run_command(train_command(dir / "from_checkpoint.yaml") + " --dry-run");
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("has shape [128, 64] but the config implies [96, 64]"),
            std::string::npos)
      << result.output;
}

}  // namespace

TEST(TrainExport, DtypeCastsTheTrainedWeightsBeforeWriting) {
  ScratchDir dir;
  const std::string run = dir / "run";
  ASSERT_EQ(run_command(train_command(write_job(dir, run, 2))).exit_code, 0);
  const std::string export_command =
      tandem::testing::tandem_binary() + " --threads 1 export " + run;
  ASSERT_EQ(run_command(export_command + " --out " + (dir / "fp32")).exit_code, 0);
  ASSERT_EQ(run_command(export_command + " --dtype bf16 --out " + (dir / "bf16")).exit_code, 0);
  const auto fp32 = tandem::HfCheckpoint::open(dir / "fp32");
  const auto bf16 = tandem::HfCheckpoint::open(dir / "bf16");
  ASSERT_EQ(fp32.names(), bf16.names());
  for (const std::string& name : fp32.names()) {
    const at::Tensor trained = fp32.read(name), cast = bf16.read(name);
    EXPECT_EQ(trained.scalar_type(), at::kFloat) << name;
    EXPECT_EQ(cast.scalar_type(), at::kBFloat16) << name;
    EXPECT_TRUE(at::equal(trained.to(at::kBFloat16), cast)) << name;  // round to nearest even
  }
  std::ifstream config_file(dir / "bf16/config.json");
  EXPECT_EQ(nlohmann::json::parse(config_file).at("torch_dtype"), "bfloat16");

  // An unknown dtype is refused before anything is read or written.
  const auto refused = run_command(export_command + " --dtype fp8 --out " + (dir / "fp8"));
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("unknown dtype 'fp8'"), std::string::npos) << refused.output;
  EXPECT_FALSE(fs::exists(dir / "fp8"));
}
