#pragma once
// A tiny `tandem train` job for the end-to-end tests: a 2-layer Llama from a config.json and 40
// pre-tokenized documents, and the helpers that run, start and watch it.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tandem/train/checkpoint.h"
#include "test_util.h"

extern char** environ;

namespace tandem::testing {

constexpr int kSteps = 12;  // SIGKILL test: every step saved, all kept

// A tiny Llama and a pre-tokenized dataset written into `dir`; returns the config path.
// `data_keys`: more lines of the data section ("  packing: best_fit\n").
inline std::string write_job(const ScratchDir& dir, const std::string& run_dir, int steps = kSteps,
                             int keep_last = 0, const std::string& data_keys = "") {
  std::ofstream(dir / "model.json") << R"({"model_type": "llama", "vocab_size": 97,
    "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0, "tie_word_embeddings": false})";
  std::mt19937 random(7);
  std::ofstream data(dir / "data.jsonl");
  for (int doc = 0; doc < 40; ++doc) {
    const int length = 5 + static_cast<int>(random() % 20);
    data << "{\"input_ids\": [";
    for (int t = 0; t < length; ++t) data << (t ? "," : "") << random() % 97;
    data << "], \"loss_mask\": [";
    for (int t = 0; t < length; ++t) data << (t ? "," : "") << (t < 2 ? 0 : 1);
    data << "]}\n";
  }
  const std::string config = dir / (std::filesystem::path(run_dir).filename().string() + ".yaml");
  std::ofstream(config) << "model:\n  config: " << (dir / "model.json") << "\n"
                        << "data:\n  path: " << (dir / "data.jsonl") << "\n  format: pretokenized\n"
                        << "  seq_len: 32\n  micro_batch_rows: 2\n  cache_dir: " << (dir / "cache")
                        << "\n"
                        << data_keys << "training:\n  run_dir: " << run_dir
                        << "\n  steps: " << steps
                        << "\n  lr: 0.01\n  warmup_steps: 2\n  micro_batches: 2\n  save_every: 1\n"
                        << "  keep_last: " << keep_last << "\n  seed: 3\n  export: false\n";
  return config;
}

inline std::string train_command(const std::string& config) {
  return tandem_binary() + " --threads 1 train " + config;
}

// Starts `tandem train` in the background; returns its pid.
inline pid_t start_training(const std::string& config) {
  const std::string binary = tandem_binary();
  std::vector<std::string> args = {binary, "--threads", "1", "train", config};
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  EXPECT_EQ(posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

// Waits until `run_dir` holds a committed checkpoint of at least `step`; false on timeout.
inline bool wait_for_step(const std::string& run_dir, int64_t step) {
  for (int i = 0; i < 3000; ++i) {
    for (const auto& [found, path] : tandem::list_checkpoints(run_dir))
      if (found >= step) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace tandem::testing
