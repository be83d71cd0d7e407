// Distillation losses against an independent PyTorch computation
// (tools/make_policy_loss_fixtures.py -> tests/fixtures/losses/distill.safetensors): values and
// gradients of forward KL, reverse KL, JSD(beta) with a teacher temperature and a hard-label mix;
// the chunked fused path equals the unfused one for every chunking; its closed-form gradients,
// formed in the forward pass, equal autograd's in fp64 and follow the upstream gradient.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <cmath>

#include "fixture_tensors.h"
#include "tandem/objectives/distill_loss.h"
#include "test_util.h"

namespace {

std::map<std::string, at::Tensor> fixture() {
  return tandem::testing::fixture_tensors("tests/fixtures/losses/distill.safetensors");
}

struct Case {
  std::string name;
  tandem::Divergence divergence;
  double beta;
};

const Case kCases[] = {
    {"fkl", tandem::Divergence::ForwardKL, 0.5}, {"rkl", tandem::Divergence::ReverseKL, 0.5},
    {"jsd_b0", tandem::Divergence::JSD, 0.0},    {"jsd_b0.25", tandem::Divergence::JSD, 0.25},
    {"jsd_b0.5", tandem::Divergence::JSD, 0.5},  {"jsd_b1", tandem::Divergence::JSD, 1.0}};

double max_rel(const at::Tensor& got, const at::Tensor& expected) {
  return tandem::testing::max_relative_error(got, expected);
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
        const at::Tensor loss = tandem::fused_distillation_loss(
            hidden, head, ref.at("teacher_hidden"), ref.at("teacher_lm_head"), ref.at("labels"),
            weights, options);
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

// The gradients are formed in the forward pass and only scaled in backward: an upstream gradient
// other than 1 must still reach them, for every divergence and with the hard-label mix.
TEST(DistillLoss, BackwardScalesByTheUpstreamGradient) {
  const auto ref = fixture();
  const at::Tensor mask = ref.at("loss_mask").to(at::kFloat);
  const at::Tensor weights = mask / mask.sum();
  for (const Case& c : kCases) {
    tandem::DistillLossOptions options;
    options.divergence = c.divergence;
    options.beta = c.beta;
    options.temperature = 2.0;
    options.hard_label_weight = 0.3;
    options.chunk_tokens = 5;
    at::Tensor hidden = ref.at("student_hidden").clone().requires_grad_(true);
    at::Tensor head = ref.at("student_lm_head").clone().requires_grad_(true);
    const at::Tensor loss = tandem::fused_distillation_loss(hidden, head, ref.at("teacher_hidden"),
                                                            ref.at("teacher_lm_head"),
                                                            ref.at("labels"), weights, options);
    (loss * -3.0).backward();
    const std::string key = c.name + ".mix";
    SCOPED_TRACE(key);
    EXPECT_LT(max_rel(hidden.grad(), -3.0 * ref.at(key + ".grad.student_hidden")), 1e-5);
    EXPECT_LT(max_rel(head.grad(), -3.0 * ref.at(key + ".grad.student_lm_head")), 1e-5);
  }
}

// Without grad mode, or with a student that wants no gradient, only the value is computed: the
// same value, and a result that carries no graph.
TEST(DistillLoss, ForwardWithoutGradientsGivesTheSameValue) {
  const auto ref = fixture();
  const at::Tensor mask = ref.at("loss_mask").to(at::kFloat);
  const at::Tensor weights = mask / mask.sum();
  for (const Case& c : kCases) {
    tandem::DistillLossOptions options;
    options.divergence = c.divergence;
    options.beta = c.beta;
    options.temperature = 2.0;
    options.hard_label_weight = 0.3;
    options.chunk_tokens = 7;
    const std::string key = c.name + ".mix";
    SCOPED_TRACE(key);
    const double expected = ref.at(key + ".loss").item<double>();
    auto loss_of = [&](const at::Tensor& hidden, const at::Tensor& head) {
      return tandem::fused_distillation_loss(hidden, head, ref.at("teacher_hidden"),
                                             ref.at("teacher_lm_head"), ref.at("labels"), weights,
                                             options);
    };
    at::Tensor hidden = ref.at("student_hidden").clone().requires_grad_(true);
    at::Tensor head = ref.at("student_lm_head").clone().requires_grad_(true);
    {
      at::NoGradGuard no_grad;
      const at::Tensor loss = loss_of(hidden, head);
      EXPECT_FALSE(loss.requires_grad());
      EXPECT_NEAR(loss.item<double>(), expected, 1e-5 * std::abs(expected));
    }
    const at::Tensor plain = loss_of(ref.at("student_hidden"), ref.at("student_lm_head"));
    EXPECT_FALSE(plain.requires_grad());
    EXPECT_NEAR(plain.item<double>(), expected, 1e-5 * std::abs(expected));
  }
}

// The closed-form gradients against autograd through the unfused loss, in fp64 where the two can
// agree to rounding: every divergence, with and without the mix, tokens of zero weight among
// them, and a head that alone wants a gradient.
TEST(DistillLoss, ClosedFormGradientsEqualAutogradInDouble) {
  at::manual_seed(11);
  const int64_t tokens = 13, hidden_size = 6, teacher_size = 5, vocab = 29;
  const auto fp64 = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor student_hidden = at::randn({tokens, hidden_size}, fp64);
  const at::Tensor student_head = at::randn({vocab, hidden_size}, fp64);
  const at::Tensor teacher_hidden = at::randn({tokens, teacher_size}, fp64);
  const at::Tensor teacher_head = at::randn({vocab, teacher_size}, fp64);
  at::Tensor labels = at::randint(vocab, {tokens}, at::kLong);
  at::Tensor weights = at::rand({tokens}, fp64);
  weights.index_put_({at::arange(0, tokens, 4)}, 0.0);
  labels.index_put_({at::arange(0, tokens, 4)}, -100);  // padding: no weight, any label
  for (const Case& c : kCases) {
    for (const double alpha : {0.0, 0.3, 1.0}) {
      tandem::DistillLossOptions options;
      options.divergence = c.divergence;
      options.beta = c.beta;
      options.temperature = 0.7;
      options.hard_label_weight = alpha;
      options.chunk_tokens = 4;
      SCOPED_TRACE(c.name + " alpha " + std::to_string(alpha));
      at::Tensor hidden = student_hidden.clone().requires_grad_(true);
      at::Tensor head = student_head.clone().requires_grad_(true);
      const at::Tensor expected = tandem::unfused_distillation_loss(
          hidden, head, teacher_hidden, teacher_head, labels, weights, options);
      expected.backward();
      const at::Tensor expected_hidden = hidden.grad().clone();
      const at::Tensor expected_head = head.grad().clone();
      hidden.mutable_grad().reset();
      head.mutable_grad().reset();
      const at::Tensor fused = tandem::fused_distillation_loss(
          hidden, head, teacher_hidden, teacher_head, labels, weights, options);
      fused.backward();
      EXPECT_EQ(fused.scalar_type(), at::kDouble);
      EXPECT_NEAR(fused.item<double>(), expected.item<double>(), 1e-12);
      EXPECT_LT(max_rel(hidden.grad(), expected_hidden), 1e-10);
      EXPECT_LT(max_rel(head.grad(), expected_head), 1e-10);

      at::Tensor head_only = student_head.clone().requires_grad_(true);
      tandem::fused_distillation_loss(student_hidden, head_only, teacher_hidden, teacher_head,
                                      labels, weights, options)
          .backward();
      EXPECT_LT(max_rel(head_only.grad(), expected_head), 1e-10);
    }
  }
}

// With bf16 inputs and the fp32 head, gradients come back in the inputs' dtype and agree with
// the fp32 computation to bf16 precision.
TEST(DistillLoss, Bf16InputsWithTheFp32HeadGetBf16Gradients) {
  const auto ref = fixture();
  const at::Tensor mask = ref.at("loss_mask").to(at::kFloat);
  const at::Tensor weights = mask / mask.sum();
  tandem::DistillLossOptions options;
  options.divergence = tandem::Divergence::JSD;
  options.beta = 0.25;
  options.temperature = 2.0;
  options.hard_label_weight = 0.3;
  options.chunk_tokens = 5;
  options.fp32_head = true;
  at::Tensor hidden = ref.at("student_hidden").to(at::kBFloat16).requires_grad_(true);
  at::Tensor head = ref.at("student_lm_head").to(at::kBFloat16).requires_grad_(true);
  const at::Tensor loss = tandem::fused_distillation_loss(
      hidden, head, ref.at("teacher_hidden").to(at::kBFloat16),
      ref.at("teacher_lm_head").to(at::kBFloat16), ref.at("labels"), weights, options);
  loss.backward();
  EXPECT_EQ(loss.scalar_type(), at::kFloat);
  EXPECT_EQ(hidden.grad().scalar_type(), at::kBFloat16);
  EXPECT_EQ(head.grad().scalar_type(), at::kBFloat16);
  EXPECT_LT(max_rel(hidden.grad(), ref.at("jsd_b0.25.mix.grad.student_hidden")), 5e-2);
  EXPECT_LT(max_rel(head.grad(), ref.at("jsd_b0.25.mix.grad.student_lm_head")), 5e-2);
}

// A teacher given as log-probabilities formed once (temperature applied) and read through a row
// index, as EAGLE-3's unroll steps read theirs shifted: every divergence, chunked or not, equals
// the loss through the teacher's head on the same rows, in value and both student gradients.
TEST(DistillLoss, TeacherLogProbabilitiesThroughARowIndexEqualTheTeachersHead) {
  const auto ref = fixture();
  const at::Tensor mask = ref.at("loss_mask").to(at::kFloat);
  const at::Tensor weights = mask / mask.sum();
  const at::Tensor teacher_hidden = ref.at("teacher_hidden"),
                   teacher_head = ref.at("teacher_lm_head");
  const int64_t n = teacher_hidden.size(0);
  // Rows read in another order, one of them twice: a shift by 2 clamped at the last row.
  const at::Tensor rows = (at::arange(n, at::kLong) + 2).clamp_max_(n - 1);
  for (const Case& c : kCases) {
    for (const int64_t chunk : {int64_t{0}, int64_t{5}, int64_t{1024}}) {
      SCOPED_TRACE(c.name + " chunk " + std::to_string(chunk));
      tandem::DistillLossOptions options;
      options.divergence = c.divergence;
      options.beta = c.beta;
      options.temperature = 2.0;
      options.hard_label_weight = 0.3;
      options.chunk_tokens = chunk;
      const at::Tensor log_probs =
          at::log_softmax(at::linear(teacher_hidden, teacher_head) / options.temperature, 1);
      at::Tensor hidden = ref.at("student_hidden").clone().requires_grad_(true);
      at::Tensor head = ref.at("student_lm_head").clone().requires_grad_(true);
      const at::Tensor kept = log_probs.clone();
      const at::Tensor loss = tandem::fused_distillation_loss_from_log_probs(
          hidden, head, log_probs, rows, ref.at("labels"), weights, options);
      loss.backward();
      EXPECT_TRUE(log_probs.equal(kept)) << "the teacher's log-probabilities were overwritten";
      at::Tensor hidden_ref = ref.at("student_hidden").clone().requires_grad_(true);
      at::Tensor head_ref = ref.at("student_lm_head").clone().requires_grad_(true);
      const at::Tensor loss_ref = tandem::fused_distillation_loss(
          hidden_ref, head_ref, teacher_hidden.index_select(0, rows), teacher_head,
          ref.at("labels"), weights, options);
      loss_ref.backward();
      EXPECT_NEAR(loss.item<double>(), loss_ref.item<double>(),
                  1e-5 * std::abs(loss_ref.item<double>()));
      EXPECT_LT(max_rel(hidden.grad(), hidden_ref.grad()), 1e-5);
      EXPECT_LT(max_rel(head.grad(), head_ref.grad()), 1e-5);
    }
  }
  // Wrong shapes are named.
  const at::Tensor log_probs = at::zeros({n, teacher_head.size(0) + 1});
  EXPECT_NE(tandem::testing::error_of([&] {
              tandem::fused_distillation_loss_from_log_probs(
                  ref.at("student_hidden"), ref.at("student_lm_head"), log_probs, rows,
                  ref.at("labels"), weights, tandem::DistillLossOptions{});
            }).find("teacher log-probabilities"),
            std::string::npos);
}

TEST(DistillLoss, VocabMismatchIsAClearError) {
  const auto ref = fixture();
  const at::Tensor weights = at::ones({24});
  EXPECT_NE(tandem::testing::error_of([&] {
              tandem::fused_distillation_loss(
                  ref.at("student_hidden"), ref.at("student_lm_head"), ref.at("teacher_hidden"),
                  ref.at("teacher_lm_head").narrow(0, 0, 60), ref.at("labels"), weights, {});
            }).find("the teacher's vocab (60) differs from the student's (64)"),
            std::string::npos);
}

}  // namespace
