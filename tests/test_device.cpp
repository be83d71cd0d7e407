// The device switch (training.device / --device) and the CUDA path. The CPU tests run
// everywhere; the Cuda* tests run where a GPU is visible (scripts/gpu_check.sh runs them on the
// GPU machine) and skip with the reason printed elsewhere.
//  - device specs resolve, and a GPU that is not there is a clear error;
//  - one training step of every objective is reproducible on the CPU (the harness the CUDA
//    tests use), and on CUDA it equals the CPU step (fp32: loss and every gradient);
//  - frozen weights reach the GPU bit-identical; NCCL runs every collective in a group of one,
//    host tensors over Gloo. (Logits on CUDA against transformers: test_decoder_parity.cpp.)
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "tandem/core/config.h"
#include "tandem/core/device.h"
#include "tandem/data/sampler.h"
#include "tandem/dist/process_group.h"
#include "tandem/dist/sharding.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/models/frozen.h"
#include "tandem/objectives/objective.h"
#include "tandem/objectives/sft.h"
#include "tandem/train/training_data.h"
#include "forked_ranks.h"
#include "test_util.h"

namespace {

using tandem::testing::error_of;
using tandem::testing::ScratchDir;

// Skips a CUDA test with the reason, where no GPU is visible.
#define SKIP_WITHOUT_CUDA()                                                                   \
  if (tandem::cuda_device_count() == 0)                                                       \
  GTEST_SKIP() << "no CUDA device visible to this process (CPU machine): the CUDA path is "  \
                  "checked by scripts/gpu_check.sh on a GPU"

TEST(Device, SpecsResolveOnThisMachine) {
  EXPECT_EQ(tandem::resolve_device("cpu", 0, "training.device"), at::Device(at::kCPU));
  const at::Device automatic = tandem::resolve_device("auto", 0, "training.device");
  EXPECT_EQ(automatic.is_cuda(), tandem::cuda_device_count() > 0);
  const std::string bad = error_of([] { tandem::resolve_device("gpu", 0, "run.yaml: training.device"); });
  EXPECT_NE(bad.find("run.yaml: training.device: 'gpu' is not one of auto, cpu, cuda, cuda:N"),
            std::string::npos)
      << bad;
  EXPECT_NE(error_of([] { tandem::resolve_device("cuda:x", 0, "--device"); }).find("cuda:N"),
            std::string::npos);
}

TEST(Device, AGpuThatIsNotThereIsAClearError) {
  const int64_t gpus = tandem::cuda_device_count();
  const std::string missing = error_of([&] { tandem::resolve_device("cuda:" + std::to_string(gpus), 0, "--device"); });
  EXPECT_NE(missing.find("--device = cuda:" + std::to_string(gpus)), std::string::npos) << missing;
  if (gpus == 0) {
    EXPECT_NE(missing.find("no CUDA device is visible"), std::string::npos) << missing;
    EXPECT_NE(error_of([] { tandem::resolve_device("cuda", 0, "training.device"); })
                  .find("use cpu, or auto"),
              std::string::npos);
  } else {
    EXPECT_NE(missing.find("does not exist"), std::string::npos) << missing;
  }
}

TEST(Device, FrozenModelsDefaultToBf16OnAGpuOnly) {
  EXPECT_EQ(tandem::frozen_dtype_default(at::Device(at::kCPU)), "fp32");
  EXPECT_EQ(tandem::frozen_dtype_default(at::Device(at::kCUDA, 0)), "bf16");
}

TEST(Device, ABatchAlreadyOnTheDeviceIsNotCopied) {
  tandem::PackingOptions packing;
  packing.seq_len = 8;
  const tandem::PackedBatch batch =
      tandem::pack_documents({{{5, 6, 7, 8}, {1, 1, 1, 1}, "a"}}, packing);
  const tandem::PackedBatch same = batch.to(at::kCPU);
  EXPECT_TRUE(same.input_ids.is_same(batch.input_ids));
  EXPECT_EQ(same.documents.size(), batch.documents.size());
}

// ---------------------------------------------------------------------------------------------
// One training step of an objective, from a config, on a device: what the CUDA tests compare
// with the CPU. The trainable model is initialised from the same seed on either device.

struct StepResult {
  double loss = 0;
  std::vector<std::pair<std::string, at::Tensor>> gradients;  // on the CPU, fp32
};

StepResult one_step(const std::string& yaml, const at::Device& device) {
  const tandem::Config config = tandem::Config::parse(yaml, "step.yaml");
  const tandem::TrainingData data = tandem::read_training_data(config);
  at::manual_seed(0);
  std::unique_ptr<tandem::Objective> objective = tandem::make_objective(config, device);
  objective->attach_data({data.dataset ? &*data.dataset : nullptr,
                          data.dataset ? nullptr : &data.rollouts, data.cache_dir,
                          data.packing.seq_len});
  tandem::SamplerOptions sampler_options;
  sampler_options.dataset_size = data.num_records();
  tandem::Sampler sampler(sampler_options);
  const tandem::PackedBatch batch = tandem::next_micro_batch(sampler, data);
  const tandem::StepTotals totals = objective->count(batch);
  tandem::ObjectiveOutput output = objective->compute(batch.to(device), totals);
  output.loss.backward();
  StepResult result;
  result.loss = output.loss.item<double>();
  for (const auto& [name, parameter] : tandem::trainable_parameters(objective->trainable())) {
    EXPECT_EQ(parameter.device(), device) << name;
    EXPECT_TRUE(parameter.grad().defined()) << name << " has no gradient";
    if (parameter.grad().defined())
      result.gradients.emplace_back(name, parameter.grad().to(at::kCPU, at::kFloat));
  }
  return result;
}

// max |a - b| / max |b| per gradient must stay within `tolerance` (0: equal).
void expect_same_step(const StepResult& a, const StepResult& b, double tolerance) {
  EXPECT_NEAR(a.loss, b.loss, tolerance * std::max(1.0, std::abs(b.loss)));
  ASSERT_EQ(a.gradients.size(), b.gradients.size());
  ASSERT_FALSE(a.gradients.empty());
  for (size_t i = 0; i < a.gradients.size(); ++i) {
    ASSERT_EQ(a.gradients[i].first, b.gradients[i].first);
    const at::Tensor& got = a.gradients[i].second;
    const at::Tensor& want = b.gradients[i].second;
    const double scale = std::max(want.abs().max().item<double>(), 1e-12);
    const double error = (got - want).abs().max().item<double>() / scale;
    EXPECT_LE(error, tolerance) << a.gradients[i].first;
  }
}

// The data and configs of one step of each objective, on the fixture models.
class StepConfigs {
 public:
  StepConfigs() {
    std::mt19937 random(0);
    std::ofstream docs(dir_ / "docs.jsonl"), rollouts(dir_ / "rollouts.jsonl");
    for (int d = 0; d < 8; ++d) {
      const int length = 20 + static_cast<int>(random() % 12);
      std::string ids, mask, completion, logprobs;
      for (int t = 0; t < length; ++t) {
        ids += (t ? "," : "") + std::to_string(3 + random() % 509);
        mask += std::string(t ? "," : "") + (t < 3 ? "0" : "1");
      }
      docs << R"({"input_ids": [)" << ids << R"(], "loss_mask": [)" << mask << "]}\n";
      for (int t = 0; t < 10; ++t) {
        completion += (t ? "," : "") + std::to_string(3 + random() % 509);
        logprobs += std::string(t ? "," : "") + "-" + std::to_string(1 + random() % 5);
      }
      rollouts << R"({"prompt_ids": [5, 6, 7, 8], "completion_ids": [)" << completion
               << R"(], "old_logprobs": [)" << logprobs << R"(], "advantage": )"
               << (d % 2 ? "0.5" : "-0.5") << "}\n";
    }
    std::ifstream all(tandem::testing::source_path("data/demo/preference.jsonl"));
    std::ofstream pairs(dir_ / "pairs.jsonl");
    std::string line;
    for (int i = 0; i < 4 && std::getline(all, line); ++i) pairs << line << "\n";
    // A vocab-4096 policy for the demo tokenizer's preference pairs: the demo student shape.
    tandem::SftOptions fresh;
    fresh.model_config = tandem::testing::source_path("configs/demo-student-model.json");
    fresh.seed = 3;
    tandem::export_causal_lm(tandem::make_causal_lm(fresh), (dir_ / "policy"));
  }

  std::string data(const std::string& extra = "") const {
    return "data: {path: " + (dir_ / "docs.jsonl") + ", format: pretokenized, seq_len: 32, " +
           "micro_batch_rows: 2, cache_dir: " + (dir_ / "cache") + extra + "}\n";
  }
  std::string config(const std::string& objective) const {
    const std::string llama = tandem::testing::model_fixture("llama3");
    const std::string qwen3 = tandem::testing::model_fixture("qwen3");
    const std::string training = "training: {objective: " + objective + ", seed: 0}\n";
    if (objective == "sft")
      return "model: {path: " + llama + "}\nloss: {chunk_tokens: 16}\n" + data() + training;
    if (objective == "eagle3")
      return "target: {path: " + llama + "}\ndraft: {aux_layer_ids: [0, 1, 2], ttt_length: 3, "
             "draft_vocab_size: 128, intermediate_size: 96}\n" + data() + training;
    if (objective == "dflash")
      return "target: {path: " + qwen3 + "}\ndraft: {num_layers: 2, target_layer_ids: [0, 2], "
             "block_size: 4, mask_token_id: 511}\nloss: {max_anchors: 8, chunk_tokens: 16}\n" +
             data() + training;
    if (objective == "distill")
      return "model: {config: " + llama + "/config.json}\nteacher: {path: " + llama +
             "}\nloss: {divergence: jsd, beta: 0.5, chunk_tokens: 16}\n" + data() + training;
    if (objective == "dpo")
      return "model: {path: " + (dir_ / "policy") + "}\nloss: {beta: 0.1, chunk_tokens: 64}\n" +
             "data: {path: " + (dir_ / "pairs.jsonl") + ", format: preference, tokenizer: " +
             tandem::testing::source_path("data/demo/tokenizer") + ", seq_len: 512, " +
             "micro_batch_rows: 2, cache_dir: " + (dir_ / "cache") + "}\n" + training;
    if (objective == "gspo")
      return "model: {path: " + llama + "}\nloss: {chunk_tokens: 16}\ndata: {path: " +
             (dir_ / "rollouts.jsonl") + ", format: rollout, seq_len: 32, micro_batch_rows: 2}\n" +
             training;
    throw std::runtime_error("no step config for " + objective);
  }
  /// EAGLE-3 offline: the online config plus a capture of its target, made by the binary.
  std::string eagle3_offline() const {
    const std::string online = config("eagle3");
    std::ofstream(dir_ / "eagle3.yaml") << online;
    const auto captured = tandem::testing::run_command(
        tandem::testing::tandem_binary() + " capture " + (dir_ / "eagle3.yaml") +
        " --device cpu --out " + (dir_ / "capture"));
    EXPECT_EQ(captured.exit_code, 0) << captured.output;
    return "target: {path: " + tandem::testing::model_fixture("llama3") +
           "}\ndraft: {aux_layer_ids: [0, 1, 2], ttt_length: 3, draft_vocab_size: 128, "
           "intermediate_size: 96}\n" + data(", capture: " + (dir_ / "capture")) +
           "training: {objective: eagle3, seed: 0}\n";
  }

 private:
  ScratchDir dir_;
};

const char* kObjectives[] = {"sft", "eagle3", "dflash", "distill", "dpo", "gspo"};

// The harness itself, on the CPU: two runs of the same step are identical, for every objective
// (the models start from the seed, the batch from the sampler): so what the CUDA test measures
// is the device, not the harness.
TEST(StepParity, TheSameStepTwiceOnTheCpuIsIdentical) {
  const StepConfigs configs;
  for (const char* objective : kObjectives) {
    SCOPED_TRACE(objective);
    const std::string yaml = configs.config(objective);
    expect_same_step(one_step(yaml, at::kCPU), one_step(yaml, at::kCPU), 0.0);
  }
  SCOPED_TRACE("eagle3 offline");
  const std::string offline = configs.eagle3_offline();
  expect_same_step(one_step(offline, at::kCPU), one_step(offline, at::kCPU), 0.0);
}

TEST(Cuda, OneTrainingStepEqualsTheCpuStep) {
  SKIP_WITHOUT_CUDA();
  const StepConfigs configs;
  for (const char* objective : kObjectives) {
    SCOPED_TRACE(objective);
    const std::string yaml = configs.config(objective);
    expect_same_step(one_step(yaml, at::Device(at::kCUDA, 0)), one_step(yaml, at::kCPU), 1e-5);
  }
  SCOPED_TRACE("eagle3 offline");
  const std::string offline = configs.eagle3_offline();
  expect_same_step(one_step(offline, at::Device(at::kCUDA, 0)), one_step(offline, at::kCPU),
                   1e-5);
}

TEST(Cuda, FrozenWeightsArriveOnTheGpuBitIdentical) {
  SKIP_WITHOUT_CUDA();
  const std::string dir = tandem::testing::model_fixture("qwen3");
  const tandem::HfCheckpoint file = tandem::HfCheckpoint::open(dir);
  const tandem::FrozenModel model = tandem::FrozenModel::load(dir, at::kFloat, at::Device(at::kCUDA, 0));
  int compared = 0;
  for (const auto& [name, weight] : model.named_weights()) {
    EXPECT_TRUE(weight.is_cuda()) << name;
    EXPECT_TRUE(at::equal(weight.cpu(), file.read(name).to(at::kFloat))) << name;
    ++compared;
  }
  EXPECT_GT(compared, 10);
}

TEST(Cuda, NcclRunsEveryCollectiveInAGroupOfOneWithHostTensorsOverGloo) {
  SKIP_WITHOUT_CUDA();
  if (!tandem::dist::nccl_available()) GTEST_SKIP() << "this build has no NCCL backend";
  tandem::dist::LaunchEnv env;
  env.port = tandem::testing::free_port();
  const at::Device gpu(at::kCUDA, 0);
  auto group = tandem::dist::ProcessGroup::connect(env, tandem::dist::Backend::Nccl,
                                                   std::chrono::seconds(30), gpu);
  at::Tensor values = at::arange(6, at::TensorOptions().dtype(at::kFloat).device(gpu));
  group->all_reduce_sum(values);
  group->broadcast(values, 0);
  EXPECT_TRUE(at::equal(values.cpu(), at::arange(6, at::kFloat)));
  EXPECT_TRUE(at::equal(group->all_gather(values).cpu(), at::arange(6, at::kFloat)));
  EXPECT_TRUE(at::equal(group->reduce_scatter_sum(values).cpu(), at::arange(6, at::kFloat)));
  at::Tensor host = at::full({3}, 2.0, at::kDouble);  // metrics: over the Gloo group beside it
  group->all_reduce_sum(host);
  std::string text = "rank 0";
  group->broadcast_text(text, 0);
  group->barrier();
  EXPECT_EQ(text, "rank 0");
  EXPECT_TRUE(at::equal(host, at::full({3}, 2.0, at::kDouble)));
  // A sharded layer (shard mode) through NCCL: gathered for the call, its gradient
  // reduce-scattered onto the slice.
  tandem::ParameterShards shards(group);
  at::Tensor weight = at::randn({4, 3}, at::TensorOptions().device(gpu));
  const at::Tensor full = weight.clone();
  const at::Tensor slice = shards.shard(weight, /*trainable=*/true);
  const at::Tensor x = at::randn({2, 3}, at::TensorOptions().device(gpu));
  const at::Tensor y = tandem::with_full_parameters({weight}, {x}, [](const auto& in, const auto& w) {
    return std::vector<at::Tensor>{at::linear(in[0], w[0])};
  })[0];
  EXPECT_TRUE(at::allclose(y, at::linear(x, full)));
  y.sum().backward();
  EXPECT_TRUE(at::allclose(slice.grad().narrow(0, 0, 12).view({4, 3}),
                           x.sum(0).expand({4, 3})));
}

}  // namespace
