// ATen operations per training step and per speculative-decode step, and what they would cost
// on a GPU: every dispatcher call that one step of each objective makes online (the frozen model
// in the loop), split into the forward, the backward and the AdamW update; the kernels a GPU
// would launch for them, their FLOPs and bytes, the bytes copied between host and device, and a
// roofline estimate of the step's time on an H100 (bench/op_trace.h says how each is counted).
// EAGLE-3's TTT and DFlash's blocks run with each attention kernel (attention.kernel: fused, the
// default, and blockwise).
//
// Shapes: by default the demo target's (hidden 256, 8 layers, 8/4 heads, vocab 4096, random
// weights), one row of 2,048 tokens of one document; EAGLE-3 TTT 7, draft vocab 2048; DFlash 1
// layer, blocks of 16, 128 anchors; distillation with the same model as teacher and student, DPO
// with two documents per row. The call and kernel counts depend on the structure (layers, unroll
// steps, tiles, documents), not on the widths; FLOPs, bytes and the estimate depend on both.
#include <ATen/ATen.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "bench_common.h"
#include "bench_model.h"
#include "bench_objective.h"
#include "op_trace.h"
#include "tandem/core/dtype.h"
#include "tandem/core/threads.h"
#include "tandem/eval/eagle3_decode.h"
#include "tandem/models/frozen.h"
#include "tandem/objectives/dflash.h"
#include "tandem/objectives/distill.h"
#include "tandem/objectives/dpo.h"
#include "tandem/objectives/eagle3.h"
#include "tandem/objectives/sft.h"
#include "tandem/train/optimizer.h"

namespace {

using namespace tandem;

struct Settings {
  c10::ScalarType dtype = at::kFloat;
  bench::GpuPeaks peaks;
  int top = 0;  // print each part's N most frequent kernels
};
Settings g_settings;

bench::OpTrace traced(const std::function<void()>& work) {
  bench::OpTrace trace = bench::trace_ops(work, g_settings.peaks, g_settings.top > 0);
  if (g_settings.top > 0)
    std::printf("    top kernels: %s\n", bench::top_kernels(trace, g_settings.top).c_str());
  return trace;
}

void print_row(const char* objective, const char* kernel, const bench::OpTrace& forward,
               const bench::OpTrace& backward, const bench::OpTrace& update) {
  bench::OpTrace step = forward;
  step += backward;
  step += update;
  const bench::GpuPeaks& peaks = g_settings.peaks;
  std::printf(
      "  %-7s %-9s | calls %6ld + %6ld + %5ld = %6ld | kernels %5ld + %5ld + %4ld = %5ld | "
      "%8.2f GFLOP, %7.3f GB, to device %7.3f MB, to host %6.3f MB | GPU estimate %7.2f ms "
      "(device %.2f, issue %.2f) | CPU %.3f + %.3f + %.3f s\n",
      objective, kernel, forward.calls, backward.calls, update.calls, step.calls, forward.kernels,
      backward.kernels, update.kernels, step.kernels, step.flops / 1e9, step.bytes / 1e9,
      step.transfers.to_device_bytes / 1e6, step.transfers.to_host_bytes / 1e6,
      step.estimate(peaks) * 1e3, step.device_seconds * 1e3,
      static_cast<double>(step.kernels) * peaks.dispatch * 1e3, forward.cpu_seconds,
      backward.cpu_seconds, update.cpu_seconds);
  std::fflush(stdout);
}

// One step traced in three parts: forward (loss), backward, optimizer.
template <typename Loss>
void measure(const char* objective, const char* kernel, Loss loss, MixedPrecisionAdamW& optimizer) {
  loss().backward();  // warm-up
  optimizer.step(1e-4);
  optimizer.zero_grad();
  at::Tensor value;
  const bench::OpTrace forward = traced([&] { value = loss(); });
  const bench::OpTrace backward = traced([&] { value.backward(); });
  const bench::OpTrace update = traced([&] {
    optimizer.step(1e-4);
    optimizer.zero_grad();
  });
  print_row(objective, kernel, forward, backward, update);
}

// An objective's whole step (compute() and its backward) on `batch`.
void measure_objective(const char* name, Objective& objective, const PackedBatch& batch) {
  MixedPrecisionAdamW optimizer(trainable_parameters(objective.trainable()), {});
  const StepTotals totals = objective.count(batch);
  measure(
      name, "-", [&] { return objective.compute(batch, totals).loss; }, optimizer);
}

struct Drafts {
  int64_t ttt = 7, draft_vocab = 2048;                   // EAGLE-3
  int64_t dflash_layers = 1, block = 16, anchors = 128;  // DFlash
};
Drafts g_drafts;

void eagle3(const std::string& target_dir, const PackedBatch& batch, AttentionKernel kernel,
            const char* name) {
  Eagle3Options options;
  options.target_path = target_dir;
  options.target_dtype = options.draft_dtype = g_settings.dtype;
  options.ttt_length = g_drafts.ttt;
  options.draft_vocab_size = g_drafts.draft_vocab;
  options.run.attention.kernel = kernel;
  Eagle3Objective objective(options);
  MixedPrecisionAdamW optimizer(trainable_parameters(*objective.draft()), {});
  const StepTotals totals = objective.count(batch);
  measure(
      "eagle3", name,
      [&] { return objective.unroll(batch, objective.features(batch), totals).loss; }, optimizer);
}

void dflash(const std::string& target_dir, const PackedBatch& batch, int64_t vocab,
            AttentionKernel kernel, const char* name) {
  DFlashOptions options;
  options.run.attention.kernel = kernel;
  options.target_path = target_dir;
  options.target_dtype = options.draft_dtype = g_settings.dtype;
  options.block_size = g_drafts.block;
  options.dims.num_layers = g_drafts.dflash_layers;
  options.max_anchors = g_drafts.anchors;
  options.mask_token_id = vocab - 1;
  DFlashObjective objective(options);
  MixedPrecisionAdamW optimizer(trainable_parameters(*objective.draft()), {});
  const DFlashAnchors anchors = objective.anchors(batch);
  const StepTotals totals = objective.totals(batch, anchors.blocks);
  measure(
      "dflash", name,
      [&] { return objective.run(batch, objective.features(batch), anchors.blocks, totals).loss; },
      optimizer);
}

void sft(const std::string& target_dir, const PackedBatch& batch) {
  SftOptions options;
  options.model_path = target_dir;
  options.dtype = g_settings.dtype;
  SftObjective objective(options);
  measure_objective("sft", objective, batch);
}

// The same model as student and frozen teacher.
void distill(const std::string& target_dir, const PackedBatch& batch) {
  DistillOptions options;
  options.student.model_path = options.teacher_path = target_dir;
  options.student.dtype = options.teacher_dtype = g_settings.dtype;
  DistillObjective objective(options);
  measure_objective("distill", objective, batch);
}

// The same model as policy and frozen reference; each row one chosen/rejected pair.
void dpo(const std::string& target_dir, const PackedBatch& pairs) {
  DpoOptions options;
  options.policy.model_path = options.reference_path = target_dir;
  options.policy.dtype = options.reference_dtype = g_settings.dtype;
  DpoObjective objective(options);
  measure_objective("dpo", objective, pairs);
}

// EAGLE-3 speculative decoding with the (untrained) draft: one verification step, each of which
// proposes 3 tokens, verifies them in one target forward and rolls the caches back; averaged
// over the steps of a 64-token decode of a 256-token prompt.
void speculative_step(const std::string& target_dir, int64_t vocab) {
  Eagle3Options options;
  options.target_path = target_dir;
  options.target_dtype = options.draft_dtype = g_settings.dtype;
  options.ttt_length = g_drafts.ttt;
  options.draft_vocab_size = g_drafts.draft_vocab;
  Eagle3Objective objective(options);
  const FrozenModel target = FrozenModel::load(target_dir, g_settings.dtype, at::Device(at::kCPU));
  std::vector<int64_t> prompt(256);
  for (size_t t = 0; t < prompt.size(); ++t) prompt[t] = static_cast<int64_t>((t * 7919) % vocab);
  DecodeOptions decode;
  decode.max_new_tokens = 64;
  at::NoGradGuard no_grad;
  eagle3_decode(target, *objective.draft(), prompt, 3, decode);  // warm-up
  SpeculativeOutput output;
  const bench::OpTrace trace =
      traced([&] { output = eagle3_decode(target, *objective.draft(), prompt, 3, decode); });
  const double steps = static_cast<double>(std::max<size_t>(1, output.accepted.size()));
  std::printf(
      "  eagle3  decode    | per verification step (%zu steps for %zu tokens): calls %.0f, "
      "kernels %.0f, %.3f GFLOP, %.4f GB, to device %.4f MB, to host %.4f MB | GPU estimate "
      "%.3f ms (device %.3f, issue %.3f) | CPU %.4f s\n",
      output.accepted.size(), output.tokens.size(), trace.calls / steps, trace.kernels / steps,
      trace.flops / steps / 1e9, trace.bytes / steps / 1e9,
      trace.transfers.to_device_bytes / steps / 1e6, trace.transfers.to_host_bytes / steps / 1e6,
      trace.estimate(g_settings.peaks) / steps * 1e3, trace.device_seconds / steps * 1e3,
      static_cast<double>(trace.kernels) * g_settings.peaks.dispatch / steps * 1e3,
      trace.cpu_seconds / steps);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "bench_step_ops: ATen calls, GPU kernels, FLOPs, bytes and an H100 roofline estimate per "
      "training step of each objective and per speculative-decode step"};
  int64_t seq = 2048;
  int threads = 0;
  std::string dtype = "fp32";
  std::vector<std::string> only = {"eagle3", "dflash", "sft", "distill", "dpo", "decode"};
  std::vector<std::string> kernels = {"fused", "blockwise"};
  bench::ModelShape shape = bench::demo_target_shape();
  bench::add_shape_options(app, shape);
  app.add_option("--seq", seq, "tokens in the step's one row")->capture_default_str();
  app.add_option("--dtype", dtype, "fp32 | bf16: every model's dtype (a GPU run's default: bf16)")
      ->capture_default_str();
  app.add_option("--steps", only, "which steps to trace")->delimiter(',')->capture_default_str();
  app.add_option("--kernels", kernels, "attention kernels for EAGLE-3 and DFlash")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--ttt", g_drafts.ttt, "EAGLE-3 unroll steps")->capture_default_str();
  app.add_option("--draft-vocab", g_drafts.draft_vocab, "EAGLE-3 draft vocabulary")
      ->capture_default_str();
  app.add_option("--dflash-layers", g_drafts.dflash_layers)->capture_default_str();
  app.add_option("--anchors", g_drafts.anchors, "DFlash blocks per row")->capture_default_str();
  app.add_option("--block", g_drafts.block, "DFlash block size")->capture_default_str();
  app.add_option("--peak-tflops", g_settings.peaks.matmul16_flops, "estimate: bf16 matmul FLOP/s")
      ->capture_default_str();
  app.add_option("--fp32-tflops", g_settings.peaks.matmul32_flops, "estimate: fp32 matmul FLOP/s")
      ->capture_default_str();
  app.add_option("--bandwidth", g_settings.peaks.bandwidth, "estimate: memory bytes/s")
      ->capture_default_str();
  app.add_option("--threads", threads, "0: all usable cores")->capture_default_str();
  app.add_option("--top", g_settings.top, "print each part's N most frequent kernels")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  g_settings.dtype = parse_compute_dtype(dtype, "--dtype");
  const int used_threads = configure_threads(threads);
  auto wanted = [&](const std::string& name) {
    return std::find(only.begin(), only.end(), name) != only.end();
  };
  const std::string scratch =
      (std::filesystem::temp_directory_path() / ("tandem-bench-ops-" + std::to_string(::getpid())))
          .string();
  const std::string target_dir = bench::write_random_llama(shape, scratch);
  const PackedBatch batch = bench::random_batch(shape.vocab, 1, seq, 1);
  std::printf(
      "bench_step_ops: target hidden %ld, %ld layers, %ld/%ld heads, intermediate %ld, vocab %ld "
      "(random weights); one row of %ld tokens; %s; %d threads. Calls: ATen dispatcher calls, "
      "nested ones included (forward + backward + AdamW = step); kernels: what a GPU would "
      "launch; estimate: roofline at %.0f TFLOP/s (16-bit) / %.0f TFLOP/s (fp32), %.1f TB/s.\n",
      shape.hidden, shape.layers, shape.heads, shape.kv_heads, shape.intermediate, shape.vocab, seq,
      dtype.c_str(), used_threads, g_settings.peaks.matmul16_flops / 1e12,
      g_settings.peaks.matmul32_flops / 1e12, g_settings.peaks.bandwidth / 1e12);
  const std::vector<std::pair<AttentionKernel, const char*>> attention = {
      {AttentionKernel::Fused, "fused"}, {AttentionKernel::Blockwise, "blockwise"}};
  for (const auto& [kernel, name] : attention) {
    if (std::find(kernels.begin(), kernels.end(), name) == kernels.end()) continue;
    if (wanted("eagle3")) eagle3(target_dir, batch, kernel, name);
    if (wanted("dflash")) dflash(target_dir, batch, shape.vocab, kernel, name);
  }
  if (wanted("sft")) sft(target_dir, batch);
  if (wanted("distill")) distill(target_dir, batch);
  if (wanted("dpo")) dpo(target_dir, bench::random_batch(shape.vocab, 1, seq, 2));
  if (wanted("decode")) speculative_step(target_dir, shape.vocab);
  std::filesystem::remove_all(scratch);
  return 0;
}
