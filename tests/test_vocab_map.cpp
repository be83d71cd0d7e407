// The EAGLE-3 draft vocabulary: d2t/t2d against hand-computed cases (ties, fill), validation,
// and the safetensors cache keyed by the inputs.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tandem/core/error.h"
#include "tandem/data/vocab_map.h"
#include "test_util.h"

namespace {

using tandem::TokenizedDocument;
using tandem::VocabMap;

std::vector<int64_t> to_vector(const at::Tensor& tensor) {
  const at::Tensor values = tensor.to(at::kLong).contiguous();
  return {values.data_ptr<int64_t>(), values.data_ptr<int64_t>() + values.numel()};
}

std::vector<int64_t> true_ids(const at::Tensor& t2d) {
  return to_vector(at::nonzero(t2d).flatten());
}

// Counts over loss-masked tokens only: 3 and 7 five times each, 1, 5 and 8 twice (a three-way
// tie), 0 once; 9 appears often but never under the loss mask.
// Top 4 by (count desc, id asc): 3, 7, then 1 and 5 win the tie over 8. Sorted: 1, 3, 5, 7.
// d2t[i] = used[i] - i = 1-0, 3-1, 5-2, 7-3 = 1, 2, 3, 4.
TEST(VocabMap, HandComputedWithTies) {
  const std::vector<TokenizedDocument> documents = {
      {{9, 9, 3, 3, 3, 7, 7, 1, 8}, {0, 0, 1, 1, 1, 1, 1, 1, 1}, "a:1"},
      {{9, 3, 3, 7, 7, 7, 5, 5, 8, 1, 0, 9}, {0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0}, "a:2"},
  };
  tandem::TokenCounter counter(10);
  for (const auto& document : documents) counter.add(document);
  EXPECT_EQ(counter.total(), 17);
  EXPECT_EQ(to_vector(counter.counts()), (std::vector<int64_t>{1, 2, 0, 5, 0, 2, 0, 5, 2, 0}));

  const VocabMap map = tandem::build_vocab_map(counter.counts(), 4);
  EXPECT_EQ(map.d2t.scalar_type(), at::kLong);
  EXPECT_EQ(map.t2d.scalar_type(), at::kBool);
  EXPECT_EQ(to_vector(map.d2t), (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(true_ids(map.t2d), (std::vector<int64_t>{1, 3, 5, 7}));
  EXPECT_EQ(to_vector(map.draft_to_target()), (std::vector<int64_t>{1, 3, 5, 7}));
  EXPECT_NO_THROW(map.validate("hand"));
}

// Only 6 (x3) and 2 (x1) seen, draft vocab 5: the three missing slots take the lowest unseen
// ids 0, 1, 3. Sorted: 0, 1, 2, 3, 6 -> d2t = 0, 0, 0, 0, 2.
TEST(VocabMap, FillsWithLowestUnseenIds) {
  const at::Tensor counts = at::tensor({0, 0, 1, 0, 0, 0, 3, 0}, at::kLong);
  const VocabMap map = tandem::build_vocab_map(counts, 5);
  EXPECT_EQ(to_vector(map.d2t), (std::vector<int64_t>{0, 0, 0, 0, 2}));
  EXPECT_EQ(true_ids(map.t2d), (std::vector<int64_t>{0, 1, 2, 3, 6}));
}

TEST(VocabMap, FullVocabIsIdentityAndBadSizesThrow) {
  const at::Tensor counts = at::tensor({4, 0, 2}, at::kLong);
  EXPECT_EQ(to_vector(tandem::build_vocab_map(counts, 3).d2t), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_THROW(tandem::build_vocab_map(counts, 4), tandem::Error);
  EXPECT_THROW(tandem::build_vocab_map(counts, 0), tandem::Error);
  tandem::TokenCounter counter(3);
  EXPECT_THROW(counter.add({{0, 3}, {1, 1}, "bad.jsonl:7"}), tandem::Error);
  try {
    counter.add({{0, 3}, {1, 1}, "bad.jsonl:7"});
  } catch (const tandem::Error& error) {
    EXPECT_NE(std::string(error.what()).find("bad.jsonl:7"), std::string::npos);
  }
}

TEST(VocabMap, ValidateCatchesInconsistency) {
  VocabMap map = tandem::build_vocab_map(at::tensor({5, 1, 4, 0, 3}, at::kLong), 3);  // 0, 2, 4
  EXPECT_EQ(to_vector(map.d2t), (std::vector<int64_t>{0, 1, 2}));
  VocabMap flipped{map.d2t.clone(), map.t2d.clone()};
  flipped.t2d[1] = true;  // an id marked but never mapped
  EXPECT_THROW(flipped.validate("flipped"), tandem::Error);
  VocabMap unsorted{at::tensor({2, -1, 2}, at::kLong), map.t2d.clone()};  // 2, 0, 4
  EXPECT_THROW(unsorted.validate("unsorted"), tandem::Error);
  VocabMap wrong_dtype{map.d2t.to(at::kInt), map.t2d.clone()};
  EXPECT_THROW(wrong_dtype.validate("dtype"), tandem::Error);
  VocabMap outside{at::tensor({0, 1, 3}, at::kLong), map.t2d.clone()};  // 0, 2, 5 >= V
  EXPECT_THROW(outside.validate("outside"), tandem::Error);
}

// Regression value from an independent XXH64 in Python (checked there against the published
// xxh64("") and xxh64("abc")) over the same fields.
TEST(VocabMap, KeyIsStable) {
  EXPECT_EQ(tandem::vocab_map_key("abc", 10, 4), "7a66b7b6818186ec");
  EXPECT_NE(tandem::vocab_map_key("abc", 10, 5), tandem::vocab_map_key("abc", 10, 4));
  EXPECT_NE(tandem::vocab_map_key("abd", 10, 4), tandem::vocab_map_key("abc", 10, 4));
}

TEST(VocabMap, CacheBuildsOnceThenLoads) {
  tandem::testing::ScratchDir scratch;
  const at::Tensor counts = at::tensor({0, 7, 7, 1, 9, 0, 2, 0}, at::kLong);
  int builds = 0;
  auto count_tokens = [&] {
    ++builds;
    return counts;
  };
  const auto first = tandem::cached_vocab_map(scratch.path(), "data-v1", 8, 4, count_tokens);
  EXPECT_FALSE(first.from_cache);
  EXPECT_EQ(builds, 1);
  EXPECT_TRUE(std::filesystem::exists(first.path));
  EXPECT_EQ(true_ids(first.map.t2d), (std::vector<int64_t>{1, 2, 4, 6}));

  const auto second = tandem::cached_vocab_map(scratch.path(), "data-v1", 8, 4, count_tokens);
  EXPECT_TRUE(second.from_cache);
  EXPECT_EQ(builds, 1);
  EXPECT_EQ(second.path, first.path);
  EXPECT_TRUE(second.map.d2t.equal(first.map.d2t));
  EXPECT_TRUE(second.map.t2d.equal(first.map.t2d));

  // Other inputs, another file.
  const auto other = tandem::cached_vocab_map(scratch.path(), "data-v2", 8, 4, count_tokens);
  EXPECT_FALSE(other.from_cache);
  EXPECT_NE(other.path, first.path);
  EXPECT_EQ(builds, 2);

  // A file for the right key but another key's contents is refused by load, and a corrupt
  // file is rebuilt in place.
  EXPECT_THROW(tandem::load_vocab_map(first.path, "not-the-key"), tandem::Error);
  { std::ofstream(first.path, std::ios::binary | std::ios::trunc) << "garbage"; }
  const auto rebuilt = tandem::cached_vocab_map(scratch.path(), "data-v1", 8, 4, count_tokens);
  EXPECT_FALSE(rebuilt.from_cache);
  EXPECT_EQ(builds, 3);
  EXPECT_TRUE(rebuilt.map.d2t.equal(first.map.d2t));
  EXPECT_NO_THROW(tandem::load_vocab_map(first.path, tandem::vocab_map_key("data-v1", 8, 4)));

  // Counts over the wrong vocabulary are an error, not a silently wrong map.
  EXPECT_THROW(tandem::cached_vocab_map(scratch.path(), "data-v3", 9, 4, count_tokens),
               tandem::Error);
}

}  // namespace
