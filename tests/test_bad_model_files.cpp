// Model files that disagree with themselves or describe impossible sizes (issue 19): each is an
// error naming the file before anything large is allocated.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tandem/core/run_context.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/io/tensor_io.h"
#include "tandem/models/decoder_config.h"
#include "tandem/models/eagle3.h"
#include "tandem/models/load.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using tandem::testing::error_of;
using tandem::testing::ScratchDir;

std::string copy_llama3(const ScratchDir& dir) {
  const std::string to = dir / "m";
  fs::copy(tandem::testing::model_fixture("llama3"), to, fs::copy_options::recursive);
  return to;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// An int32 tensor where a float weight belongs is refused, not converted.
TEST(BadModelFiles, AnIntegerWeightIsRefused) {
  ScratchDir dir;
  const std::string model = copy_llama3(dir);
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  {
    const tandem::HfCheckpoint stored = tandem::HfCheckpoint::open(model);
    for (const std::string& name : stored.names()) {
      const at::Tensor tensor = stored.read(name);
      tensors.emplace_back(name, name == "model.norm.weight" ? tensor.to(at::kInt) : tensor);
    }
  }
  tandem::write_tensors(model + "/model.safetensors", tensors);
  const std::string message =
      error_of([&] { tandem::load_causal_lm(model, at::kFloat, tandem::RunContext{}); });
  EXPECT_NE(message.find("tensor 'model.norm.weight' is stored as I32; a model weight must be "
                         "F32, F16 or BF16"),
            std::string::npos)
      << message;
}

// config.json sizes that disagree with the weights fail on the headers, before the model is
// allocated: a vocabulary of 16 M rows x 60,000 wide would be 3.6 TiB.
TEST(BadModelFiles, SizesThatDisagreeWithTheWeightsFailBeforeAllocation) {
  ScratchDir dir;
  const std::string model = copy_llama3(dir);
  nlohmann::json config = read_json(model + "/config.json");
  config["vocab_size"] = 16000000;
  config["hidden_size"] = 60000;
  config["head_dim"] = 64;
  std::ofstream(model + "/config.json") << config.dump();
  const auto start = std::chrono::steady_clock::now();
  const std::string message =
      error_of([&] { tandem::load_causal_lm(model, at::kFloat, tandem::RunContext{}); });
  EXPECT_NE(message.find("[checkpoint] " + model + ": tensor '"), std::string::npos) << message;
  EXPECT_NE(message.find("but the config implies"), std::string::npos) << message;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 30.0);
}

// A model from config alone (a fresh student) larger than the machine's memory is refused
// before its pages are touched.
TEST(BadModelFiles, AModelLargerThanMemoryIsRefusedByName) {
  nlohmann::json config = read_json(tandem::testing::model_fixture("llama3") + "/config.json");
  config["vocab_size"] = 1 << 24;
  config["hidden_size"] = 1 << 16;
  config["head_dim"] = 128;
  const tandem::DecoderConfig decoder = tandem::DecoderConfig::from_json(config, "big.json");
  const std::string message = error_of([&] {
    tandem::allocate_causal_lm(decoder, at::TensorOptions().dtype(at::kFloat), "big.json");
  });
  EXPECT_NE(message.find("[model] big.json: the model it describes has "), std::string::npos)
      << message;
  EXPECT_NE(message.find("GiB of memory (are its sizes right?)"), std::string::npos) << message;
}

// A draft's config.json sizes are bounded too (the fc layer is 3 x target_hidden_size wide).
TEST(BadModelFiles, ADraftsTargetHiddenSizeIsBounded) {
  tandem::Eagle3Config config;
  config.layer = tandem::DecoderConfig::from_json(
      read_json(tandem::testing::model_fixture("llama3") + "/config.json"), "draft.json");
  config.layer.num_hidden_layers = 1;
  config.layer.sliding_window.resize(1);
  config.draft_vocab_size = 32;
  config.aux_layer_ids = {0, 1, 2};
  config.target_hidden_size = int64_t{1000000000000};
  const std::string message = error_of([&] { config.validate("draft.json"); });
  EXPECT_NE(message.find("draft.json: target_hidden_size must be in 1..65536, got 1000000000000"),
            std::string::npos)
      << message;
}

}  // namespace
