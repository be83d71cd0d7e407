// The sampler: a platform-independent permutation per (seed, epoch), disjoint equal shards per
// rank, and an exact resume from a saved position.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "tandem/core/error.h"
#include "tandem/data/sampler.h"
#include "test_util.h"

namespace {

using tandem::Sampler;
using tandem::SamplerOptions;
using tandem::SamplerState;

SamplerOptions options(int64_t size, uint64_t seed, int64_t rank = 0, int64_t world = 1,
                       bool drop_last = true) {
  SamplerOptions result;
  result.dataset_size = size;
  result.seed = seed;
  result.rank = rank;
  result.world_size = world;
  result.drop_last = drop_last;
  return result;
}

// Expected values from tools/make_sampler_fixtures.py: an independent pure-Python mt19937_64 +
// splitmix64 + the same Fisher-Yates / rejection draw (checked there against the standard's
// 10000th-output value 9981545732273789042), written to tests/fixtures/sampler/.
TEST(Sampler, KnownPermutations) {
  std::ifstream file(tandem::testing::source_path("tests/fixtures/sampler/permutations.json"));
  ASSERT_TRUE(file.good()) << "run tools/make_sampler_fixtures.py";
  const nlohmann::json fixture = nlohmann::json::parse(file);
  for (const auto& [value, expected] : fixture.at("splitmix64").items())
    EXPECT_EQ(tandem::splitmix64(std::stoull(value)), std::stoull(expected.get<std::string>()));
  ASSERT_GE(fixture.at("permutations").size(), 6u);
  for (const nlohmann::json& item : fixture.at("permutations")) {
    const int64_t size = item.at("size").get<int64_t>(), epoch = item.at("epoch").get<int64_t>();
    const uint64_t seed = std::stoull(item.at("seed").get<std::string>());
    EXPECT_EQ(tandem::epoch_permutation(size, seed, epoch),
              item.at("permutation").get<std::vector<int64_t>>())
        << "size " << size << ", seed " << seed << ", epoch " << epoch;
  }
  // The sampler on one rank hands out exactly that order, then the next epoch's.
  Sampler sampler(options(10, 42));
  EXPECT_EQ(sampler.next(12), (std::vector<int64_t>{2, 0, 4, 7, 8, 3, 5, 1, 9, 6, 2, 8}));
  EXPECT_EQ(sampler.state().epoch, 1);
  EXPECT_EQ(sampler.state().offset, 2);
}

TEST(Sampler, DeterministicPerSeedAndEpoch) {
  for (int64_t epoch = 0; epoch < 5; ++epoch) {
    const auto order = tandem::epoch_permutation(257, 1234, epoch);
    EXPECT_EQ(order, tandem::epoch_permutation(257, 1234, epoch));
    auto sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < 257; ++i) ASSERT_EQ(sorted[i], i) << "not a permutation";
    EXPECT_NE(order, tandem::epoch_permutation(257, 1234, epoch + 1));
    EXPECT_NE(order, tandem::epoch_permutation(257, 1235, epoch));
  }
  Sampler a(options(100, 9)), b(options(100, 9));
  EXPECT_EQ(a.next(250), b.next(250));
}

TEST(Sampler, NoShuffleIsIdentity) {
  SamplerOptions opts = options(5, 3);
  opts.shuffle = false;
  Sampler sampler(opts);
  EXPECT_EQ(sampler.next(7), (std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1}));
}

TEST(Sampler, ShardsDropLastAreDisjointAndEqual) {
  const int64_t size = 10, world = 3;
  const auto order = tandem::epoch_permutation(size, 42, 0);
  std::set<int64_t> seen;
  for (int64_t rank = 0; rank < world; ++rank) {
    Sampler sampler(options(size, 42, rank, world));
    ASSERT_EQ(sampler.per_rank(), 3);
    const auto indices = sampler.epoch_indices(0);
    for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(indices[i], order[rank + i * world]);
    for (int64_t index : indices) EXPECT_TRUE(seen.insert(index).second) << "shared " << index;
    EXPECT_EQ(sampler.next(3), indices);
  }
  // The union is the permutation without its last N mod W = 1 entry.
  EXPECT_EQ(seen.size(), 9u);
  EXPECT_EQ(seen.count(order.back()), 0u);
}

TEST(Sampler, ShardsPaddedCoverEverything) {
  const int64_t size = 10, world = 4;
  const auto order = tandem::epoch_permutation(size, 5, 2);
  std::multiset<int64_t> seen;
  for (int64_t rank = 0; rank < world; ++rank) {
    Sampler sampler(options(size, 5, rank, world, /*drop_last=*/false));
    ASSERT_EQ(sampler.per_rank(), 3);
    for (int64_t index : sampler.epoch_indices(2)) seen.insert(index);
  }
  ASSERT_EQ(seen.size(), 12u);
  for (int64_t i = 0; i < size; ++i) EXPECT_GE(seen.count(i), 1u);
  // The two padding entries repeat the permutation's first two.
  EXPECT_EQ(seen.count(order[0]), 2u);
  EXPECT_EQ(seen.count(order[1]), 2u);
}

TEST(Sampler, TooSmallForWorldIsAnError) {
  EXPECT_THROW(Sampler(options(3, 1, 0, 4)), tandem::Error);
  EXPECT_NO_THROW(Sampler(options(3, 1, 3, 4, /*drop_last=*/false)));
  EXPECT_THROW(Sampler(options(10, 1, 4, 4)), tandem::Error);
  EXPECT_THROW(Sampler(options(0, 1)), tandem::Error);
}

TEST(Sampler, ResumeContinuesIdentically) {
  for (int64_t taken : {0, 5, 33, 34, 70}) {  // start, mid-epoch, epoch edge, later epoch
    Sampler original(options(101, 77, 1, 3));
    original.next(taken);
    const std::string saved = nlohmann::json(original.state()).dump();
    const auto expected = original.next(60);

    Sampler resumed(options(101, 77, 1, 3));
    resumed.restore(nlohmann::json::parse(saved).get<SamplerState>());
    EXPECT_EQ(resumed.next(60), expected) << "after " << taken;
    EXPECT_EQ(resumed.state(), original.state());
  }
}

TEST(Sampler, PeekDoesNotMove) {
  Sampler sampler(options(7, 11));
  sampler.next(5);
  const SamplerState before = sampler.state();
  const auto peeked = sampler.peek(10);  // crosses into the next two epochs
  EXPECT_EQ(sampler.state(), before);
  EXPECT_EQ(sampler.next(10), peeked);
}

TEST(Sampler, RestoreRejectsForeignState) {
  Sampler sampler(options(50, 3, 0, 2));
  SamplerState state = sampler.state();
  state.seed = 4;
  EXPECT_THROW(sampler.restore(state), tandem::Error);
  state = sampler.state();
  state.world_size = 4;
  EXPECT_THROW(sampler.restore(state), tandem::Error);
  state = sampler.state();
  state.offset = 26;  // per rank is 25
  EXPECT_THROW(sampler.restore(state), tandem::Error);
  EXPECT_THROW(nlohmann::json::parse(R"({"seed": 1, "epoch": 0})").get<SamplerState>(),
               tandem::Error);
  EXPECT_THROW(nlohmann::json::parse(
                   R"({"seed": -1, "epoch": 0, "offset": 0, "rank": 0, "world_size": 1,
                       "dataset_size": 3})")
                   .get<SamplerState>(),
               tandem::Error);
}

}  // namespace
