// EAGLE-3 (docs/eagle3.md) against an independent PyTorch implementation
// (tools/make_eagle3_fixtures.py, transformers' Llama pieces + a dense attention mask): target
// features, per-step draft logits, losses, accuracies and gradients; TTT attention against a dense
// reference; online = offline; the export formats; speculative decoding = greedy decoding.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "pretokenized.h"
#include "tandem/core/hash.h"
#include "tandem/data/capture.h"
#include "tandem/data/packing.h"
#include "tandem/data/token_cache.h"
#include "tandem/eval/eagle3_decode.h"
#include "tandem/eval/speculative.h"
#include "tandem/eval/uncached_decode.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/io/tensor_io.h"
#include "tandem/models/ttt_attention.h"
#include "tandem/objectives/eagle3.h"
#include "tandem/objectives/eagle3_export.h"
#include "test_util.h"

namespace {

using tandem::testing::ScratchDir;

std::map<std::string, at::Tensor> reference_tensors() {
  const auto file = tandem::safetensors::File::open(
      tandem::testing::source_path("tests/fixtures/eagle3/reference.safetensors"));
  std::map<std::string, at::Tensor> out;
  for (const auto& info : file.header().tensors) out[info.name] = tandem::read_tensor(file, info);
  return out;
}

const std::map<std::string, at::Tensor>& reference() {
  static const std::map<std::string, at::Tensor> tensors = reference_tensors();
  return tensors;
}

tandem::Eagle3Options fixture_options(int64_t ttt_length) {
  tandem::Eagle3Options options;
  options.target_path = tandem::testing::model_fixture("llama3");
  options.aux_layer_ids = {0, 1, 2};
  options.ttt_length = ttt_length;
  options.draft_vocab_size = 96;
  options.intermediate_size = 96;
  return options;
}

// The draft with the fixture's weights and vocab map.
void load_fixture_draft(tandem::Eagle3Objective& objective) {
  const auto& ref = reference();
  objective.set_vocab_map({ref.at("d2t"), ref.at("t2d")});
  at::NoGradGuard no_grad;
  for (auto& parameter : objective.draft()->named_parameters())
    parameter.value().copy_(ref.at("draft." + parameter.key()));
}

// The fixture's three documents (lengths 11, 13, 19).
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

tandem::PackedBatch fixture_batch() {
  tandem::PackingOptions packing;
  packing.seq_len = 24;
  tandem::PackedBatch batch = tandem::pack_documents(fixture_documents(), packing);
  for (size_t i = 0; i < batch.documents.size(); ++i)
    batch.documents[i].dataset_index = static_cast<int64_t>(i);
  return batch;
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

TEST(Eagle3Fixture, PackingReproducesTheReferenceBatch) {
  const auto& ref = reference();
  const tandem::PackedBatch batch = fixture_batch();
  EXPECT_TRUE(batch.input_ids.equal(ref.at("input_ids")));
  EXPECT_TRUE(batch.position_ids.equal(ref.at("position_ids")));
  EXPECT_TRUE(batch.document_ids.equal(ref.at("document_ids")));
  EXPECT_TRUE(batch.loss_mask.equal(ref.at("loss_mask")));
  EXPECT_TRUE(batch.padding_mask.equal(ref.at("padding_mask")));
}

TEST(Eagle3Fixture, StepTargetsAndCountsMatchTheReference) {
  const auto& ref = reference();
  const tandem::PackedBatch batch = fixture_batch();
  tandem::Eagle3Objective objective(fixture_options(4));
  const tandem::StepTotals totals = objective.count(batch);
  ASSERT_EQ(totals.unroll_tokens.size(), 4u);
  for (int64_t i = 0; i < 4; ++i) {
    const std::string s = std::to_string(i);
    EXPECT_TRUE(tandem::eagle3_step_targets(batch, i).equal(ref.at("valid." + s).to(at::kBool)))
        << i;
    EXPECT_EQ(totals.unroll_tokens[i], ref.at("count." + s).item<int64_t>()) << i;
  }
}

// A TTT-4 unroll of `objective` on the fixture batch against `ref`'s logits, losses, accuracies
// (and loss positions where `ref` has them), total loss and every gradient. Returns the number
// of gradients compared.
int expect_unroll_matches(tandem::Eagle3Objective& objective,
                          const std::map<std::string, at::Tensor>& ref,
                          const tandem::TargetFeatures& features) {
  const tandem::PackedBatch batch = fixture_batch();
  const at::Tensor real = batch.padding_mask.to(at::kBool);
  const tandem::StepTotals totals = objective.count(batch);
  const tandem::Eagle3Result result = objective.unroll(batch, features, totals);
  for (int64_t i = 0; i < 4; ++i) {
    const std::string s = std::to_string(i);
    const at::Tensor logits = objective.draft()->logits(result.step_outputs[i]).detach();
    EXPECT_LT(max_abs_diff(logits.index({real}), ref.at("logits." + s).index({real})), 1e-4)
        << "logits of step " << i;
    EXPECT_NEAR(result.step_losses[i].item<double>(), ref.at("loss." + s).item<double>(), 1e-5)
        << i;
    EXPECT_NEAR(result.correct[i].item<int64_t>() / static_cast<double>(totals.unroll_tokens[i]),
                ref.at("acc." + s).item<double>(), 1e-6)
        << "acc of step " << i;
    if (ref.count("loss_mask." + s) != 0)
      EXPECT_EQ(result.loss_positions[i].item<int64_t>(),
                ref.at("loss_mask." + s).sum().item<int64_t>())
          << i;
  }
  EXPECT_NEAR(result.loss.item<double>(), ref.at("loss_total").item<double>(), 1e-5);

  result.loss.backward();
  int checked = 0;
  for (const auto& parameter : objective.draft()->named_parameters()) {
    const at::Tensor expected = ref.at("grad." + parameter.key());
    EXPECT_TRUE(parameter.value().grad().defined()) << parameter.key();
    if (!parameter.value().grad().defined()) continue;
    const double scale = expected.abs().max().item<double>();
    EXPECT_LT(max_abs_diff(parameter.value().grad(), expected), 1e-4 * scale + 1e-7)
        << parameter.key();
    ++checked;
  }
  return checked;
}

TEST(Eagle3Fixture, OnlineFeaturesLogitsLossesAccuraciesAndGradientsMatchPyTorch) {
  const auto& ref = reference();
  const tandem::PackedBatch batch = fixture_batch();
  tandem::Eagle3Objective objective(fixture_options(4));
  load_fixture_draft(objective);
  const tandem::TargetFeatures features = objective.features(batch);
  const at::Tensor real = batch.padding_mask.to(at::kBool);
  EXPECT_LT(max_abs_diff(features.aux.index({real}), ref.at("aux_hidden").index({real})), 1e-4);
  EXPECT_LT(max_abs_diff(features.last.index({real}), ref.at("last_hidden").index({real})), 1e-4);
  EXPECT_EQ(expect_unroll_matches(objective, ref, features), 13);
}

TEST(Eagle3Options, RefusesAuxLayersNoServingEngineCanCapture) {
  tandem::Eagle3Options options = fixture_options(4);
  options.aux_layer_ids = {0, 1, 3};  // 3 = the last layer of 4: vLLM and SGLang never expose it
  EXPECT_NE(tandem::testing::error_of([&] {
              tandem::Eagle3Objective objective(options);
            }).find("aux layer 3 is the target's last layer"),
            std::string::npos);
}

TEST(Eagle3Fixture, SevenStepUnrollMatchesPyTorch) {
  const auto& ref = reference();
  const tandem::PackedBatch batch = fixture_batch();
  tandem::Eagle3Objective objective(fixture_options(7));
  load_fixture_draft(objective);
  const tandem::StepTotals totals = objective.count(batch);
  const tandem::Eagle3Result result = objective.unroll(batch, objective.features(batch), totals);
  for (int64_t i = 0; i < 7; ++i) {
    const std::string s = std::to_string(i);
    EXPECT_EQ(totals.unroll_tokens[i], ref.at("l7.count." + s).item<int64_t>()) << i;
    EXPECT_NEAR(result.step_losses[i].item<double>(), ref.at("l7.loss." + s).item<double>(), 1e-5)
        << i;
  }
  EXPECT_NEAR(result.loss.item<double>(), ref.at("l7.loss_total").item<double>(), 1e-5);
  result.loss.backward();
  const auto parameters = objective.draft()->named_parameters();
  int checked = 0;
  for (const auto& [name, expected] : ref) {
    if (name.rfind("l7.grad.", 0) != 0) continue;
    const at::Tensor grad = parameters[name.substr(8)].grad();
    EXPECT_LT(max_abs_diff(grad, expected), 1e-4 * expected.abs().max().item<double>() + 1e-7)
        << name;
    ++checked;
  }
  EXPECT_EQ(checked, 6);
}

TEST(Eagle3Fixture, OfflineFromACaptureGivesTheOnlineLoss) {
  ScratchDir dir;
  const tandem::TokenizedDataset dataset =
      tandem::testing::pretokenized_dataset(dir.path(), fixture_documents());
  const tandem::PackedBatch batch = fixture_batch();

  tandem::Eagle3Objective online(fixture_options(4));
  load_fixture_draft(online);
  const tandem::StepTotals totals = online.count(batch);
  const double online_loss = online.compute(batch, totals).loss.item<double>();

  tandem::CaptureSettings settings;
  settings.target = tandem::testing::model_fixture("llama3");
  settings.layer_ids = {0, 1, 2};
  settings.dtype = "fp32";
  settings.seq_len = 24;
  settings.dataset_key = tandem::hex64(dataset.key());
  settings.num_documents = dataset.size();
  settings.hidden_size = 64;
  tandem::CaptureOptions capture_options;
  capture_options.documents_per_shard = 2;  // two shards
  capture_options.quiet = true;
  {
    const tandem::FrozenModel target =
        tandem::FrozenModel::load(settings.target, at::kFloat, at::Device(at::kCPU));
    const auto progress =
        tandem::capture_features(target, dataset, settings, dir / "capture", capture_options);
    EXPECT_EQ(progress.shards_written, 2);
    // A rerun finds it complete; a rerun with other settings is refused.
    EXPECT_EQ(tandem::capture_features(target, dataset, settings, dir / "capture", capture_options)
                  .documents_written,
              0);
    tandem::CaptureSettings other = settings;
    other.seq_len = 16;
    EXPECT_NE(tandem::testing::error_of([&] {
                tandem::capture_features(target, dataset, other, dir / "capture", capture_options);
              }).find("a capture with other settings"),
              std::string::npos);
  }

  tandem::Eagle3Options offline_options = fixture_options(4);
  offline_options.capture_dir = dir / "capture";
  tandem::Eagle3Objective offline(offline_options);
  EXPECT_TRUE(offline.offline());
  offline.attach_data(
      {&dataset, nullptr, dir / "cache", 24});  // checks the capture matches the data
  load_fixture_draft(offline);
  const double offline_loss = offline.compute(batch, totals).loss.item<double>();
  EXPECT_NEAR(offline_loss, online_loss, 1e-5 * std::abs(online_loss));
  EXPECT_NEAR(online_loss, reference().at("loss_total").item<double>(), 1e-5);

  EXPECT_NE(tandem::testing::error_of([&] {
              offline.attach_data({&dataset, nullptr, dir / "cache", 32});
            }).find("captured with seq_len 24, training uses 32"),
            std::string::npos);
}

TEST(Eagle3Fixture, ResumingAnInterruptedCaptureContinuesWhereItStopped) {
  ScratchDir dir;
  {
    std::ofstream out(dir / "docs.jsonl");
    for (const auto& document : fixture_documents())
      out << nlohmann::json{{"input_ids", document.ids}}.dump() << "\n";
  }
  tandem::CacheOptions cache;
  cache.dir = dir / "cache";
  const auto dataset = tandem::TokenizedDataset::open(dir / "docs.jsonl",
                                                      tandem::DataFormat::pretokenized, {}, cache);
  tandem::CaptureSettings settings{tandem::testing::model_fixture("llama3"),
                                   {0, 1, 2},
                                   "fp32",
                                   8,
                                   tandem::hex64(dataset.key()),
                                   dataset.size(),
                                   64};
  const auto target = tandem::FrozenModel::load(settings.target, at::kFloat, at::Device(at::kCPU));
  tandem::CaptureOptions options;
  options.documents_per_shard = 1;
  options.quiet = true;
  tandem::capture_features(target, dataset, settings, dir / "full", options);
  // Simulate an interruption after the first shard: drop the later shards from the manifest.
  tandem::capture_features(target, dataset, settings, dir / "cut", options);
  nlohmann::json manifest = nlohmann::json::parse(std::ifstream(dir / "cut/manifest.json"));
  manifest["shards"] = nlohmann::json::array({manifest["shards"][0]});
  manifest["complete"] = false;
  std::ofstream(dir / "cut/manifest.json") << manifest.dump();
  EXPECT_NE(tandem::testing::error_of([&] {
              tandem::CaptureStore::open(dir / "cut");
            }).find("unfinished (1/3"),
            std::string::npos);
  const auto progress = tandem::capture_features(target, dataset, settings, dir / "cut", options);
  EXPECT_EQ(progress.documents_done, 1);
  EXPECT_EQ(progress.documents_written, 2);
  const auto full = tandem::CaptureStore::open(dir / "full");
  const auto resumed = tandem::CaptureStore::open(dir / "cut");
  // Document 2 has 19 tokens: split at seq_len 8 into chunks run separately, as training does.
  const std::vector<int32_t> document_ids = fixture_documents()[2].ids;
  const at::Tensor ids = at::tensor(std::vector<int64_t>(document_ids.begin(), document_ids.end()));
  EXPECT_TRUE(full.read(2, 0, 19, ids).aux.equal(resumed.read(2, 0, 19, ids).aux));
  EXPECT_NE(
      tandem::testing::error_of([&] { full.read(2, 0, 19, ids + 1); }).find("holds other tokens"),
      std::string::npos);
  // A document longer than `rows` rows (19 tokens at seq_len 8, rows 1) is run alone, `rows`
  // rows at a time (it used to fail): the same features.
  tandem::CaptureOptions one_row = options;
  one_row.rows = 1;
  tandem::capture_features(target, dataset, settings, dir / "one_row", one_row);
  const at::Tensor narrow = tandem::CaptureStore::open(dir / "one_row").read(2, 0, 19, ids).aux;
  EXPECT_TRUE(at::allclose(narrow, full.read(2, 0, 19, ids).aux, 1e-5, 1e-6));
}

// Dense reference of ttt_attention: keys of all steps concatenated with an explicit mask.
TEST(TttAttention, EqualsADenseMaskedReference) {
  at::manual_seed(3);
  const int64_t batch = 2, heads = 4, kv_heads = 2, length = 9, dim = 8, steps = 3;
  const at::Tensor q = at::randn({batch, heads, length, dim}, at::kDouble);
  const at::Tensor k0 = at::randn({batch, kv_heads, length, dim}, at::kDouble);
  const at::Tensor v0 = at::randn({batch, kv_heads, length, dim}, at::kDouble);
  std::vector<at::Tensor> ks, vs;
  for (int64_t j = 0; j < steps; ++j) {
    ks.push_back(at::randn({batch, kv_heads, length, dim}, at::kDouble));
    vs.push_back(at::randn({batch, kv_heads, length, dim}, at::kDouble));
  }
  // Two documents in row 0 (0..3, 4..8), one in row 1.
  const at::Tensor documents =
      at::tensor({0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}, at::kLong).view({2, 9});
  tandem::AttentionLayout layout{at::zeros({batch, length}, at::kLong), documents, documents};
  const tandem::KeyBands bands = tandem::causal_key_bands(layout);
  // Tiles smaller than a document, so several tiles and skipped tiles are exercised.
  const tandem::AttentionOptions tiles{tandem::AttentionKernel::Blockwise, 4, 3};
  const at::Tensor out = tandem::ttt_attention(q, k0, v0, bands, ks, vs, tiles);

  const at::Tensor keys =
      at::cat({k0, at::cat(ks, 2)}, 2).repeat_interleave(2, 1);  // (B, h, 4T, d)
  const at::Tensor values = at::cat({v0, at::cat(vs, 2)}, 2).repeat_interleave(2, 1);
  at::Tensor mask = at::zeros({batch, 1, length, length * (steps + 1)}, at::kBool);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < length; ++t) {
      for (int64_t s = 0; s <= t; ++s)
        mask[b][0][t][s] = documents[b][s].item<int64_t>() == documents[b][t].item<int64_t>();
      for (int64_t j = 1; j <= steps; ++j) mask[b][0][t][j * length + t] = true;
    }
  const at::Tensor scores = at::matmul(q, keys.transpose(2, 3)) / std::sqrt(double(dim));
  const at::Tensor dense =
      at::matmul(at::softmax(scores.masked_fill(mask.logical_not(), -INFINITY), -1), values);
  EXPECT_LT(max_abs_diff(out, dense), 1e-6);  // ttt_attention runs its softmax in fp32
}

TEST(Eagle3Teacher, MasksTargetsWhoseArgmaxIsOutsideTheDraftVocab) {
  // A hand-made vocab map: draft ids {1, 4, 6} of a vocab of 8.
  const tandem::VocabMap map =
      tandem::build_vocab_map(at::tensor({0, 5, 0, 0, 9, 0, 7, 0}, at::kLong), 3);
  EXPECT_TRUE(map.d2t.equal(at::tensor({1, 3, 4}, at::kLong)));
  EXPECT_TRUE(map.t2d.equal(at::tensor({0, 1, 0, 0, 1, 0, 1, 0}, at::kLong).to(at::kBool)));
  EXPECT_TRUE(map.draft_to_target().equal(at::tensor({1, 4, 6}, at::kLong)));
  // The fixture's reference masks: valid positions minus those whose target argmax is out of vocab.
  const auto& ref = reference();
  const tandem::PackedBatch batch = fixture_batch();
  tandem::Eagle3Objective objective(fixture_options(4));
  load_fixture_draft(objective);
  const tandem::Teacher teacher = objective.teacher(objective.features(batch).last);
  const at::Tensor full_argmax = ref.at("target_logits").argmax(-1);
  const at::Tensor real = batch.padding_mask.to(at::kBool);
  EXPECT_TRUE(teacher.argmax.index({real}).equal(full_argmax.index({real})));
  EXPECT_TRUE(
      teacher.in_vocab.index({real}).equal(ref.at("t2d").index({full_argmax}).index({real})));
  EXPECT_GT(teacher.in_vocab.index({real}).logical_not().sum().item<int64_t>(), 0);  // some are out
  // The entropy of a distribution over the 96 draft ids: in [0, log 96], and not all peaked.
  EXPECT_GE(teacher.entropy.min().item<double>(), -1e-6);
  EXPECT_LE(teacher.entropy.max().item<double>(), std::log(96.0) + 1e-5);
  EXPECT_GT(teacher.entropy.max().item<double>(), 0.1);
}

TEST(Eagle3Export, BothFormatsHaveExactlyTheKeysShapesAndConfigEnginesRead) {
  ScratchDir dir;
  tandem::Eagle3Objective objective(fixture_options(7));
  load_fixture_draft(objective);
  objective.export_model(dir.path());
  const int64_t hidden = 64, vocab = 512, draft_vocab = 96, inter = 96;
  std::map<std::string, std::vector<int64_t>> expected = {
      {"fc.weight", {hidden, 3 * hidden}},
      {"midlayer.self_attn.q_proj.weight", {64, 2 * hidden}},
      {"midlayer.self_attn.k_proj.weight", {32, 2 * hidden}},
      {"midlayer.self_attn.v_proj.weight", {32, 2 * hidden}},
      {"midlayer.self_attn.o_proj.weight", {hidden, 64}},
      {"midlayer.mlp.gate_proj.weight", {inter, hidden}},
      {"midlayer.mlp.up_proj.weight", {inter, hidden}},
      {"midlayer.mlp.down_proj.weight", {hidden, inter}},
      {"midlayer.input_layernorm.weight", {hidden}},
      {"midlayer.hidden_norm.weight", {hidden}},
      {"midlayer.post_attention_layernorm.weight", {hidden}},
      {"norm.weight", {hidden}},
      {"lm_head.weight", {draft_vocab, hidden}},
      {"d2t", {draft_vocab}},
      {"t2d", {vocab}}};
  for (const std::string format : {"sglang", "speculators"}) {
    const auto checkpoint = tandem::HfCheckpoint::open(dir / format);
    std::map<std::string, std::vector<int64_t>> found;
    for (const std::string& name : checkpoint.names()) found[name] = checkpoint.info(name).shape;
    std::map<std::string, std::vector<int64_t>> wanted;
    for (const auto& [name, shape] : expected)
      wanted[format == "speculators" && name.rfind("midlayer.", 0) == 0
                 ? "layers.0." + name.substr(9)
                 : name] = shape;
    EXPECT_EQ(found, wanted) << format;
    EXPECT_EQ(checkpoint.info("d2t").dtype, tandem::safetensors::Dtype::I64);
    EXPECT_EQ(checkpoint.info("t2d").dtype, tandem::safetensors::Dtype::BOOL);
  }
  const auto sglang = nlohmann::json::parse(std::ifstream(dir / "sglang/config.json"));
  EXPECT_EQ(sglang["architectures"], nlohmann::json::array({"LlamaForCausalLMEagle3"}));
  EXPECT_EQ(sglang["model_type"], "llama");
  EXPECT_EQ(sglang["num_hidden_layers"], 1);
  EXPECT_EQ(sglang["draft_vocab_size"], draft_vocab);
  EXPECT_EQ(sglang["vocab_size"], vocab);
  EXPECT_EQ(sglang["target_hidden_size"], hidden);
  EXPECT_EQ(sglang["norm_before_residual"], false);
  EXPECT_EQ(sglang["eagle_aux_hidden_state_layer_ids"], nlohmann::json::array({1, 2, 3}));  // vLLM
  EXPECT_EQ(sglang["eagle_config"]["eagle_aux_hidden_state_layer_ids"],
            nlohmann::json::array({0, 1, 2}));
  const auto speculators = nlohmann::json::parse(std::ifstream(dir / "speculators/config.json"));
  EXPECT_EQ(speculators["architectures"], nlohmann::json::array({"Eagle3DraftModel"}));
  EXPECT_FALSE(speculators.contains("model_type"));
  EXPECT_EQ(speculators["speculators_model_type"], "eagle3");
  EXPECT_EQ(speculators["transformer_layer_config"]["model_type"], "llama");
  EXPECT_EQ(speculators["speculators_config"]["proposal_methods"][0]["speculative_tokens"], 7);
  EXPECT_EQ(speculators["eagle_aux_hidden_state_layer_ids"], nlohmann::json::array({1, 2, 3}));
  EXPECT_EQ(speculators["draft_vocab_size"], draft_vocab);
  for (const char* key : {"fc_norm", "norm_output", "norm_before_fc"})  // EAGLE-3.1's only
    EXPECT_FALSE(sglang.contains(key) || speculators.contains(key)) << key;

  // Reading the SGLang export back gives the same draft.
  const tandem::Eagle3Draft loaded = tandem::load_eagle3_export(dir / "sglang", at::kFloat);
  for (const auto& parameter : objective.draft()->named_parameters())
    EXPECT_TRUE(loaded->named_parameters()[parameter.key()].equal(parameter.value()))
        << parameter.key();
  EXPECT_TRUE(loaded->d2t.equal(objective.draft()->d2t));
  EXPECT_EQ(loaded->config().aux_layer_ids, (std::vector<int64_t>{0, 1, 2}));
}

// The speculators config's verifier: the target's own classes from its config.json, and its hub
// id when target.name gives one (else the path as given), so vLLM on another machine finds it.
TEST(Eagle3Export, TheVerifierIsTheTargetsOwnClassAndTheGivenName) {
  const std::string qwen3 = tandem::testing::model_fixture("qwen3");
  const tandem::VerifierInfo by_path = tandem::verifier_of(qwen3, "");
  EXPECT_EQ(by_path.name_or_path, qwen3);
  EXPECT_EQ(by_path.architectures, (std::vector<std::string>{"Qwen3ForCausalLM"}));
  EXPECT_EQ(tandem::verifier_of(qwen3, "Qwen/Qwen3-8B").name_or_path, "Qwen/Qwen3-8B");

  ScratchDir dir;
  tandem::Eagle3Options options = fixture_options(4);
  options.target_name = "meta-llama/Llama-3.1-8B-Instruct";
  tandem::Eagle3Objective objective(options);
  objective.export_model(dir.path());
  const auto config = nlohmann::json::parse(std::ifstream(dir / "speculators/config.json"));
  EXPECT_EQ(config["speculators_config"]["verifier"],
            nlohmann::json({{"name_or_path", "meta-llama/Llama-3.1-8B-Instruct"},
                            {"architectures", {"LlamaForCausalLM"}}}));

  // A target config without `architectures` is an error naming the file.
  std::filesystem::create_directories(dir / "bare");
  std::ofstream(dir / "bare/config.json") << R"({"model_type": "qwen3"})";
  try {
    tandem::verifier_of(dir / "bare", "");
    FAIL() << "expected an error";
  } catch (const tandem::Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir / "bare/config.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("architectures"), std::string::npos) << e.what();
  }
}

TEST(SpeculativeDecoding, OutputEqualsGreedyDecodingOfTheTarget) {
  tandem::Eagle3Objective objective(fixture_options(4));
  load_fixture_draft(objective);
  const auto target = tandem::FrozenModel::load(tandem::testing::model_fixture("llama3"),
                                                at::kFloat, at::Device(at::kCPU));
  tandem::DecodeOptions decode;
  decode.max_new_tokens = 20;
  tandem::AcceptanceStats stats(4);
  for (const auto& document : fixture_documents()) {
    const std::vector<int64_t> prompt(document.ids.begin(), document.ids.begin() + 6);
    const auto output = tandem::eagle3_decode(target, *objective.draft(), prompt, 4, decode);
    EXPECT_EQ(output.tokens, tandem::greedy_decode(target, prompt, decode));
    EXPECT_EQ(static_cast<int64_t>(output.tokens.size()), 20);
    // The cached decoder accepts exactly what the uncached reference accepts.
    const auto reference =
        tandem::eagle3_decode(target, *objective.draft(), prompt, 4, decode.without_cache());
    EXPECT_EQ(output.accepted, reference.accepted);
    EXPECT_EQ(output.tokens, reference.tokens);
    stats.add(output);
  }
  EXPECT_GE(stats.tau(), 1.0);
  EXPECT_LE(stats.tau(), 5.0);
}

TEST(SpeculativeDecoding, StopsAtTheFirstStopToken) {
  tandem::Eagle3Objective objective(fixture_options(4));
  load_fixture_draft(objective);
  const auto target = tandem::FrozenModel::load(tandem::testing::model_fixture("llama3"),
                                                at::kFloat, at::Device(at::kCPU));
  const std::vector<int64_t> prompt = {5, 6, 7, 8};
  tandem::DecodeOptions decode;
  decode.max_new_tokens = 12;
  const auto free_run = tandem::greedy_decode(target, prompt, decode);
  decode.stop_ids = {free_run[3]};
  const auto stopped = tandem::eagle3_decode(target, *objective.draft(), prompt, 4, decode);
  const auto greedy = tandem::greedy_decode(target, prompt, decode);
  EXPECT_EQ(stopped.tokens, greedy);
  EXPECT_LE(stopped.tokens.size(), 4u);
  EXPECT_EQ(stopped.tokens.back(), free_run[3]);
}

// EAGLE-3.1 (fc_norm + norm_output) against tools/make_eagle3_fixtures.py's own 3.1 reference
// (reference_3_1.safetensors: the same batch, features and vocab map, its own weights).
const std::map<std::string, at::Tensor>& reference_3_1() {
  static const std::map<std::string, at::Tensor> tensors = [] {
    const auto file = tandem::safetensors::File::open(
        tandem::testing::source_path("tests/fixtures/eagle3/reference_3_1.safetensors"));
    std::map<std::string, at::Tensor> out;
    for (const auto& info : file.header().tensors) out[info.name] = tandem::read_tensor(file, info);
    return out;
  }();
  return tensors;
}

tandem::Eagle3Options eagle31_options(int64_t ttt_length) {
  tandem::Eagle3Options options = fixture_options(ttt_length);
  options.fc_norm = true;
  options.norm_output = true;
  return options;
}

void load_eagle31_draft(tandem::Eagle3Objective& objective) {
  const auto& ref = reference_3_1();
  objective.set_vocab_map({reference().at("d2t"), reference().at("t2d")});
  at::NoGradGuard no_grad;
  for (auto& parameter : objective.draft()->named_parameters())
    parameter.value().copy_(ref.at("draft." + parameter.key()));
}

TEST(Eagle31Fixture, LogitsLossesAccuraciesAndGradientsMatchPyTorch) {
  tandem::Eagle3Objective objective(eagle31_options(4));
  load_eagle31_draft(objective);
  // EAGLE-3's 13 gradients and fc_norm.{0,1,2}.weight
  EXPECT_EQ(expect_unroll_matches(objective, reference_3_1(), objective.features(fixture_batch())),
            16);
}

TEST(Eagle31Fixture, EachSwitchChangesTheDraft) {
  // The same weights read without fc_norm, or without norm_output, give other step-0 / step-1
  // logits: neither switch is silently ignored.
  const tandem::PackedBatch batch = fixture_batch();
  const at::Tensor real = batch.padding_mask.to(at::kBool);
  const auto& ref = reference_3_1();
  for (const bool fc_norm : {true, false}) {
    tandem::Eagle3Options options = eagle31_options(2);
    options.fc_norm = fc_norm;
    options.norm_output = !fc_norm;
    tandem::Eagle3Objective objective(options);
    objective.set_vocab_map({reference().at("d2t"), reference().at("t2d")});
    {
      at::NoGradGuard no_grad;
      for (auto& parameter : objective.draft()->named_parameters())
        parameter.value().copy_(ref.at("draft." + parameter.key()));
    }
    const tandem::StepTotals totals = objective.count(batch);
    const tandem::Eagle3Result result = objective.unroll(batch, objective.features(batch), totals);
    const int64_t step = fc_norm ? 1 : 0;  // without fc_norm step 0 differs; without the carried
                                           // norm, step 1
    const at::Tensor logits = objective.draft()->logits(result.step_outputs[step]).detach();
    EXPECT_GT(
        max_abs_diff(logits.index({real}), ref.at("logits." + std::to_string(step)).index({real})),
        1e-2)
        << "fc_norm " << fc_norm << ", norm_output " << !fc_norm;
  }
}

TEST(Eagle31Export, CarriesTheNormsAndBothSwitchesAndDecodesAsTrained) {
  ScratchDir dir;
  tandem::Eagle3Objective objective(eagle31_options(4));
  load_eagle31_draft(objective);
  objective.export_model(dir.path());
  for (const std::string format : {"sglang", "speculators"}) {
    const auto checkpoint = tandem::HfCheckpoint::open(dir / format);
    for (int j = 0; j < 3; ++j) {
      const std::string name = "fc_norm." + std::to_string(j) + ".weight";
      ASSERT_TRUE(checkpoint.contains(name)) << format << " " << name;
      EXPECT_EQ(checkpoint.info(name).shape, (std::vector<int64_t>{64})) << format;
      EXPECT_TRUE(checkpoint.read(name).equal(reference_3_1().at("draft." + name)));
    }
    EXPECT_EQ(checkpoint.names().size(), 18u) << format;  // 13 + 3 norms + d2t + t2d
    const auto config = nlohmann::json::parse(std::ifstream(dir / (format + "/config.json")));
    EXPECT_EQ(config["fc_norm"], true) << format;
    EXPECT_EQ(config["norm_output"], true) << format;
    EXPECT_EQ(config.contains("norm_before_fc"), format == "speculators");  // speculators: not
                                                                            // both
  }
  const auto speculators = nlohmann::json::parse(std::ifstream(dir / "speculators/config.json"));
  EXPECT_EQ(speculators["norm_before_fc"], false);
  EXPECT_EQ(speculators["speculators_model_type"], "eagle3");

  // The SGLang export read back: the switches and every weight; speculative decoding with it
  // gives the target's greedy tokens and accepts what the uncached reference accepts.
  const tandem::Eagle3Draft loaded = tandem::load_eagle3_export(dir / "sglang", at::kFloat);
  EXPECT_TRUE(loaded->config().fc_norm);
  EXPECT_TRUE(loaded->config().norm_output);
  for (const auto& parameter : objective.draft()->named_parameters())
    EXPECT_TRUE(loaded->named_parameters()[parameter.key()].equal(parameter.value()))
        << parameter.key();
  const auto target = tandem::FrozenModel::load(tandem::testing::model_fixture("llama3"),
                                                at::kFloat, at::Device(at::kCPU));
  tandem::DecodeOptions decode;
  decode.max_new_tokens = 16;
  int64_t accepted = 0;
  for (const auto& document : fixture_documents()) {
    const std::vector<int64_t> prompt(document.ids.begin(), document.ids.begin() + 6);
    const auto output = tandem::eagle3_decode(target, *loaded, prompt, 4, decode);
    EXPECT_EQ(output.tokens, tandem::greedy_decode(target, prompt, decode));
    const auto uncached = tandem::eagle3_decode(target, *loaded, prompt, 4, decode.without_cache());
    EXPECT_EQ(output.accepted, uncached.accepted);
    for (const int64_t a : output.accepted) accepted += a;
  }
  EXPECT_GT(accepted, 0);  // the warmed-up draft gets some tokens accepted
}

}  // namespace

namespace {

// τ, per-position acceptance and the bootstrap interval over prompts, by hand. Prompt A: two
// verify steps accepting 2 then 0 tokens (4 tokens, τ_A = 2); prompt B: one step accepting 0
// (τ_B = 1). Resampling two prompts gives AA (τ 2), BB (τ 1) or AB (τ 5/3) with probabilities
// 1/4, 1/4, 1/2, so the 2.5th and 97.5th percentiles are 1 and 2.
TEST(AcceptanceStats, TauPerPositionRatesAndBootstrapIntervalByHand) {
  tandem::AcceptanceStats stats(2);
  tandem::SpeculativeOutput a, b;
  a.accepted = {2, 0};
  b.accepted = {0};
  stats.add(a);
  EXPECT_EQ(stats.tau_interval(), std::make_pair(2.0, 2.0));  // one prompt: no spread
  stats.add(b);
  EXPECT_DOUBLE_EQ(stats.tau(), 5.0 / 3.0);
  EXPECT_EQ(stats.conditional_acceptance(), (std::vector<double>{1.0 / 3.0, 1.0}));
  EXPECT_EQ(stats.cumulative_acceptance(), (std::vector<double>{1.0 / 3.0, 1.0 / 3.0}));
  EXPECT_EQ(stats.tau_interval(), std::make_pair(1.0, 2.0));
  const nlohmann::json report = stats.to_json();
  EXPECT_EQ(report["tau_ci95"], nlohmann::json({1.0, 2.0}));
  EXPECT_EQ(report["verify_steps"], 3);
}

}  // namespace
