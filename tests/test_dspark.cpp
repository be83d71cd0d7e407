// DSpark (docs/dspark.md) against an independent PyTorch implementation
// (tools/make_dspark_fixtures.py: dense [context | blocks] mask, per-block float64 cross-checks,
// checked against DeepSpec's own loss and heads): labels, Markov inputs and the prefix mask,
// the draft's hidden states, corrected and confidence logits, the three loss terms, per-slot
// accuracy and every gradient; the fused vocabulary loss against plain autograd; the anchor
// rule; the speculators export read back.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "fixture_tensors.h"
#include "packed_fixture.h"
#include "tandem/data/packing.h"
#include "tandem/objectives/dspark.h"
#include "tandem/objectives/dspark_export.h"
#include "tandem/objectives/dspark_loss.h"
#include "tandem/objectives/dspark_targets.h"
#include "test_util.h"

namespace {

using tandem::testing::ScratchDir;

const std::map<std::string, at::Tensor>& reference() {
  static const auto tensors =
      tandem::testing::fixture_tensors("tests/fixtures/dspark/reference.safetensors");
  return tensors;
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// The fixture's draft: 2 layers, 4 heads, 2 KV heads, head_dim 16, intermediate 96, reading the
// outputs of target layers 0 and 2, unscaled RoPE theta 10000, mask token 511, block size 4,
// gamma 4, Markov rank 8, the confidence head on.
tandem::DSparkOptions fixture_options() {
  tandem::DSparkOptions options;
  options.target_path = tandem::testing::model_fixture("llama3");
  options.dims = {2, 96, 4, 2, 16};
  options.target_layer_ids = {0, 2};
  options.block_size = 4;
  options.gamma = 4.0;
  options.mask_token_id = 511;
  options.rope_theta = 10000.0;
  options.heads.markov_rank = 8;
  options.target_name = "fixture/llama3";
  return options;
}

void load_fixture_draft(tandem::DSparkObjective& objective) {
  at::NoGradGuard no_grad;
  int loaded = 0;
  for (auto& parameter : objective.draft()->named_parameters()) {
    parameter.value().copy_(reference().at("draft." + parameter.key()));
    ++loaded;
  }
  EXPECT_EQ(loaded, 29);  // fc, hidden_norm, norm, 11 per layer, 2 Markov, 2 confidence
}

tandem::PackedBatch fixture_batch() {
  tandem::PackingOptions packing;
  packing.seq_len = 24;
  tandem::PackedBatch batch =
      tandem::pack_documents(tandem::testing::packed_fixture_documents(reference()), packing);
  for (size_t i = 0; i < batch.documents.size(); ++i)
    batch.documents[i].dataset_index = static_cast<int64_t>(i);
  return batch;
}

tandem::DFlashBlocks fixture_blocks() {
  return {4, reference().at("anchors"), reference().at("anchor_valid").to(at::kBool)};
}

const at::Tensor& lm_head() {
  static const at::Tensor head =
      tandem::testing::fixture_tensors("tests/fixtures/models/llama3/model.safetensors")
          .at("lm_head.weight");
  return head;
}

TEST(DSparkFixture, PackingAndTargetsMatchTheReference) {
  const auto& ref = reference();
  const tandem::PackedBatch batch = fixture_batch();
  EXPECT_TRUE(batch.input_ids.equal(ref.at("input_ids")));
  EXPECT_TRUE(batch.loss_mask.equal(ref.at("loss_mask")));
  EXPECT_TRUE(batch.document_ids.equal(ref.at("document_ids")));
  const tandem::DFlashBlocks blocks = fixture_blocks();
  EXPECT_TRUE(
      tandem::dflash_block_ids(batch.input_ids, blocks, 511).equal(ref.at("block_input_ids")));
  EXPECT_TRUE(tandem::dflash_block_positions(batch.position_ids, blocks)
                  .equal(ref.at("block_position_ids")));
  const tandem::DSparkTargets targets = tandem::dspark_targets(batch, blocks);
  EXPECT_TRUE(targets.labels.equal(ref.at("labels")));
  EXPECT_TRUE(targets.prev.equal(ref.at("prev_ids")));
  EXPECT_TRUE(targets.valid.equal(ref.at("eval_mask").to(at::kBool)));
  const at::Tensor weights =
      tandem::dspark_slot_weights(4, 4.0).view({1, 1, 4}) * targets.valid.to(at::kFloat);
  EXPECT_LT(max_abs_diff(weights, ref.at("loss_weights")), 1e-7);
}

TEST(DSparkFixture, ForwardLossMetricsAndEveryGradientMatchTheReference) {
  const auto& ref = reference();
  const tandem::PackedBatch batch = fixture_batch();
  tandem::DSparkObjective objective(fixture_options());
  load_fixture_draft(objective);
  const tandem::DFlashBlocks blocks = fixture_blocks();
  const tandem::StepTotals totals = objective.totals(batch, blocks);
  const at::Tensor count_per_k = ref.at("count_per_k");
  for (int64_t k = 0; k < 4; ++k)
    EXPECT_EQ(totals.unroll_tokens[k], count_per_k[k].item<int64_t>());
  EXPECT_EQ(totals.loss_tokens, ref.at("count").item<int64_t>());

  const tandem::TargetFeatures features = objective.features(batch);  // online, from the target
  ASSERT_TRUE(features.last.defined());
  const at::Tensor real = batch.padding_mask.to(at::kBool);
  EXPECT_LT(max_abs_diff(features.aux.index({real}), ref.at("context_features").index({real})),
            1e-4);
  objective.draft()->zero_grad();
  const tandem::DSparkResult result = objective.run(batch, features, blocks, totals);

  // Every supervised slot, in (row, anchor, slot) order, against the reference's dense tensors.
  const at::Tensor valid = ref.at("eval_mask").to(at::kBool);  // (B, A, bs)
  const at::Tensor hidden = result.hidden.view({2, -1, 4, 64});
  EXPECT_LT(max_abs_diff(hidden, ref.at("hidden")), 1e-4);
  const at::Tensor anchor_valid = blocks.anchor_valid;
  EXPECT_EQ(hidden.index({anchor_valid.logical_not()}).abs().max().item<double>(), 0.0);
  const tandem::DSparkDraftImpl& draft = objective.dspark();
  at::Tensor corrected;
  {
    at::NoGradGuard no_grad;
    corrected = at::matmul(hidden, lm_head().t()) +
                draft.markov_bias(draft.markov_code(ref.at("prev_ids")));  // (B, A, bs, V)
  }
  const at::Tensor valid_anchors = anchor_valid;
  EXPECT_LT(max_abs_diff(corrected.index({valid_anchors}),
                         ref.at("corrected_logits").index({valid_anchors})),
            1e-4);
  EXPECT_TRUE(result.corrected_argmax.equal(ref.at("corrected_logits").index({valid}).argmax(-1)));
  EXPECT_LT(
      max_abs_diff(result.confidence_logits.detach(), ref.at("confidence_logits").index({valid})),
      1e-5);
  EXPECT_LT(max_abs_diff(result.confidence_target, ref.at("confidence_target").index({valid})),
            1e-5);
  // The three terms and the loss (the reference divides by sum(w) + 1e-6, tandem by sum(w)).
  for (const auto& [share, name] :
       std::vector<std::pair<at::Tensor, std::string>>{{result.ce_share, "loss_ce"},
                                                       {result.l1_share, "loss_l1"},
                                                       {result.confidence_share, "loss_conf"},
                                                       {result.loss, "loss"}}) {
    const double expected = ref.at(name).item<double>();
    EXPECT_NEAR(share.item<double>(), expected, 1e-5 * std::abs(expected)) << name;
  }
  for (int64_t k = 0; k < 4; ++k) {
    EXPECT_EQ(result.counts[k], count_per_k[k].item<int64_t>());
    EXPECT_EQ(result.correct[k].item<int64_t>(),
              std::llround(ref.at("acc_per_k")[k].item<double>() * result.counts[k]))
        << "slot " << k;
  }
  // Every gradient.
  result.loss.backward();
  int checked = 0;
  for (const auto& parameter : objective.draft()->named_parameters()) {
    const at::Tensor expected = ref.at("grad." + parameter.key());
    ASSERT_TRUE(parameter.value().grad().defined()) << parameter.key();
    EXPECT_LT(tandem::testing::max_relative_error(parameter.value().grad(), expected), 1e-4)
        << parameter.key();
    ++checked;
  }
  EXPECT_EQ(checked, 29);
}

// The fused loss (chunks of 3 rows, closed-form gradients) equals plain autograd on full logits:
// value, parts and the gradients of hidden, the Markov code and markov_w2.
TEST(DSparkLoss, FusedEqualsUnfusedWithGradients) {
  at::manual_seed(7);
  const int64_t n = 11, h = 16, v = 40, r = 4;
  const auto options = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor head = at::randn({v, h}, options);
  const at::Tensor teacher = at::randn({n, h}, options);
  const at::Tensor labels = at::randint(v, {n}, at::kLong);
  const at::Tensor weights = at::rand({n}, options);
  const tandem::DSparkLossWeights loss_weights{0.3, 0.7};
  std::vector<at::Tensor> fused_grads, plain_grads;
  tandem::DSparkVocabLoss fused, plain;
  for (const bool chunked : {true, false}) {
    at::manual_seed(8);
    const at::Tensor hidden = at::randn({n, h}, options).requires_grad_();
    const at::Tensor code = at::randn({n, r}, options).requires_grad_();
    const at::Tensor w2 = at::randn({v, r}, options).requires_grad_();
    tandem::FusedLossOptions fused_options;
    fused_options.chunk_tokens = 3;
    tandem::DSparkVocabLoss out =
        chunked ? tandem::fused_dspark_loss(hidden, head, code, w2, teacher, labels, weights,
                                            loss_weights, fused_options)
                : tandem::unfused_dspark_loss(hidden, head, code, w2, teacher, labels, weights,
                                              loss_weights);
    (out.loss * 2.5).backward();  // an incoming gradient other than 1
    std::vector<at::Tensor>& grads = chunked ? fused_grads : plain_grads;
    grads = std::vector<at::Tensor>{hidden.grad(), code.grad(), w2.grad()};
    (chunked ? fused : plain) = out;
  }
  EXPECT_NEAR(fused.loss.item<double>(), plain.loss.item<double>(), 1e-12);
  EXPECT_LT(max_abs_diff(fused.cross_entropy, plain.cross_entropy), 1e-12);
  EXPECT_LT(max_abs_diff(fused.l1, plain.l1), 1e-12);
  EXPECT_TRUE(fused.argmax.equal(plain.argmax));
  for (size_t i = 0; i < 3; ++i)
    EXPECT_LT(max_abs_diff(fused_grads[i], plain_grads[i]), 1e-10) << "gradient " << i;
  // Without the Markov head: the logits are lm_head's alone.
  const at::Tensor hidden = at::randn({n, h}, options).requires_grad_();
  const tandem::DSparkVocabLoss bare = tandem::fused_dspark_loss(
      hidden, head, {}, {}, teacher, labels, weights, loss_weights, tandem::FusedLossOptions{});
  const tandem::DSparkVocabLoss bare_plain =
      tandem::unfused_dspark_loss(hidden, head, {}, {}, teacher, labels, weights, loss_weights);
  EXPECT_NEAR(bare.loss.item<double>(), bare_plain.loss.item<double>(), 1e-12);
}

// A bf16 draft against an fp32 target: the Markov head's operands are bf16, the lm_head's fp32.
// The fused loss runs (each matmul in its operands' dtype) and agrees with plain autograd.
TEST(DSparkLoss, ABf16MarkovHeadBesideAnFp32LmHead) {
  at::manual_seed(9);
  const int64_t n = 7, h = 16, v = 40, r = 4;
  const at::Tensor head = at::randn({v, h});
  const at::Tensor teacher = at::randn({n, h});
  const at::Tensor labels = at::randint(v, {n}, at::kLong);
  const at::Tensor weights = at::rand({n});
  std::vector<std::vector<at::Tensor>> grads;
  std::vector<double> losses;
  for (const bool fused : {true, false}) {
    at::manual_seed(10);
    const at::Tensor hidden = at::randn({n, h}).requires_grad_();
    const at::Tensor code = at::randn({n, r}).to(at::kBFloat16).requires_grad_();
    const at::Tensor w2 = at::randn({v, r}).to(at::kBFloat16).requires_grad_();
    tandem::FusedLossOptions options;
    options.chunk_tokens = fused ? 3 : 0;  // 0: the unfused path
    const tandem::DSparkVocabLoss out = tandem::fused_dspark_loss(
        hidden, head, code, w2, teacher, labels, weights, tandem::DSparkLossWeights{}, options);
    out.loss.backward();
    EXPECT_EQ(code.grad().scalar_type(), at::kBFloat16);
    EXPECT_EQ(w2.grad().scalar_type(), at::kBFloat16);
    grads.push_back({hidden.grad(), code.grad(), w2.grad()});
    losses.push_back(out.loss.item<double>());
  }
  EXPECT_NEAR(losses[0], losses[1], 1e-5);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_LT(tandem::testing::max_relative_error(grads[0][i], grads[1][i]), 2e-2) << i;
}

// DeepSpec's candidates: loss-masked a with a + 1 in the document and loss-masked; no document
// is skipped for being short.
// draft.head_init: fan_in draws the heads at speculators' scales from a stream of their own (the
// backbone is the same as with normal); normal leaves them N(0, init_std) with a zero bias.
TEST(DSparkHeads, InitialisationFanInOrNormal) {
  tandem::DSparkOptions options = fixture_options();
  options.heads.markov_rank = 64;
  options.init_std = 0.02;
  options.heads.init = tandem::DSparkHeadInit::FanIn;
  tandem::DSparkObjective fan_in(options);
  options.heads.init = tandem::DSparkHeadInit::Normal;
  tandem::DSparkObjective normal(options);
  std::map<std::string, at::Tensor> a, b;
  for (const auto& p : fan_in.draft()->named_parameters()) a[p.key()] = p.value();
  for (const auto& p : normal.draft()->named_parameters()) b[p.key()] = p.value();
  for (const auto& [name, value] : a) {
    if (name.rfind("markov_head.", 0) != 0 && name.rfind("confidence_head.", 0) != 0) {
      EXPECT_TRUE(at::equal(value, b.at(name))) << name << ": the backbone must not change";
    }
  }
  const double bound_w2 = 1.0 / 8.0;  // 1/sqrt(64)
  const at::Tensor& w1 = a.at("markov_head.markov_w1.weight");
  const at::Tensor& w2 = a.at("markov_head.markov_w2.weight");
  EXPECT_NEAR(w1.std().item<double>(), 0.01, 0.0005);
  EXPECT_LE(w2.abs().max().item<double>(), bound_w2);
  EXPECT_NEAR(w2.std().item<double>(), bound_w2 / std::sqrt(3.0), 0.002);  // U(-b, b)
  const at::Tensor& proj = a.at("confidence_head.proj.weight");
  const double bound_proj = 1.0 / std::sqrt(static_cast<double>(proj.size(1)));  // H + r
  EXPECT_LE(proj.abs().max().item<double>(), bound_proj);
  EXPECT_LE(a.at("confidence_head.proj.bias").abs().item<double>(), bound_proj);
  EXPECT_NE(a.at("confidence_head.proj.bias").item<double>(), 0.0);
  EXPECT_NEAR(b.at("markov_head.markov_w1.weight").std().item<double>(), 0.02, 0.001);
  EXPECT_NEAR(b.at("markov_head.markov_w2.weight").std().item<double>(), 0.02, 0.001);
  EXPECT_EQ(b.at("confidence_head.proj.bias").item<double>(), 0.0);
}

TEST(DSparkAnchors, CandidatesAreTrainedPositionsFollowedByATrainedToken) {
  const tandem::PackedBatch batch = fixture_batch();
  tandem::DSparkObjective objective(fixture_options());
  const tandem::DFlashBlocks blocks = objective.anchors(batch).blocks;  // max_anchors 512: all
  const at::Tensor loss = batch.loss_mask, documents = batch.document_ids;
  for (int64_t row = 0; row < 2; ++row) {
    std::vector<int64_t> expected;
    for (int64_t a = 0; a + 1 < 24; ++a)
      if (loss[row][a].item<int64_t>() && loss[row][a + 1].item<int64_t>() &&
          documents[row][a].item<int64_t>() == documents[row][a + 1].item<int64_t>() &&
          batch.padding_mask[row][a + 1].item<int64_t>())
        expected.push_back(a);
    std::vector<int64_t> drawn;
    for (int64_t i = 0; i < blocks.num_anchors(); ++i)
      if (blocks.anchor_valid[row][i].item<bool>())
        drawn.push_back(blocks.anchors[row][i].item<int64_t>());
    EXPECT_EQ(drawn, expected) << "row " << row;
  }
}

TEST(DSparkExport, SpeculatorsFormatRoundTripsAndIsStrict) {
  const ScratchDir scratch;
  tandem::DSparkObjective objective(fixture_options());
  load_fixture_draft(objective);
  const std::string dir = scratch / "export";
  objective.export_model(dir);
  const nlohmann::json config =
      nlohmann::json::parse(std::ifstream(dir + "/speculators/config.json"));
  EXPECT_EQ(config.at("speculators_model_type"), "dspark");
  EXPECT_EQ(config.at("aux_hidden_state_layer_ids"), nlohmann::json::array({1, 3}));
  EXPECT_EQ(config.at("block_size"), 4);
  EXPECT_EQ(config.at("mask_token_id"), 511);
  EXPECT_EQ(config.at("markov_rank"), 8);
  EXPECT_EQ(config.at("draft_vocab_size"), 512);
  EXPECT_EQ(config.at("speculators_config").at("verifier").at("name_or_path"), "fixture/llama3");
  EXPECT_EQ(config.at("speculators_config").at("verifier").at("architectures"),
            nlohmann::json::array({"LlamaForCausalLM"}));
  EXPECT_EQ(config.at("transformer_layer_config").at("num_hidden_layers"), 2);
  EXPECT_EQ(tandem::find_dspark_export(dir), dir + "/speculators");

  const auto loaded = tandem::load_dspark_export(dir + "/speculators", at::kFloat);
  EXPECT_EQ(loaded->config().target_layer_ids, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(loaded->heads().markov_rank, 8);
  int compared = 0;
  for (const auto& parameter : loaded->named_parameters()) {
    EXPECT_TRUE(parameter.value().equal(reference().at("draft." + parameter.key())))
        << parameter.key();
    ++compared;
  }
  EXPECT_EQ(compared, 29);

  // Strict: a config whose rank disagrees with the weights, and an unexpected tensor.
  nlohmann::json wrong_rank = config;
  wrong_rank["markov_rank"] = 16;
  std::ofstream(dir + "/speculators/config.json") << wrong_rank.dump();
  EXPECT_THROW(
      {
        try {
          tandem::load_dspark_export(dir + "/speculators", at::kFloat);
        } catch (const tandem::Error& e) {
          EXPECT_NE(std::string(e.what()).find("markov_head.markov_w1.weight"), std::string::npos)
              << e.what();
          throw;
        }
      },
      tandem::Error);
}

// speculators embeds the mask token with the target's embedding: a grown row cannot be served.
TEST(DSparkExport, RefusesAGrownMaskToken) {
  const ScratchDir scratch;
  tandem::DSparkObjective objective(fixture_options());
  tandem::DFlashConfig config = objective.dspark().config();
  config.mask_token_id = 512;  // the target's vocab size: the grown row's id
  const tandem::DSparkDraftImpl grown(config, objective.dspark().heads(), at::kFloat);
  EXPECT_THROW(
      {
        try {
          tandem::write_dspark_export(grown, scratch / "export", {});
        } catch (const tandem::Error& e) {
          EXPECT_NE(std::string(e.what()).find("draft.mask_token_id"), std::string::npos)
              << e.what();
          throw;
        }
      },
      tandem::Error);
  EXPECT_FALSE(std::filesystem::exists(scratch / "export"));
}

}  // namespace
