// SFT: next-token targets inside documents, the loss against transformers' own logits, and
// accumulation: one big batch and the same data split into micro-batches give the same gradient.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include "tandem/data/packing.h"
#include "tandem/io/safetensors.h"
#include "tandem/io/tensor_io.h"
#include "tandem/models/frozen.h"
#include "tandem/objectives/sft.h"
#include "tandem/train/optimizer.h"
#include "test_util.h"

namespace {

using tandem::PackedBatch;
using tandem::TokenizedDocument;

TokenizedDocument document(std::vector<int32_t> ids, std::vector<uint8_t> mask) {
  return {std::move(ids), std::move(mask), "test"};
}

tandem::PackingOptions packing(int64_t seq_len) {
  tandem::PackingOptions options;
  options.seq_len = seq_len;
  return options;
}

TEST(Sft, TargetsStayInsideDocumentsAndFollowTheLossMask) {
  // Row: doc A = [5 6 7] (mask 0 1 1), doc B = [8 9] (mask 1 1), 1 padding token.
  const PackedBatch batch = tandem::pack_documents(
      {document({5, 6, 7}, {0, 1, 1}), document({8, 9}, {1, 1})}, packing(6));
  const at::Tensor targets = tandem::next_token_targets(batch);  // (1, 5)
  // Position t predicts token t+1: 6 (trained), 7 (trained), 8 (other document: no),
  // 9 (trained, same document), padding (no).
  EXPECT_TRUE(at::equal(targets, at::tensor({1, 1, 0, 1, 0}).to(at::kBool).view({1, 5})));
}

// The SFT loss of a fixture model equals cross-entropy computed from transformers' logits.
TEST(Sft, LossMatchesCrossEntropyOfTransformersLogits) {
  const std::string dir = tandem::testing::model_fixture("llama3");
  const auto reference = tandem::safetensors::File::open(dir + "/reference.safetensors");
  const at::Tensor ids = tandem::read_tensor(reference, reference.info("input_ids"));  // (2, 16)
  const at::Tensor logits = tandem::read_tensor(reference, reference.info("logits"));  // (2, 16, V)
  std::vector<TokenizedDocument> documents;
  for (int64_t b = 0; b < 2; ++b) {
    std::vector<int32_t> row(16);
    for (int64_t t = 0; t < 16; ++t) row[t] = static_cast<int32_t>(ids[b][t].item<int64_t>());
    documents.push_back(document(row, std::vector<uint8_t>(16, 1)));
  }
  tandem::PackingOptions options = packing(16);
  options.mode = tandem::PackingMode::Padded;
  const PackedBatch batch = tandem::pack_documents(documents, options);

  tandem::SftOptions sft;
  sft.model_path = dir;
  sft.loss.chunk_tokens = 5;
  tandem::SftObjective objective(sft);
  const tandem::StepTotals totals = objective.count(batch);
  EXPECT_EQ(totals.loss_tokens, 30);
  const double loss = objective.compute(batch, totals).loss.item<double>();
  const at::Tensor expected = at::cross_entropy_loss(
      logits.narrow(1, 0, 15).reshape({-1, logits.size(2)}), ids.narrow(1, 1, 15).reshape({-1}));
  EXPECT_NEAR(loss, expected.item<double>(), 1e-5);
}

std::vector<at::Tensor> gradients_of(tandem::SftObjective& objective,
                                     const std::vector<PackedBatch>& batches) {
  tandem::StepTotals totals;
  for (const auto& batch : batches) {
    totals.loss_tokens += objective.count(batch).loss_tokens;
    totals.documents += batch.total_documents();
  }
  for (auto& p : objective.trainable().parameters()) p.mutable_grad() = at::Tensor();
  for (const auto& batch : batches) objective.compute(batch, totals).loss.backward();
  std::vector<at::Tensor> grads;
  for (auto& p : objective.trainable().parameters()) grads.push_back(p.grad().clone());
  return grads;
}

TEST(Sft, MicroBatchesGiveTheGradientOfOneBigBatch) {
  tandem::SftOptions sft;
  sft.model_path = tandem::testing::model_fixture("qwen3");
  tandem::SftObjective objective(sft);
  std::vector<TokenizedDocument> documents = {
      document({1, 2, 3, 4, 5, 6}, {0, 0, 1, 1, 1, 1}), document({7, 8, 9}, {1, 1, 1}),
      document({10, 11, 12, 13, 14, 15, 16, 17}, {0, 1, 1, 1, 1, 1, 1, 1}),
      document({18, 19, 20, 21}, {1, 0, 1, 1})};
  const auto big = gradients_of(objective, {tandem::pack_documents(documents, packing(24))});
  const auto split =
      gradients_of(objective, {tandem::pack_documents({documents[0], documents[1]}, packing(10)),
                               tandem::pack_documents({documents[2]}, packing(8)),
                               tandem::pack_documents({documents[3]}, packing(7))});
  ASSERT_EQ(big.size(), split.size());
  for (size_t i = 0; i < big.size(); ++i)
    EXPECT_TRUE(at::allclose(big[i], split[i], 1e-5, 1e-6)) << "parameter " << i;
}

// Training next to a frozen model: the frozen weights never change and never reach the
// optimizer; the trainable ones do change.
TEST(Sft, FrozenNeighbourUntouchedTrainableUpdated) {
  const tandem::FrozenModel frozen =
      tandem::FrozenModel::load(tandem::testing::model_fixture("llama3"), at::kFloat, at::kCPU);
  std::map<std::string, at::Tensor> frozen_before;
  for (const auto& [name, weight] : frozen.named_weights()) frozen_before[name] = weight.clone();

  tandem::SftOptions sft;
  sft.model_path = tandem::testing::model_fixture("llama3");  // the same checkpoint, trainable
  tandem::SftObjective objective(sft);
  const auto trainable = tandem::trainable_parameters(objective.trainable());
  for (const auto& [name, tensor] : trainable) EXPECT_FALSE(tandem::is_frozen(tensor)) << name;
  std::vector<at::Tensor> before;
  for (const auto& entry : trainable) before.push_back(entry.second.detach().clone());

  tandem::MixedPrecisionAdamW optimizer(trainable, {});
  const PackedBatch batch = tandem::pack_documents(
      {document({3, 1, 4, 1, 5, 9, 2, 6}, {1, 1, 1, 1, 1, 1, 1, 1})}, packing(8));
  for (int step = 0; step < 3; ++step) {
    objective.compute(batch, objective.count(batch)).loss.backward();
    frozen.forward(batch.input_ids, batch.layout(), {0});  // the frozen model in the loop
    optimizer.step(1e-2);
    optimizer.zero_grad();
  }
  for (const auto& [name, weight] : frozen.named_weights())
    EXPECT_TRUE(at::equal(weight, frozen_before.at(name))) << name;
  for (size_t i = 0; i < trainable.size(); ++i)
    EXPECT_FALSE(at::equal(trainable[i].second, before[i]))
        << trainable[i].first << " did not train";
}

}  // namespace
