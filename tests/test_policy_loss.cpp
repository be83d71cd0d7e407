// DPO, GRPO and GSPO losses and the fp32 LM head against an independent PyTorch computation
// (tools/make_policy_loss_fixtures.py -> tests/fixtures/losses/{dpo,policy,fp32_head}.safetensors):
// values, metrics and gradients w.r.t. the hidden states and the LM head, through the chunked
// token log-probabilities, on packed rows with padding clamped onto the last document.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "fixture_tensors.h"
#include "tandem/objectives/dpo_loss.h"
#include "tandem/objectives/fused_vocab_loss.h"
#include "tandem/objectives/policy_loss.h"

namespace {

using tandem::testing::fixture_tensors;
using tandem::testing::max_relative_error;

tandem::FusedLossOptions chunked(int64_t chunk_tokens, bool fp32_head = false) {
  tandem::FusedLossOptions options;
  options.chunk_tokens = chunk_tokens;
  options.fp32_head = fp32_head;
  return options;
}

TEST(TokenLogprobs, FusedEqualsUnfusedInValueAndGradientForEveryChunking) {
  const auto ref = fixture_tensors("tests/fixtures/losses/dpo.safetensors");
  const at::Tensor upstream = at::linspace(-1.0, 2.0, 48);
  at::Tensor hidden = ref.at("policy_hidden").clone().requires_grad_(true);
  at::Tensor head = ref.at("policy_lm_head").clone().requires_grad_(true);
  const at::Tensor plain = tandem::unfused_token_logprobs(hidden, head, ref.at("labels"));
  (plain * upstream).sum().backward();
  const at::Tensor plain_hidden = hidden.grad().clone(), plain_head = head.grad().clone();
  EXPECT_LT(max_relative_error(plain, ref.at("policy_logps")), 1e-6);
  for (const int64_t chunk : {int64_t{1}, int64_t{7}, int64_t{48}, int64_t{1000}}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    hidden.mutable_grad().zero_();
    head.mutable_grad().zero_();
    const at::Tensor fused =
        tandem::fused_token_logprobs(hidden, head, ref.at("labels"), chunked(chunk));
    (fused * upstream).sum().backward();
    EXPECT_LT(max_relative_error(fused, plain), 1e-6);
    EXPECT_LT(max_relative_error(hidden.grad(), plain_hidden), 1e-5);
    EXPECT_LT(max_relative_error(head.grad(), plain_head), 1e-5);
  }
}

TEST(Dpo, EveryLossMatchesPyTorchInValueMetricsAndGradient) {
  const auto ref = fixture_tensors("tests/fixtures/losses/dpo.safetensors");
  const at::Tensor mask = ref.at("completion_mask").to(at::kBool);  // (48,)
  const at::Tensor segment = ref.at("segment_ids").index({mask});   // (N,)
  const at::Tensor labels = ref.at("labels").index({mask});         // (N,)
  const int64_t sequences = 6;
  auto per_sequence = [&](const at::Tensor& token_values) {  // (N,) -> (6,)
    return at::zeros({sequences}, token_values.options()).index_add(0, segment, token_values);
  };
  const at::Tensor even = at::arange(0, sequences, 2), odd = at::arange(1, sequences, 2);
  // The live reference and the precomputed one give the same sums.
  const at::Tensor live_reference = per_sequence(tandem::fused_token_logprobs(
      ref.at("ref_hidden").index({mask}), ref.at("ref_lm_head"), labels, chunked(5)));
  const at::Tensor cached_reference = per_sequence(ref.at("ref_logps").index({mask}));
  EXPECT_LT(max_relative_error(live_reference, cached_reference), 1e-6);
  const at::Tensor lengths = per_sequence(at::ones({labels.size(0)}, at::kFloat));

  for (const char* name : {"sigmoid", "hinge", "ipo"}) {
    SCOPED_TRACE(name);
    at::Tensor hidden = ref.at("policy_hidden").clone().requires_grad_(true);
    at::Tensor head = ref.at("policy_lm_head").clone().requires_grad_(true);
    const at::Tensor policy =
        per_sequence(tandem::fused_token_logprobs(hidden.index({mask}), head, labels, chunked(5)));
    tandem::DpoPairLogprobs pairs{policy.index({even}),           policy.index({odd}),
                                  cached_reference.index({even}), cached_reference.index({odd}),
                                  lengths.index({even}),          lengths.index({odd})};
    const auto out = tandem::dpo_pair_losses(pairs, tandem::parse_dpo_loss_type(name), 0.1);
    const at::Tensor loss = out.losses.sum() / ref.at("num_pairs").item<int64_t>();
    loss.backward();
    const std::string key = name;
    EXPECT_LT(max_relative_error(out.losses, ref.at(key + ".losses")), 1e-5);
    EXPECT_NEAR(loss.item<double>(), ref.at(key + ".loss").item<double>(),
                1e-5 * std::abs(ref.at(key + ".loss").item<double>()));
    EXPECT_LT(max_relative_error(hidden.grad(), ref.at(key + ".grad.policy_hidden")), 1e-5);
    EXPECT_LT(max_relative_error(head.grad(), ref.at(key + ".grad.policy_lm_head")), 1e-5);
    EXPECT_LT(max_relative_error(out.rewards_chosen, ref.at("pair.rewards_chosen")), 1e-5);
    EXPECT_LT(max_relative_error(out.rewards_rejected, ref.at("pair.rewards_rejected")), 1e-5);
    const at::Tensor margins = out.rewards_chosen - out.rewards_rejected;
    EXPECT_LT(max_relative_error(margins, ref.at("pair.margins")), 1e-5);
    EXPECT_NEAR((margins > 0).to(at::kFloat).mean().item<double>(),
                ref.at("metrics.accuracy").item<double>(), 1e-7);
  }
}

// The pair-fused loss (logits formed once per pair, gradients made in forward), in one pass
// (pairs within a chunk) and in two (chunks of 5 tokens), equals the fixture too.
TEST(Dpo, PairFusedLossMatchesPyTorchInOneAndTwoPasses) {
  const auto ref = fixture_tensors("tests/fixtures/losses/dpo.safetensors");
  const at::Tensor mask = ref.at("completion_mask").to(at::kBool);
  const at::Tensor segment = ref.at("segment_ids").index({mask});
  const at::Tensor labels = ref.at("labels").index({mask});
  const at::Tensor reference =
      at::zeros({6}).index_add(0, segment, ref.at("ref_logps").index({mask}));
  const at::Tensor counts = at::zeros({6}, at::kLong).index_add(0, segment, at::ones_like(segment));
  for (const char* name : {"sigmoid", "hinge", "ipo"})
    for (const int64_t chunk : {int64_t{5}, int64_t{1000}}) {
      SCOPED_TRACE(std::string(name) + " chunk " + std::to_string(chunk));
      at::Tensor hidden = ref.at("policy_hidden").clone().requires_grad_(true);
      at::Tensor head = ref.at("policy_lm_head").clone().requires_grad_(true);
      const tandem::DpoHeadInputs inputs{
          hidden.index({mask}), head,      labels, segment, at::arange(0, 6, 2),
          at::arange(1, 6, 2),  reference, counts};
      tandem::DpoPairLosses pairs;
      const at::Tensor loss = tandem::fused_dpo_loss(inputs, tandem::parse_dpo_loss_type(name), 0.1,
                                                     1.0 / 3.0, chunked(chunk), &pairs);
      (loss * 2.0).backward();  // the upstream gradient scales the stored ones
      const std::string key = name;
      EXPECT_NEAR(loss.item<double>(), ref.at(key + ".loss").item<double>(),
                  1e-5 * std::abs(ref.at(key + ".loss").item<double>()));
      EXPECT_LT(max_relative_error(pairs.losses, ref.at(key + ".losses")), 1e-5);
      EXPECT_LT(max_relative_error(pairs.rewards_chosen, ref.at("pair.rewards_chosen")), 1e-5);
      EXPECT_LT(max_relative_error(hidden.grad() / 2.0, ref.at(key + ".grad.policy_hidden")), 1e-5);
      EXPECT_LT(max_relative_error(head.grad() / 2.0, ref.at(key + ".grad.policy_lm_head")), 1e-5);
    }
}

TEST(Dpo, UnknownLossTypeNamesTheChoices) {
  EXPECT_NE(tandem::testing::error_of([] {
              tandem::parse_dpo_loss_type("robust");
            }).find("(sigmoid, hinge, ipo)"),
            std::string::npos);
}

// GRPO and GSPO on B=2 packed rows: row 0 two documents, row 1 one document plus padding.
TEST(PolicyLoss, GrpoAndGspoMatchPyTorchInValueMetricsAndGradient) {
  const auto ref = fixture_tensors("tests/fixtures/losses/policy.safetensors");
  const at::Tensor mask = ref.at("loss_mask").to(at::kBool);  // (2, 16)
  const at::Tensor labels = ref.at("labels").index({mask});
  const at::Tensor document = ref.at("global_document_ids").index({mask});
  const at::Tensor advantages = ref.at("advantages").index({mask});
  const double tokens = static_cast<double>(ref.at("num_tokens").item<int64_t>());
  const double documents = static_cast<double>(ref.at("num_documents_total").item<int64_t>());
  const tandem::ClipRange clip{0.2, 0.28};
  for (const char* variant : {"grpo", "gspo", "grpo_onpolicy", "gspo_onpolicy"}) {
    SCOPED_TRACE(variant);
    const std::string key = variant;
    const bool sequence_level = key.rfind("gspo", 0) == 0;
    const at::Tensor old =
        ref.at(key.find("onpolicy") != std::string::npos ? "old_logps_onpolicy" : "old_logps")
            .index({mask});
    at::Tensor hidden = ref.at("hidden").clone().requires_grad_(true);
    at::Tensor head = ref.at("lm_head").clone().requires_grad_(true);
    at::Tensor entropy;
    const at::Tensor logprobs =
        tandem::fused_token_logprobs(hidden.index({mask}), head, labels, chunked(3), &entropy);
    const tandem::PolicyLosses out =
        sequence_level
            ? tandem::gspo_document_losses(logprobs, old, document, ref.at("advantages_doc"), clip)
            : tandem::grpo_token_losses(logprobs, old, advantages, clip);
    const at::Tensor loss = out.losses.sum() / (sequence_level ? documents : tokens);
    loss.backward();
    // The loss sums terms of order 1 that nearly cancel: an absolute tolerance.
    EXPECT_NEAR(loss.item<double>(), ref.at(key + ".loss").item<double>(), 1e-6);
    EXPECT_LT(max_relative_error(hidden.grad(), ref.at(key + ".grad.hidden")), 1e-5);
    EXPECT_LT(max_relative_error(head.grad(), ref.at(key + ".grad.lm_head")), 1e-5);
    const at::Tensor expected_ratio =
        sequence_level ? ref.at(key + ".ratio") : ref.at(key + ".ratio").index({mask});
    EXPECT_LT(max_relative_error(out.ratio, expected_ratio), 1e-5);
    EXPECT_NEAR(out.ratio.mean().item<double>(), ref.at(key + ".metrics.ratio_mean").item<double>(),
                1e-5);
    EXPECT_NEAR(out.clipped.to(at::kFloat).mean().item<double>(),
                ref.at(key + ".metrics.clipped_fraction").item<double>(), 1e-7);
    EXPECT_NEAR(tandem::kl_k3(logprobs, old).mean().item<double>(),
                ref.at(key + ".metrics.kl_new_old").item<double>(), 1e-6);
    EXPECT_NEAR(entropy.mean().item<double>(), ref.at(key + ".metrics.entropy").item<double>(),
                1e-5);
    EXPECT_LT(max_relative_error(entropy, ref.at("entropy_token").index({mask})), 1e-5);
  }
  // The fixture has both clipped and unclipped tokens, so the clip rule is exercised.
  EXPECT_GT(ref.at("grpo.metrics.clipped_fraction").item<double>(), 0.0);
  EXPECT_LT(ref.at("grpo.metrics.clipped_fraction").item<double>(), 1.0);
}

// The fp32 head (docs/training.md): the projection runs with hidden and weight upcast to fp32; the
// stored bf16 weight's gradient is the fp32 gradient rounded once.
TEST(Fp32Head, LogprobsEqualTheFp32ComputationAndBf16GradientsAreRoundedOnce) {
  const auto ref = fixture_tensors("tests/fixtures/losses/fp32_head.safetensors");
  ASSERT_EQ(ref.at("hidden").scalar_type(), at::kBFloat16);
  for (const int64_t chunk : {int64_t{5}, int64_t{1024}}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    at::Tensor hidden = ref.at("hidden").clone().requires_grad_(true);
    at::Tensor head = ref.at("lm_head").clone().requires_grad_(true);
    const at::Tensor logprobs =
        tandem::fused_token_logprobs(hidden, head, ref.at("labels"), chunked(chunk, true));
    EXPECT_EQ(logprobs.scalar_type(), at::kFloat);
    EXPECT_LT((logprobs - ref.at("logps_fp32")).abs().max().item<double>(), 2e-5);
    logprobs.sum().backward();
    ASSERT_EQ(hidden.grad().scalar_type(), at::kBFloat16);
    ASSERT_EQ(head.grad().scalar_type(), at::kBFloat16);
    // Within one bf16 rounding of the fp32 gradient; the chunked accumulation order differs from
    // one big matmul in the last fp32 bits, which can tip a rounding to the neighbour.
    const auto within_one_ulp = [](const at::Tensor& got, const at::Tensor& fp32) {
      const at::Tensor ulp = fp32.abs() * std::ldexp(1.0, -7) + 1e-6 * fp32.abs().max();
      return ((got.to(at::kFloat) - fp32).abs() <= ulp).all().item<bool>();
    };
    EXPECT_TRUE(within_one_ulp(hidden.grad(), ref.at("grad_hidden_fp32")));
    EXPECT_TRUE(within_one_ulp(head.grad(), ref.at("grad_lm_head_fp32")));
    const double exact =
        (head.grad() == ref.at("grad_lm_head")).to(at::kFloat).mean().item<double>();
    EXPECT_GT(exact, 0.95) << "bf16 head gradient equal to the once-rounded fp32 one";
  }
  // Without the option the bf16 matmul's rounding shows: the test above can fail.
  const at::Tensor bf16_path = tandem::fused_token_logprobs(ref.at("hidden"), ref.at("lm_head"),
                                                            ref.at("labels"), chunked(5));
  EXPECT_GT((bf16_path - ref.at("logps_fp32")).abs().max().item<double>(), 1e-3);
}

}  // namespace
