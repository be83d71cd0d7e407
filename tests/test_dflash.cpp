// DFlash (docs/dflash.md) against an independent PyTorch implementation
// (tools/make_dflash_fixtures.py: dense [context | blocks] mask, float64 cross-checks): target
// features, block inputs, the mask, labels, draft logits, loss, per-slot accuracy and every
// gradient, for block sizes 4 and 8; the two published bugs; the factored attention against a dense
// masked one; anchor sampling; mask token resolution; offline from a capture equals online; a short
// training run against the frozen fixture target.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "fixture_tensors.h"
#include "pretokenized.h"
#include "tandem/core/config.h"
#include "tandem/core/hash.h"
#include "tandem/data/capture.h"
#include "tandem/data/packing.h"
#include "tandem/data/token_cache.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/models/dflash.h"
#include "tandem/models/dflash_attention.h"
#include "tandem/objectives/dflash.h"
#include "tandem/text/byte_level.h"
#include "tandem/train/optimizer.h"
#include "tandem/train/training_data.h"
#include "tandem/train/training_options.h"
#include "test_util.h"

namespace {

using tandem::testing::ScratchDir;

const std::map<std::string, at::Tensor>& reference() {
  static const auto tensors =
      tandem::testing::fixture_tensors("tests/fixtures/dflash/reference.safetensors");
  return tensors;
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// The fixture's draft: 2 layers, 6 heads, 2 KV heads, head_dim 16, intermediate 64, reading the
// outputs of target layers 0 and 2, unscaled RoPE theta 10000, mask token 511.
tandem::DFlashOptions fixture_options(int64_t block_size, double gamma) {
  tandem::DFlashOptions options;
  options.target_path = tandem::testing::model_fixture("llama3");
  options.dims = {2, 64, 6, 2, 16};
  options.target_layer_ids = {0, 2};
  options.block_size = block_size;
  options.gamma = gamma;
  options.mask_token_id = 511;
  options.rope_theta = 10000.0;
  return options;
}

void load_fixture_draft(tandem::DFlashObjective& objective) {
  at::NoGradGuard no_grad;
  int loaded = 0;
  for (auto& parameter : objective.draft()->named_parameters()) {
    parameter.value().copy_(reference().at("draft." + parameter.key()));
    ++loaded;
  }
  EXPECT_EQ(loaded, 25);  // fc, hidden_norm, norm + 11 per layer
}

// The fixture's three documents (lengths 11, 13, 19), `first` to `last`.
std::vector<tandem::TokenizedDocument> fixture_documents() {
  const auto& ref = reference();
  std::vector<tandem::TokenizedDocument> documents;
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> spans = {
      {0, 0, 11}, {0, 11, 13}, {1, 0, 19}};
  for (const auto& [row, begin, length] : spans) {
    tandem::TokenizedDocument document;
    for (int64_t t = begin; t < begin + length; ++t) {
      document.ids.push_back(static_cast<int32_t>(ref.at("input_ids")[row][t].item<int64_t>()));
      document.loss_mask.push_back(
          static_cast<uint8_t>(ref.at("loss_mask")[row][t].item<int64_t>()));
    }
    documents.push_back(document);
  }
  return documents;
}

// Packs documents with the given dataset indices (seq_len 24, as the fixture).
tandem::PackedBatch pack(const std::vector<tandem::TokenizedDocument>& documents,
                         const std::vector<int64_t>& dataset_indices) {
  tandem::PackingOptions packing;
  packing.seq_len = 24;
  tandem::PackedBatch batch = tandem::pack_documents(documents, packing);
  for (size_t i = 0; i < batch.documents.size(); ++i)
    batch.documents[i].dataset_index = dataset_indices[i];
  return batch;
}

tandem::PackedBatch fixture_batch() { return pack(fixture_documents(), {0, 1, 2}); }

tandem::DFlashBlocks fixture_blocks(const std::string& prefix, int64_t block_size) {
  return {block_size, reference().at(prefix + "anchors"),
          reference().at(prefix + "anchor_valid").to(at::kBool)};
}

// Full-vocab logits of the draft output through the target lm_head: (B, A * bs, H) -> (B, A, bs,
// V).
at::Tensor logits_of(const at::Tensor& hidden, int64_t block_size) {
  static const at::Tensor head =
      tandem::testing::fixture_tensors("tests/fixtures/models/llama3/model.safetensors")
          .at("lm_head.weight");
  return at::matmul(hidden.detach(), head.t()).view({hidden.size(0), -1, block_size, head.size(0)});
}

TEST(DFlashFixture, PackingReproducesTheReferenceBatch) {
  const auto& ref = reference();
  const tandem::PackedBatch batch = fixture_batch();
  EXPECT_TRUE(batch.input_ids.equal(ref.at("input_ids")));
  EXPECT_TRUE(batch.position_ids.equal(ref.at("position_ids")));
  EXPECT_TRUE(batch.document_ids.equal(ref.at("document_ids")));
  EXPECT_TRUE(batch.loss_mask.equal(ref.at("loss_mask")));
  EXPECT_TRUE(batch.padding_mask.equal(ref.at("padding_mask")));
}

TEST(DFlashFixture, OnlineTargetFeaturesAndContextMatchTheReference) {
  const auto& ref = reference();
  const tandem::PackedBatch batch = fixture_batch();
  tandem::DFlashObjective objective(fixture_options(4, 2.0));
  load_fixture_draft(objective);
  const at::Tensor features = objective.features(batch).aux;
  EXPECT_FALSE(objective.features(batch).last.defined());  // teacher labels: not read
  const at::Tensor real = batch.padding_mask.to(at::kBool);
  EXPECT_LT(max_abs_diff(features.index({real}), ref.at("context_features").index({real})), 1e-4);
  const at::Tensor context = objective.draft()->context(ref.at("context_features"));
  EXPECT_LT(max_abs_diff(context, ref.at("context_projected")), 1e-5);
}

TEST(DFlashFixture, BlockInputsPositionsMaskLabelsAndWeightsMatchTheReference) {
  const auto& ref = reference();
  const tandem::PackedBatch batch = fixture_batch();
  const tandem::DFlashBlocks blocks = fixture_blocks("", 4);
  EXPECT_TRUE(
      tandem::dflash_block_ids(batch.input_ids, blocks, 511).equal(ref.at("block_input_ids")));
  EXPECT_TRUE(tandem::dflash_block_positions(batch.position_ids, blocks)
                  .equal(ref.at("block_position_ids")));
  const at::Tensor context_mask =
      tandem::dflash_context_mask(batch.document_ids, batch.padding_mask, blocks);
  EXPECT_TRUE(
      tandem::dflash_dense_mask(context_mask, blocks.anchor_valid, 4).equal(ref.at("attn_mask")));
  const tandem::DFlashTargets targets = tandem::dflash_targets(batch, blocks);
  EXPECT_TRUE(targets.labels.equal(ref.at("labels")));
  EXPECT_TRUE(targets.valid.equal(ref.at("label_valid").to(at::kBool)));
  const at::Tensor weights = tandem::dflash_slot_weights(4, 2.0).view({1, 1, 4}) * targets.valid;
  EXPECT_LT(max_abs_diff(weights, ref.at("loss_weights")), 1e-7);
  EXPECT_NEAR(weights.sum().item<double>(), ref.at("weight_sum").item<double>(), 1e-5);
  // Block size 8: its own anchors.
  const tandem::DFlashBlocks blocks8 = fixture_blocks("bs8.", 8);
  const tandem::DFlashTargets targets8 = tandem::dflash_targets(batch, blocks8);
  EXPECT_TRUE(targets8.valid.equal(ref.at("bs8.label_valid").to(at::kBool)));
  EXPECT_LT(max_abs_diff(tandem::dflash_slot_weights(8, 4.0).view({1, 1, 8}) * targets8.valid,
                         ref.at("bs8.loss_weights")),
            1e-7);
}

// Checks one block size's loss, metrics and gradients against the fixture (`prefix` "" or "bs8.").
void expect_matches_reference(int64_t block_size, double gamma, const std::string& prefix) {
  const auto& ref = reference();
  const tandem::PackedBatch batch = fixture_batch();
  tandem::DFlashObjective objective(fixture_options(block_size, gamma));
  load_fixture_draft(objective);
  const tandem::DFlashBlocks blocks = fixture_blocks(prefix, block_size);
  const tandem::StepTotals totals = objective.totals(batch, blocks);
  const std::vector<int64_t> counts(
      ref.at(prefix + "count_per_k").data_ptr<int64_t>(),
      ref.at(prefix + "count_per_k").data_ptr<int64_t>() + block_size);
  EXPECT_EQ(totals.unroll_tokens, counts);
  EXPECT_EQ(totals.loss_tokens, ref.at(prefix + "count").item<int64_t>());

  const tandem::DFlashResult result =
      objective.run(batch, {ref.at("context_features"), {}}, blocks, totals);
  if (prefix.empty()) {
    const at::Tensor valid = blocks.anchor_valid;
    const at::Tensor hidden = result.hidden.view({2, -1, block_size, 64});
    EXPECT_LT(max_abs_diff(hidden, ref.at("hidden")), 1e-4);
    EXPECT_LT(max_abs_diff(logits_of(result.hidden, block_size).index({valid}),
                           ref.at("logits").index({valid})),
              1e-4);
    EXPECT_EQ(hidden.index({valid.logical_not()}).abs().max().item<double>(),
              0.0);  // invalid: zeros
  }
  const double loss = ref.at(prefix + "loss").item<double>();
  EXPECT_NEAR(result.loss.item<double>(), loss, 1e-5 * loss) << prefix;
  for (int64_t k = 0; k < block_size; ++k) {
    EXPECT_EQ(result.counts[k], counts[k]) << prefix << k;
    const int64_t hits = std::llround(ref.at(prefix + "acc_per_k")[k].item<double>() * counts[k]);
    EXPECT_EQ(result.correct[k].item<int64_t>(), hits) << prefix << "acc at slot " << k;
    if (counts[k] > 0) {
      EXPECT_NEAR(result.loss_sums[k].item<double>() / counts[k],
                  ref.at(prefix + "loss_per_k")[k].item<double>(), 1e-5)
          << prefix << k;
    }
  }

  result.loss.backward();
  int checked = 0;
  const auto parameters = objective.draft()->named_parameters();
  for (const auto& [name, expected] : ref) {
    if (name.rfind(prefix + "grad.", 0) != 0) continue;
    const at::Tensor grad = parameters[name.substr(prefix.size() + 5)].grad();
    ASSERT_TRUE(grad.defined()) << name;
    EXPECT_LT(max_abs_diff(grad, expected), 1e-4 * expected.abs().max().item<double>()) << name;
    ++checked;
  }
  EXPECT_EQ(checked, prefix.empty() ? 25 : 7);
}

TEST(DFlashFixture, BlockSize4LogitsLossAccuracyAndGradientsMatchPyTorch) {
  expect_matches_reference(4, 2.0, "");
}

TEST(DFlashFixture, BlockSize8LossAccuracyAndGradientsMatchPyTorch) {
  expect_matches_reference(8, 4.0, "bs8.");
}

tandem::DFlashOptions distilled(tandem::DFlashOptions options) {
  options.teacher = tandem::DFlashTeacher::Target;
  options.distill.divergence = tandem::Divergence::ForwardKL;
  options.distill.temperature = 2.0;
  options.distill.hard_label_weight = 0.25;
  return options;
}

// Offline (a capture) against online (the target), for either teacher: a capture for teacher
// target carries the last hidden states, one for teacher labels does not.
void expect_offline_equals_online(const tandem::DFlashOptions& options) {
  const bool distill = options.teacher == tandem::DFlashTeacher::Target;
  ScratchDir dir;
  const tandem::TokenizedDataset dataset =
      tandem::testing::pretokenized_dataset(dir.path(), fixture_documents());
  const tandem::PackedBatch batch = fixture_batch();

  tandem::DFlashObjective online(options);
  load_fixture_draft(online);
  const tandem::StepTotals totals = online.count(batch);
  const tandem::ObjectiveOutput online_output = online.compute(batch, totals);
  online_output.loss.backward();

  tandem::CaptureSettings settings;
  settings.target = tandem::testing::model_fixture("llama3");
  settings.layer_ids = {0, 2};
  settings.dtype = "fp32";
  settings.seq_len = 24;
  settings.dataset_key = tandem::hex64(dataset.key());
  settings.num_documents = dataset.size();
  settings.hidden_size = 64;
  settings.last_hidden = distill;  // what `tandem capture` stores for this config
  tandem::CaptureOptions capture_options;
  capture_options.quiet = true;
  {
    const tandem::FrozenModel target =
        tandem::FrozenModel::load(settings.target, at::kFloat, at::Device(at::kCPU));
    tandem::capture_features(target, dataset, settings, dir / "capture", capture_options);
  }
  std::set<std::string> stored;
  const auto shard = tandem::safetensors::File::open(dir / "capture/shard-00000.safetensors");
  for (const auto& info : shard.header().tensors) stored.insert(info.name);
  EXPECT_EQ(stored.count("aux.0"), 1u);
  EXPECT_EQ(stored.count("last.0"), distill ? 1u : 0u);

  tandem::DFlashOptions offline_options = options;
  offline_options.capture_dir = dir / "capture";
  tandem::DFlashObjective offline(offline_options);
  EXPECT_TRUE(offline.offline());
  offline.attach_data({&dataset, nullptr, dir / "cache", 24});
  load_fixture_draft(offline);
  const tandem::ObjectiveOutput offline_output = offline.compute(batch, totals);
  EXPECT_NEAR(offline_output.loss.item<double>(), online_output.loss.item<double>(),
              1e-6 * online_output.loss.item<double>());
  offline_output.loss.backward();

  // Read ahead on a thread, as the trainer does on a GPU: the same loss, bit for bit. A read
  // ahead for another batch is let finish and this batch read directly; an error of the read
  // ahead surfaces in the forward that takes it.
  offline.prefetch(batch);  // off by default on the CPU
  EXPECT_FALSE(offline.reading_ahead());
  offline.set_prefetch(true);
  offline.prefetch(batch);
  EXPECT_TRUE(offline.reading_ahead());
  EXPECT_EQ(offline.compute(batch, totals).loss.item<double>(), offline_output.loss.item<double>());
  EXPECT_FALSE(offline.reading_ahead());  // taken by the forward
  tandem::PackedBatch other = batch;
  other.documents = {batch.documents[0]};
  offline.prefetch(other);
  EXPECT_EQ(offline.compute(batch, totals).loss.item<double>(), offline_output.loss.item<double>());
  tandem::PackedBatch unknown = batch;
  unknown.documents[0].dataset_index = -1;
  offline.prefetch(unknown);
  EXPECT_NE(tandem::testing::error_of([&] {
              offline.compute(unknown, totals);
            }).find("offline training needs batches that know their dataset documents"),
            std::string::npos);
  offline.set_prefetch(false);

  const auto online_parameters = online.draft()->named_parameters();
  for (const auto& parameter : offline.draft()->named_parameters())
    EXPECT_LT(max_abs_diff(parameter.value().grad(), online_parameters[parameter.key()].grad()),
              1e-6)
        << parameter.key();

  // The capture must match the draft's layers and the data.
  tandem::DFlashOptions other_layers = offline_options;
  other_layers.target_layer_ids = {0, 1};
  EXPECT_NE(tandem::testing::error_of([&] {
              tandem::DFlashObjective bad(other_layers);
            }).find("the capture holds target layers [0, 2] but the draft reads [0, 1]"),
            std::string::npos);
  EXPECT_NE(tandem::testing::error_of([&] {
              offline.attach_data({&dataset, nullptr, dir / "cache", 32});
            }).find("captured with seq_len 24, training uses 32"),
            std::string::npos);
  if (!distill) {  // teacher target cannot train from a capture without the last hidden states
    EXPECT_NE(tandem::testing::error_of([&] {
                tandem::DFlashObjective bad(distilled(offline_options));
              }).find("last hidden"),
              std::string::npos);
  }
}

TEST(DFlashFixture, OfflineFromACaptureGivesTheOnlineLossAndGradients) {
  expect_offline_equals_online(fixture_options(4, 2.0));
}

TEST(DFlashTeacher, OfflineDistillationFromACaptureGivesTheOnlineLossAndGradients) {
  expect_offline_equals_online(distilled(fixture_options(4, 2.0)));
}

// loss.teacher: target against the same quantity written out with full logits: the teacher from
// the target model's own logits (its forward, not the objective's head path), the student's from
// the draft's hidden states, (1 - alpha) KL(p_t || p_s) + alpha CE(label) per counted slot,
// weighted w_k / sum_k w_k count_k; gradients through autograd on that expression.
TEST(DFlashTeacher, TargetDistillationMatchesFullLogitsLossGradientsAndAccuracy) {
  const tandem::PackedBatch batch = fixture_batch();
  const tandem::DFlashOptions options = distilled(fixture_options(4, 2.0));
  tandem::DFlashObjective objective(options);
  load_fixture_draft(objective);
  const tandem::DFlashAnchors drawn = objective.anchors(batch);
  const tandem::StepTotals totals = objective.totals(batch, drawn.blocks);
  const tandem::TargetFeatures features = objective.features(batch);
  ASSERT_TRUE(features.last.defined());

  const tandem::DFlashResult fused = objective.run(batch, features, drawn.blocks, totals);
  fused.loss.backward();
  std::map<std::string, at::Tensor> fused_grads;
  for (const auto& parameter : objective.draft()->named_parameters()) {
    fused_grads[parameter.key()] = parameter.value().grad().clone();
    parameter.value().mutable_grad().zero_();
  }

  const tandem::FrozenModel target = tandem::FrozenModel::load(
      tandem::testing::model_fixture("llama3"), at::kFloat, at::Device(at::kCPU));
  const at::Tensor target_logits =
      target.forward(batch.input_ids, batch.layout(), {}, /*with_logits=*/true).logits;  // (B,S,V)
  const tandem::DFlashResult plain = objective.run(batch, features, drawn.blocks, totals);
  const int64_t bs = 4, anchors = drawn.blocks.num_anchors();
  const at::Tensor weights = tandem::dflash_slot_weights(bs, 2.0);
  double weight_total = 0;
  for (int64_t k = 0; k < bs; ++k)
    weight_total += weights[k].item<double>() * static_cast<double>(totals.unroll_tokens[k]);
  const at::Tensor student_logits =
      at::matmul(plain.hidden, target.lm_head_weight().t());  // (B, A * bs, V)
  at::Tensor loss = at::zeros({}, at::kDouble);
  std::vector<int64_t> agree(bs, 0);
  for (int64_t b = 0; b < batch.rows(); ++b)
    for (int64_t i = 0; i < anchors; ++i)
      for (int64_t k = 1; k < bs; ++k) {
        if (!plain.targets.valid[b][i][k].item<bool>()) continue;
        const int64_t a = drawn.blocks.anchors[b][i].item<int64_t>();
        const at::Tensor teacher = target_logits[b][a + k - 1].to(at::kDouble);
        const at::Tensor student = student_logits[b][i * bs + k].to(at::kDouble);
        const at::Tensor p_t = at::softmax(teacher / 2.0, -1);
        const at::Tensor log_p_s = at::log_softmax(student, -1);
        const at::Tensor kl = (p_t * (at::log(p_t) - log_p_s)).sum();
        const at::Tensor ce = -log_p_s[plain.targets.labels[b][i][k].item<int64_t>()];
        loss = loss + weights[k].item<double>() / weight_total * (0.75 * kl + 0.25 * ce);
        agree[k] += student.argmax().item<int64_t>() == teacher.argmax().item<int64_t>();
      }
  EXPECT_NEAR(fused.loss.item<double>(), loss.item<double>(), 1e-5 * loss.item<double>());
  const at::Tensor correct = fused.correct.cpu();
  EXPECT_EQ(std::vector<int64_t>(correct.data_ptr<int64_t>(), correct.data_ptr<int64_t>() + bs),
            agree);
  EXPECT_EQ(fused.counts, totals.unroll_tokens);
  loss.backward();
  for (const auto& parameter : objective.draft()->named_parameters()) {
    const at::Tensor expected = parameter.value().grad();
    const double scale = expected.abs().max().item<double>() + 1e-12;
    EXPECT_LT(max_abs_diff(fused_grads.at(parameter.key()), expected) / scale, 1e-4)
        << parameter.key();
  }
}

TEST(DFlashTeacher, DistillationKeysNeedTeacherTarget) {
  const std::string target = tandem::testing::model_fixture("llama3");
  const std::string base =
      "target: {path: " + target + "}\ndraft: {num_layers: 1, block_size: 4, mask_token_id: 511}\n";
  EXPECT_NE(tandem::testing::error_of([&] {
              tandem::dflash_options(
                  tandem::Config::parse(base + "loss: {divergence: reverse_kl}\n", "t.yaml"));
            }).find("loss.divergence applies to distillation from the target"),
            std::string::npos);
  const tandem::DFlashOptions options = tandem::dflash_options(tandem::Config::parse(
      base + "loss: {teacher: target, divergence: jsd, beta: 0.3, temperature: 1.5}\n", "t.yaml"));
  EXPECT_EQ(options.teacher, tandem::DFlashTeacher::Target);
  EXPECT_EQ(options.distill.divergence, tandem::Divergence::JSD);
  EXPECT_DOUBLE_EQ(options.distill.beta, 0.3);
  EXPECT_DOUBLE_EQ(options.distill.temperature, 1.5);
  EXPECT_EQ(tandem::dflash_options(tandem::Config::parse(base, "t.yaml")).teacher,
            tandem::DFlashTeacher::Labels);
  EXPECT_NE(tandem::testing::error_of([&] {
              tandem::dflash_options(
                  tandem::Config::parse(base + "loss: {teacher: teachers}\n", "t.yaml"));
            }).find("teacher"),
            std::string::npos);
}

// The two bugs that crushed acceptance in published trainers. Both are reproduced by moving the
// anchors one column right (a + 1 stays in a's document, since the block fits in it): labels at
// a + 1 + k (shifted labels), or context j < a + 1, i.e. j <= a (the anchor's own hidden state
// leaks in). The fixture's losses of both differ from the correct one, which this code gives.
TEST(DFlashFixture, PublishedBugsGiveTheReferenceBugLossesAndTheCodeAvoidsBoth) {
  const auto& ref = reference();
  const tandem::PackedBatch batch = fixture_batch();
  tandem::DFlashObjective objective(fixture_options(4, 2.0));
  load_fixture_draft(objective);
  const tandem::DFlashBlocks blocks = fixture_blocks("", 4);
  tandem::DFlashBlocks moved = blocks;
  moved.anchors = at::where(blocks.anchor_valid, blocks.anchors + 1, blocks.anchors);
  const at::Tensor& features = ref.at("context_features");
  const auto loss_of = [&](const tandem::KeyBands& bands, const tandem::DFlashTargets& targets) {
    const auto& draft = objective.draft();
    const at::Tensor embeds = at::embedding(objective.input_embedding(),
                                            tandem::dflash_block_ids(batch.input_ids, blocks, 511));
    const at::Tensor hidden = draft->forward(
        embeds, draft->context(features), batch.position_ids,
        tandem::dflash_block_positions(batch.position_ids, blocks), bands, blocks.anchor_valid);
    const at::Tensor ce = -at::log_softmax(logits_of(hidden, 4), -1)
                               .gather(-1, targets.labels.unsqueeze(-1))
                               .squeeze(-1);
    const at::Tensor weights = tandem::dflash_slot_weights(4, 2.0).view({1, 1, 4}) * targets.valid;
    return ((ce * weights).sum() / weights.sum()).item<double>();
  };
  const at::Tensor mask =
      tandem::dflash_context_mask(batch.document_ids, batch.padding_mask, blocks);
  const at::Tensor mask_le =
      tandem::dflash_context_mask(batch.document_ids, batch.padding_mask, moved);
  EXPECT_EQ(mask_le.logical_and(mask.logical_not()).sum().item<int64_t>(),
            7);  // one column per valid block
  const tandem::KeyBands bands = tandem::dflash_key_bands(batch.document_ids, blocks, c10::kCPU);
  const tandem::KeyBands bands_le = tandem::dflash_key_bands(batch.document_ids, moved, c10::kCPU);
  EXPECT_TRUE(bands.dense_mask(mask.size(2)).slice(1, 0, c10::nullopt, 4).equal(mask));
  EXPECT_TRUE(bands_le.dense_mask(mask.size(2)).slice(1, 0, c10::nullopt, 4).equal(mask_le));
  const tandem::DFlashTargets targets = tandem::dflash_targets(batch, blocks);

  const double correct = ref.at("loss").item<double>();
  const double shifted = ref.at("bug.shifted_labels.loss").item<double>();
  const double leaked = ref.at("bug.context_le.loss").item<double>();
  EXPECT_NEAR(loss_of(bands, targets), correct, 1e-5 * correct);
  EXPECT_NEAR(loss_of(bands, tandem::dflash_targets(batch, moved)), shifted, 1e-5 * shifted);
  EXPECT_NEAR(loss_of(bands_le, targets), leaked, 1e-5 * leaked);
  const tandem::DFlashResult result =
      objective.run(batch, {features, {}}, blocks, objective.totals(batch, blocks));
  for (const double bug : {shifted, leaked})
    EXPECT_GT(std::abs(result.loss.item<double>() - bug), 0.05 * correct);
  EXPECT_NEAR(result.loss.item<double>(), correct, 1e-5 * correct);
}

// A hand-made row: document 0 at columns 0..3, document 1 at 4..6, padding at 7 (its document id
// clamped onto document 1). Anchors 2, 4 (a document start: no context), 5, and an invalid slot.
TEST(DFlashMask, HandMadeCaseAndNoNaNFromABlockThatSeesNothing) {
  const at::Tensor documents = at::tensor({0, 0, 0, 0, 1, 1, 1, 1}, at::kLong).view({1, 8});
  const at::Tensor padding =
      at::tensor({1, 1, 1, 1, 1, 1, 1, 0}, at::kLong).to(at::kByte).view({1, 8});
  const tandem::DFlashBlocks blocks{2, at::tensor({2, 4, 5, 0}, at::kLong).view({1, 4}),
                                    at::tensor({1, 1, 1, 0}, at::kLong).to(at::kBool).view({1, 4})};
  const at::Tensor context = tandem::dflash_context_mask(documents, padding, blocks);
  const at::Tensor expected_context = at::tensor({1, 1, 0, 0, 0, 0, 0, 0,   // anchor 2: 0, 1
                                                  0, 0, 0, 0, 0, 0, 0, 0,   // anchor 4: nothing
                                                  0, 0, 0, 0, 1, 0, 0, 0,   // anchor 5: 4 only
                                                  0, 0, 0, 0, 0, 0, 0, 0},  // invalid
                                                 at::kLong)
                                          .to(at::kBool)
                                          .view({1, 4, 8});
  EXPECT_TRUE(context.equal(expected_context));
  const at::Tensor dense =
      tandem::dflash_dense_mask(context, blocks.anchor_valid, 2);  // (1, 8, 16)
  ASSERT_EQ(dense.sizes(), (std::vector<int64_t>{1, 8, 16}));
  for (int64_t query = 0; query < 8; ++query)
    for (int64_t key = 8; key < 16; ++key)  // own block both ways, no other block, invalid: none
      EXPECT_EQ(dense[0][query][key].item<bool>(), (key - 8) / 2 == query / 2 && query < 6)
          << query << " " << key;

  at::manual_seed(5);
  const at::Tensor q = at::randn({1, 4, 8, 8}), k = at::randn({1, 2, 8, 8}),
                   v = at::randn({1, 2, 8, 8});
  const at::Tensor kb = at::randn({1, 2, 8, 8}), vb = at::randn({1, 2, 8, 8});
  const tandem::KeyBands bands = tandem::dflash_key_bands(documents, blocks, c10::kCPU);
  EXPECT_TRUE(bands.dense_mask(8).slice(1, 0, c10::nullopt, 2).equal(context));
  const at::Tensor out = tandem::dflash_attention(q, k, v, kb, vb, bands, blocks.anchor_valid,
                                                  tandem::AttentionOptions{});
  EXPECT_TRUE(at::isfinite(out).all().item<bool>());
  EXPECT_EQ(out.narrow(2, 6, 2).abs().max().item<double>(), 0.0);  // the invalid block
  // The document-start block (queries 2, 3) attends to its own two slots only.
  const at::Tensor own = at::softmax(
      at::matmul(q.narrow(2, 2, 2), kb.narrow(2, 2, 2).repeat_interleave(2, 1).transpose(2, 3)) /
          std::sqrt(8.0),
      -1);
  EXPECT_LT(max_abs_diff(out.narrow(2, 2, 2),
                         at::matmul(own, vb.narrow(2, 2, 2).repeat_interleave(2, 1))),
            1e-6);
}

TEST(DFlashAttention, EqualsADenseMaskedReference) {
  at::manual_seed(11);
  const int64_t batch = 2, heads = 6, kv_heads = 2, length = 10, blocks = 3, block_size = 4,
                dim = 8;
  const int64_t queries = blocks * block_size;
  const at::Tensor q = at::randn({batch, heads, queries, dim}, at::kDouble);
  const at::Tensor k = at::randn({batch, kv_heads, length, dim}, at::kDouble);
  const at::Tensor v = at::randn({batch, kv_heads, length, dim}, at::kDouble);
  const at::Tensor kb = at::randn({batch, kv_heads, queries, dim}, at::kDouble);
  const at::Tensor vb = at::randn({batch, kv_heads, queries, dim}, at::kDouble);
  const at::Tensor valid =
      at::tensor({1, 1, 1, 1, 1, 0}, at::kLong).to(at::kBool).view({batch, blocks});
  // Row 0: documents [0, 4) and [4, 10), anchors 2, 5, 8; row 1: one document, anchors 1, 6.
  const at::Tensor documents =
      at::tensor({0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, at::kLong)
          .view({batch, length});
  const tandem::DFlashBlocks drawn{block_size,
                                   at::tensor({2, 5, 8, 1, 6, 0}, at::kLong).view({2, 3}), valid};
  const at::Tensor context = tandem::dflash_context_mask(
      documents, at::ones({batch, length}, at::kByte), drawn);  // (B, A, S)
  const tandem::KeyBands bands = tandem::dflash_key_bands(documents, drawn, c10::kCPU);
  const at::Tensor out = tandem::dflash_attention(q, k, v, kb, vb, bands, valid,
                                                  {tandem::AttentionKernel::Blockwise, 4, 3});

  const at::Tensor mask =
      tandem::dflash_dense_mask(context, valid, block_size).unsqueeze(1);  // (B, 1, Q, S + Q)
  const at::Tensor keys = at::cat({k, kb}, 2).repeat_interleave(heads / kv_heads, 1);
  const at::Tensor values = at::cat({v, vb}, 2).repeat_interleave(heads / kv_heads, 1);
  const at::Tensor scores = (at::matmul(q, keys.transpose(2, 3)) / std::sqrt(double(dim)))
                                .masked_fill(mask.logical_not(), -INFINITY);
  const at::Tensor seen = mask.any(-1, true);
  const at::Tensor dense =
      at::matmul(at::softmax(scores.masked_fill(seen.logical_not(), 0.0), -1) * seen, values);
  EXPECT_LT(max_abs_diff(out, dense), 1e-12);
}

TEST(DFlashConfig, DefaultTargetLayersFollowZLab) {
  using tandem::DFlashConfig;
  EXPECT_EQ(DFlashConfig::default_target_layers(36, 5),
            (std::vector<int64_t>{1, 9, 17, 25, 33}));  // Qwen3-8B
  // 1 + i * 26 / 4 = 1, 7.5, 14, 20.5, 27: Python's round() takes halves to even.
  EXPECT_EQ(DFlashConfig::default_target_layers(30, 5), (std::vector<int64_t>{1, 8, 14, 20, 27}));
  EXPECT_EQ(DFlashConfig::default_target_layers(28, 1), (std::vector<int64_t>{14}));
  EXPECT_EQ(DFlashConfig::default_target_layers(32, 3), (std::vector<int64_t>{1, 15, 29}));
  EXPECT_DOUBLE_EQ(tandem::dflash_default_gamma(16), 7.0);
  EXPECT_DOUBLE_EQ(tandem::dflash_default_gamma(10), 5.0);
  EXPECT_DOUBLE_EQ(tandem::dflash_default_gamma(8), 4.0);
  EXPECT_DOUBLE_EQ(tandem::dflash_default_gamma(4), 2.0);  // the fixture's choice for 4
}

// Documents of random lengths with loss masks, packed into rows of 64.
std::vector<tandem::TokenizedDocument> random_documents(int64_t count, uint64_t seed) {
  at::manual_seed(seed);
  std::vector<tandem::TokenizedDocument> documents;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t length = at::randint(8, 40, {1}).item<int64_t>();
    const int64_t prompt = at::randint(0, length / 2, {1}).item<int64_t>();
    tandem::TokenizedDocument document;
    for (int64_t t = 0; t < length; ++t) {
      document.ids.push_back(static_cast<int32_t>(at::randint(3, 500, {1}).item<int64_t>()));
      document.loss_mask.push_back(t >= prompt && at::rand({1}).item<double>() < 0.9 ? 1 : 0);
    }
    documents.push_back(document);
  }
  return documents;
}

// Documents packed into rows of 64, with dataset indices 100, 101, ...
tandem::PackedBatch random_batch(const std::vector<tandem::TokenizedDocument>& documents) {
  tandem::PackingOptions packing;
  packing.seq_len = 64;
  tandem::PackedBatch batch = tandem::pack_documents(documents, packing);
  for (size_t i = 0; i < batch.documents.size(); ++i)
    batch.documents[i].dataset_index = 100 + static_cast<int64_t>(i);
  return batch;
}

TEST(DFlashAnchors, DeterministicSeededAndInsideTheirDocuments) {
  const auto documents = random_documents(12, 3);
  const tandem::PackedBatch batch = random_batch(documents);
  const int64_t block_size = 4, max_anchors = 6;
  const auto first = tandem::sample_dflash_anchors(batch, block_size, max_anchors, 7);
  const auto again = tandem::sample_dflash_anchors(batch, block_size, max_anchors, 7);
  const auto other = tandem::sample_dflash_anchors(batch, block_size, max_anchors, 8);
  EXPECT_TRUE(first.blocks.anchors.equal(again.blocks.anchors));
  EXPECT_TRUE(first.blocks.anchor_valid.equal(again.blocks.anchor_valid));
  EXPECT_FALSE(first.blocks.anchors.equal(other.blocks.anchors));
  EXPECT_LE(first.blocks.num_anchors(), max_anchors);

  const at::Tensor anchors = first.blocks.anchors, valid = first.blocks.anchor_valid;
  int64_t drawn = 0;
  for (int64_t b = 0; b < batch.rows(); ++b) {
    int64_t candidates = 0, previous = -1;
    for (const auto& document : batch.documents) {
      if (document.row != b) continue;
      const int64_t loss_tokens =
          batch.loss_mask[b].narrow(0, document.begin, document.length).sum().item<int64_t>();
      if (loss_tokens < 2 * block_size) continue;
      for (int64_t a = document.begin; a <= document.begin + document.length - block_size; ++a)
        candidates += batch.loss_mask[b][a].item<int64_t>();
    }
    const int64_t in_row = valid[b].sum().item<int64_t>();
    EXPECT_EQ(in_row, std::min(candidates, max_anchors)) << "row " << b;
    for (int64_t i = 0; i < anchors.size(1); ++i) {
      const int64_t a = anchors[b][i].item<int64_t>();
      if (!valid[b][i].item<bool>()) {
        EXPECT_GE(i, in_row);  // invalid slots last, anchor 0
        EXPECT_EQ(a, 0);
        continue;
      }
      EXPECT_GT(a, previous);  // ascending, no repeats
      previous = a;
      EXPECT_EQ(batch.loss_mask[b][a].item<int64_t>(), 1);
      EXPECT_EQ(batch.padding_mask[b][a + block_size - 1].item<int64_t>(), 1);
      EXPECT_EQ(batch.document_ids[b][a + block_size - 1].item<int64_t>(),
                batch.document_ids[b][a].item<int64_t>());
      ++drawn;
    }
  }
  EXPECT_GT(drawn, 0);
  // A row's anchors do not depend on the rows batched with it (one document per row here).
  tandem::PackingOptions packing;
  packing.seq_len = 64;
  packing.mode = tandem::PackingMode::Padded;
  tandem::PackedBatch all = tandem::pack_documents(documents, packing);
  tandem::PackedBatch some = tandem::pack_documents({documents[0], documents[1]}, packing);
  for (size_t i = 0; i < all.documents.size(); ++i)
    all.documents[i].dataset_index = static_cast<int64_t>(i);
  for (size_t i = 0; i < some.documents.size(); ++i)
    some.documents[i].dataset_index = static_cast<int64_t>(i);
  const auto from_all = tandem::sample_dflash_anchors(all, block_size, max_anchors, 7).blocks;
  const auto from_some = tandem::sample_dflash_anchors(some, block_size, max_anchors, 7).blocks;
  const int64_t width = from_some.num_anchors();
  EXPECT_TRUE(from_all.anchors.narrow(0, 0, 2).narrow(1, 0, width).equal(from_some.anchors));
}

TEST(DFlashAnchors, EachEpochDrawsOtherAnchorsOfTheSameDocuments) {
  tandem::PackedBatch batch = random_batch(random_documents(12, 3));
  const auto epoch0 = tandem::sample_dflash_anchors(batch, 4, 6, 7).blocks;
  for (auto& document : batch.documents) document.epoch = 1;
  const auto epoch1 = tandem::sample_dflash_anchors(batch, 4, 6, 7).blocks;
  const auto epoch1_again = tandem::sample_dflash_anchors(batch, 4, 6, 7).blocks;
  EXPECT_TRUE(epoch1.anchors.equal(epoch1_again.anchors));
  EXPECT_FALSE(epoch1.anchors.equal(epoch0.anchors));
  // Same candidates, so the same count per row: only which ones changes.
  EXPECT_TRUE(epoch1.anchor_valid.sum(1).equal(epoch0.anchor_valid.sum(1)));
}

TEST(DFlashAnchors, TrainingBatchesCarryTheEpochEachDocumentWasDrawnIn) {
  ScratchDir dir;
  tandem::TrainingData data;
  data.dataset.emplace(tandem::testing::pretokenized_dataset(dir.path(), random_documents(5, 11)));
  data.format = tandem::DataFormat::pretokenized;
  data.packing.seq_len = 64;
  data.rows = 2;  // two 20..40-token documents per row at most: several batches per epoch
  tandem::SamplerOptions options;
  options.dataset_size = data.num_records();
  options.seed = 3;
  tandem::DataCursor cursor(options);
  const tandem::Sampler& sampler = cursor.sampler;
  std::map<int64_t, std::vector<int64_t>> epochs_of;  // dataset index -> epochs it came in
  int64_t crossing = 0;
  for (int step = 0; step < 8; ++step) {
    const int64_t before = sampler.state().epoch;
    const tandem::PackedBatch batch = tandem::next_micro_batch(cursor, data);
    std::set<int64_t> in_batch;
    for (const auto& document : batch.documents) {
      EXPECT_GE(document.epoch, before);
      EXPECT_LE(document.epoch, sampler.state().epoch);
      epochs_of[document.dataset_index].push_back(document.epoch);
      in_batch.insert(document.epoch);
    }
    crossing += in_batch.size() > 1;
  }
  // Every document is drawn once per epoch, in epochs 0, 1, 2, ... in order.
  ASSERT_EQ(epochs_of.size(), 5u);
  for (const auto& [index, epochs] : epochs_of)
    for (size_t i = 0; i < epochs.size(); ++i) EXPECT_EQ(epochs[i], static_cast<int64_t>(i));
  EXPECT_GE(sampler.state().epoch, 2);
  (void)crossing;  // a batch may straddle an epoch boundary; the per-document epochs still hold
}

TEST(DFlashAnchors, DocumentsWithFewerThanTwoBlocksOfLossTokensAreSkipped) {
  // Fixture documents have 9, 12 and 15 loss tokens: block size 5 skips the first only.
  const tandem::PackedBatch batch = fixture_batch();
  const auto drawn = tandem::sample_dflash_anchors(batch, 5, 512, 0);
  EXPECT_EQ(drawn.skipped_documents, 1);
  const at::Tensor valid = drawn.blocks.anchor_valid, anchors = drawn.blocks.anchors;
  // With no cap every candidate is taken: loss-masked a with a + 4 inside the document.
  std::vector<int64_t> row0, row1;
  for (int64_t i = 0; i < anchors.size(1); ++i) {
    if (valid[0][i].item<bool>()) row0.push_back(anchors[0][i].item<int64_t>());
    if (valid[1][i].item<bool>()) row1.push_back(anchors[1][i].item<int64_t>());
  }
  EXPECT_EQ(row0,
            (std::vector<int64_t>{11, 12, 13, 14, 15, 17, 18, 19}));  // doc 1: 11..23 minus 16
  EXPECT_EQ(row1, (std::vector<int64_t>{3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14}));  // 3..18 minus 10
  EXPECT_EQ(tandem::sample_dflash_anchors(batch, 8, 512, 0).skipped_documents, 3);
}

TEST(DFlashObjective, ConfigKeysMaskTokenAndMetrics) {
  const std::string target = tandem::testing::model_fixture("llama3");
  const tandem::Config config = tandem::Config::parse(
      "target: {path: " + target +
          "}\n"
          "draft: {num_layers: 2, block_size: 8, intermediate_size: 64, mask_token_id: 511}\n"
          "loss: {max_anchors: 16}\ntraining: {objective: dflash, seed: 3}\n",
      "run.yaml");
  // training.seed is read once, into the run context (train/training_options.h).
  const tandem::RunContext run =
      tandem::read_run_context(config, tandem::dist::LaunchEnv{}, /*dry_run=*/true);
  const tandem::DFlashOptions options = tandem::dflash_options(config, run);
  EXPECT_EQ(options.block_size, 8);
  EXPECT_DOUBLE_EQ(options.gamma, 4.0);
  EXPECT_EQ(options.max_anchors, 16);
  EXPECT_EQ(options.seed, 3u);
  // Built directly: the registry does not offer dflash until its export and eval exist.
  auto objective = std::make_unique<tandem::DFlashObjective>(tandem::dflash_options(config));
  EXPECT_EQ(objective->name(), "dflash");
  auto& dflash = dynamic_cast<tandem::DFlashObjective&>(*objective);
  EXPECT_EQ(dflash.draft()->config().target_layer_ids,
            (std::vector<int64_t>{1, 1}));  // 4 target layers
  EXPECT_EQ(dflash.mask_token().rule, tandem::MaskTokenRule::Config);

  // No mask token id and no tokenizer anywhere: a clear error.
  tandem::DFlashOptions bare = fixture_options(4, 2.0);
  bare.mask_token_id.reset();
  EXPECT_NE(tandem::testing::error_of([&] {
              tandem::DFlashObjective o(bare);
            }).find("set draft.mask_token_id"),
            std::string::npos);
  EXPECT_EQ(tandem::dflash_options(
                tandem::Config::parse("target: {path: x}\ndata: {capture: runs/c}\n", "run.yaml"))
                .capture_dir,
            "runs/c");
}

// A minimal tokenizer.json with `size` model tokens and the given added tokens.
std::string write_tokenizer(const std::string& dir, int64_t size, const nlohmann::json& added) {
  std::filesystem::create_directories(dir);
  nlohmann::json vocab = nlohmann::json::object();  // the 256 byte-level tokens, then fillers
  for (int64_t i = 0; i < size; ++i)
    vocab[i < 256 ? tandem::byte_level::encode(std::string(1, static_cast<char>(i)))
                  : "t" + std::to_string(i)] = i;
  const nlohmann::json tokenizer = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"},
        {"add_prefix_space", false},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
  std::ofstream(dir + "/tokenizer.json") << tokenizer.dump();
  return dir;
}

TEST(DFlashObjective, MaskTokenFromTheTokenizerOrAGrownRow) {
  ScratchDir scratch;
  const auto special = [](int64_t id, const std::string& content) {
    return nlohmann::json{{"id", id},        {"content", content}, {"single_word", false},
                          {"lstrip", false}, {"rstrip", false},    {"normalized", false},
                          {"special", true}};
  };
  tandem::DFlashOptions options = fixture_options(4, 2.0);
  options.mask_token_id.reset();
  options.tokenizer_dir = write_tokenizer(
      scratch / "reserved", 300,
      {special(300, "<|begin_of_text|>"), special(301, "<|reserved_special_token_0|>")});
  EXPECT_EQ(tandem::DFlashObjective(options).mask_token().id, 301);

  // A tokenizer as large as the target's vocab with no spare token: grow one row.
  options.tokenizer_dir = write_tokenizer(scratch / "full", 512, nlohmann::json::array());
  tandem::DFlashObjective grown(options);
  EXPECT_EQ(grown.mask_token().rule, tandem::MaskTokenRule::Grown);
  EXPECT_EQ(grown.mask_token().id, 512);
  const at::Tensor embed =
      tandem::testing::fixture_tensors("tests/fixtures/models/llama3/model.safetensors")
          .at("model.embed_tokens.weight");
  ASSERT_EQ(grown.input_embedding().size(0), 513);
  EXPECT_TRUE(grown.input_embedding().narrow(0, 0, 512).equal(embed));
  const tandem::PackedBatch batch = fixture_batch();
  const tandem::StepTotals totals = grown.count(batch);
  EXPECT_TRUE(std::isfinite(grown.compute(batch, totals).loss.item<double>()));
}

TEST(DFlashObjective, ABf16DraftTrainsAgainstAnFp32Target) {
  tandem::DFlashOptions options = fixture_options(4, 2.0);
  options.draft_dtype = at::kBFloat16;
  tandem::DFlashObjective objective(options);
  const tandem::PackedBatch batch = fixture_batch();
  const tandem::ObjectiveOutput output = objective.compute(batch, objective.count(batch));
  EXPECT_TRUE(std::isfinite(output.loss.item<double>()));
  output.loss.backward();
  const at::Tensor grad =
      objective.draft()->layers[0]->named_parameters()["self_attn.q_proj.weight"].grad();
  ASSERT_TRUE(grad.defined());
  EXPECT_EQ(grad.scalar_type(), at::kBFloat16);
  EXPECT_GT(grad.abs().max().item<double>(), 0.0);
}

TEST(DFlashObjective, MicroBatchLossesAndMetricsSumToTheStep) {
  const auto documents = fixture_documents();
  const tandem::PackedBatch whole = fixture_batch();
  const tandem::PackedBatch first = pack({documents[0], documents[1]}, {0, 1});
  const tandem::PackedBatch second = pack({documents[2]}, {2});
  tandem::DFlashObjective objective(fixture_options(4, 2.0));
  load_fixture_draft(objective);
  const tandem::StepTotals step = objective.count(whole);
  tandem::StepTotals split = objective.count(first);
  split.add(objective.count(second));
  EXPECT_EQ(split.unroll_tokens, step.unroll_tokens);  // anchors are drawn per row
  const auto whole_output = objective.compute(whole, step);
  const auto first_output = objective.compute(first, step);
  const auto second_output = objective.compute(second, step);
  const double sum = first_output.loss.item<double>() + second_output.loss.item<double>();
  EXPECT_NEAR(sum, whole_output.loss.item<double>(), 1e-6);

  std::map<std::string, double> metrics;
  for (const auto* output : {&first_output, &second_output})
    for (const auto& [name, value] : output->metric_values()) metrics[name] += value;
  std::vector<std::pair<std::string, double>> step_metrics(metrics.begin(), metrics.end());
  objective.finish_metrics(step_metrics);
  const double accept = step_metrics.back().second;
  EXPECT_EQ(step_metrics.back().first, "sim_accept_length");
  EXPECT_NEAR(accept, metrics["acc_1"] * (1 + metrics["acc_2"] * (1 + metrics["acc_3"])), 1e-12);
  for (const auto& [name, value] : whole_output.metric_values())
    EXPECT_NEAR(metrics[name], value, 1e-6) << name;
}

TEST(DFlashTraining, AShortRunLowersTheLossAndNeverTouchesTheTarget) {
  tandem::DFlashOptions options = fixture_options(4, 2.0);
  options.seed = 1;
  tandem::DFlashObjective objective(options);
  const auto checkpoint = tandem::HfCheckpoint::open(options.target_path);
  const auto parameters = tandem::trainable_parameters(*objective.draft());
  EXPECT_EQ(parameters.size(), 25u);  // the draft only: no embedding, no lm_head, no target layer
  for (const auto& [name, tensor] : parameters) EXPECT_FALSE(tandem::is_frozen(tensor)) << name;
  tandem::AdamWOptions adamw;
  adamw.max_grad_norm = 1.0;
  tandem::MixedPrecisionAdamW optimizer(parameters, adamw);

  const tandem::PackedBatch batch = fixture_batch();
  const tandem::StepTotals totals = objective.count(batch);
  std::vector<double> losses;
  for (int step = 0; step < 15; ++step) {
    const tandem::ObjectiveOutput output = objective.compute(batch, totals);
    output.loss.backward();
    optimizer.accumulate_gradients();
    optimizer.step(1e-2);
    optimizer.zero_grad();
    losses.push_back(output.loss.item<double>());
  }
  EXPECT_LT(losses.back(), 0.7 * losses.front()) << losses.front() << " -> " << losses.back();
  for (const std::string& name : checkpoint.names())
    EXPECT_TRUE(objective.target().named_weights().at(name).equal(checkpoint.read(name))) << name;
}

}  // namespace
