// Parity with transformers: every fixture model under tests/fixtures/models was written by
// tools/make_model_fixtures.py (glm4_moe and deepseek_v3 among them; the hybrids qwen3_5,
// qwen3_5_moe, qwen3_next by tools/make_hybrid_fixtures.py) together with transformers' own logits
// and per-layer hidden states for fixed ids. tandem loads the same checkpoint and must reproduce
// them, on the CPU and, where a GPU is visible, on CUDA (skipped with the reason elsewhere;
// scripts/gpu_check.sh).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "tandem/core/device.h"
#include "tandem/io/safetensors.h"
#include "tandem/io/tensor_io.h"
#include "tandem/models/frozen.h"
#include "test_util.h"

namespace {

using tandem::AttentionLayout;
using tandem::FrozenModel;

struct Reference {
  std::map<std::string, at::Tensor> tensors;
  const at::Tensor& operator[](const std::string& name) const {
    auto found = tensors.find(name);
    if (found == tensors.end()) throw std::runtime_error("reference lacks " + name);
    return found->second;
  }
};

Reference load_reference(const std::string& model_dir) {
  const auto file = tandem::safetensors::File::open(model_dir + "/reference.safetensors");
  Reference reference;
  for (const auto& info : file.header().tensors)
    reference.tensors[info.name] = tandem::read_tensor(file, info);
  return reference;
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  // On the host: tandem's output may be on a GPU, the reference is always read to the CPU.
  return (a.to(at::kCPU, at::kFloat) - b.to(at::kCPU, at::kFloat)).abs().max().item<double>();
}

// Per row (sequence), the first token of a mixture-of-experts fixture whose routing in bf16 has
// a near-tie at some layer: the k-th and (k+1)-th best expert scores of transformers' bf16 router
// logits lie within 4 bf16 ulps (the row's length where none does; every row's length for a
// dense model). Scores as the family ranks them: the logits (softmax keeps their order), or
// sigmoid + e_score_correction_bias (MiniMax-M2; GLM-4.5, whose group limit is left out: a tie
// among all experts is a superset of the ties that matter).
std::vector<int64_t> first_routing_near_ties(const Reference& reference, const FrozenModel& model) {
  const tandem::MoeConfig& moe = model.config().moe;
  const int64_t rows = reference["input_ids"].size(0), length = reference["input_ids"].size(1);
  std::vector<int64_t> first(rows, length);
  if (moe.num_experts == 0) return first;
  const int64_t k = moe.experts_per_token;
  const std::map<std::string, at::Tensor> weights = model.named_weights();
  const std::string prefix = "router_logits_bf16.";
  for (const auto& [name, logits] : reference.tensors) {
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string layer = "layers." + name.substr(prefix.size()) + ".";
    at::Tensor scores = logits.to(at::kFloat);  // (B * T, E)
    if (moe.scoring != tandem::RouterScoring::Softmax)
      for (const auto& [weight_name, weight] : weights)
        if (weight_name.find(layer) != std::string::npos &&
            weight_name.find("e_score_correction_bias") != std::string::npos)
          scores = at::sigmoid(scores) + weight.to(at::kCPU, at::kFloat);
    const at::Tensor sorted = std::get<0>(scores.sort(-1, /*descending=*/true));
    const at::Tensor kth = sorted.select(1, k - 1), next = sorted.select(1, k);
    // One bf16 ulp at |x|: 2^(floor(log2 |x|) - 7).
    const at::Tensor ulp = at::pow(2.0, at::floor(at::log2(kth.abs().clamp_min(1e-30))) - 7);
    const at::Tensor near = (kth - next) <= 4 * ulp;
    for (int64_t token = 0; token < near.size(0); ++token)
      if (near[token].item<bool>())
        first[token / length] = std::min(first[token / length], token % length);
  }
  return first;
}

// (fixture, device): "cpu" always, "cuda" where a GPU is visible.
class DecoderParity : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  void SetUp() override {
    if (std::get<1>(GetParam()) == "cuda" && tandem::cuda_device_count() == 0)
      GTEST_SKIP()
          << "no CUDA device visible (CPU machine): scripts/gpu_check.sh runs this on a GPU";
  }
  std::string name() const { return std::get<0>(GetParam()); }
  at::Device device() const {
    return std::get<1>(GetParam()) == "cuda" ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  }
};

// fp32: logits and every layer's raw output within 1e-4 of transformers (docs/models.md).
TEST_P(DecoderParity, Fp32MatchesTransformers) {
  const std::string dir = tandem::testing::model_fixture(name());
  const Reference reference = load_reference(dir);
  const FrozenModel model = FrozenModel::load(dir, at::kFloat, device());
  const at::Tensor ids = reference["input_ids"].to(device());
  std::vector<int64_t> layers;
  for (int64_t i = 0; i < model.config().num_hidden_layers; ++i) layers.push_back(i);
  const auto out =
      model.forward(ids, AttentionLayout::causal(ids.size(0), ids.size(1), device()), layers);

  const at::Tensor& expected = reference["logits"];
  ASSERT_EQ(out.logits.sizes(), expected.sizes());
  // The check only means something if the logits are not all near zero.
  ASSERT_GT(expected.std().item<double>(), 0.3) << "fixture logits too flat to test parity";
  const double logits_diff = max_abs_diff(out.logits, expected);
  std::printf("[parity] %s fp32 on %s: logits max|diff| %.3g (logit std %.2f)\n", name().c_str(),
              device().str().c_str(), logits_diff, expected.std().item<double>());
  EXPECT_LE(logits_diff, 1e-4) << name();
  for (int64_t i : layers) {
    const at::Tensor& hidden = reference["hidden." + std::to_string(i)];
    EXPECT_LE(max_abs_diff(out.hidden.at(i), hidden), 1e-4) << name() << " layer " << i;
  }
}

// bf16: tandem in bf16 against transformers in bf16. Both round every op to bf16 (8 mantissa
// bits) but in different orders, so they agree to a few bf16 ulps of the logit scale: the
// stated tolerance is 3% of the largest |logit| (or transformers' own bf16-vs-fp32 error where
// that is larger: the hybrids, whose many fp32/bf16 round trips make bf16 coarser, up to 5.5%
// of the scale in transformers itself), and the diff must also stay well inside that own error
// times 2.
TEST_P(DecoderParity, Bf16WithinStatedTolerance) {
  const std::string dir = tandem::testing::model_fixture(name());
  const Reference reference = load_reference(dir);
  const FrozenModel model = FrozenModel::load(dir, at::kBFloat16, device());
  const at::Tensor ids = reference["input_ids"].to(device());
  const auto out =
      model.forward(ids, AttentionLayout::causal(ids.size(0), ids.size(1), device()), {});
  ASSERT_EQ(out.logits.scalar_type(), at::kBFloat16);
  // On a GPU, a mixture-of-experts token whose bf16 routing has a near-tie may pick another
  // expert than transformers did (another rounding order), which moves its logits far past bf16
  // rounding, and causal attention carries that into every later token of its row: from a row's
  // first near-tie on, its tokens are counted and left out; the tokens before keep the bounds.
  // (The CPU, whose rounding order the fixtures' bounds were set on, compares every token.)
  const std::vector<int64_t> first_tie = first_routing_near_ties(reference, model);
  const int64_t rows = out.logits.size(0), length = out.logits.size(1);
  at::Tensor keep = at::ones({rows, length}, at::kBool);  // (B, T)
  int64_t tied = 0;
  for (int64_t row = 0; row < rows; ++row) {
    tied += length - first_tie[row];
    if (device().is_cuda())
      keep[row].narrow(0, first_tie[row], length - first_tie[row]).fill_(false);
  }
  const int64_t left_out = device().is_cuda() ? tied : 0;
  if (tied > 0)
    std::printf("[parity] %s bf16: %lld of %lld tokens at or after a routing near-tie (%s)\n",
                name().c_str(), static_cast<long long>(tied), static_cast<long long>(rows * length),
                device().is_cuda() ? "not compared on a GPU" : "compared on the CPU");
  ASSERT_GE(rows * length - left_out, 4) << "fewer than 4 tokens precede a routing near-tie: "
                                            "the fixture tests too little on a GPU";
  const at::Tensor logits = out.logits.to(at::kCPU).index({keep});  // (kept, V)
  const at::Tensor expected = reference["logits_bf16"].index({keep});
  const double scale = expected.abs().max().item<double>();
  const double diff = max_abs_diff(logits, expected);
  const double transformers_bf16_error = max_abs_diff(expected, reference["logits"].index({keep}));
  const double tandem_bf16_error = max_abs_diff(logits, reference["logits"].index({keep}));
  std::printf(
      "[parity] %s bf16 on %s: logits max|diff| %.3g vs transformers bf16 (bf16 vs fp32: "
      "transformers %.3g, tandem %.3g; max|logit| %.2f)\n",
      name().c_str(), device().str().c_str(), diff, transformers_bf16_error, tandem_bf16_error,
      scale);
  EXPECT_LE(diff, std::max(0.03 * scale, transformers_bf16_error)) << name() << " scale " << scale;
  EXPECT_LE(diff, 2 * transformers_bf16_error + 1e-3)
      << name() << " transformers' own bf16 error " << transformers_bf16_error;
}

// Packed documents: attention never crosses a boundary and positions restart, so each document
// of a packed row equals that document run alone. (Each document is its own causal SDPA call
// without a mask; on CUDA in fp32 with GQA, K/V are repeated per head: sdpa_repeats_kv.)
TEST_P(DecoderParity, PackedRowEqualsSeparateDocuments) {
  const FrozenModel model =
      FrozenModel::load(tandem::testing::model_fixture(name()), at::kFloat, device());
  const at::TensorOptions ids = at::TensorOptions().dtype(at::kLong).device(device());
  const at::Tensor first = at::arange(5, 12, ids).unsqueeze(0);    // (1, 7)
  const at::Tensor second = at::arange(40, 49, ids).unsqueeze(0);  // (1, 9)
  const at::Tensor packed = at::cat({first, second}, 1);           // (1, 16)
  AttentionLayout layout;
  layout.positions = at::cat({at::arange(7, ids), at::arange(9, ids)}).unsqueeze(0);
  layout.document_ids = at::cat({at::zeros({7}, ids), at::ones({9}, ids)}).unsqueeze(0);
  const auto together = model.forward(packed, layout, {});
  const auto alone_first = model.forward(first, AttentionLayout::causal(1, 7, device()), {});
  const auto alone_second = model.forward(second, AttentionLayout::causal(1, 9, device()), {});
  // fp32 rounding of a masked vs a causal attention call: 1e-5 of the logits' scale (at least 1).
  const double scale = std::max(1.0, alone_first.logits.abs().max().item<double>());
  std::printf("[parity] %s packed on %s: max|logit| %.2f, diffs %.3g %.3g\n", name().c_str(),
              device().str().c_str(), scale,
              max_abs_diff(together.logits.narrow(1, 0, 7), alone_first.logits),
              max_abs_diff(together.logits.narrow(1, 7, 9), alone_second.logits));
  EXPECT_LE(max_abs_diff(together.logits.narrow(1, 0, 7), alone_first.logits), 1e-5 * scale);
  EXPECT_LE(max_abs_diff(together.logits.narrow(1, 7, 9), alone_second.logits), 1e-5 * scale);
}

// The hybrids (Gated DeltaNet + gated attention): a packed row of two documents equals
// transformers run on each document alone (its packed_logits), the linear-attention state and
// the conv window restarting at the boundary; and a chunk smaller than a document changes
// nothing beyond fp32 rounding.
class HybridParity : public DecoderParity {};

TEST_P(HybridParity, PackedRowEqualsTransformersOnEachDocument) {
  const Reference reference = load_reference(tandem::testing::model_fixture(name()));
  for (const int64_t chunk : {int64_t{64}, int64_t{4}}) {
    tandem::RunContext run;
    run.device = device();
    run.attention.linear_chunk = chunk;
    const FrozenModel model =
        FrozenModel::load(tandem::testing::model_fixture(name()), at::kFloat, run);
    const at::TensorOptions ids = at::TensorOptions().dtype(at::kLong).device(device());
    AttentionLayout layout;
    layout.positions = at::cat({at::arange(7, ids), at::arange(9, ids)}).unsqueeze(0);
    layout.document_ids = at::cat({at::zeros({7}, ids), at::ones({9}, ids)}).unsqueeze(0);
    const auto out = model.forward(reference["packed_ids"].to(device()), layout, {});
    const double diff = max_abs_diff(out.logits, reference["packed_logits"]);
    std::printf("[parity] %s packed, chunk %ld, on %s: logits max|diff| %.3g\n", name().c_str(),
                static_cast<long>(chunk), device().str().c_str(), diff);
    EXPECT_LE(diff, 1e-4) << name() << " chunk " << chunk;
  }
}

// What drafts read of a hybrid target, the head (embedding, final norm, lm_head) from the model
// and, for offline training, from the checkpoint alone: the final norm of the last layer's
// output through lm_head gives the model's logits.
TEST_P(HybridParity, HeadGivesTheModelsLogits) {
  const std::string dir = tandem::testing::model_fixture(name());
  const Reference reference = load_reference(dir);
  const FrozenModel model = FrozenModel::load(dir, at::kFloat, device());
  const at::Tensor ids = reference["input_ids"].to(device());
  const int64_t last = model.config().num_hidden_layers - 1;
  const auto out =
      model.forward(ids, AttentionLayout::causal(ids.size(0), ids.size(1), device()), {last});
  const tandem::FrozenHead loaded = tandem::FrozenHead::load(dir, at::kFloat, device());
  for (const tandem::FrozenHead& head : {model.head(), loaded}) {
    const at::Tensor logits = at::linear(head.final_norm(out.hidden.at(last)), head.lm_head());
    EXPECT_LE(max_abs_diff(logits, out.logits), 1e-5) << name();
    EXPECT_LE(max_abs_diff(head.embed(ids), at::embedding(model.embed_tokens(), ids)), 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Hybrids, HybridParity,
    ::testing::Combine(::testing::Values("qwen3_5", "qwen3_5_moe", "qwen3_next"),
                       ::testing::Values("cpu", "cuda")),
    [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

INSTANTIATE_TEST_SUITE_P(
    Fixtures, DecoderParity,
    ::testing::Combine(::testing::Values("llama3", "mistral", "qwen2", "qwen3", "qwen3_moe",
                                         "mixtral", "minimax_m2", "qwen3_5", "qwen3_5_moe",
                                         "qwen3_next", "glm4_moe", "deepseek_v3",
                                         "deepseek_v3_q_proj", "gemma3_text", "gemma3", "gpt_oss"),
                       ::testing::Values("cpu", "cuda")),
    [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

}  // namespace
