// Sharded parameters (dist/sharding.h): the layout arithmetic; in one process, layers whose
// weights are sharded give the unsharded outputs and gradients exactly, hold no full storage
// outside a call, and a weight used twice gets both gradients; between 2 forked processes, each
// rank's slice gradient is its slice of the sum of both ranks' full gradients (computed here
// without sharding); subgroups of 4 forked processes (hybrid's shard and replica groups) reduce
// within their own members.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <chrono>

#include "forked_ranks.h"
#include "tandem/dist/process_group.h"
#include "tandem/dist/sharding.h"
#include "tandem/models/layers.h"

namespace {

using tandem::FullParameters;
using tandem::ParameterShards;
using tandem::ShardLayout;
using tandem::dist::ProcessGroup;

TEST(ShardLayout, SlicesArePaddedToEqualChunks) {
  const ShardLayout five{5, 2};
  EXPECT_EQ(five.chunk(), 3);
  EXPECT_EQ(five.begin(0), 0);
  EXPECT_EQ(five.end(0), 3);
  EXPECT_EQ(five.begin(1), 3);
  EXPECT_EQ(five.end(1), 5);
  const ShardLayout one{1, 2};  // rank 1 holds nothing but padding
  EXPECT_EQ(one.chunk(), 1);
  EXPECT_EQ(one.begin(1), one.end(1));
}

struct TinyModel {
  tandem::Embedding embed{10, 4, at::TensorOptions()};
  tandem::Linear proj{4, 3, /*bias=*/true, at::TensorOptions()};
  tandem::RMSNorm norm{3, 1e-6, at::TensorOptions()};

  explicit TinyModel(uint64_t seed) {
    for (auto* module :
         {static_cast<torch::nn::Module*>(embed.get()), static_cast<torch::nn::Module*>(proj.get()),
          static_cast<torch::nn::Module*>(norm.get())})
      tandem::init_normal_(*module, 0.5, seed);
    at::NoGradGuard no_grad;
    norm->weight.uniform_(0.5, 1.5, at::make_generator<at::CPUGeneratorImpl>(seed));
    for (at::Tensor& parameter : parameters()) parameter.set_requires_grad(true);
  }
  std::vector<at::Tensor> parameters() {
    return {embed->weight, proj->weight, proj->bias, norm->weight};
  }

  // ids (2, 5) -> a scalar loss; the embedding is also the output projection (tied, used twice).
  at::Tensor loss(const at::Tensor& ids) {
    const at::Tensor hidden = norm->forward(proj->forward(embed->forward(ids)));  // (2, 5, 3)
    const at::Tensor logits = tandem::with_full_parameters(
        {embed->weight}, {hidden.narrow(-1, 0, 3)}, [](const auto& in, const auto& w) {
          return std::vector<at::Tensor>{at::linear(in[0], w[0].narrow(1, 0, 3))};
        })[0];  // (2, 5, 10)
    return logits.pow(2).mean() + hidden.sum();
  }
};

TEST(Sharding, OneProcessGivesTheUnshardedOutputsAndGradients) {
  const at::Tensor ids = at::tensor({1, 4, 7, 2, 9, 0, 3, 3, 8, 5}, at::kLong).view({2, 5});
  TinyModel reference(11), sharded(11);
  const at::Tensor expected = reference.loss(ids);
  expected.backward();

  ParameterShards shards(ProcessGroup::single());
  std::vector<at::Tensor> slices;
  for (const at::Tensor& parameter : sharded.parameters())
    slices.push_back(shards.shard(parameter, true));
  for (const at::Tensor& parameter : sharded.parameters()) {
    EXPECT_TRUE(tandem::is_sharded(parameter));
    EXPECT_EQ(parameter.storage().nbytes(), 0u) << "full storage kept outside a call";
    EXPECT_FALSE(parameter.requires_grad()) << "the slice is the leaf";
  }
  const at::Tensor loss = sharded.loss(ids);
  EXPECT_TRUE(loss.equal(expected));
  loss.backward();
  const std::vector<at::Tensor> originals = reference.parameters();
  for (size_t i = 0; i < slices.size(); ++i) {
    ASSERT_TRUE(slices[i].grad().defined()) << "parameter " << i;
    EXPECT_TRUE(at::allclose(slices[i].grad(), originals[i].grad().reshape({-1}), 1e-6, 1e-7))
        << "parameter " << i << " (the embedding's gradient sums its two uses)";
  }
  {
    const FullParameters full(sharded.parameters());
    for (size_t i = 0; i < originals.size(); ++i)
      EXPECT_TRUE(sharded.parameters()[i].equal(originals[i])) << "parameter " << i;
  }
  EXPECT_EQ(sharded.embed->weight.storage().nbytes(), 0u) << "freed again after the scope";
  int64_t held = 0, full = 0;  // one rank holds every element, in its slices only
  for (const at::Tensor& parameter : sharded.parameters()) {
    held += tandem::held_bytes(parameter);
    full += parameter.numel() * parameter.element_size();
  }
  EXPECT_EQ(held, full);
}

TEST(Sharding, TwoProcessesReduceScatterTheSumOfBothRanksGradients) {
  tandem::testing::run_forked_ranks(2, [](int64_t rank, int port) {
    auto group = tandem::testing::connect_loopback(rank, 2, port);
    int failures = 0;
    auto input_of = [](int64_t r) {
      return at::randn({3, 5}, at::make_generator<at::CPUGeneratorImpl>(100 + r));
    };
    // Unsharded reference: the gradient both ranks' inputs give together.
    tandem::Linear reference(5, 3, true, at::TensorOptions());
    tandem::init_normal_(*reference, 0.3, 7);
    reference->weight.set_requires_grad(true);
    reference->bias.set_requires_grad(true);
    for (int64_t r = 0; r < 2; ++r) reference->forward(input_of(r)).pow(2).sum().backward();

    tandem::Linear layer(5, 3, true, at::TensorOptions());
    tandem::init_normal_(*layer, 0.3, 7);
    ParameterShards shards(group);
    const at::Tensor weight = shards.shard(layer->weight, true);  // 15 elements: 8 + 7 (+1 pad)
    const at::Tensor bias = shards.shard(layer->bias, true);      // 3 elements: 2 + 1 (+1 pad)
    failures += weight.numel() != 8 || bias.numel() != 2;
    const at::Tensor out = layer->forward(input_of(rank));
    at::Tensor expected_out;
    {
      at::NoGradGuard no_grad;
      expected_out = reference->forward(input_of(rank));
    }
    failures += !at::allclose(out, expected_out, 1e-6, 1e-7);
    out.pow(2).sum().backward();
    const ShardLayout w = shards.layout(layer->weight), b = shards.layout(layer->bias);
    const at::Tensor w_expected =
        reference->weight.grad().reshape({-1}).narrow(0, w.begin(rank), w.count(rank));
    const at::Tensor b_expected = reference->bias.grad().narrow(0, b.begin(rank), b.count(rank));
    failures +=
        !at::allclose(weight.grad().narrow(0, 0, w_expected.numel()), w_expected, 1e-5, 1e-6);
    failures += !at::allclose(bias.grad().narrow(0, 0, b_expected.numel()), b_expected, 1e-5, 1e-6);
    // The padding's gradient stays zero.
    failures += weight.grad()
                    .narrow(0, w_expected.numel(), 8 - w_expected.numel())
                    .abs()
                    .sum()
                    .item<double>() != 0;
    failures += layer->weight.storage().nbytes() != 0;
    failures += tandem::held_bytes(layer->weight) + tandem::held_bytes(layer->bias) != (8 + 2) * 4;
    return failures;
  });
}

TEST(Sharding, SubgroupsOfFourProcessesReduceWithinTheirMembers) {
  tandem::testing::run_forked_ranks(4, [](int64_t rank, int port) {
    auto world = tandem::testing::connect_loopback(rank, 4, port);
    // hybrid 2 x 2: shard groups {0, 1} and {2, 3}; replica groups {0, 2} and {1, 3}.
    const int64_t first = rank / 2 * 2, column = rank % 2;
    auto shard = world->subgroup({first, first + 1}, "shard");
    auto replicate = world->subgroup({column, column + 2}, "replicate");
    int failures = 0;
    failures += shard->size() != 2 || shard->rank() != rank % 2;
    failures += replicate->size() != 2 || replicate->rank() != rank / 2;
    at::Tensor in_shard = at::full({1}, static_cast<double>(rank));
    shard->all_reduce_sum(in_shard);
    failures += in_shard.item<double>() != static_cast<double>(2 * first + 1);
    at::Tensor in_replica = at::full({1}, static_cast<double>(rank));
    replicate->all_reduce_sum(in_replica);
    failures += in_replica.item<double>() != static_cast<double>(2 * column + 2);
    world->barrier();
    return failures;
  });
}

}  // namespace
