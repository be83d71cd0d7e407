// ATen operations per training step: every dispatcher call (nested calls included) that one
// EAGLE-3, one DFlash and one SFT step make, online (the frozen target in the loop), split into the
// forward (target features, teacher, draft, loss), the backward and the AdamW update, with each
// attention kernel (attention.kernel: fused, the default, and blockwise) for EAGLE-3's TTT and
// DFlash's blocks; and per verification step of EAGLE-3 speculative decoding. On a GPU most of
// these calls launch a kernel of their own, so the count bounds how launch-bound a step is: at ~5
// us per launch, 10,000 calls cost ~50 ms whatever the FLOPs. The CPU step time beside it shows
// what the count costs here. Beside the count of every call, the calls that launch a kernel
// (views, allocations, composite wrappers and autograd bookkeeping left out: launches_no_kernel).
//
// Shapes: the demo target's (hidden 256, 8 layers, 8/4 heads, vocab 4096, random weights), one
// row of 2,048 tokens of one document, fp32; EAGLE-3 TTT 7, draft vocab 2048; DFlash 1 layer,
// blocks of 16, 128 anchors. The counts depend on the structure (layers, unroll steps, tiles,
// documents), not on the widths.
#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "bench_common.h"
#include "bench_model.h"
#include "bench_objective.h"
#include "tandem/core/threads.h"
#include "tandem/eval/eagle3_decode.h"
#include "tandem/models/frozen.h"
#include "tandem/objectives/dflash.h"
#include "tandem/objectives/eagle3.h"
#include "tandem/objectives/sft.h"
#include "tandem/train/optimizer.h"

namespace {

using namespace tandem;

std::atomic<int64_t> g_calls{0};
std::atomic<int64_t> g_compute_calls{0};

// Calls that launch no kernel of their own: views and metadata, allocations without a fill,
// composite operations that only call others (counted there), autograd's bookkeeping. The rest
// estimates the kernels a step launches on a GPU.
bool launches_no_kernel(const char* name) {
  static const std::set<std::string> kNoKernel = {"aten::as_strided",
                                                  "aten::slice",
                                                  "aten::narrow",
                                                  "aten::view",
                                                  "aten::transpose",
                                                  "aten::reshape",
                                                  "aten::_reshape_alias",
                                                  "aten::_unsafe_view",
                                                  "aten::resolve_conj",
                                                  "aten::resolve_neg",
                                                  "aten::t",
                                                  "aten::expand",
                                                  "aten::unsqueeze",
                                                  "aten::squeeze",
                                                  "aten::select",
                                                  "aten::permute",
                                                  "aten::detach",
                                                  "detach",
                                                  "aten::alias",
                                                  "aten::result_type",
                                                  "aten::empty",
                                                  "aten::empty_strided",
                                                  "aten::empty_like",
                                                  "aten::linear",
                                                  "aten::matmul",
                                                  "aten::to",
                                                  "aten::_to_copy",
                                                  "aten::zeros",
                                                  "aten::zeros_like",
                                                  "aten::ones_like",
                                                  "aten::contiguous",
                                                  "aten::unbind",
                                                  "aten::split",
                                                  "aten::chunk",
                                                  "aten::expand_as",
                                                  "aten::view_as",
                                                  "aten::flatten",
                                                  "aten::lift_fresh",
                                                  "aten::is_nonzero",
                                                  "aten::item",
                                                  "aten::_local_scalar_dense",
                                                  "aten::size",
                                                  "aten::stride",
                                                  "aten::numel"};
  const std::string text(name);
  return kNoKernel.count(text) > 0 || text.rfind("autograd::", 0) == 0 ||
         text.find("Backward") != std::string::npos || text.rfind("torch::autograd", 0) == 0;
}
int g_top = 0;  // --top: the most frequent operations of each part, printed
std::mutex g_names_mutex;
std::map<std::string, int64_t> g_names;

// Dispatcher calls made by `work`, and its wall time.
struct Counted {
  int64_t calls = 0;
  int64_t compute_calls = 0;  // of those, the ones that launch a kernel (launches_no_kernel)
  double seconds = 0;
};

Counted count_calls(const std::function<void()>& work) {
  const at::CallbackHandle handle = at::addGlobalCallback(
      at::RecordFunctionCallback([](const at::RecordFunction& fn)
                                     -> std::unique_ptr<at::ObserverContext> {
        g_calls.fetch_add(1, std::memory_order_relaxed);
        if (!launches_no_kernel(fn.name())) g_compute_calls.fetch_add(1, std::memory_order_relaxed);
        if (g_top > 0) {
          std::lock_guard<std::mutex> lock(g_names_mutex);
          ++g_names[fn.name()];
        }
        return nullptr;
      }).scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  g_calls = 0;
  g_compute_calls = 0;
  g_names.clear();
  const auto start = std::chrono::steady_clock::now();
  work();
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  at::removeCallback(handle);
  if (g_top > 0) {
    std::vector<std::pair<int64_t, std::string>> ranked;
    for (const auto& [name, calls] : g_names) ranked.emplace_back(calls, name);
    std::sort(ranked.rbegin(), ranked.rend());
    std::string line = "    top:";
    for (size_t i = 0; i < ranked.size() && i < static_cast<size_t>(g_top); ++i)
      line += " " + ranked[i].second + " " + std::to_string(ranked[i].first) + ",";
    std::printf("%s\n", line.c_str());
  }
  return {g_calls.load(), g_compute_calls.load(), elapsed.count()};
}

void print_row(const char* objective, const char* kernel, const Counted& forward,
               const Counted& backward, const Counted& optimizer) {
  const int64_t total = forward.calls + backward.calls + optimizer.calls;
  const int64_t compute = forward.compute_calls + backward.compute_calls + optimizer.compute_calls;
  std::printf(
      "  %-7s %-9s | calls: forward %7ld, backward %7ld, AdamW %6ld, step %7ld (kernel-launching "
      "%6ld) | CPU time: forward %.3f s, backward %.3f s, AdamW %.3f s\n",
      objective, kernel, forward.calls, backward.calls, optimizer.calls, total, compute,
      forward.seconds, backward.seconds, optimizer.seconds);
}

// One step counted in three parts: forward (loss), backward, optimizer.
template <typename Loss>
void measure(const char* objective, const char* kernel, Loss loss, MixedPrecisionAdamW& optimizer) {
  loss().backward();  // warm-up
  optimizer.step(1e-4);
  optimizer.zero_grad();
  at::Tensor value;
  const Counted forward = count_calls([&] { value = loss(); });
  const Counted backward = count_calls([&] { value.backward(); });
  const Counted update = count_calls([&] {
    optimizer.step(1e-4);
    optimizer.zero_grad();
  });
  print_row(objective, kernel, forward, backward, update);
}

void eagle3(const std::string& target_dir, const PackedBatch& batch, AttentionKernel kernel,
            const char* name) {
  Eagle3Options options;
  options.target_path = target_dir;
  options.ttt_length = 7;
  options.draft_vocab_size = 2048;
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
  options.block_size = 16;
  options.dims.num_layers = 1;
  options.max_anchors = 128;
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
  SftObjective objective(options);
  MixedPrecisionAdamW optimizer(trainable_parameters(objective.trainable()), {});
  const StepTotals totals = objective.count(batch);
  measure(
      "sft", "-", [&] { return objective.compute(batch, totals).loss; }, optimizer);
}

// EAGLE-3 speculative decoding with the (untrained) draft: the calls of one verification step,
// each of which proposes 3 tokens, verifies them in one target forward and rolls the caches
// back; averaged over the steps of a 64-token decode of a 256-token prompt.
void speculative_step(const std::string& target_dir, int64_t vocab) {
  Eagle3Options options;
  options.target_path = target_dir;
  options.ttt_length = 7;
  options.draft_vocab_size = 2048;
  Eagle3Objective objective(options);
  const FrozenModel target = FrozenModel::load(target_dir, at::kFloat, at::Device(at::kCPU));
  std::vector<int64_t> prompt(256);
  for (size_t t = 0; t < prompt.size(); ++t) prompt[t] = static_cast<int64_t>((t * 7919) % vocab);
  DecodeOptions decode;
  decode.max_new_tokens = 64;
  at::NoGradGuard no_grad;
  eagle3_decode(target, *objective.draft(), prompt, 3, decode);  // warm-up
  SpeculativeOutput output;
  const Counted counted =
      count_calls([&] { output = eagle3_decode(target, *objective.draft(), prompt, 3, decode); });
  const double steps = static_cast<double>(std::max<size_t>(1, output.accepted.size()));
  std::printf(
      "  eagle3  decode    | calls per verification step %7.0f (kernel-launching %6.0f), %zu "
      "steps for %zu tokens | CPU time per step %.4f s\n",
      counted.calls / steps, counted.compute_calls / steps, output.accepted.size(),
      output.tokens.size(), counted.seconds / steps);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_step_ops: ATen calls per EAGLE-3 and DFlash training step, per kernel"};
  int64_t seq = 2048;
  int threads = 0;
  app.add_option("--seq", seq, "tokens in the step's one row")->capture_default_str();
  app.add_option("--threads", threads, "0: all usable cores")->capture_default_str();
  app.add_option("--top", g_top, "print the N most frequent operations of each part")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const int used_threads = configure_threads(threads);
  const bench::ModelShape shape = bench::demo_target_shape();
  const std::string scratch =
      (std::filesystem::temp_directory_path() / ("tandem-bench-ops-" + std::to_string(::getpid())))
          .string();
  const std::string target_dir = bench::write_random_llama(shape, scratch);
  const PackedBatch batch = bench::random_batch(shape.vocab, 1, seq, 1);
  std::printf(
      "bench_step_ops: target hidden %ld, %ld layers, vocab %ld (random weights); one row of %ld "
      "tokens; fp32; %d threads. Calls = ATen dispatcher calls, nested ones included.\n",
      shape.hidden, shape.layers, shape.vocab, seq, used_threads);
  eagle3(target_dir, batch, AttentionKernel::Fused, "fused");
  eagle3(target_dir, batch, AttentionKernel::Blockwise, "blockwise");
  dflash(target_dir, batch, shape.vocab, AttentionKernel::Fused, "fused");
  dflash(target_dir, batch, shape.vocab, AttentionKernel::Blockwise, "blockwise");
  sft(target_dir, batch);
  speculative_step(target_dir, shape.vocab);
  std::filesystem::remove_all(scratch);
  return 0;
}
