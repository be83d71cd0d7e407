// Distillation losses against an independent PyTorch computation
// (tools/make_policy_loss_fixtures.py -> tests/fixtures/losses/distill.safetensors): values and
// gradients of forward KL, reverse KL, JSD(beta) with a teacher temperature and a hard-label mix;
// the chunked fused path equals the unfused one for every chunking.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "tandem/io/tensor_io.h"
#include "tandem/objectives/distill_loss.h"
#include "test_util.h"

namespace {

std::map<std::string, at::Tensor> fixture() {
  const auto file = tandem::safetensors::File::open(
      tandem::testing::source_path("tests/fixtures/losses/distill.safetensors"));
  std::map<std::string, at::Tensor> out;
  for (const auto& info : file.header().tensors) out[info.name] = tandem::read_tensor(file, info);
  return out;
}

struct Case {
  std::string name;
  tandem::Divergence divergence;
  double beta;
};

const Case kCases[] = {{"fkl", tandem::Divergence::ForwardKL, 0.5},
                       {"rkl", tandem::Divergence::ReverseKL, 0.5},
                       {"jsd_b0", tandem::Divergence::JSD, 0.0},
                       {"jsd_b0.25", tandem::Divergence::JSD, 0.25},
                       {"jsd_b0.5", tandem::Divergence::JSD, 0.5},
                       {"jsd_b1", tandem::Divergence::JSD, 1.0}};

double max_rel(const at::Tensor& got, const at::Tensor& expected) {
  return (got.to(at::kDouble) - expected.to(at::kDouble)).abs().max().item<double>() /
         expected.abs().max().item<double>();
}

TEST(DistillLoss, EveryDivergenceMatchesPyTorchInValueAndGradient) {
  const auto ref = fixture();
  const at::Tensor mask = ref.at("loss_mask").to(at::kFloat);
  const at::Tensor weights = mask / mask.sum();
  for (const Case& c : kCases) {
    for (const bool mix : {false, true}) {
      for (const int64_t chunk : {int64_t{5}, int64_t{1024}}) {
        tandem::DistillLossOptions options;
        options.divergence = c.divergence;
        options.beta = c.beta;
        options.temperature = 2.0;
        options.hard_label_weight = mix ? 0.3 : 0.0;
        options.chunk_tokens = chunk;
        at::Tensor hidden = ref.at("student_hidden").clone().requires_grad_(true);
        at::Tensor head = ref.at("student_lm_head").clone().requires_grad_(true);
        const at::Tensor loss =
            tandem::fused_distillation_loss(hidden, head, ref.at("teacher_hidden"),
                                            ref.at("teacher_lm_head"), ref.at("labels"), weights, options);
        loss.backward();
        const std::string key = c.name + (mix ? ".mix" : "");
        SCOPED_TRACE(key + " chunk " + std::to_string(chunk));
        EXPECT_NEAR(loss.item<double>(), ref.at(key + ".loss").item<double>(),
                    1e-5 * std::abs(ref.at(key + ".loss").item<double>()));
        EXPECT_LT(max_rel(hidden.grad(), ref.at(key + ".grad.student_hidden")), 1e-5);
        EXPECT_LT(max_rel(head.grad(), ref.at(key + ".grad.student_lm_head")), 1e-5);
      }
    }
  }
}

TEST(DistillLoss, FusedEqualsUnfusedAndTheTeacherGetsNoGradient) {
  const auto ref = fixture();
  const at::Tensor weights = ref.at("loss_mask").to(at::kFloat) / 17.0;
  tandem::DistillLossOptions options;
  options.divergence = tandem::Divergence::JSD;
  options.beta = 0.25;
  options.temperature = 2.0;
  options.hard_label_weight = 0.3;
  at::Tensor teacher_hidden = ref.at("teacher_hidden").clone().requires_grad_(true);
  at::Tensor hidden = ref.at("student_hidden").clone().requires_grad_(true);
  at::Tensor head = ref.at("student_lm_head").clone().requires_grad_(true);
  const at::Tensor unfused = tandem::unfused_distillation_loss(
      hidden, head, teacher_hidden, ref.at("teacher_lm_head"), ref.at("labels"), weights, options);
  unfused.backward();
  const at::Tensor unfused_grad = head.grad().clone();
  head.mutable_grad().zero_();
  options.chunk_tokens = 7;
  const at::Tensor fused = tandem::fused_distillation_loss(
      hidden, head, teacher_hidden, ref.at("teacher_lm_head"), ref.at("labels"), weights, options);
  fused.backward();
  EXPECT_NEAR(fused.item<double>(), unfused.item<double>(), 1e-6);
  EXPECT_LT(max_rel(head.grad(), unfused_grad), 1e-5);
  EXPECT_FALSE(teacher_hidden.grad().defined());
}

TEST(DistillLoss, VocabMismatchIsAClearError) {
  const auto ref = fixture();
  const at::Tensor weights = at::ones({24});
  EXPECT_NE(tandem::testing::error_of([&] {
              tandem::fused_distillation_loss(ref.at("student_hidden"), ref.at("student_lm_head"),
                                              ref.at("teacher_hidden"),
                                              ref.at("teacher_lm_head").narrow(0, 0, 60),
                                              ref.at("labels"), weights, {});
            }).find("the teacher's vocab (60) differs from the student's (64)"),
            std::string::npos);
}

}  // namespace
