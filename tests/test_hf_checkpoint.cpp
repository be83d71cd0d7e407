// HF checkpoint directories: single file, sharded with an index, and the errors for a directory
// whose index, files and config disagree.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <deque>
#include <filesystem>
#include <fstream>

#include "tandem/core/error.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/models/load.h"
#include "test_util.h"

namespace {

using tandem::testing::error_of;

namespace fs = std::filesystem;
using tandem::HfCheckpoint;
using tandem::testing::ScratchDir;

void copy_fixture(const std::string& name, const std::string& to) {
  fs::copy(tandem::testing::model_fixture(name), to, fs::copy_options::recursive);
}

TEST(HfCheckpoint, ShardedFixtureHasTwoFiles) {
  const auto checkpoint = HfCheckpoint::open(tandem::testing::model_fixture("qwen2"));
  EXPECT_EQ(checkpoint.file_paths().size(), 2u);
  EXPECT_TRUE(checkpoint.contains("model.layers.0.self_attn.q_proj.bias"));
  EXPECT_EQ(checkpoint.read("model.norm.weight").scalar_type(), at::kBFloat16);
}

TEST(HfCheckpoint, WriteShardsAndReadBack) {
  ScratchDir dir;
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const char* name : {"w0", "w1", "w2", "w3", "w4"})
    tensors.emplace_back(name,
                         at::randn({16, 8}).to(tensors.size() % 2 ? at::kBFloat16 : at::kFloat));
  tandem::write_hf_weights(dir.path(), tensors,
                           /*max_shard_bytes=*/800);  // 512 | 256+512 | 256+512 bytes
  EXPECT_TRUE(fs::exists(dir / "model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(dir / "model-00001-of-00003.safetensors"));
  const auto checkpoint = HfCheckpoint::open(dir.path());
  for (const auto& [name, tensor] : tensors)
    EXPECT_TRUE(at::equal(checkpoint.read(name), tensor)) << name;
}

TEST(HfCheckpoint, IndexNamingMissingShard) {
  ScratchDir dir;
  copy_fixture("qwen2", dir / "m");
  fs::remove(dir / "m/model-00002-of-00002.safetensors");
  const std::string message = error_of([&] { HfCheckpoint::open(dir / "m"); });
  EXPECT_NE(message.find("model-00002-of-00002.safetensors' listed for"), std::string::npos)
      << message;
}

TEST(HfCheckpoint, IndexMappingTensorToWrongFile) {
  ScratchDir dir;
  copy_fixture("qwen2", dir / "m");
  const std::string index_path = dir / "m/model.safetensors.index.json";
  auto index = nlohmann::json::parse(std::ifstream(index_path));
  auto& map = index["weight_map"];
  const std::string moved = "model.norm.weight";
  map[moved] = map[moved] == "model-00001-of-00002.safetensors"
                   ? "model-00002-of-00002.safetensors"
                   : "model-00001-of-00002.safetensors";
  std::ofstream(index_path) << index.dump();
  const std::string message = error_of([&] { HfCheckpoint::open(dir / "m"); });
  EXPECT_NE(message.find("'model.norm.weight' is mapped to"), std::string::npos) << message;
}

TEST(HfCheckpoint, NoWeightsIsAClearError) {
  ScratchDir dir;
  const std::string message = error_of([&] { HfCheckpoint::open(dir.path()); });
  EXPECT_NE(message.find("no model.safetensors"), std::string::npos) << message;
}

TEST(LoadCausalLm, ConfigAndWeightsMustAgree) {
  ScratchDir dir;
  copy_fixture("llama3", dir / "m");
  const std::string config_path = dir / "m/config.json";
  const auto original = nlohmann::json::parse(std::ifstream(config_path));

  auto config = original;
  config["intermediate_size"] = config["intermediate_size"].get<int64_t>() * 2;
  std::ofstream(config_path) << config.dump();
  std::string message = error_of([&] { tandem::load_causal_lm(dir / "m", at::kFloat, at::kCPU); });
  EXPECT_NE(message.find("mlp.gate_proj.weight' has shape"), std::string::npos) << message;

  config = original;
  config["num_hidden_layers"] = config["num_hidden_layers"].get<int64_t>() + 1;
  if (config.contains("layer_types")) config["layer_types"].push_back("full_attention");
  std::ofstream(config_path) << config.dump();
  message = error_of([&] { tandem::load_causal_lm(dir / "m", at::kFloat, at::kCPU); });
  EXPECT_NE(message.find("missing tensors"), std::string::npos) << message;

  config = original;
  config["num_hidden_layers"] = config["num_hidden_layers"].get<int64_t>() - 1;
  if (config.contains("layer_types")) config["layer_types"].erase(config["layer_types"].size() - 1);
  std::ofstream(config_path) << config.dump();
  message = error_of([&] { tandem::load_causal_lm(dir / "m", at::kFloat, at::kCPU); });
  EXPECT_NE(message.find("tensors the config does not account for"), std::string::npos) << message;
}

// Rank-0 loading without processes: the reading side records what it broadcasts, the receiving
// side replays it (the order of a real broadcast); tests/e2e_distributed.sh does it over c10d.
struct Channel {
  std::deque<std::string> texts;
  std::deque<at::Tensor> tensors;
  std::vector<std::string> log_lines;
};
class Recording : public tandem::CheckpointBroadcast {
 public:
  explicit Recording(Channel& channel) : channel_(channel) {}
  bool reads_files() const override { return true; }
  void broadcast_text(std::string& text) override { channel_.texts.push_back(text); }
  void broadcast_tensor(at::Tensor& tensor) override { channel_.tensors.push_back(tensor.clone()); }
  void log(const std::string& line) override { channel_.log_lines.push_back("reader " + line); }

 private:
  Channel& channel_;
};
class Replaying : public tandem::CheckpointBroadcast {
 public:
  explicit Replaying(Channel& channel) : channel_(channel) {}
  bool reads_files() const override { return false; }
  void broadcast_text(std::string& text) override {
    text = channel_.texts.front();
    channel_.texts.pop_front();
  }
  void broadcast_tensor(at::Tensor& tensor) override {
    const at::Tensor sent = channel_.tensors.front();
    channel_.tensors.pop_front();
    ASSERT_EQ(sent.scalar_type(), tensor.scalar_type());  // agreed from the header
    ASSERT_EQ(sent.sizes(), tensor.sizes());
    tensor.copy_(sent);
  }
  void log(const std::string& line) override { channel_.log_lines.push_back("receiver " + line); }

 private:
  Channel& channel_;
};

TEST(CheckpointBroadcast, TheReceivingRankGetsBitIdenticalWeightsWithoutOpeningAFile) {
  ScratchDir dir;
  copy_fixture("llama3", dir / "m");
  Channel channel;
  Recording reader(channel);
  tandem::RunContext reading;
  reading.rank_zero = &reader;
  const tandem::CausalLM read = tandem::load_causal_lm(dir / "m", at::kBFloat16, reading);
  const size_t sent = channel.tensors.size();
  EXPECT_GT(sent, 0u);
  // The receiver cannot open anything: the directory is gone.
  fs::rename(dir / "m", dir / "gone");
  fs::create_directories(dir / "m");
  fs::copy_file(dir / "gone/config.json", dir / "m/config.json");
  Replaying receiver(channel);
  tandem::RunContext receiving;
  receiving.rank_zero = &receiver;
  const tandem::CausalLM received = tandem::load_causal_lm(dir / "m", at::kBFloat16, receiving);
  EXPECT_TRUE(channel.tensors.empty() && channel.texts.empty());
  const auto expected = read->named_parameters();
  int compared = 0;
  for (const auto& parameter : received->named_parameters()) {
    EXPECT_TRUE(parameter.value().equal(expected[parameter.key()])) << parameter.key();
    EXPECT_EQ(parameter.value().scalar_type(), at::kBFloat16);
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(expected.size()));
  ASSERT_EQ(channel.log_lines.size(), 2u);
  EXPECT_EQ(channel.log_lines[0], "reader opened " + (dir / "m") + "/model.safetensors");
  EXPECT_EQ(channel.log_lines[1].rfind("receiver received " + (dir / "m") + " (", 0), 0u)
      << channel.log_lines[1];
}

TEST(CheckpointBroadcast, AnOpenErrorReachesEveryRankWithTheSameWords) {
  ScratchDir dir;
  Channel channel;
  Recording reader(channel);
  const std::string on_reader = error_of([&] { HfCheckpoint::open(dir.path(), &reader); });
  Replaying receiver(channel);
  const std::string on_receiver = error_of([&] { HfCheckpoint::open(dir.path(), &receiver); });
  EXPECT_NE(on_reader.find("no model.safetensors"), std::string::npos) << on_reader;
  EXPECT_EQ(on_receiver, on_reader);
}

}  // namespace
