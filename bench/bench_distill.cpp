// Distillation loss through both LM heads, fused (chunked over tokens, gradients formed in the
// forward pass) vs unfused (full fp32 logits of student and teacher, plain autograd): peak-memory
// rise (kernel VmHWM, reset before each measurement) and time of forward + backward, for N tokens
// x vocab V.
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "bench_common.h"
#include "tandem/core/threads.h"
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
  std::printf("  unfused: peak +%.0f MiB, %.3f s (%.0f tokens/s)\n", unfused.peak_mib,
              unfused.seconds, tokens / unfused.seconds);
  std::printf(
      "  fused  : peak +%.0f MiB, %.3f s (%.0f tokens/s) | memory %.2fx, time %.2fx of unfused\n",
      fused.peak_mib, fused.seconds, tokens / fused.seconds, fused.peak_mib / unfused.peak_mib,
      fused.seconds / unfused.seconds);
  return 0;
}
