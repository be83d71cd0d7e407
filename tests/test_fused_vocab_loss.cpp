// The chunked LM-head cross-entropy: equal to the plain full-logits computation in value and
// gradient, for any chunking; gradients checked against finite differences in fp64; and the
// fp32-head option equal to an fp32 reference while a bf16 weight keeps a bf16 gradient.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include "tandem/objectives/fused_vocab_loss.h"

namespace {

using tandem::FusedLossOptions;

struct Case {
  at::Tensor hidden, head, targets, weights;
};

Case make_case(int64_t tokens, int64_t hidden_size, int64_t vocab, c10::ScalarType dtype,
               uint64_t seed) {
  at::manual_seed(seed);
  Case c;
  c.hidden = at::randn({tokens, hidden_size}).to(dtype).requires_grad_();
  c.head = (at::randn({vocab, hidden_size}) * 0.5).to(dtype).requires_grad_();
  c.targets = at::randint(vocab, {tokens}, at::kLong);
  c.weights = at::rand({tokens});
  // Some tokens carry no weight; their targets are padding (-100) and must be ignored.
  for (int64_t t = 0; t < tokens; t += 5) {
    c.weights[t] = 0.0;
    c.targets[t] = -100;
  }
  return c;
}

std::pair<at::Tensor, at::Tensor> grads_of(const at::Tensor& loss, const Case& c) {
  const auto grads = torch::autograd::grad({loss}, {c.hidden, c.head});
  return {grads[0], grads[1]};
}

TEST(FusedVocabLoss, EqualsUnfusedForAnyChunking) {
  const Case c = make_case(37, 16, 101, at::kFloat, 1);
  const at::Tensor reference =
      tandem::unfused_linear_cross_entropy(c.hidden, c.head, c.targets, c.weights);
  const auto [ref_hidden, ref_head] = grads_of(reference, c);
  for (int64_t chunk : {1, 7, 16, 37, 64}) {
    FusedLossOptions options;
    options.chunk_tokens = chunk;
    const at::Tensor loss =
        tandem::fused_linear_cross_entropy(c.hidden, c.head, c.targets, c.weights, options);
    EXPECT_NEAR(loss.item<double>(), reference.item<double>(), 1e-6 * reference.item<double>())
        << "chunk " << chunk;
    const auto [g_hidden, g_head] = grads_of(loss, c);
    EXPECT_TRUE(at::allclose(g_hidden, ref_hidden, 1e-5, 1e-6)) << "chunk " << chunk;
    EXPECT_TRUE(at::allclose(g_head, ref_head, 1e-5, 1e-6)) << "chunk " << chunk;
  }
}

TEST(FusedVocabLoss, HandComputedValue) {
  // One token, H = 1, V = 2: logits = (h*w0, h*w1) = (1, 3); CE(target 0) = log(e + e^3) - 1.
  const at::Tensor hidden = at::ones({1, 1});
  const at::Tensor head = at::tensor({1.0f, 3.0f}).view({2, 1});
  const at::Tensor loss = tandem::fused_linear_cross_entropy(hidden, head, at::tensor({int64_t{0}}),
                                                             at::tensor({0.5f}));
  EXPECT_NEAR(loss.item<double>(), 0.5 * (std::log(std::exp(1.0) + std::exp(3.0)) - 1.0), 1e-6);
}

// Central differences in fp64 on a few coordinates of each input.
TEST(FusedVocabLoss, GradientMatchesFiniteDifferences) {
  const Case c = make_case(9, 5, 13, at::kDouble, 2);
  FusedLossOptions options;
  options.chunk_tokens = 4;
  auto loss_at = [&](const at::Tensor& hidden, const at::Tensor& head) {
    at::NoGradGuard no_grad;
    return tandem::fused_linear_cross_entropy(hidden, head, c.targets, c.weights, options)
        .item<double>();
  };
  const at::Tensor loss =
      tandem::fused_linear_cross_entropy(c.hidden, c.head, c.targets, c.weights, options);
  const auto [g_hidden, g_head] = grads_of(loss, c);
  const double eps = 1e-6;
  for (const auto& [input, grad, is_hidden] :
       {std::tuple{c.hidden, g_hidden, true}, std::tuple{c.head, g_head, false}}) {
    for (int64_t flat : {0, 3, 11, 20, 40}) {
      at::Tensor plus = input.detach().clone(), minus = input.detach().clone();
      plus.view(-1)[flat] += eps;
      minus.view(-1)[flat] -= eps;
      const double numeric = is_hidden
                                 ? (loss_at(plus, c.head) - loss_at(minus, c.head)) / (2 * eps)
                                 : (loss_at(c.hidden, plus) - loss_at(c.hidden, minus)) / (2 * eps);
      EXPECT_NEAR(grad.view(-1)[flat].item<double>(), numeric, 1e-7)
          << (is_hidden ? "hidden" : "head") << "[" << flat << "]";
    }
  }
}

TEST(FusedVocabLoss, Fp32HeadMatchesFp32ReferenceWithBf16Weights) {
  const Case c = make_case(24, 32, 257, at::kBFloat16, 3);
  FusedLossOptions options;
  options.chunk_tokens = 10;
  options.fp32_head = true;
  const at::Tensor loss =
      tandem::fused_linear_cross_entropy(c.hidden, c.head, c.targets, c.weights, options);
  const auto [g_hidden, g_head] = grads_of(loss, c);
  EXPECT_EQ(g_head.scalar_type(), at::kBFloat16);  // the stored weight's gradient stays bf16
  EXPECT_EQ(g_hidden.scalar_type(), at::kBFloat16);

  // fp32 reference on the same (bf16-valued) inputs, computed without the fused path.
  const at::Tensor hidden32 = c.hidden.detach().to(at::kFloat).requires_grad_();
  const at::Tensor head32 = c.head.detach().to(at::kFloat).requires_grad_();
  const at::Tensor reference =
      tandem::unfused_linear_cross_entropy(hidden32, head32, c.targets, c.weights);
  EXPECT_NEAR(loss.item<double>(), reference.item<double>(),
              1e-4 * std::abs(reference.item<double>()));
  const auto ref = torch::autograd::grad({reference}, {hidden32, head32});
  // Equal up to the final rounding of the gradient to bf16 (8 mantissa bits).
  EXPECT_TRUE(at::allclose(g_head.to(at::kFloat), ref[1], 1e-2, 1e-4));
  EXPECT_TRUE(at::allclose(g_hidden.to(at::kFloat), ref[0], 1e-2, 1e-4));

  // Without the fp32 head the bf16 projection rounds the logits: measurably further away.
  FusedLossOptions bf16_head = options;
  bf16_head.fp32_head = false;
  const at::Tensor rounded =
      tandem::fused_linear_cross_entropy(c.hidden, c.head, c.targets, c.weights, bf16_head);
  EXPECT_GT(std::abs(rounded.item<double>() - reference.item<double>()),
            std::abs(loss.item<double>() - reference.item<double>()));
}

TEST(FusedVocabLoss, RejectsMismatchedShapes) {
  const at::Tensor hidden = at::randn({4, 8});
  EXPECT_ANY_THROW(tandem::fused_linear_cross_entropy(hidden, at::randn({10, 7}),
                                                      at::zeros({4}, at::kLong), at::ones({4})));
  EXPECT_ANY_THROW(tandem::fused_linear_cross_entropy(hidden, at::randn({10, 8}),
                                                      at::zeros({3}, at::kLong), at::ones({4})));
}

}  // namespace
