// Mixed-precision AdamW against libtorch's own torch::optim::AdamW (an independent
// implementation), global-norm clipping against torch::nn::utils::clip_grad_norm_, bf16
// parameters tracking their fp32 masters, and exact state save/restore.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>

#include "tandem/core/error.h"
#include "tandem/train/optimizer.h"

namespace {

using tandem::AdamWOptions;
using tandem::MixedPrecisionAdamW;

std::vector<at::Tensor> make_parameters(c10::ScalarType dtype) {
  at::manual_seed(0);
  return {at::randn({6, 4}).to(dtype).requires_grad_(), at::randn({4}).to(dtype).requires_grad_(),
          at::randn({3, 6}).to(dtype).requires_grad_()};
}

// Deterministic pseudo-gradients for step `step` (large enough that clipping engages).
at::Tensor gradient_for(const at::Tensor& parameter, int step, size_t index) {
  at::manual_seed(1000 * step + index);
  return at::randn(parameter.sizes()) * (step % 2 ? 5.0 : 0.1);
}

TEST(Optimizer, MatchesTorchAdamWWithClippingAndDecayGroups) {
  AdamWOptions options;
  options.beta1 = 0.9;
  options.beta2 = 0.95;
  options.eps = 1e-8;
  options.weight_decay = 0.1;
  options.max_grad_norm = 1.0;
  const double lr = 3e-3;

  auto ours = make_parameters(at::kFloat);
  auto theirs = make_parameters(at::kFloat);
  MixedPrecisionAdamW optimizer({{"w", ours[0]}, {"norm", ours[1]}, {"proj", ours[2]}}, options);

  // torch's AdamW with the same decay groups: matrices decay, the vector does not.
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(
      std::vector<at::Tensor>{theirs[0], theirs[2]},
      std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(lr).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1)));
  groups.emplace_back(
      std::vector<at::Tensor>{theirs[1]},
      std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(lr).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.0)));
  torch::optim::AdamW reference(groups, torch::optim::AdamWOptions(lr));

  for (int step = 0; step < 6; ++step) {
    for (size_t i = 0; i < ours.size(); ++i) {
      ours[i].mutable_grad() = gradient_for(ours[i], step, i);
      theirs[i].mutable_grad() = gradient_for(theirs[i], step, i);
    }
    const double norm = optimizer.step(lr).item<double>();
    const double reference_norm = torch::nn::utils::clip_grad_norm_(theirs, 1.0);
    reference.step();
    EXPECT_NEAR(norm, reference_norm, 1e-5 * reference_norm) << "step " << step;
    for (size_t i = 0; i < ours.size(); ++i)
      EXPECT_TRUE(at::allclose(ours[i], theirs[i], 1e-6, 1e-7))
          << "step " << step << " param " << i;
  }
}

TEST(Optimizer, Bf16ParametersFollowFp32Masters) {
  auto bf16 = make_parameters(at::kBFloat16);
  std::vector<at::Tensor> fp32;
  for (const auto& p : bf16) fp32.push_back(p.detach().to(at::kFloat).requires_grad_());
  AdamWOptions options;
  options.weight_decay = 0.05;
  MixedPrecisionAdamW mixed({{"a", bf16[0]}, {"b", bf16[1]}, {"c", bf16[2]}}, options);
  MixedPrecisionAdamW plain({{"a", fp32[0]}, {"b", fp32[1]}, {"c", fp32[2]}}, options);
  for (int step = 0; step < 5; ++step) {
    for (size_t i = 0; i < bf16.size(); ++i) {
      const at::Tensor grad = gradient_for(bf16[i], step, i).to(at::kBFloat16);
      bf16[i].mutable_grad() = grad;
      fp32[i].mutable_grad() = grad.to(at::kFloat);
    }
    mixed.step(1e-2);
    plain.step(1e-2);
  }
  const auto state = mixed.state();
  for (size_t i = 0; i < bf16.size(); ++i) {
    const at::Tensor& master = state[3 * i].second;  // master.<name> comes first for bf16 params
    EXPECT_EQ(state[3 * i].first.rfind("master.", 0), 0u);
    EXPECT_TRUE(at::equal(master, fp32[i])) << "fp32 masters must evolve exactly like fp32 params";
    EXPECT_TRUE(at::equal(bf16[i], master.to(at::kBFloat16)))
        << "bf16 params are the rounded masters";
  }
}

TEST(Optimizer, StateRoundTripContinuesIdentically) {
  auto first = make_parameters(at::kBFloat16);
  auto second = make_parameters(at::kBFloat16);
  MixedPrecisionAdamW a({{"x", first[0]}, {"y", first[1]}, {"z", first[2]}}, {});
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < first.size(); ++i)
      first[i].mutable_grad() = gradient_for(first[i], step, i);
    a.step(1e-2);
  }
  // Restore into a fresh optimizer over parameters holding the same values.
  {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < first.size(); ++i) second[i].copy_(first[i]);
  }
  MixedPrecisionAdamW b({{"x", second[0]}, {"y", second[1]}, {"z", second[2]}}, {});
  std::map<std::string, at::Tensor> saved;
  for (const auto& [name, tensor] : a.state()) saved[name] = tensor.clone();
  b.load_state(saved, "test");
  EXPECT_EQ(b.steps_taken(), 3);
  for (int step = 3; step < 6; ++step) {
    for (size_t i = 0; i < first.size(); ++i) {
      first[i].mutable_grad() = gradient_for(first[i], step, i);
      second[i].mutable_grad() = gradient_for(second[i], step, i);
    }
    a.step(1e-2);
    b.step(1e-2);
  }
  for (size_t i = 0; i < first.size(); ++i) EXPECT_TRUE(at::equal(first[i], second[i]));
  saved.erase("exp_avg.y");
  EXPECT_THROW(b.load_state(saved, "ckpt"), tandem::Error);
}

TEST(Optimizer, RejectsFrozenOrDuplicateParameters) {
  at::Tensor frozen = at::randn({2, 2});
  EXPECT_THROW(MixedPrecisionAdamW({{"frozen", frozen}}, {}), tandem::Error);
  at::Tensor live = at::randn({2, 2}).requires_grad_();
  EXPECT_THROW(MixedPrecisionAdamW({{"a", live}, {"b", live}}, {}), tandem::Error);
}

// A bf16 weight's micro-batch gradients are summed in fp32: 1 + 64 tiny gradients of 2^-10
// each would vanish one by one in bf16 (8 bits of mantissa), but not in the fp32 sum.
TEST(Optimizer, Bf16GradientsAccumulateInFp32AcrossMicroBatches) {
  at::Tensor weight = at::zeros({1}, at::kBFloat16).requires_grad_();
  AdamWOptions options;
  options.max_grad_norm = 0;
  MixedPrecisionAdamW optimizer({{"w", weight}}, options);
  const auto backward_with = [&](double value) {
    (weight.to(at::kFloat) * value).sum().backward();
    optimizer.accumulate_gradients();
  };
  backward_with(1.0);
  for (int micro = 0; micro < 64; ++micro) backward_with(std::ldexp(1.0, -10));
  EXPECT_FALSE(weight.grad().defined());
  const double norm = optimizer.step(0.0).item<double>();
  EXPECT_DOUBLE_EQ(norm, 1.0 + 64 * std::ldexp(1.0, -10));
  // Plain autograd accumulation in bf16 loses every small addend.
  at::Tensor plain = at::zeros({1}, at::kBFloat16).requires_grad_();
  (plain.to(at::kFloat) * 1.0).sum().backward();
  for (int micro = 0; micro < 64; ++micro)
    (plain.to(at::kFloat) * std::ldexp(1.0, -10)).sum().backward();
  EXPECT_EQ(plain.grad().item<float>(), 1.0f);
  optimizer.zero_grad();
  EXPECT_DOUBLE_EQ(optimizer.step(0.0).item<double>(), 0.0);
}

// Two data-parallel "ranks" in one process: the all-reduce is played by hand (rank 1's buffer is
// taken first, then added into rank 0's). After it, rank 0 steps exactly like one optimizer that
// saw both ranks' gradients; a parameter no rank touched keeps no gradient and no moment step.
TEST(Optimizer, ReducedGradientsStepLikeOneProcessWithAllMicroBatches) {
  const auto make = [](c10::ScalarType dtype) {
    at::manual_seed(3);
    return std::vector<at::Tensor>{at::randn({5, 3}).requires_grad_(),
                                   at::randn({3}).to(dtype).requires_grad_(),
                                   at::randn({2, 2}).requires_grad_()};
  };
  const auto named = [](const std::vector<at::Tensor>& p) {
    return MixedPrecisionAdamW::NamedTensors{{"a", p[0]}, {"b", p[1]}, {"unused", p[2]}};
  };
  std::vector<at::Tensor> single = make(at::kBFloat16), rank0 = make(at::kBFloat16),
                          rank1 = make(at::kBFloat16);
  MixedPrecisionAdamW one(named(single), {}), zero(named(rank0), {}), other(named(rank1), {});
  // Micro-batch 1 on rank 0, micro-batch 2 on rank 1 ("b" only gets a gradient there).
  const auto micro = [](std::vector<at::Tensor>& p, MixedPrecisionAdamW& optimizer, int which) {
    at::Tensor loss = (p[0].pow(2) * (which + 1.0)).sum();
    if (which == 2) loss = loss + (p[1].to(at::kFloat) * 3.0).sum();
    loss.backward();
    optimizer.accumulate_gradients();
  };
  micro(single, one, 1);
  micro(single, one, 2);
  micro(rank0, zero, 1);
  micro(rank1, other, 2);
  at::Tensor from_rank1;
  other.reduce_gradients([&](at::Tensor& buffer) { from_rank1 = buffer.clone(); });
  const int64_t bytes = zero.reduce_gradients([&](at::Tensor& buffer) { buffer.add_(from_rank1); });
  EXPECT_EQ(bytes, (3 + 15 + 3 + 4) * 4);
  EXPECT_DOUBLE_EQ(zero.step(0.01).item<double>(), one.step(0.01).item<double>());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(rank0[i].equal(single[i])) << i;
  EXPECT_FALSE(rank0[2].grad().defined());
  for (const auto& [name, value] : zero.state())
    if (name == "exp_avg.unused") {
      EXPECT_EQ(value.abs().sum().item<double>(), 0.0);
    }
}

}  // namespace
