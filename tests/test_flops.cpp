// Model FLOPs (models/flops.h), the numerator of MFU, against a count done by hand.
#include <gtest/gtest.h>

#include "tandem/models/flops.h"

namespace {

TEST(ModelFlops, ADecoderForwardMatchesTheHandCount) {
  tandem::DecoderConfig config;
  config.hidden_size = 4;
  config.num_attention_heads = 2;
  config.head_dim = 2;             // q width 4
  config.num_key_value_heads = 1;  // kv width 2
  config.intermediate_size = 8;
  config.num_hidden_layers = 1;
  config.vocab_size = 10;
  // One layer's matmul parameters: q, o 4 x 4 each, k, v 4 x 2 each = 48; MLP 3 x 4 x 8 = 96.
  // 3 tokens in one document: 2 x 144 x 3 = 864; attention 2 x 3^2 x 4 = 72; lm_head
  // 2 x 3 x 10 x 4 = 240.
  EXPECT_DOUBLE_EQ(tandem::decoder_forward_flops(config, 3, 9, /*with_lm_head=*/false), 936.0);
  EXPECT_DOUBLE_EQ(tandem::decoder_forward_flops(config, 3, 9, /*with_lm_head=*/true), 1176.0);
  EXPECT_DOUBLE_EQ(tandem::lm_head_flops(config, 3), 240.0);
}

// A sliding-window layer counts the keys its window shows: 10 tokens in one document, window 3:
// visible pairs 1 + 2 + 3 x 8 = 27, 54 in the len^2 count (2 x 10 x 3 - 3 x 2), against 100.
TEST(ModelFlops, ASlidingWindowLayerCountsItsWindow) {
  tandem::DecoderConfig config;
  config.hidden_size = 4;
  config.num_attention_heads = 2;
  config.head_dim = 2;
  config.num_key_value_heads = 1;
  config.intermediate_size = 8;
  config.num_hidden_layers = 2;
  config.vocab_size = 10;
  config.sliding_window = {3, 0};
  // Per layer: matmuls 2 x 144 x 10 = 2880; attention 2 x pairs x 4.
  EXPECT_DOUBLE_EQ(tandem::decoder_forward_flops(config, 10, 100, false),
                   2 * 2880.0 + 2 * 54 * 4 + 2 * 100 * 4);
  // Documents shorter than the window: nothing hidden, also when the batch is (window 3, 4
  // tokens in two documents; window 64, 10 tokens in one).
  EXPECT_DOUBLE_EQ(tandem::decoder_forward_flops(config, 4, 8, false),
                   2 * 2 * 144 * 4.0 + 2 * (2 * 8 * 4));
  config.sliding_window = {64, 0};
  EXPECT_DOUBLE_EQ(tandem::decoder_forward_flops(config, 10, 100, false),
                   2 * 2880.0 + 2 * (2 * 100 * 4));
}

// A mixture-of-experts layer counts its active parameters: the router and top-k experts.
TEST(ModelFlops, AMixtureOfExpertsLayerCountsTheActiveExperts) {
  tandem::DecoderConfig config;
  config.hidden_size = 4;
  config.num_attention_heads = 2;
  config.head_dim = 2;
  config.num_key_value_heads = 1;
  config.intermediate_size = 8;  // the dense layer's MLP
  config.num_hidden_layers = 2;
  config.vocab_size = 10;
  config.moe.num_experts = 6;
  config.moe.experts_per_token = 2;
  config.moe.expert_intermediate_size = 3;
  config.moe.sparse_layers = {true, false};
  // Sparse layer: attention 48 + router 4 x 6 = 24 + 2 experts x 3 x 4 x 3 = 72 -> 144, the same
  // as the dense layer's 48 + 96; 3 tokens: 2 x (144 + 144) x 3 = 1728; attention 2 x 72 = 144.
  EXPECT_DOUBLE_EQ(tandem::decoder_forward_flops(config, 3, 9, /*with_lm_head=*/false), 1872.0);
  config.moe.experts_per_token = 1;  // one expert fewer: 2 x 36 x 3 = 216 less
  EXPECT_DOUBLE_EQ(tandem::decoder_forward_flops(config, 3, 9, /*with_lm_head=*/false), 1656.0);
  // A shared expert of width 5 and its gate: 4 x (3 x 5 + 1) = 64 more, 2 x 64 x 3 = 384.
  config.moe.shared_expert_intermediate_size = 5;
  EXPECT_DOUBLE_EQ(tandem::decoder_forward_flops(config, 3, 9, /*with_lm_head=*/false), 2040.0);
  // Ungated shared experts (GLM-4.5, DeepSeek-V3): no gate, 4 x 1 x 2 x 3 = 24 less.
  config.moe.shared_expert_gated = false;
  EXPECT_DOUBLE_EQ(tandem::decoder_forward_flops(config, 3, 9, /*with_lm_head=*/false), 2016.0);
}

// Latent attention (DeepSeek-V3) counts its five projections, and QK^T over qk dims and PV over
// the values' own dims.
TEST(ModelFlops, LatentAttentionCountsItsProjections) {
  tandem::DecoderConfig config;
  config.hidden_size = 4;
  config.num_attention_heads = 2;
  config.num_key_value_heads = 2;
  config.head_dim = 4;  // qk_nope 2 + qk_rope 2
  config.intermediate_size = 8;
  config.num_hidden_layers = 1;
  config.vocab_size = 10;
  tandem::LatentAttentionConfig& m = config.latent_attention;
  m.q_lora_rank = 3;
  m.kv_lora_rank = 2;
  m.qk_nope_head_dim = 2;
  m.qk_rope_head_dim = 2;
  m.v_head_dim = 1;
  // q_a_proj 4 x 3 + q_b_proj 3 x (2 x 4) = 36, kv_a_proj_with_mqa 4 x (2 + 2) = 16, kv_b_proj
  // 2 x 2 x (2 + 1) = 12, o_proj 2 x 1 x 4 = 8: 72; MLP 96. 3 tokens: 2 x 168 x 3 = 1008;
  // attention over 9 / 2 causal pairs: QK^T 2 x 4.5 x 2 heads x 4 = 72, PV 2 x 4.5 x 2 x 1 = 18.
  EXPECT_DOUBLE_EQ(tandem::decoder_forward_flops(config, 3, 9, /*with_lm_head=*/false), 1098.0);
  m.q_lora_rank = 0;  // q_proj 4 x 8 = 32 in place of 36: 2 x 4 x 3 = 24 less
  EXPECT_DOUBLE_EQ(tandem::decoder_forward_flops(config, 3, 9, /*with_lm_head=*/false), 1074.0);
}

// A hybrid: a Gated DeltaNet layer counts its projections, conv and out_proj, and the chunked
// rule at chunks of 64 in place of attention; a gated attention layer's q_proj is twice as wide.
TEST(ModelFlops, AHybridCountsItsLinearAttentionLayers) {
  tandem::DecoderConfig config;
  config.hidden_size = 4;
  config.num_attention_heads = 2;
  config.head_dim = 2;
  config.num_key_value_heads = 1;
  config.intermediate_size = 8;
  config.num_hidden_layers = 2;
  config.vocab_size = 10;
  config.gated_attention = true;
  config.linear_attention.layers = {true, false};
  config.linear_attention.key_heads = 1;
  config.linear_attention.value_heads = 2;
  config.linear_attention.key_dim = 2;
  config.linear_attention.value_dim = 2;
  config.linear_attention.conv_kernel = 3;
  // Layer 0: channels 2 x 2 + 2 x 2 = 8; in_proj 4 x (8 + 4 + 2 + 2) = 64, conv 8 x 3 = 24,
  // out_proj 4 x 4 = 16: 104, and the MLP's 96; the rule per token 2 heads x (4 x 64 x 2 +
  // 64 x 4 + 2 x 64 x 2 + 6 x 2 x 2) = 2096: 3 tokens x (2 x 200 + 2096) = 7488.
  // Layer 1: q and its gate 2 x 4 x 4, o 4 x 4, k, v 4 x 2 each: 64; MLP 96: 2 x 160 x 3 = 960,
  // attention 2 x 9 x 4 = 72.
  EXPECT_DOUBLE_EQ(tandem::decoder_forward_flops(config, 3, 9, /*with_lm_head=*/false), 8520.0);
}

}  // namespace
