// DFlash training step throughput, online (the frozen target runs in the loop) and offline
// (target features precomputed, as `tandem capture` provides them), on two target shapes: the
// demo target (hidden 256, 8 layers, vocab 4096) and a larger one (hidden 1024, vocab 32000).
//
// Model FLOPs per step (fp32), with Q = block queries = valid anchors * block_size (the draft term
// is dflash_draft_forward_flops in objectives/dflash.h, which the trainer's MFU uses too):
//   target forward (online only) = bench_model.h's forward FLOPs without the lm_head term
//   draft forward = context: 2 * tokens * (k * H_t * H)                       (fc)
//                 + per layer, context keys/values: 2 * tokens * H * 2 kv width
//                 + per layer, blocks: 2 * Q * (H * (q + 2 kv widths) + q width * H + 3 * H * I)
//                 + per layer, attention over the VISIBLE keys only (the context before each
//                   anchor in its document, plus the block): 4 * q width * sum over queries
//   lm_head (frozen) = 2 * labels * V * H forward + the same for the hidden-state gradient
//   draft forward + backward = 3 x draft forward (two backward matmuls per forward matmul)
// The blockwise attention kernel skips the context tiles after each anchor but still masks inside
// the tiles it visits; the masked work is not counted, so MFU is the useful fraction. MFU = model
// FLOPs / time / the fp32 matmul peak measured in the same run. Target weights are random (speed
// does not depend on them).
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>

#include "bench_common.h"
#include "bench_model.h"
#include "bench_objective.h"
#include "tandem/core/threads.h"
#include "tandem/objectives/dflash.h"
#include "tandem/train/optimizer.h"

namespace {

using namespace tandem;

struct Case {
  const char* name;
  bench::ModelShape target;
  int64_t seq, rows, max_anchors;
};

void run_case(const Case& c, int64_t block_size, int64_t draft_layers, int repeats, double peak) {
  const std::string scratch = (std::filesystem::temp_directory_path() /
                               ("tandem-bench-dflash-" + std::to_string(::getpid())))
                                  .string();
  const std::string target_dir = bench::write_random_llama(c.target, scratch);
  DFlashOptions options;
  options.target_path = target_dir;
  options.block_size = block_size;
  options.dims.num_layers = draft_layers;
  options.max_anchors = c.max_anchors;
  options.mask_token_id = c.target.vocab - 1;  // random weights: any row serves
  DFlashObjective objective(options);
  MixedPrecisionAdamW optimizer(trainable_parameters(*objective.draft()), {});
  const DecoderConfig target = DecoderConfig::from_dir(target_dir);

  const PackedBatch batch = bench::random_batch(target.vocab_size, c.rows, c.seq, 1);
  const DFlashAnchors anchors = objective.anchors(batch);
  const StepTotals totals = objective.totals(batch, anchors.blocks);
  const TargetFeatures captured = objective.features(batch);

  auto draft_step = [&](const TargetFeatures& features) {
    objective.run(batch, features, anchors.blocks, totals).loss.backward();
    optimizer.step(1e-4);
    optimizer.zero_grad();
  };
  draft_step(captured);  // warm-up: the allocator's first touch of the step's buffers
  bench::reset_peak_rss();
  const double target_seconds = bench::best_seconds([&] { objective.features(batch); }, repeats);
  const double offline_seconds = bench::best_seconds([&] { draft_step(captured); }, repeats);
  const double online_seconds =
      bench::best_seconds([&] { draft_step(objective.features(batch)); }, repeats);
  const double rss = bench::peak_rss_mark_mib();

  const double tokens = static_cast<double>(c.seq) * c.rows;
  DecoderConfig target_body = target;
  target_body.vocab_size = 0;  // the target's forward stops at its last layer
  const double target_flops = bench::forward_flops(target_body, c.seq, c.rows);
  const double labels = static_cast<double>(totals.loss_tokens);
  const double head_flops = 2 * 2 * labels * target.vocab_size * target.hidden_size;
  const double draft_flops =
      3 * dflash_draft_forward_flops(objective.draft()->config(), batch, anchors.blocks);
  const double online_flops = target_flops + head_flops + draft_flops;
  const double offline_flops = head_flops + draft_flops;
  std::printf(
      "bench_dflash [%s]: target hidden %ld, layers %ld, heads %ld/%ld, intermediate %ld, "
      "vocab %ld; draft %ld layers reading target layers %s, block %ld; %ld x %ld tokens, "
      "%.0f anchors, %.0f labels, fp32\n",
      c.name, target.hidden_size, target.num_hidden_layers, target.num_attention_heads,
      target.num_key_value_heads, target.intermediate_size, target.vocab_size, draft_layers,
      c10::str(at::IntArrayRef(objective.draft()->config().target_layer_ids)).c_str(), block_size,
      c.rows, c.seq, anchors.blocks.anchor_valid.sum().item<double>(), labels);
  std::printf(
      "  online : step %.3f s, %.0f tokens/s, MFU %.1f%% | target forward %.3f s = %.0f%% "
      "of the step\n",
      online_seconds, tokens / online_seconds, 100 * online_flops / online_seconds / peak,
      target_seconds, 100 * target_seconds / online_seconds);
  std::printf("  offline: step %.3f s, %.0f tokens/s, MFU %.1f%%\n", offline_seconds,
              tokens / offline_seconds, 100 * offline_flops / offline_seconds / peak);
  std::printf("  peak RSS during the steps %.0f MiB (process peak %.0f MiB)\n", rss,
              bench::peak_rss_mib());
  std::filesystem::remove_all(scratch);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_dflash: DFlash training step, online and offline: tokens/s, MFU, memory"};
  std::string only;
  int64_t block_size = 16, draft_layers = 5;
  int repeats = 3, threads = 0;
  app.add_option("--only", only, "run one case: demo | large");
  app.add_option("--block-size", block_size)->capture_default_str();
  app.add_option("--draft-layers", draft_layers)->capture_default_str();
  app.add_option("--repeats", repeats)->capture_default_str();
  app.add_option("--threads", threads, "0: all usable cores")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const int used_threads = configure_threads(threads);
  const double peak = bench::matmul_peak_flops(at::kFloat);
  std::printf("bench_dflash: fp32 matmul peak %.1f GFLOP/s, %d threads\n", peak / 1e9,
              used_threads);
  const bench::ModelShape demo = bench::demo_target_shape();
  bench::ModelShape large;  // hidden 1024, 8 layers, 16/8 heads, intermediate 2816, vocab 32000
  // Anchors: 64 blocks per 256-token row (demo), 256 per 1024-token row (large): a quarter of
  // the positions start a block, as 512 anchors in a 2048-token sequence would.
  const Case cases[] = {{"demo", demo, 256, 8, 64}, {"large", large, 1024, 2, 256}};
  for (const Case& c : cases)
    if (only.empty() || only == c.name) run_case(c, block_size, draft_layers, repeats, peak);
  return 0;
}
