// The DFlash mask token: each rule of the resolution order, and embedding growth that leaves
// every old row bit-identical.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>

#include "tandem/core/error.h"
#include "tandem/data/mask_token.h"
#include "tandem/models/frozen.h"
#include "tandem/text/tokenizer.h"
#include "test_util.h"

namespace {

using tandem::MaskTokenRule;
using tandem::TokenizerVocab;

// A Llama-3-like tokenizer in miniature: 20 ids, the top ones special.
TokenizerVocab llama_like(int64_t size = 20) {
  TokenizerVocab vocab;
  vocab.size = size;
  vocab.added_tokens = {{16, "<|begin_of_text|>", true},
                        {17, "<|end_of_text|>", true},
                        {19, "<|reserved_special_token_1|>", true},
                        {18, "<|reserved_special_token_0|>", true}};
  return vocab;
}

TEST(MaskToken, ConfigIdWinsAndIsValidated) {
  const auto choice = tandem::resolve_mask_token(17, 20, llama_like());
  EXPECT_EQ(choice.rule, MaskTokenRule::Config);
  EXPECT_EQ(choice.id, 17);
  EXPECT_EQ(choice.content, "<|end_of_text|>");
  EXPECT_FALSE(choice.grow_embedding);
  EXPECT_STREQ(tandem::mask_token_rule_name(choice.rule), "config");
  EXPECT_THROW(tandem::resolve_mask_token(20, 20, llama_like()), tandem::Error);
  EXPECT_THROW(tandem::resolve_mask_token(-1, 20, llama_like()), tandem::Error);
}

TEST(MaskToken, TokenizerMaskTokenBeforeReserved) {
  for (const std::string name : {"<|MASK|>", "<mask>", "[MASK]", "<|mask|>"}) {
    TokenizerVocab vocab = llama_like();
    vocab.added_tokens.push_back({15, name, true});
    const auto choice = tandem::resolve_mask_token(std::nullopt, 20, vocab);
    EXPECT_EQ(choice.rule, MaskTokenRule::Tokenizer) << name;
    EXPECT_EQ(choice.id, 15) << name;
    EXPECT_EQ(choice.content, name);
    EXPECT_FALSE(choice.add_to_tokenizer);
  }
  // Not mask names.
  TokenizerVocab vocab = llama_like();
  vocab.added_tokens.push_back({15, "<|masked|>", true});
  vocab.added_tokens.push_back({14, "mask", false});
  EXPECT_EQ(tandem::resolve_mask_token(std::nullopt, 20, vocab).rule, MaskTokenRule::Reserved);
  // A declared mask token (tokenizer_config "mask_token") is looked up by content.
  vocab.declared_mask_token = "<|masked|>";
  const auto declared = tandem::resolve_mask_token(std::nullopt, 20, vocab);
  EXPECT_EQ(declared.rule, MaskTokenRule::Tokenizer);
  EXPECT_EQ(declared.id, 15);
  vocab.declared_mask_token = "<nothing>";
  EXPECT_THROW(tandem::resolve_mask_token(std::nullopt, 20, vocab), tandem::Error);
}

TEST(MaskToken, ReservedSpecialTokenLowestId) {
  const auto choice = tandem::resolve_mask_token(std::nullopt, 20, llama_like());
  EXPECT_EQ(choice.rule, MaskTokenRule::Reserved);
  EXPECT_EQ(choice.id, 18);
  EXPECT_EQ(choice.content, "<|reserved_special_token_0|>");
  EXPECT_FALSE(choice.add_to_tokenizer);
  EXPECT_FALSE(choice.grow_embedding);
  EXPECT_TRUE(choice.serving_note.empty());
}

TEST(MaskToken, PaddingRowWhenEmbeddingExceedsTokenizer) {
  // Qwen-like: no reserved names, 24 embedding rows for 20 tokenizer ids.
  TokenizerVocab vocab;
  vocab.size = 20;
  vocab.added_tokens = {{18, "<|im_start|>", true}, {19, "<|im_end|>", true}};
  const auto choice = tandem::resolve_mask_token(std::nullopt, 24, vocab);
  EXPECT_EQ(choice.rule, MaskTokenRule::PaddingRow);
  EXPECT_EQ(choice.id, 20);
  EXPECT_EQ(choice.content, "<|MASK|>");
  EXPECT_TRUE(choice.add_to_tokenizer);
  EXPECT_FALSE(choice.grow_embedding);
}

TEST(MaskToken, GrowsAsLastResort) {
  TokenizerVocab vocab;
  vocab.size = 20;
  vocab.added_tokens = {{19, "<|im_end|>", true}};
  const auto choice = tandem::resolve_mask_token(std::nullopt, 20, vocab);
  EXPECT_EQ(choice.rule, MaskTokenRule::Grown);
  EXPECT_EQ(choice.id, 20);
  EXPECT_EQ(choice.content, "<|MASK|>");
  EXPECT_TRUE(choice.add_to_tokenizer);
  EXPECT_TRUE(choice.grow_embedding);
  EXPECT_NE(choice.serving_note.find("SGLang rejects"), std::string::npos);
  EXPECT_NE(choice.serving_note.find("vLLM needs the separate mask embedding file"),
            std::string::npos);

  // A tokenizer saved after that growth already has <|MASK|> at id 20: grow, reuse the token.
  vocab.size = 21;
  vocab.added_tokens.push_back({20, "<|MASK|>", true});
  const auto again = tandem::resolve_mask_token(std::nullopt, 20, vocab);
  EXPECT_EQ(again.rule, MaskTokenRule::Grown);
  EXPECT_EQ(again.id, 20);
  EXPECT_FALSE(again.add_to_tokenizer);

  // A tokenizer with more ids than the target has rows is a mismatch, not a guess.
  TokenizerVocab larger;
  larger.size = 22;
  EXPECT_THROW(tandem::resolve_mask_token(std::nullopt, 20, larger), tandem::Error);
  vocab.added_tokens.back().id = 21;
  vocab.size = 22;
  EXPECT_THROW(tandem::resolve_mask_token(std::nullopt, 20, vocab), tandem::Error);
}

struct FakeAddedToken {
  int32_t id;
  std::string content;
  bool special;
  bool lstrip = false;
};
struct FakeTokenizer {
  size_t vocab_size() const { return 10; }
  std::vector<FakeAddedToken> added_tokens() const { return {{12, "<|MASK|>", true}}; }
};

TEST(MaskToken, TokenizerVocabAdapter) {
  const TokenizerVocab vocab = tandem::tokenizer_vocab(FakeTokenizer{});
  EXPECT_EQ(vocab.size, 13);  // one past the largest added id
  ASSERT_EQ(vocab.added_tokens.size(), 1u);
  EXPECT_EQ(tandem::resolve_mask_token(std::nullopt, 16, vocab).id, 12);
}

/// Growth on a given embedding: old rows byte-identical, the new row the fp32 mean, the
/// source untouched.
void check_growth(const at::Tensor& embedding) {
  const at::Tensor before = embedding.clone();
  const at::Tensor row = tandem::mean_embedding_row(embedding);
  ASSERT_EQ(row.sizes(), at::IntArrayRef({embedding.size(1)}));
  ASSERT_EQ(row.scalar_type(), embedding.scalar_type());
  const at::Tensor grown = tandem::grow_embedding(embedding, row);
  ASSERT_EQ(grown.sizes(), at::IntArrayRef({embedding.size(0) + 1, embedding.size(1)}));
  ASSERT_EQ(grown.scalar_type(), embedding.scalar_type());
  const size_t old_bytes = embedding.numel() * embedding.element_size();
  EXPECT_EQ(std::memcmp(grown.data_ptr(), before.data_ptr(), old_bytes), 0);
  EXPECT_EQ(std::memcmp(embedding.data_ptr(), before.data_ptr(), old_bytes), 0);
  const at::Tensor expected = before.to(at::kFloat).mean(0).to(embedding.scalar_type());
  EXPECT_TRUE(grown[embedding.size(0)].equal(expected));
  EXPECT_NE(grown.data_ptr(), embedding.data_ptr());
}

TEST(MaskToken, GrowthKeepsFrozenRowsBitIdentical) {
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    const auto model =
        tandem::FrozenModel::load(tandem::testing::model_fixture("llama3"), dtype, at::kCPU);
    const at::Tensor embedding = model.embed_tokens();  // (512, 64)
    check_growth(embedding);
    const auto choice = tandem::resolve_mask_token(
        std::nullopt, model.config().vocab_size, TokenizerVocab{model.config().vocab_size, {}, {}});
    EXPECT_EQ(choice.rule, MaskTokenRule::Grown);
    EXPECT_EQ(choice.id, 512);
  }
  EXPECT_THROW(tandem::grow_embedding(at::zeros({4, 3}), at::zeros({2})), tandem::Error);
}

}  // namespace

// With the real tokenizer the demo ships (tools/make_demo_data.py): no mask token declared, so
// the lowest reserved special token is chosen, inside the target's vocabulary.
TEST(MaskToken, DemoTokenizerUsesItsFirstReservedToken) {
  const tandem::Tokenizer tokenizer =
      tandem::Tokenizer::from_dir(tandem::testing::source_path("data/demo/tokenizer"));
  const auto choice =
      tandem::resolve_mask_token(std::nullopt, 4096, tandem::tokenizer_vocab(tokenizer));
  EXPECT_EQ(choice.rule, tandem::MaskTokenRule::Reserved);
  EXPECT_EQ(choice.id, *tokenizer.token_to_id("<|reserved_special_token_0|>"));
  EXPECT_EQ(choice.content, "<|reserved_special_token_0|>");
  EXPECT_FALSE(choice.grow_embedding);
}
