// DPO through the policy's and the frozen reference's LM heads, fused (token log-probs chunked
// over tokens, recomputed in backward) vs unfused (full fp32 logits of both):
// 1. the loss alone: peak-memory rise (kernel VmHWM, reset before each measurement) and time of
//    forward + backward, for P pairs of documents over N tokens x vocab V (fused: the pair-fused
//    loss of objectives/dpo_loss.h, the reference's sums chunked over tokens);
// 2. a whole DPO step of the objective (policy forward + backward, reference forward) on a random
//    Llama-style policy/reference checkpoint: the same, with tokens/s and model FLOP utilisation
//    against the fp32 matmul peak measured in the same run (model FLOPs = 3 x policy forward +
//    1 x reference forward).
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>

#include "bench_common.h"
#include "bench_model.h"
#include "bench_objective.h"
#include "tandem/core/threads.h"
#include "tandem/data/packing.h"
#include "tandem/objectives/dpo.h"
#include "tandem/objectives/dpo_loss.h"
#include "tandem/objectives/fused_vocab_loss.h"
#include "tandem/objectives/policy_loss.h"

namespace {

using namespace tandem;

using Measure = bench::PeakAndTime;

Measure measure(bool fused, int64_t tokens, int64_t hidden, int64_t vocab, int64_t pairs,
                const FusedLossOptions& options) {
  at::manual_seed(0);
  at::Tensor policy = at::randn({tokens, hidden}).requires_grad_();
  at::Tensor head = (at::randn({vocab, hidden}) * 0.02).requires_grad_();
  const at::Tensor reference = at::randn({tokens, hidden});
  const at::Tensor reference_head = at::randn({vocab, hidden}) * 0.02;
  const at::Tensor labels = at::randint(vocab, {tokens}, at::kLong);
  // Documents of equal length, alternately chosen and rejected.
  const at::Tensor document = at::div(at::arange(tokens, at::kLong), tokens / (2 * pairs), "floor");
  const at::Tensor even = at::arange(0, 2 * pairs, 2), odd = at::arange(1, 2 * pairs, 2);
  const at::Tensor lengths = at::full({2 * pairs}, tokens / (2 * pairs), at::kLong);
  auto run = [&] {
    at::Tensor reference_sums;
    {
      at::NoGradGuard no_grad;
      reference_sums =
          at::zeros({2 * pairs})
              .index_add(0, document,
                         fused ? fused_token_logprobs(reference, reference_head, labels, options)
                               : unfused_token_logprobs(reference, reference_head, labels));
    }
    at::Tensor loss;
    if (fused) {  // what the objective runs: the pair-fused loss (objectives/dpo_loss.h)
      loss = fused_dpo_loss({policy, head, labels, document, even, odd, reference_sums, lengths},
                            DpoLossType::Sigmoid, 0.1, 1.0 / pairs, options);
    } else {
      const at::Tensor policy_sums =
          at::zeros({2 * pairs})
              .index_add(0, document, unfused_token_logprobs(policy, head, labels));
      loss = dpo_pair_losses(
                 {policy_sums.index({even}), policy_sums.index({odd}), reference_sums.index({even}),
                  reference_sums.index({odd}), lengths.index({even}), lengths.index({odd})},
                 DpoLossType::Sigmoid, 0.1)
                 .losses.mean();
    }
    loss.backward();
    policy.mutable_grad().reset();
    head.mutable_grad().reset();
  };
  return bench::measure_peak_and_time(run, 2);
}

// A whole DPO micro-batch step: `rows` rows of `seq_len` tokens, two documents (one pair) per row.
Measure measure_step(int64_t chunk_tokens, const std::string& checkpoint, int64_t rows,
                     int64_t seq_len) {
  DpoOptions options;
  options.policy.model_path = checkpoint;
  options.reference_path = checkpoint;
  options.policy.loss.chunk_tokens = chunk_tokens;
  DpoObjective objective(options);
  const PackedBatch batch =
      bench::random_batch(objective.policy()->config().vocab_size, rows, seq_len, 2);
  return bench::measure_objective_step(objective, batch);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_dpo: DPO loss memory and time through both LM heads, fused vs unfused"};
  int64_t tokens = 4096, hidden = 512, vocab = 32000, pairs = 4, chunk = 1024;
  int threads = 0;
  bench::ModelShape shape;
  shape.hidden = 512;
  shape.layers = 4;
  shape.heads = 8;
  shape.kv_heads = 4;
  shape.intermediate = 1536;
  int64_t step_rows = 4, step_seq_len = 1024;
  bool skip_step = false;
  bench::add_shape_options(app, shape);
  app.add_option("--step-rows", step_rows, "DPO step: rows (one pair each)")->capture_default_str();
  app.add_option("--step-seq-len", step_seq_len, "DPO step: tokens per row")->capture_default_str();
  app.add_flag("--no-step", skip_step, "only the loss, not the whole DPO step");
  app.add_option("--tokens", tokens)->capture_default_str();
  app.add_option("--pairs", pairs, "preference pairs (2 documents each) over the tokens")
      ->capture_default_str();
  app.add_option("--chunk-tokens", chunk)->capture_default_str();
  app.add_option("--threads", threads, "0: all usable cores")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const int used = configure_threads(threads);
  FusedLossOptions options;
  options.chunk_tokens = chunk;
  hidden = shape.hidden;
  vocab = shape.vocab;
  const Measure unfused = measure(false, tokens, hidden, vocab, pairs, options);
  const Measure fused = measure(true, tokens, hidden, vocab, pairs, options);
  std::printf(
      "bench_dpo: sigmoid, %ld tokens in %ld pairs, vocab %ld, hidden %ld, chunk %ld, fp32, "
      "%d threads, policy forward + backward, reference forward\n",
      tokens, pairs, vocab, hidden, chunk, used);
  bench::print_loss_comparison(unfused, fused, tokens);
  if (skip_step) return 0;

  const double peak_flops = bench::matmul_peak_flops(at::kFloat);
  const std::string dir = (std::filesystem::temp_directory_path() / "tandem-bench-dpo").string();
  std::filesystem::remove_all(dir);
  bench::write_random_llama(shape, dir);
  const DecoderConfig config = bench::llama_config(shape);
  const double step_flops = 4.0 * bench::forward_flops(config, step_seq_len, step_rows);
  const int64_t step_tokens = step_rows * step_seq_len;
  const Measure step_unfused = measure_step(0, dir, step_rows, step_seq_len);
  const Measure step_fused = measure_step(chunk, dir, step_rows, step_seq_len);
  std::filesystem::remove_all(dir);
  std::printf(
      "bench_dpo step: policy = reference = random Llama (hidden %ld, %ld layers, %ld/%ld heads, "
      "intermediate %ld, vocab %ld), %ld rows x %ld tokens (one pair per row), matmul peak "
      "%.1f GFLOP/s\n",
      shape.hidden, shape.layers, shape.heads, shape.kv_heads, shape.intermediate, shape.vocab,
      step_rows, step_seq_len, peak_flops / 1e9);
  bench::print_step_comparison(step_unfused, step_fused, step_tokens, step_flops, peak_flops);
  return 0;
}
