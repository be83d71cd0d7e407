// Mixture-of-experts targets: frozen forward tokens/s and MFU of a Qwen3-MoE-shaped target
// (hidden 1024, 8 layers, 32 experts of intermediate 256, top-8) against a dense Qwen3 target of
// the same active size (intermediate 8 x 256 = 2048: the same matmul work per token), in one run,
// each loaded from an HF checkpoint the way a frozen target is (the MoE one stored one tensor per
// expert); then an EAGLE-3 training step (online: the target runs in the step) against each.
//
// Model FLOPs (models/flops.h) count active parameters: per token 2 x (attention projections +
// lm_head) + for a sparse layer 2 x (router E x H + k experts x 3 x H x I), for a dense layer
// 2 x 3 x H x I; plus causal attention 2 * T^2 * heads * head_dim per layer. The EAGLE-3 step
// adds the teacher's 2 * tokens * V * H and 3 x the draft's forward (objectives/eagle3.h).
// MFU = model FLOPs / time / the matmul peak measured in the same run (fp32 on the CPU).
// Weights are random: speed does not depend on them, and random routers spread tokens over the
// experts about evenly (the grouping's worst case is one expert taking all, which the counts
// printed per layer would show).
#include <ATen/ATen.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>

#include "bench_common.h"
#include "bench_model.h"
#include "bench_objective.h"
#include "tandem/core/threads.h"
#include "tandem/models/frozen.h"
#include "tandem/objectives/eagle3.h"
#include "tandem/train/optimizer.h"

namespace {

using namespace tandem;

struct Shape {
  int64_t hidden = 1024, layers = 8, heads = 16, kv_heads = 8, vocab = 32000;
  int64_t experts = 32, top_k = 8, expert_intermediate = 256;
};

DecoderConfig qwen3_config(const Shape& s, bool sparse) {
  bench::ModelShape dense;
  dense.hidden = s.hidden, dense.layers = s.layers, dense.heads = s.heads,
  dense.kv_heads = s.kv_heads, dense.vocab = s.vocab;
  dense.intermediate = s.top_k * s.expert_intermediate;  // equal active MLP work per token
  DecoderConfig config = bench::llama_config(dense);
  config.family = sparse ? DecoderFamily::Qwen3Moe : DecoderFamily::Qwen3;
  config.qk_norm = true;
  config.rope_theta = 1e6;
  if (sparse) {
    config.moe.num_experts = s.experts;
    config.moe.experts_per_token = s.top_k;
    config.moe.expert_intermediate_size = s.expert_intermediate;
    config.moe.normalize_top_k = true;
    config.moe.weights_in_model_dtype = true;
    config.moe.sparse_layers.assign(static_cast<size_t>(s.layers), true);
  }
  return config;
}

struct Result {
  double forward_seconds, forward_mfu, step_seconds, step_mfu, rss;
};

Result run(const DecoderConfig& config, const std::string& dir, int64_t seq, int64_t rows,
           int64_t eagle_seq, int64_t ttt, int repeats, double peak) {
  Result result{};
  {
    const FrozenModel model = FrozenModel::load(dir, at::kFloat, at::kCPU);
    const at::Tensor ids = at::randint(config.vocab_size, {rows, seq}, at::kLong);
    const auto layout = AttentionLayout::causal(rows, seq, at::kCPU);
    result.forward_seconds = bench::best_seconds([&] { model.forward(ids, layout, {}); }, repeats);
    result.forward_mfu = bench::forward_flops(config, seq, rows) / result.forward_seconds / peak;
  }
  Eagle3Options options;
  options.target_path = dir;
  options.ttt_length = ttt;
  options.draft_vocab_size = 8192;
  Eagle3Objective objective(options);
  MixedPrecisionAdamW optimizer(trainable_parameters(*objective.draft()), {});
  const PackedBatch batch = bench::random_batch(config.vocab_size, 1, eagle_seq, 1);
  const StepTotals totals = objective.count(batch);
  bench::reset_peak_rss();
  result.step_seconds = bench::best_seconds(
      [&] {
        objective.unroll(batch, objective.features(batch), totals).loss.backward();
        optimizer.step(1e-4);
        optimizer.zero_grad();
      },
      std::max(1, repeats - 1));
  result.rss = bench::peak_rss_mark_mib();
  const double tokens = static_cast<double>(eagle_seq);
  DecoderConfig body = config;
  body.vocab_size = 0;  // the target's forward stops at its last layer
  const double flops =
      bench::forward_flops(body, eagle_seq, 1) +
      2 * tokens * config.vocab_size * config.hidden_size +
      3 * eagle3_draft_forward_flops(objective.draft()->config(), tokens, tokens * tokens, ttt);
  result.step_mfu = flops / result.step_seconds / peak;
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "bench_moe: a Qwen3-MoE-shaped frozen target vs a dense one of equal active size: "
      "forward tokens/s and MFU, and an EAGLE-3 step against each"};
  Shape shape;
  int64_t seq = 1024, rows = 1, eagle_seq = 512, ttt = 7;
  int repeats = 3, threads = 0;
  app.add_option("--hidden", shape.hidden)->capture_default_str();
  app.add_option("--layers", shape.layers)->capture_default_str();
  app.add_option("--experts", shape.experts)->capture_default_str();
  app.add_option("--top-k", shape.top_k)->capture_default_str();
  app.add_option("--expert-intermediate", shape.expert_intermediate)->capture_default_str();
  app.add_option("--vocab", shape.vocab)->capture_default_str();
  app.add_option("--seq", seq, "forward: tokens per row")->capture_default_str();
  app.add_option("--rows", rows, "forward: rows")->capture_default_str();
  app.add_option("--eagle-seq", eagle_seq, "EAGLE-3 step: tokens (one row)")->capture_default_str();
  app.add_option("--ttt", ttt)->capture_default_str();
  app.add_option("--repeats", repeats)->capture_default_str();
  app.add_option("--threads", threads, "0: all usable cores")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const int used_threads = configure_threads(threads);
  const double peak = bench::matmul_peak_flops(at::kFloat);
  std::printf(
      "bench_moe: fp32 matmul peak %.1f GFLOP/s, %d threads; hidden %ld, %ld layers, "
      "heads %ld/%ld, vocab %ld; MoE %ld experts x intermediate %ld, top-%ld vs dense "
      "intermediate %ld; forward %ld x %ld tokens, EAGLE-3 step %ld tokens, TTT %ld, fp32\n",
      peak / 1e9, used_threads, shape.hidden, shape.layers, shape.heads, shape.kv_heads,
      shape.vocab, shape.experts, shape.expert_intermediate, shape.top_k,
      shape.top_k * shape.expert_intermediate, rows, seq, eagle_seq, ttt);
  const std::string scratch =
      (std::filesystem::temp_directory_path() / ("tandem-bench-moe-" + std::to_string(::getpid())))
          .string();
  for (const bool sparse : {true, false}) {
    const DecoderConfig config = qwen3_config(shape, sparse);
    const std::string dir = scratch + (sparse ? "/moe" : "/dense");
    bench::write_random_model(config, dir);
    int64_t total = 0;
    for (const auto& file : std::filesystem::directory_iterator(dir))
      if (file.path().extension() == ".safetensors") total += std::filesystem::file_size(file);
    const Result r = run(config, dir, seq, rows, eagle_seq, ttt, repeats, peak);
    std::printf(
        "  %-5s target (%.0f MiB of fp32 weights, %.1f GFLOP per forward token): forward "
        "%.3f s, %.0f tokens/s, MFU %.1f%% | EAGLE-3 online step %.3f s, %.0f tokens/s, "
        "MFU %.1f%%, peak RSS during the steps %.0f MiB\n",
        sparse ? "MoE" : "dense", total / 1048576.0, bench::forward_flops(config, 1, 1) / 1e9,
        r.forward_seconds, rows * seq / r.forward_seconds, 100 * r.forward_mfu, r.step_seconds,
        eagle_seq / r.step_seconds, 100 * r.step_mfu, r.rss);
  }
  std::filesystem::remove_all(scratch);
  return 0;
}
