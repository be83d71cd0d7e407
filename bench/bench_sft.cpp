// SFT training step throughput and the memory of the vocabulary-sized loss.
//
// 1. A full training step (forward, backward, AdamW) of a Llama-style model at sequence 1024:
//    tokens/s and model FLOP utilisation against the fp32 matmul peak measured in the same run.
//    Model FLOPs per step = 3 x forward FLOPs (forward + backward's two matmuls per matmul).
// 2. Peak memory of the LM-head loss alone (forward + backward) for N tokens x vocab V, fused
//    (chunked, recomputed in backward) vs unfused (full fp32 logits), measured as the rise of
//    the kernel's peak-RSS mark (VmHWM, reset before each measurement).
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "bench_common.h"
#include "bench_model.h"
#include "tandem/core/threads.h"
#include "tandem/data/packing.h"
#include "tandem/models/decoder.h"
#include "tandem/models/frozen.h"
#include "tandem/objectives/fused_vocab_loss.h"
#include "tandem/objectives/sft.h"
#include "tandem/train/optimizer.h"

namespace {

using namespace tandem;

// Peak RSS rise (MiB) while running the loss forward + backward once.
double loss_peak_mib(bool fused, int64_t tokens, int64_t hidden_size, int64_t vocab) {
  at::manual_seed(0);
  at::Tensor hidden = at::randn({tokens, hidden_size}).requires_grad_();
  at::Tensor head = (at::randn({vocab, hidden_size}) * 0.02).requires_grad_();
  const at::Tensor targets = at::randint(vocab, {tokens}, at::kLong);
  const at::Tensor weights = at::full({tokens}, 1.0 / tokens);
  bench::reset_peak_rss();
  const double before = bench::current_rss_mib();
  at::Tensor loss = fused ? fused_linear_cross_entropy(hidden, head, targets, weights, {})
                          : unfused_linear_cross_entropy(hidden, head, targets, weights);
  loss.backward();
  return bench::peak_rss_mark_mib() - before;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_sft: SFT step tokens/s and MFU; fused vs unfused loss memory"};
  bench::ModelShape shape;
  shape.hidden = 512, shape.heads = 8, shape.kv_heads = 4, shape.intermediate = 1536;
  int64_t seq = 1024, loss_tokens = 4096;
  int repeats = 3, threads = 0;
  bench::add_shape_options(app, shape);
  app.add_option("--seq", seq)->capture_default_str();
  app.add_option("--loss-tokens", loss_tokens, "tokens for the loss memory comparison")
      ->capture_default_str();
  app.add_option("--repeats", repeats)->capture_default_str();
  app.add_option("--threads", threads, "0: all usable cores")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const int used_threads = configure_threads(threads);

  // Loss memory first, before the model's allocations raise the baseline.
  const double unfused_mib = loss_peak_mib(false, loss_tokens, shape.hidden, shape.vocab);
  const double fused_mib = loss_peak_mib(true, loss_tokens, shape.hidden, shape.vocab);
  std::printf(
      "bench_sft: loss head %ld tokens x vocab %ld x hidden %ld (fp32), forward+backward: "
      "unfused peak +%.0f MiB, fused peak +%.0f MiB (fused/unfused = %.3f)\n",
      loss_tokens, shape.vocab, shape.hidden, unfused_mib, fused_mib, fused_mib / unfused_mib);

  const DecoderConfig config = bench::llama_config(shape);
  CausalLM model(config, at::TensorOptions().dtype(at::kFloat));
  init_normal_(*model, 0.02, 0);
  for (auto& p : model->parameters()) p.set_requires_grad(true);
  MixedPrecisionAdamW optimizer(trainable_parameters(*model), {});
  std::vector<int32_t> ids(seq);
  for (int64_t t = 0; t < seq; ++t) ids[t] = static_cast<int32_t>((t * 7919) % shape.vocab);
  PackingOptions packing;
  packing.seq_len = seq;
  const PackedBatch batch = pack_documents({{ids, std::vector<uint8_t>(seq, 1), "bench"}}, packing);
  const at::Tensor targets_mask = next_token_targets(batch);
  const int64_t targets = targets_mask.sum().item<int64_t>();

  auto step = [&] {
    const at::Tensor hidden_states = model->forward_hidden(batch.input_ids, batch.layout());
    const at::Tensor inputs = hidden_states.narrow(1, 0, seq - 1).index({targets_mask});
    const at::Tensor labels = batch.input_ids.narrow(1, 1, seq - 1).index({targets_mask});
    at::Tensor loss = fused_linear_cross_entropy(inputs, model->lm_head_weight(), labels,
                                                 at::full({targets}, 1.0 / targets), {});
    loss.backward();
    optimizer.step(1e-4);
    optimizer.zero_grad();
  };
  const double peak = bench::matmul_peak_flops(at::kFloat);
  const double seconds = bench::best_seconds(step, repeats);
  const double flops = 3.0 * bench::forward_flops(config, seq);
  std::printf(
      "bench_sft: hidden %ld, layers %ld, heads %ld/%ld, intermediate %ld, vocab %ld, "
      "seq %ld, fp32, %d threads\n",
      shape.hidden, shape.layers, shape.heads, shape.kv_heads, shape.intermediate, shape.vocab, seq,
      used_threads);
  std::printf(
      "  matmul peak %.1f GFLOP/s | train step %.3f s, %.0f tokens/s, %.1f GFLOP/s, MFU %.1f%% "
      "| peak RSS %.0f MiB\n",
      peak / 1e9, seconds, seq / seconds, flops / seconds / 1e9, 100.0 * flops / seconds / peak,
      bench::peak_rss_mib());
  return 0;
}
