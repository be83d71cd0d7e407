// Frozen models: weights bit-identical to the checkpoint file after set-up, no autograd, and
// never in the list of parameters an optimizer receives.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>

#include "tandem/core/error.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/models/frozen.h"
#include "tandem/models/layers.h"
#include "test_util.h"

namespace {

using tandem::FrozenModel;

// Compares each weight's bytes with the bytes stored in the checkpoint files, read through the
// checkpoint reader independently of the model.
void expect_bit_identical(const FrozenModel& model, const std::string& dir) {
  const auto checkpoint = tandem::HfCheckpoint::open(dir);
  const auto weights = model.named_weights();
  ASSERT_FALSE(weights.empty());
  for (const auto& [name, weight] : weights) {
    ASSERT_TRUE(checkpoint.contains(name)) << name;
    const auto& info = checkpoint.info(name);
    const at::Tensor stored = checkpoint.read(name);
    ASSERT_EQ(weight.scalar_type(), stored.scalar_type()) << name;
    ASSERT_EQ(weight.sizes(), stored.sizes()) << name;
    const at::Tensor contiguous = weight.contiguous();
    EXPECT_EQ(
        std::memcmp(contiguous.data_ptr(), checkpoint.file_of(name).data(info), info.nbytes()), 0)
        << name << " differs from " << dir;
  }
}

TEST(Frozen, WeightsBitIdenticalToFileAfterSetup) {
  for (const char* name : {"llama3", "mistral", "qwen3"}) {  // fp32 checkpoints
    const std::string dir = tandem::testing::model_fixture(name);
    const FrozenModel model = FrozenModel::load(dir, at::kFloat, at::kCPU);
    // Set-up work that must not touch the weights: a forward, and building a trainable model
    // with its own random init beside it.
    const at::Tensor ids = at::arange(8, at::kLong).unsqueeze(0);
    model.forward(ids, tandem::AttentionLayout::causal(1, 8, at::kCPU), {0});
    tandem::CausalLM student(model.config(), at::TensorOptions().dtype(at::kFloat));
    tandem::init_normal_(*student, 0.02, 1234);
    expect_bit_identical(model, dir);
  }
}

TEST(Frozen, Bf16ShardedCheckpointLoadsBitIdentical) {
  const std::string dir = tandem::testing::model_fixture("qwen2");  // bf16, two shards
  const FrozenModel model = FrozenModel::load(dir, at::kBFloat16, at::kCPU);
  expect_bit_identical(model, dir);
}

TEST(Frozen, NoAutogradAndNotTrainable) {
  const FrozenModel model =
      FrozenModel::load(tandem::testing::model_fixture("qwen3"), at::kFloat, at::kCPU);
  for (const auto& [name, weight] : model.named_weights()) {
    EXPECT_FALSE(weight.requires_grad()) << name;
    EXPECT_TRUE(tandem::is_frozen(weight)) << name;
  }
  const at::Tensor ids = at::arange(6, at::kLong).unsqueeze(0);
  const auto out = model.forward(ids, tandem::AttentionLayout::causal(1, 6, at::kCPU), {1});
  EXPECT_FALSE(out.logits.requires_grad());
  EXPECT_FALSE(out.hidden.at(1).requires_grad());
}

// A trainable module that shares a frozen tensor (as drafts share the target's embedding):
// the shared tensor never appears among the trainable parameters, and if someone flips
// requires_grad on it, collecting the trainable list fails loudly.
struct DraftLike : torch::nn::Module {
  DraftLike(const at::Tensor& frozen_embedding) {
    embed = register_parameter("embed", frozen_embedding, /*requires_grad=*/false);
    proj = register_module("proj", tandem::Linear(4, 4, true, at::TensorOptions()));
    tandem::init_normal_(*proj, 0.1, 7);
  }
  at::Tensor embed;
  tandem::Linear proj{nullptr};
};

TEST(Frozen, NeverInTrainableParameters) {
  const FrozenModel model =
      FrozenModel::load(tandem::testing::model_fixture("llama3"), at::kFloat, at::kCPU);
  DraftLike draft(model.embed_tokens());
  const auto trainable = tandem::trainable_parameters(draft);
  ASSERT_EQ(trainable.size(), 2u);
  for (const auto& [name, tensor] : trainable) {
    EXPECT_TRUE(name == "proj.weight" || name == "proj.bias") << name;
    EXPECT_FALSE(tandem::is_frozen(tensor));
  }
  draft.embed.set_requires_grad(true);
  EXPECT_THROW(tandem::trainable_parameters(draft), tandem::Error);
}

}  // namespace
