// EAGLE-3 training step throughput, online (the frozen target runs in the loop) and offline
// (target features precomputed, as `tandem capture` provides them), on two target shapes: the
// demo target (hidden 256, 8 layers, vocab 4096) and a larger one (hidden 1024, vocab 32000).
//
// Model FLOPs per step (fp32; the draft term is eagle3_draft_forward_flops in objectives/eagle3.h,
// which the trainer's MFU uses too):
//   target forward (online only)  = bench_model.h's forward FLOPs without the lm_head term
//   teacher                        = 2 * tokens * V * H   (full-vocab logits for argmax + probs)
//   draft, per TTT step, forward   = 2 * tokens * (2H * (q + 2 kv widths) + q width * H
//                                    + 3 * H * I + H * D) + 2 * T^2 * q width (causal attention)
//                                    + fc (step 0 only) 2 * tokens * 3H * H
//   draft forward + backward       = 3 x that (the two backward matmuls per forward matmul)
// MFU = model FLOPs / time / the fp32 matmul peak measured in the same run.
// Target weights are random (speed does not depend on them); pass --target DIR for a real one.
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
#include "tandem/data/packing.h"
#include "tandem/objectives/eagle3.h"
#include "tandem/objectives/sft.h"
#include "tandem/train/optimizer.h"

namespace {

using namespace tandem;

struct Case {
  const char* name;
  bench::ModelShape target;
  int64_t draft_vocab, seq, rows;
};

void run_case(const Case& c, const std::string& given_target, int64_t ttt_length, int repeats,
              double peak) {
  const std::string scratch = (std::filesystem::temp_directory_path() /
                               ("tandem-bench-eagle3-" + std::to_string(::getpid())))
                                  .string();
  const std::string target_dir =
      given_target.empty() ? bench::write_random_llama(c.target, scratch) : given_target;
  Eagle3Options options;
  options.target_path = target_dir;
  options.ttt_length = ttt_length;
  options.draft_vocab_size = c.draft_vocab;
  Eagle3Objective objective(options);
  MixedPrecisionAdamW optimizer(trainable_parameters(*objective.draft()), {});
  const DecoderConfig target = DecoderConfig::from_dir(target_dir);

  std::vector<TokenizedDocument> documents;
  for (int64_t r = 0; r < c.rows; ++r) {
    TokenizedDocument document{std::vector<int32_t>(c.seq), std::vector<uint8_t>(c.seq, 1),
                               "bench"};
    for (int64_t t = 0; t < c.seq; ++t)
      document.ids[t] = static_cast<int32_t>((t * 7919 + r * 104729) % target.vocab_size);
    documents.push_back(document);
  }
  PackingOptions packing;
  packing.seq_len = c.seq;
  const PackedBatch batch = pack_documents(documents, packing);
  const StepTotals totals = objective.count(batch);
  const TargetFeatures captured = objective.features(batch);

  auto draft_step = [&](const TargetFeatures& features) {
    objective.unroll(batch, features, totals).loss.backward();
    optimizer.step(1e-4);
    optimizer.zero_grad();
  };
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
  const double teacher_flops = 2 * tokens * target.vocab_size * target.hidden_size;
  const double draft_flops =
      3 * eagle3_draft_forward_flops(objective.draft()->config(), tokens,
                                     static_cast<double>(c.rows) * c.seq * c.seq, ttt_length);
  const double online_flops = target_flops + teacher_flops + draft_flops;
  const double offline_flops = teacher_flops + draft_flops;
  std::printf(
      "bench_eagle3 [%s]: target hidden %ld, layers %ld, heads %ld/%ld, intermediate %ld, "
      "vocab %ld; draft vocab %ld, TTT %ld; %ld x %ld tokens, fp32\n",
      c.name, target.hidden_size, target.num_hidden_layers, target.num_attention_heads,
      target.num_key_value_heads, target.intermediate_size, target.vocab_size, c.draft_vocab,
      ttt_length, c.rows, c.seq);
  std::printf(
      "  online : step %.3f s, %.0f tokens/s, MFU %.1f%% | target forward %.3f s = %.0f%% of "
      "the step, draft (teacher + unroll + backward + AdamW) %.0f%%\n",
      online_seconds, tokens / online_seconds, 100 * online_flops / online_seconds / peak,
      target_seconds, 100 * target_seconds / online_seconds,
      100 * (online_seconds - target_seconds) / online_seconds);
  std::printf("  offline: step %.3f s, %.0f tokens/s, MFU %.1f%%\n", offline_seconds,
              tokens / offline_seconds, 100 * offline_flops / offline_seconds / peak);
  std::printf("  peak RSS during the steps %.0f MiB (process peak %.0f MiB)\n", rss,
              bench::peak_rss_mib());
  if (given_target.empty()) std::filesystem::remove_all(scratch);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_eagle3: EAGLE-3 training step, online and offline: tokens/s, MFU, memory"};
  std::string target, only;
  int64_t ttt_length = 7;
  int repeats = 3, threads = 0;
  app.add_option("--target", target,
                 "a real target checkpoint for the demo case (default: random weights)");
  app.add_option("--only", only, "run one case: demo | large");
  app.add_option("--ttt", ttt_length)->capture_default_str();
  app.add_option("--repeats", repeats)->capture_default_str();
  app.add_option("--threads", threads, "0: all usable cores")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const int used_threads = configure_threads(threads);
  const double peak = bench::matmul_peak_flops(at::kFloat);
  std::printf("bench_eagle3: fp32 matmul peak %.1f GFLOP/s, %d threads\n", peak / 1e9,
              used_threads);
  const bench::ModelShape demo = bench::demo_target_shape();
  bench::ModelShape large;  // hidden 1024, 8 layers, 16/8 heads, intermediate 2816, vocab 32000
  const Case cases[] = {{"demo", demo, 2048, 256, 8}, {"large", large, 8192, 1024, 2}};
  for (const Case& c : cases)
    if (only.empty() || only == c.name)
      run_case(c, std::string(c.name) == "demo" ? target : "", ttt_length, repeats, peak);
  return 0;
}
