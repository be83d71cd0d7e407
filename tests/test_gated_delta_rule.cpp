// The gated delta rule (models/gated_delta_rule.h) against transformers' own implementation
// (tools/make_gated_delta_fixtures.py: torch_chunk_gated_delta_rule and
// torch_recurrent_gated_delta_rule of transformers 5.23's Qwen3.5), and against itself: every
// chunk size, the chunked and recurrent forms, packed documents = each document alone.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "fixture_tensors.h"
#include "tandem/core/error.h"
#include "tandem/models/gated_delta_rule.h"
#include "tandem/models/gated_deltanet.h"

namespace {

using tandem::testing::fixture_tensors;
using tandem::testing::max_relative_error;

const std::map<std::string, at::Tensor>& cases() {
  static const auto tensors = fixture_tensors("tests/fixtures/gated_delta/cases.safetensors");
  return tensors;
}

at::Tensor get(const std::string& name) { return cases().at(name); }

TEST(GatedDeltaRule, PackedDocumentsEqualTransformersRunOnEachDocument) {
  const std::vector<std::vector<int64_t>> bounds = {{0, 10, 37}, {0, 37}};
  for (const int64_t chunk : {1, 4, 16, 64}) {
    at::Tensor state;
    const at::Tensor out = tandem::chunked_gated_delta_rule(
        get("packed_q"), get("packed_k"), get("packed_v"), get("packed_g"), get("packed_beta"),
        bounds, {chunk, true}, {}, &state);
    EXPECT_LT(max_relative_error(out, get("packed_out")), 1e-5) << "chunk " << chunk;
    EXPECT_LT(max_relative_error(state, get("packed_final_state")), 1e-5) << "chunk " << chunk;
  }
}

TEST(GatedDeltaRule, AContinuationFromAStateEqualsTransformersChunkedAndRecurrent) {
  at::Tensor state;
  const at::Tensor chunked = tandem::chunked_gated_delta_rule(
      get("state_q"), get("state_k"), get("state_v"), get("state_g"), get("state_beta"), {},
      {8, true}, get("state_initial"), &state);
  EXPECT_LT(max_relative_error(chunked, get("state_out")), 1e-5);
  EXPECT_LT(max_relative_error(state, get("state_final_state")), 1e-5);

  at::Tensor carried = get("state_initial").clone();
  const at::Tensor recurrent = tandem::recurrent_gated_delta_rule(
      get("state_q"), get("state_k"), get("state_v"), get("state_g"), get("state_beta"), carried);
  EXPECT_LT(max_relative_error(recurrent, get("state_recurrent_out")), 1e-5);
  EXPECT_LT(max_relative_error(carried, get("state_recurrent_final_state")), 1e-5);
}

TEST(GatedDeltaRule, ChunkedEqualsRecurrentTokenByTokenAndDocumentsNeverShareAState) {
  at::manual_seed(3);
  const int64_t B = 2, T = 50, Hk = 1, Hv = 3, K = 5, V = 7;
  const at::Tensor q = at::randn({B, T, Hk, K}), k = at::randn({B, T, Hk, K});
  const at::Tensor v = at::randn({B, T, Hv, V});
  const at::Tensor g = -at::rand({B, T, Hv}) * 2, beta = at::rand({B, T, Hv});
  const std::vector<std::vector<int64_t>> bounds = {{0, 7, 8, 50}, {0, 33, 50}};
  const at::Tensor packed = tandem::chunked_gated_delta_rule(q, k, v, g, beta, bounds, {16, true});
  for (int64_t b = 0; b < B; ++b)
    for (size_t d = 0; d + 1 < bounds[b].size(); ++d) {
      const int64_t begin = bounds[b][d], length = bounds[b][d + 1] - begin;
      const auto part = [&](const at::Tensor& x) {
        return x.narrow(0, b, 1).narrow(1, begin, length);
      };
      at::Tensor state = at::zeros({1, Hv, K, V});
      const at::Tensor alone =
          tandem::recurrent_gated_delta_rule(part(q), part(k), part(v), part(g), part(beta), state);
      EXPECT_LT(max_relative_error(part(packed), alone), 1e-5) << "row " << b << " document " << d;
    }
  // Decoding one token at a time from the prefill's state continues the sequence exactly.
  at::Tensor state;
  const auto first = [&](const at::Tensor& x) { return x.narrow(0, 1, 1).narrow(1, 0, 40); };
  const auto rest = [&](const at::Tensor& x) { return x.narrow(0, 1, 1).narrow(1, 40, 10); };
  tandem::chunked_gated_delta_rule(first(q), first(k), first(v), first(g), first(beta), {},
                                   {16, true}, {}, &state);
  const at::Tensor whole =
      tandem::chunked_gated_delta_rule(q.narrow(0, 1, 1), k.narrow(0, 1, 1), v.narrow(0, 1, 1),
                                       g.narrow(0, 1, 1), beta.narrow(0, 1, 1), {}, {16, true});
  const at::Tensor decoded =
      tandem::recurrent_gated_delta_rule(rest(q), rest(k), rest(v), rest(g), rest(beta), state);
  EXPECT_LT(max_relative_error(decoded, whole.narrow(1, 40, 10)), 1e-5);
}

TEST(GatedDeltaRule, Bf16InputsComputeInFp32AndBadShapesAreNamed) {
  const at::Tensor out = tandem::chunked_gated_delta_rule(
      get("packed_q").to(at::kBFloat16), get("packed_k").to(at::kBFloat16),
      get("packed_v").to(at::kBFloat16), get("packed_g"), get("packed_beta"),
      {{0, 10, 37}, {0, 37}}, {16, true});
  EXPECT_EQ(out.scalar_type(), at::kBFloat16);
  EXPECT_LT(max_relative_error(out, get("packed_out")), 3e-2);

  const at::Tensor q = at::zeros({1, 4, 2, 8}), v = at::zeros({1, 4, 3, 8}),
                   g = at::zeros({1, 4, 3});
  EXPECT_THROW(tandem::chunked_gated_delta_rule(q, q, v, g, g, {}), tandem::Error);  // 3 % 2 heads
  const at::Tensor v4 = at::zeros({1, 4, 4, 8}), g4 = at::zeros({1, 4, 4});
  EXPECT_THROW(tandem::chunked_gated_delta_rule(q, q, v4, g4, g4, {{0, 3}}), tandem::Error);
  EXPECT_THROW(tandem::chunked_gated_delta_rule(q, q, v4, g4, g4, {}, {0, true}), tandem::Error);
}

}  // namespace

namespace {

TEST(GatedDeltaNet, LayerEqualsTransformersQwen35ModuleOnPackedDocuments) {
  const auto layer = fixture_tensors("tests/fixtures/gated_delta/layer.safetensors");
  const auto weight = [&](const std::string& name) { return layer.at("weight." + name); };
  tandem::GatedDeltaNetWeights w;
  w.in_proj_qkv = weight("in_proj_qkv.weight");
  w.in_proj_z = weight("in_proj_z.weight");
  w.in_proj_b = weight("in_proj_b.weight");
  w.in_proj_a = weight("in_proj_a.weight");
  w.conv1d = weight("conv1d.weight");
  w.dt_bias = weight("dt_bias");
  w.A_log = weight("A_log");
  w.norm = weight("norm.weight");
  w.out_proj = weight("out_proj.weight");
  const tandem::GatedDeltaNetShape shape{2, 4, 8, 6, 1e-6};
  const std::vector<std::vector<int64_t>> bounds = {{0, 9, 23}, {0, 23}};
  for (const int64_t chunk : {4, 64}) {
    const at::Tensor out =
        tandem::gated_deltanet_forward(layer.at("input"), w, shape, bounds, {chunk, true});
    EXPECT_LT(max_relative_error(out, layer.at("output")), 1e-5) << "chunk " << chunk;
  }
  // The conv window restarts at the second document: its first output equals the first token's
  // own conv alone.
  const at::Tensor x = at::randn({1, 5, 3}), conv = at::randn({3, 1, 4});
  const at::Tensor packed = tandem::causal_depthwise_conv(x, conv, {{0, 2, 5}});
  const at::Tensor alone = tandem::causal_depthwise_conv(x.narrow(1, 2, 3), conv, {});
  EXPECT_TRUE(at::allclose(packed.narrow(1, 2, 3), alone));
}

}  // namespace
