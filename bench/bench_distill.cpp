// 1. Distillation loss through both LM heads, fused (chunked over tokens, gradients formed in the
// forward pass) vs unfused (full fp32 logits of student and teacher, plain autograd): peak-memory
// rise (kernel VmHWM, reset before each measurement) and time of forward + backward, for N tokens
// x vocab V.
// 2. A whole distillation step of the objective (student forward + backward, teacher forward) on
// random Llama checkpoints, fused vs unfused (loss.chunk_tokens 0), with tokens/s and model FLOP
// utilisation against the fp32 matmul peak measured in the same run.
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>

#include "bench_common.h"
#include "bench_objective.h"
#include "tandem/core/threads.h"
#include "tandem/objectives/distill.h"
#include "tandem/objectives/distill_loss.h"

namespace {

using namespace tandem;

using Measure = bench::PeakAndTime;

Measure measure(bool fused, int64_t tokens, int64_t hidden, int64_t teacher_hidden, int64_t vocab,
                const DistillLossOptions& options) {
  at::manual_seed(0);
  at::Tensor student = at::randn({tokens, hidden}).requires_grad_();
  at::Tensor head = (at::randn({vocab, hidden}) * 0.02).requires_grad_();
  const at::Tensor teacher = at::randn({tokens, teacher_hidden});
  const at::Tensor teacher_head = at::randn({vocab, teacher_hidden}) * 0.02;
  const at::Tensor labels = at::randint(vocab, {tokens}, at::kLong);
  const at::Tensor weights = at::full({tokens}, 1.0 / tokens);
  auto run = [&] {
    at::Tensor loss = fused ? fused_distillation_loss(student, head, teacher, teacher_head, labels,
                                                      weights, options)
                            : unfused_distillation_loss(student, head, teacher, teacher_head,
                                                        labels, weights, options);
    loss.backward();
    student.mutable_grad().reset();
    head.mutable_grad().reset();
  };
  return bench::measure_peak_and_time(run, 2);
}

// A whole distillation micro-batch step (student forward + backward, teacher forward).
Measure measure_step(int64_t chunk_tokens, const DistillLossOptions& loss,
                     const std::string& student, const std::string& teacher, int64_t rows,
                     int64_t seq_len) {
  DistillOptions options;
  options.student.model_path = student;
  options.teacher_path = teacher;
  options.loss = loss;
  options.loss.chunk_tokens = chunk_tokens;
  DistillObjective objective(options);
  return bench::measure_objective_step(
      objective, bench::random_batch(objective.student()->config().vocab_size, rows, seq_len, 2));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_distill: distillation loss memory and time, fused vs unfused"};
  int64_t tokens = 4096, hidden = 512, teacher_hidden = 1024, vocab = 32000;
  int threads = 0;
  std::string divergence = "forward_kl";
  app.add_option("--tokens", tokens)->capture_default_str();
  app.add_option("--hidden", hidden)->capture_default_str();
  app.add_option("--teacher-hidden", teacher_hidden)->capture_default_str();
  app.add_option("--vocab", vocab)->capture_default_str();
  app.add_option("--divergence", divergence, "forward_kl | reverse_kl | jsd")
      ->capture_default_str();
  app.add_option("--threads", threads, "0: all usable cores")->capture_default_str();
  bench::ModelShape student_shape, teacher_shape;
  student_shape.hidden = 512, student_shape.layers = 4, student_shape.heads = 8;
  student_shape.kv_heads = 4, student_shape.intermediate = 1536;
  teacher_shape.hidden = 1024, teacher_shape.layers = 4, teacher_shape.heads = 16;
  teacher_shape.kv_heads = 8, teacher_shape.intermediate = 2816;
  int64_t step_rows = 4, step_seq_len = 1024;
  bool skip_step = false;
  app.add_option("--step-rows", step_rows, "distillation step: rows")->capture_default_str();
  app.add_option("--step-seq-len", step_seq_len, "distillation step: tokens per row")
      ->capture_default_str();
  app.add_flag("--no-step", skip_step, "only the loss, not the whole distillation step");
  CLI11_PARSE(app, argc, argv);
  const int used = configure_threads(threads);
  DistillLossOptions options;
  options.divergence = parse_divergence(divergence);
  options.temperature = 2.0;
  const Measure unfused = measure(false, tokens, hidden, teacher_hidden, vocab, options);
  const Measure fused = measure(true, tokens, hidden, teacher_hidden, vocab, options);
  std::printf(
      "bench_distill: %s, %ld tokens, vocab %ld, student hidden %ld, teacher hidden %ld, "
      "fp32, %d threads, forward + backward\n",
      divergence.c_str(), tokens, vocab, hidden, teacher_hidden, used);
  bench::print_loss_comparison(unfused, fused, tokens);
  if (skip_step) return 0;

  // The step: random student (hidden 512, 4 layers) and teacher (hidden 1024, 4 layers), the
  // --vocab given; model FLOPs = 3 x student forward + teacher forward.
  student_shape.vocab = teacher_shape.vocab = vocab;
  const double peak_flops = bench::matmul_peak_flops(at::kFloat);
  const auto scratch = std::filesystem::temp_directory_path() / "tandem-bench-distill";
  std::filesystem::remove_all(scratch);
  const std::string student =
      bench::write_random_llama(student_shape, (scratch / "student").string(), 1);
  const std::string teacher =
      bench::write_random_llama(teacher_shape, (scratch / "teacher").string(), 2);
  const double step_flops =
      3.0 * bench::forward_flops(bench::llama_config(student_shape), step_seq_len, step_rows) +
      bench::forward_flops(bench::llama_config(teacher_shape), step_seq_len, step_rows);
  const int64_t step_tokens = step_rows * step_seq_len;
  const Measure step_unfused = measure_step(0, options, student, teacher, step_rows, step_seq_len);
  const Measure step_fused = measure_step(1024, options, student, teacher, step_rows, step_seq_len);
  std::filesystem::remove_all(scratch);
  std::printf(
      "bench_distill step: student Llama hidden 512 x 4 layers, teacher hidden 1024 x 4 "
      "layers, vocab %ld, %ld rows x %ld tokens, matmul peak %.1f GFLOP/s\n",
      vocab, step_rows, step_seq_len, peak_flops / 1e9);
  bench::print_step_comparison(step_unfused, step_fused, step_tokens, step_flops, peak_flops);
  return 0;
}
