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

#include <chrono>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>

#include "forked_ranks.h"
#include "gradients.h"
#include "step_configs.h"
#include "tandem/core/config.h"
#include "tandem/core/device.h"
#include "tandem/dist/process_group.h"
#include "tandem/dist/sharding.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/models/causal_attention.h"
#include "tandem/models/decoder.h"
#include "tandem/models/dflash.h"
#include "tandem/models/dflash_attention.h"
#include "tandem/models/frozen.h"
#include "tandem/models/kernel_choice.h"
#include "tandem/models/key_bands.h"
#include "tandem/models/ttt_attention.h"
#include "tandem/models/varlen_attention.h"
#include "tandem/objectives/objective.h"
#include "tandem/objectives/sft.h"
#include "tandem/train/training_data.h"
#include "test_util.h"

namespace {

using tandem::testing::error_of;
using tandem::testing::kObjectives;
using tandem::testing::ScratchDir;
using tandem::testing::StepConfigs;

// Skips a CUDA test with the reason, where no GPU is visible.
#define SKIP_WITHOUT_CUDA()                                                                 \
  if (tandem::cuda_device_count() == 0)                                                     \
  GTEST_SKIP() << "no CUDA device visible to this process (CPU machine): the CUDA path is " \
                  "checked by scripts/gpu_check.sh on a GPU"

TEST(Device, SpecsResolveOnThisMachine) {
  EXPECT_EQ(tandem::resolve_device("cpu", 0, "training.device"), at::Device(at::kCPU));
  const at::Device automatic = tandem::resolve_device("auto", 0, "training.device");
  EXPECT_EQ(automatic.is_cuda(), tandem::cuda_device_count() > 0);
  const std::string bad =
      error_of([] { tandem::resolve_device("gpu", 0, "run.yaml: training.device"); });
  EXPECT_NE(bad.find("run.yaml: training.device: 'gpu' is not one of auto, cpu, cuda, cuda:N"),
            std::string::npos)
      << bad;
  EXPECT_NE(error_of([] { tandem::resolve_device("cuda:x", 0, "--device"); }).find("cuda:N"),
            std::string::npos);
}

TEST(Device, AGpuThatIsNotThereIsAClearError) {
  const int64_t gpus = tandem::cuda_device_count();
  const std::string missing =
      error_of([&] { tandem::resolve_device("cuda:" + std::to_string(gpus), 0, "--device"); });
  EXPECT_NE(missing.find("--device = cuda:" + std::to_string(gpus)), std::string::npos) << missing;
  if (gpus == 0) {
    EXPECT_NE(missing.find("no CUDA device is visible"), std::string::npos) << missing;
    EXPECT_NE(error_of([] {
                tandem::resolve_device("cuda", 0, "training.device");
              }).find("use cpu, or auto"),
              std::string::npos);
  } else {
    EXPECT_NE(missing.find("does not exist"), std::string::npos) << missing;
  }
}

TEST(Device, ModelsDefaultToBf16OnAGpuOnly) {
  EXPECT_EQ(tandem::device_dtype_default(at::Device(at::kCPU)), "fp32");
  EXPECT_EQ(tandem::device_dtype_default(at::Device(at::kCUDA, 0)), "bf16");
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
  tandem::DataCursor cursor(sampler_options);
  const tandem::PackedBatch batch = tandem::next_micro_batch(cursor, data);
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

// Every model an objective builds on `run`'s device, with its dtype: trained parameters, then the
// frozen weights (target, teacher, reference, shared heads), as "name dtype device" lines.
std::vector<std::string> planned_models(const std::string& yaml, const tandem::RunContext& run) {
  const tandem::Config config = tandem::Config::parse(yaml, "step.yaml");
  std::unique_ptr<tandem::Objective> objective = tandem::make_objective(config, run);
  std::vector<std::string> out;
  for (const auto& [name, parameter] : tandem::trainable_parameters(objective->trainable()))
    out.push_back("trained " + std::string(c10::toString(parameter.scalar_type())) + " " +
                  parameter.device().str());
  for (const at::Tensor& weight : tandem::frozen_weights())
    out.push_back("frozen " + std::string(c10::toString(weight.scalar_type())) + " " +
                  weight.device().str());
  return out;
}

// The dtypes a run gets are decided from its device before any weight exists: a dry run plans
// for cuda:0 on this GPU-less machine (models on the meta device) and shows what the CUDA step
// test below builds. Every model there must get the dtype of the CPU run it is compared with
// (fp32, named in each config), or the comparison measures bf16 rounding, not the GPU; and the
// defaults are those docs/gpu.md states (frozen bf16 on a GPU, trained fp32).
TEST(CudaDryRun, TheStepTestsModelsGetTheCpuRunsDtypes) {
  const StepConfigs configs;
  tandem::RunContext planned(at::Device(at::kCUDA, 0));
  planned.dry_run = true;
  std::vector<std::string> yamls;
  for (const char* objective : kObjectives) yamls.push_back(configs.config(objective));
  yamls.push_back(configs.eagle3_offline());
  for (const std::string& yaml : yamls) {
    SCOPED_TRACE(yaml);
    const std::vector<std::string> models = planned_models(yaml, planned);
    ASSERT_FALSE(models.empty());
    for (const std::string& model : models)
      EXPECT_NE(model.find(" Float meta"), std::string::npos) << model;
    // The same config with no dtype named: frozen and trained models take the GPU default, bf16
    // (trained ones with fp32 masters and moments).
    std::string bare = yaml;
    for (const std::string named : {", dtype: fp32", "reference: {dtype: fp32}\n"})
      for (size_t at = bare.find(named); at != std::string::npos; at = bare.find(named))
        bare.erase(at, named.size());
    for (const std::string& model : planned_models(bare, planned))
      EXPECT_EQ(model,
                model.rfind("frozen", 0) == 0 ? "frozen BFloat16 meta" : "trained BFloat16 meta");
  }
}

TEST(Cuda, OneTrainingStepEqualsTheCpuStep) {
  SKIP_WITHOUT_CUDA();
  const StepConfigs configs;
  for (const char* objective : kObjectives) {
    SCOPED_TRACE(objective);
    const std::string yaml = configs.config(objective);
    // DPO's loss is a difference of sequence log-probability sums (policy minus reference,
    // chosen minus rejected) that cancels most of each sum, so the devices' fp32 rounding of
    // those sums weighs more against the gradient: measured up to 2.9e-5 on an H200
    // (2026-11-26), against under 1e-5 for every other objective.
    const double tolerance = std::string(objective) == "dpo" ? 1e-4 : 1e-5;
    expect_same_step(one_step(yaml, at::Device(at::kCUDA, 0)), one_step(yaml, at::kCPU), tolerance);
  }
  SCOPED_TRACE("eagle3 offline");
  const std::string offline = configs.eagle3_offline();
  expect_same_step(one_step(offline, at::Device(at::kCUDA, 0)), one_step(offline, at::kCPU), 1e-5);
}

// The kernel SDPA picks on the GPU for each kind of call the models make (sdpa_repeats_kv is
// the policy, tested on the CPU; which kernel ATen then picks only a GPU can say): never the
// math fallback, whose (heads, T, T) scores are kept for backward.
TEST(Cuda, SdpaNeverFallsBackToTheMathKernel) {
  SKIP_WITHOUT_CUDA();
  struct Case {
    at::ScalarType dtype;
    int64_t kv_heads, head_dim;
    bool masked;
  };
  for (const Case& c : {Case{at::kBFloat16, 8, 128, false}, Case{at::kFloat, 8, 128, false},
                        Case{at::kBFloat16, 8, 128, true}, Case{at::kFloat, 8, 128, true},
                        Case{at::kBFloat16, 32, 128, false}, Case{at::kBFloat16, 8, 64, false},
                        Case{at::kBFloat16, 8, 256, false}}) {
    const at::TensorOptions options = at::TensorOptions().dtype(c.dtype).device(at::kCUDA, 0);
    const int64_t length = 512;
    const at::Tensor q = at::randn({2, 32, length, c.head_dim}, options);
    const at::Tensor k = at::randn({2, c.kv_heads, length, c.head_dim}, options);
    const at::Tensor v = at::randn({2, c.kv_heads, length, c.head_dim}, options);
    const at::Tensor mask = c.masked ? at::ones({length, length}, options.dtype(at::kBool))
                                           .tril()
                                           .view({1, 1, length, length})
                                     : at::Tensor();
    const std::string backend = tandem::sdpa_backend(q, tandem::sdpa_operands(q, k, v, mask), mask);
    std::cout << "[ sdpa     ] " << c10::toString(c.dtype) << " 32/" << c.kv_heads
              << " heads, head_dim " << c.head_dim << (c.masked ? ", mask" : ", causal") << ": "
              << backend << "\n";
    EXPECT_NE(backend, "math") << c10::toString(c.dtype) << " kv_heads " << c.kv_heads
                               << " head_dim " << c.head_dim << " masked " << c.masked;
  }
}

// The fused and the blockwise kernel of one attention on CUDA in bf16 against an fp32 reference
// (`reference`: the same attention's outputs and gradients from fp32 inputs): each kernel's
// largest relative error over the output and every gradient, and its time for one forward and
// backward after a warm-up.
struct KernelComparison {
  double seconds[2] = {0, 0};  // fused, blockwise
  double errors[2] = {0, 0};
};
KernelComparison compare_fused_and_blockwise(
    const std::function<at::Tensor(const std::vector<at::Tensor>&, tandem::AttentionKernel)>&
        attend,
    const std::vector<at::Tensor>& inputs, const at::Tensor& weights,
    const tandem::test::OutputAndGradients& reference) {
  const at::Device cuda(at::kCUDA, 0);
  std::vector<at::Tensor> bf16;
  for (const at::Tensor& input : inputs) bf16.push_back(input.to(at::kBFloat16));
  KernelComparison comparison;
  const tandem::AttentionKernel kernels[2] = {tandem::AttentionKernel::Fused,
                                              tandem::AttentionKernel::Blockwise};
  for (int i = 0; i < 2; ++i) {
    const auto run = [&] {
      return tandem::test::output_and_gradients(
          [&](const std::vector<at::Tensor>& leaves) { return attend(leaves, kernels[i]); }, bf16,
          weights);
    };
    run();  // warm-up
    tandem::synchronize(cuda);
    const auto start = std::chrono::steady_clock::now();
    const auto result = run();
    tandem::synchronize(cuda);
    comparison.seconds[i] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    comparison.errors[i] = tandem::test::relative_error(result.out, reference.out);
    for (size_t g = 0; g < result.grads.size(); ++g)
      if (reference.grads[g].defined() && result.grads[g].defined())
        comparison.errors[i] =
            std::max(comparison.errors[i],
                     tandem::test::relative_error(result.grads[g], reference.grads[g]));
  }
  return comparison;
}

// EAGLE-3's TTT attention on CUDA in bf16 (32/8 heads, head_dim 128, rows of three packed
// documents): the fused kernel (the CUDA flash kernel per document, merged by log-sum-exp) and
// the blockwise kernel against the dense kernel in fp32, outputs and every gradient, at unroll
// steps 0, 1 and 6. The fused kernel's error may be at most twice the blockwise kernel's plus a
// bf16 ulp; each kernel's time (forward and backward, 2K and 8K tokens) is printed.
TEST(Cuda, FusedTttAttentionEqualsTheDenseKernelInBf16) {
  SKIP_WITHOUT_CUDA();
  const at::Device cuda(at::kCUDA, 0);
  for (const int64_t length : {int64_t{2048}, int64_t{8192}}) {
    at::Tensor documents = at::zeros({1, length}, at::kLong);
    documents[0].narrow(0, length / 3, length / 3).fill_(1);
    documents[0].narrow(0, 2 * (length / 3), length - 2 * (length / 3)).fill_(2);
    const tandem::AttentionLayout layout{at::zeros({1, length}, at::kLong).to(cuda),
                                         documents.to(cuda), documents};
    const tandem::KeyBands bands = tandem::causal_key_bands(layout);
    at::manual_seed(5);
    const auto randn = [&](int64_t heads) {
      return at::randn({1, heads, length, 128}, at::TensorOptions().device(cuda));
    };
    std::vector<at::Tensor> inputs = {randn(32), randn(8), randn(8)};
    for (int64_t j = 0; j < 6; ++j) inputs.push_back(randn(8));
    for (const int64_t step : {int64_t{0}, int64_t{1}, int64_t{6}}) {
      const auto attend = [&](const std::vector<at::Tensor>& x, tandem::AttentionKernel kernel) {
        std::vector<at::Tensor> ks, vs;
        for (int64_t j = 0; j < step; ++j) {
          ks.push_back(x[3 + j]);
          vs.push_back(x[3 + (j + 3) % 6]);
        }
        return tandem::ttt_attention(x[0], x[1], x[2], bands, ks, vs, {kernel, 512, 1024});
      };
      const at::Tensor weights = at::randn({1, 32, length, 128}, at::TensorOptions().device(cuda));
      const bool dense_fits = length <= 2048;  // (32, T, T) fp32 scores: 8 GiB at 8K
      const auto reference = tandem::test::output_and_gradients(
          [&](const std::vector<at::Tensor>& x) {
            return attend(x, dense_fits ? tandem::AttentionKernel::Dense
                                        : tandem::AttentionKernel::Blockwise);
          },
          inputs, weights);
      const KernelComparison c = compare_fused_and_blockwise(attend, inputs, weights, reference);
      std::cout << "[ ttt      ] bf16 T " << length << " step " << step << ": fused "
                << c.seconds[0] * 1e3 << " ms (max rel error " << c.errors[0] << "), blockwise "
                << c.seconds[1] * 1e3 << " ms (" << c.errors[1] << "), reference "
                << (dense_fits ? "dense" : "blockwise") << " fp32\n";
      EXPECT_LE(c.errors[0], 2 * c.errors[1] + 8e-3) << "T " << length << " step " << step;
    }
  }
}

// The DFlash draft's attention on CUDA in bf16 (32/8 heads, head_dim 128, blocks of 16 on one
// anchor per 8 context tokens, a row of three packed documents, some anchors invalid): the fused
// kernel (the memory-efficient kernel per chunk of blocks with a band mask, merged by log-sum-exp)
// must pass its own verification on this GPU and match the dense kernel in fp32 (the blockwise
// at 8K) as closely as the blockwise kernel does; each kernel's time at 2K and 8K is printed.
TEST(Cuda, FusedDFlashAttentionEqualsTheDenseKernelInBf16) {
  SKIP_WITHOUT_CUDA();
  const at::Device cuda(at::kCUDA, 0);
  EXPECT_TRUE(tandem::fused_dflash_attention_verified(cuda, at::kBFloat16, 128));
  const int64_t block_size = 16;
  for (const int64_t length : {int64_t{2048}, int64_t{8192}}) {
    at::Tensor documents = at::zeros({1, length}, at::kLong);
    documents[0].narrow(0, length / 3, length / 3).fill_(1);
    documents[0].narrow(0, 2 * (length / 3), length - 2 * (length / 3)).fill_(2);
    const int64_t blocks = length / 8;
    const at::Tensor anchors =  // sorted, every 8th token, the last 4 slots invalid
        at::arange(blocks, at::kLong).mul_(8).clamp_max_(length - block_size).view({1, blocks});
    at::Tensor valid = at::ones({1, blocks}, at::kBool);
    valid.narrow(1, blocks - 4, 4).fill_(false);
    const tandem::DFlashBlocks host_blocks{block_size, anchors, valid};
    const tandem::KeyBands bands = tandem::dflash_key_bands(documents, host_blocks, cuda);
    const at::Tensor valid_device = valid.to(cuda);
    const int64_t queries = blocks * block_size;
    at::manual_seed(6);
    const auto randn = [&](int64_t heads, int64_t n) {
      return at::randn({1, heads, n, 128}, at::TensorOptions().device(cuda));
    };
    const std::vector<at::Tensor> inputs = {randn(32, queries), randn(8, length), randn(8, length),
                                            randn(8, queries), randn(8, queries)};
    const auto attend = [&](const std::vector<at::Tensor>& x, tandem::AttentionKernel kernel) {
      return tandem::dflash_attention(x[0], x[1], x[2], x[3], x[4], bands, valid_device,
                                      {kernel, 512, 1024});
    };
    const at::Tensor weights = at::randn({1, 32, queries, 128}, at::TensorOptions().device(cuda));
    const bool dense_fits = length <= 2048;  // (32, Q, T) fp32 scores: 16 GiB at 8K
    const auto reference = tandem::test::output_and_gradients(
        [&](const std::vector<at::Tensor>& x) {
          return attend(
              x, dense_fits ? tandem::AttentionKernel::Dense : tandem::AttentionKernel::Blockwise);
        },
        inputs, weights);
    const KernelComparison c = compare_fused_and_blockwise(attend, inputs, weights, reference);
    std::cout << "[ dflash   ] bf16 T " << length << ", " << blocks << " blocks of " << block_size
              << ": fused " << c.seconds[0] * 1e3 << " ms (max rel error " << c.errors[0]
              << "), blockwise " << c.seconds[1] * 1e3 << " ms (" << c.errors[1] << "), reference "
              << (dense_fits ? "dense" : "blockwise") << " fp32\n";
    EXPECT_LE(c.errors[0], 2 * c.errors[1] + 8e-3) << "T " << length;
  }
}

// The decoders' causal attention on CUDA in bf16 (32/8 heads, head_dim 128) over a row of three
// packed documents, without and with a sliding window of 512: the variable-length flash call must
// pass its self-check on this GPU and match the dense fp32 path as closely as the per-document /
// blockwise path does; both paths' times at 2K and 8K are printed.
TEST(Cuda, VarlenFlashAttentionEqualsThePerDocumentPaths) {
  SKIP_WITHOUT_CUDA();
  const at::Device cuda(at::kCUDA, 0);
  EXPECT_TRUE(tandem::cuda_flash_attention_runs(cuda));
  EXPECT_TRUE(tandem::varlen_attention_verified(cuda, at::kBFloat16, 128));
  for (const int64_t length : {int64_t{2048}, int64_t{8192}})
    for (const int64_t window : {int64_t{0}, int64_t{512}}) {
      at::Tensor documents = at::zeros({1, length}, at::kLong);
      documents[0].narrow(0, length / 3, length / 3).fill_(1);
      documents[0].narrow(0, 2 * (length / 3), length - 2 * (length / 3)).fill_(2);
      const tandem::AttentionLayout layout{at::arange(length, at::kLong).view({1, length}).to(cuda),
                                           documents.to(cuda), documents};
      at::manual_seed(8);
      const auto randn = [&](int64_t heads) {
        return at::randn({1, heads, length, 128}, at::TensorOptions().device(cuda));
      };
      const std::vector<at::Tensor> inputs = {randn(32), randn(8), randn(8)};
      // Fused: the variable-length call (the plan on CUDA with the fused kernel); Blockwise: SDPA
      // per document, or the blockwise kernel for the window.
      const auto attend = [&](const std::vector<at::Tensor>& x, tandem::AttentionKernel kernel) {
        const tandem::CausalAttentionPlan plan =
            tandem::plan_causal_attention(layout, window, {kernel, 512, 1024});
        return tandem::causal_attention({x[0], x[1], x[2]}, plan);
      };
      const at::Tensor weights = at::randn({1, 32, length, 128}, at::TensorOptions().device(cuda));
      const auto reference = tandem::test::output_and_gradients(
          [&](const std::vector<at::Tensor>& x) {
            return attend(x, length <= 2048 ? tandem::AttentionKernel::Dense
                                            : tandem::AttentionKernel::Blockwise);
          },
          inputs, weights);
      const KernelComparison c = compare_fused_and_blockwise(attend, inputs, weights, reference);
      std::cout << "[ varlen   ] bf16 T " << length << ", 3 documents, window " << window
                << ": variable-length " << c.seconds[0] * 1e3 << " ms (max rel error "
                << c.errors[0] << "), per document / blockwise " << c.seconds[1] * 1e3 << " ms ("
                << c.errors[1] << ")\n";
      EXPECT_LE(c.errors[0], 2 * c.errors[1] + 8e-3) << "T " << length << " window " << window;
    }
}

TEST(Cuda, FrozenWeightsArriveOnTheGpuBitIdentical) {
  SKIP_WITHOUT_CUDA();
  const std::string dir = tandem::testing::model_fixture("qwen3");
  const tandem::HfCheckpoint file = tandem::HfCheckpoint::open(dir);
  const tandem::FrozenModel model =
      tandem::FrozenModel::load(dir, at::kFloat, at::Device(at::kCUDA, 0));
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
  {
    tandem::ParameterShards shards(group);
    at::Tensor weight = at::randn({4, 3}, at::TensorOptions().device(gpu));
    const at::Tensor full = weight.clone();
    const at::Tensor slice = shards.shard(weight, /*trainable=*/true);
    const at::Tensor x = at::randn({2, 3}, at::TensorOptions().device(gpu));
    const at::Tensor y =
        tandem::with_full_parameters({weight}, {x}, [](const auto& in, const auto& w) {
          return std::vector<at::Tensor>{at::linear(in[0], w[0])};
        })[0];
    EXPECT_TRUE(at::allclose(y, at::linear(x, full)));
    y.sum().backward();
    EXPECT_TRUE(at::allclose(slice.grad().narrow(0, 0, 12).view({4, 3}), x.sum(0).expand({4, 3})));
  }
  // The group shuts its NCCL communicator down before it goes (no watchdog left waiting): its
  // destruction returns at once rather than after a timeout.
  const auto start = std::chrono::steady_clock::now();
  group.reset();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "[ nccl     ] group of one destroyed in " << seconds << " s\n";
  EXPECT_LT(seconds, 20.0);
}

}  // namespace
