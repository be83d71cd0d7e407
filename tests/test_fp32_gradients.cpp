// fp32 gradient sums for bf16 weights (core/fp32_gradients.h): a weight used several times in
// one micro-batch gets each use's gradient added in fp32, instead of autograd's running sum in
// bf16. Checked by hand on a weight used seven times, then measured on a whole EAGLE-3 step
// (test-time training reuses the draft at every unroll step) against the same step in fp32.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <cstdio>
#include <memory>

#include "step_configs.h"
#include "tandem/core/config.h"
#include "tandem/core/fp32_gradients.h"
#include "tandem/dist/sharding.h"
#include "tandem/models/frozen.h"
#include "tandem/models/layers.h"
#include "tandem/objectives/objective.h"
#include "tandem/train/optimizer.h"
#include "tandem/train/training_data.h"

namespace {

// y_i = x_i W^T for seven inputs, through apply_linear (one use each, as a layer call), summed.
at::Tensor seven_uses(const at::Tensor& weight, const std::vector<at::Tensor>& inputs) {
  at::Tensor total;
  for (const at::Tensor& x : inputs) {
    const at::Tensor y = tandem::apply_linear(x, weight).to(at::kFloat).pow(2).sum();
    total = total.defined() ? total + y : y;
  }
  return total;
}

TEST(Fp32GradientSums, SevenUsesOfABf16WeightAreSummedInFp32) {
  at::manual_seed(0);
  const at::Tensor start = at::randn({64, 96}).to(at::kBFloat16);
  std::vector<at::Tensor> inputs;
  for (int i = 0; i < 7; ++i) inputs.push_back(at::randn({32, 96}).to(at::kBFloat16));
  // Each use's own gradient (bf16, as its matmul backward rounds it), summed exactly in fp64.
  at::Tensor exact = at::zeros({64, 96}, at::kDouble);
  for (const at::Tensor& x : inputs) {
    const at::Tensor leaf = start.clone().requires_grad_(true);
    const at::Tensor g = torch::autograd::grad({seven_uses(leaf, {x})}, {leaf})[0];
    ASSERT_EQ(g.scalar_type(), at::kBFloat16);
    exact += g.to(at::kDouble);
  }
  const double scale = exact.abs().max().item<double>();

  // Autograd alone: one bf16 gradient, the uses summed in bf16.
  const at::Tensor plain = start.clone().requires_grad_(true);
  seven_uses(plain, inputs).backward();
  const double bf16_error =
      (plain.grad().to(at::kDouble) - exact).abs().max().item<double>() / scale;

  // Registered: no bf16 gradient at all; the fp32 sum holds the seven gradients added in fp32.
  const at::Tensor weight = start.clone().requires_grad_(true);
  auto sum = std::make_shared<at::Tensor>();
  {
    const tandem::Fp32GradientSum registration(weight, sum);
    seven_uses(weight, inputs).backward();
  }
  EXPECT_FALSE(weight.grad().defined());
  ASSERT_TRUE(sum->defined());
  EXPECT_EQ(sum->scalar_type(), at::kFloat);
  const double fp32_error = (sum->to(at::kDouble) - exact).abs().max().item<double>() / scale;
  std::printf(
      "[fp32 sums] 7 uses of a bf16 (64, 96) weight: max error vs the exact sum of the "
      "uses' gradients, relative to its largest: bf16 sums %.3g, fp32 sums %.3g\n",
      bf16_error, fp32_error);
  EXPECT_LE(fp32_error, 1e-6);              // only fp32 rounding of seven terms
  EXPECT_GT(bf16_error, 100 * fp32_error);  // bf16: 8 significant bits per partial sum

  // Unregistered again, the weight takes ordinary gradients; without grad mode, no tap.
  const at::Tensor again = start.clone().requires_grad_(true);
  seven_uses(again, inputs).backward();
  EXPECT_TRUE(again.grad().defined());
}

// The optimizer registers each of its non-fp32 parameters for as long as it lives, and its step
// reads the fp32 sums (gradient_norm = the norm of the exact sum, to fp32 rounding).
TEST(Fp32GradientSums, TheOptimizerOwnsTheSumsOfItsBf16Parameters) {
  at::manual_seed(1);
  at::Tensor weight = at::randn({16, 24}).to(at::kBFloat16).requires_grad_(true);
  std::vector<at::Tensor> inputs;
  for (int i = 0; i < 7; ++i) inputs.push_back(at::randn({8, 24}).to(at::kBFloat16));
  at::Tensor exact = at::zeros({16, 24}, at::kDouble);
  for (const at::Tensor& x : inputs) {
    const at::Tensor leaf = weight.detach().clone().requires_grad_(true);
    exact += torch::autograd::grad({seven_uses(leaf, {x})}, {leaf})[0].to(at::kDouble);
  }
  tandem::AdamWOptions options;
  options.max_grad_norm = 0;
  {
    tandem::MixedPrecisionAdamW optimizer({{"w", weight}}, options);
    seven_uses(weight, inputs).backward();
    EXPECT_FALSE(weight.grad().defined());  // went to the optimizer's fp32 sum
    optimizer.accumulate_gradients();
    const double norm = optimizer.gradient_norm().item<double>();
    EXPECT_NEAR(norm, exact.norm().item<double>(), 1e-6 * norm);
    optimizer.update(0.0);
    optimizer.zero_grad();
  }
  // The optimizer is gone: the weight is no longer registered.
  seven_uses(weight, inputs).backward();
  EXPECT_TRUE(weight.grad().defined());
}

// One EAGLE-3 step with the draft in bf16 (test-time training of length 7 reuses every draft
// weight at each unroll step), against the same step with the same weights in fp32: the largest
// relative gradient error over the draft's tensors, and the error over all of them, with
// autograd's bf16 sums and with fp32 sums (the figures docs/gpu.md quotes). The bf16 forward and
// each use's own backward round either way; only the sums change.
TEST(Fp32GradientSums, Bf16GradientsOfAnEagle3StepAgainstFp32) {
  const tandem::testing::StepConfigs configs;
  const std::string target = tandem::testing::model_fixture("llama3");
  auto config_for = [&](const std::string& dtype) {
    return tandem::Config::parse(
        "target: {path: " + target +
            ", dtype: fp32}\ndraft: {aux_layer_ids: [0, 1, 2], "
            "ttt_length: 7, draft_vocab_size: 128, intermediate_size: 96, dtype: " +
            dtype + "}\n" + configs.data() + "training: {objective: eagle3, seed: 0}\n",
        "eagle3.yaml");
  };
  const tandem::Config bf16_config = config_for("bf16"), fp32_config = config_for("fp32");
  const tandem::TrainingData data = tandem::read_training_data(fp32_config);
  auto make = [&](const tandem::Config& config) {
    std::unique_ptr<tandem::Objective> objective = tandem::make_objective(config, at::kCPU);
    objective->attach_data({&*data.dataset, nullptr, data.cache_dir, data.packing.seq_len});
    return objective;
  };
  tandem::SamplerOptions sampler_options;
  sampler_options.dataset_size = data.num_records();
  tandem::DataCursor cursor(sampler_options);
  const tandem::PackedBatch batch = tandem::next_micro_batch(cursor, data);

  // The fp32 reference starts from the bf16 draft's own weights.
  std::unique_ptr<tandem::Objective> reference = make(fp32_config);
  std::unique_ptr<tandem::Objective> bf16 = make(bf16_config);
  {
    at::NoGradGuard no_grad;
    for (const auto& [name, parameter] : tandem::trainable_parameters(bf16->trainable()))
      reference->trainable().named_parameters()[name].copy_(parameter);
  }
  reference->compute(batch, reference->count(batch)).loss.backward();

  // Each bf16 parameter's gradient: autograd's (bf16 sums), or through fp32 sums.
  auto gradients = [&](bool fp32_sums) {
    for (auto& [name, parameter] : tandem::trainable_parameters(bf16->trainable()))
      parameter.mutable_grad() = at::Tensor();
    std::vector<std::shared_ptr<at::Tensor>> sums;
    std::vector<std::unique_ptr<tandem::Fp32GradientSum>> registrations;
    const auto parameters = tandem::trainable_parameters(bf16->trainable());
    for (const auto& [name, parameter] : parameters) {
      sums.push_back(std::make_shared<at::Tensor>());
      if (fp32_sums)
        registrations.push_back(std::make_unique<tandem::Fp32GradientSum>(parameter, sums.back()));
    }
    bf16->compute(batch, bf16->count(batch)).loss.backward();
    std::map<std::string, at::Tensor> out;
    for (size_t i = 0; i < parameters.size(); ++i) {
      const at::Tensor& parameter = parameters[i].second;
      at::Tensor total = sums[i]->defined() ? *sums[i] : at::zeros(parameter.sizes());
      if (parameter.grad().defined()) total = total + parameter.grad().to(at::kFloat);
      out[parameters[i].first] = total;
    }
    return out;
  };
  const std::map<std::string, at::Tensor> before = gradients(false), after = gradients(true);

  double worst_before = 0, worst_after = 0, squares_before = 0, squares_after = 0, squares = 0;
  std::string worst_name;
  for (const auto& [name, parameter] : tandem::trainable_parameters(reference->trainable())) {
    const at::Tensor want = parameter.grad().to(at::kDouble);
    const double scale = std::max(want.abs().max().item<double>(), 1e-30);
    const double error_before =
        (before.at(name).to(at::kDouble) - want).abs().max().item<double>() / scale;
    const double error_after =
        (after.at(name).to(at::kDouble) - want).abs().max().item<double>() / scale;
    std::printf("[fp32 sums] eagle3 %-40s bf16 sums %.4f  fp32 sums %.4f\n", name.c_str(),
                error_before, error_after);
    squares += want.pow(2).sum().item<double>();
    squares_before += (before.at(name).to(at::kDouble) - want).pow(2).sum().item<double>();
    squares_after += (after.at(name).to(at::kDouble) - want).pow(2).sum().item<double>();
    if (error_before > worst_before) worst_name = name;
    worst_before = std::max(worst_before, error_before);
    worst_after = std::max(worst_after, error_after);
  }
  const double norm_before = std::sqrt(squares_before / squares);
  const double norm_after = std::sqrt(squares_after / squares);
  std::printf(
      "[fp32 sums] EAGLE-3 step (TTT 7), bf16 draft vs fp32: largest relative gradient "
      "error %.4f with bf16 sums (%s), %.4f with fp32 sums; over all draft gradients "
      "|g - g_fp32| / |g_fp32| %.5f with bf16 sums, %.5f with fp32 sums\n",
      worst_before, worst_name.c_str(), worst_after, norm_before, norm_after);
  // Here the bf16 forward and each use's own backward dominate the error (the sums' own share
  // is what the test above isolates): the fp32 sums must not make it worse, and a use lost or
  // counted twice (an error of 1/7 or more) would show far above bf16 rounding.
  EXPECT_LE(norm_after, 1.02 * norm_before);
  EXPECT_LT(norm_after, 0.02);
  EXPECT_LT(worst_after, 0.03);
}

}  // namespace
