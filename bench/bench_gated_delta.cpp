// Time and memory of the gated delta rule (models/gated_delta_rule.h), the linear attention of
// the Qwen3.5/3.6 and Qwen3-Next hybrids, forward only, from 2K to 32K tokens: the chunked form
// (prefill) at each length, and the token-by-token recurrent form (decoding) at the shortest for
// comparison. One row, one document, the shapes of a Qwen3-Next / Qwen3.5 linear-attention layer
// by default (16 key heads serving 32 value heads, head dims 128), fp32 on the CPU.
//
// "memory" is the rise of the process's peak resident memory over the memory just before the
// call (the call's own intermediates; lengths run shortest first). The fitted exponents are the
// least-squares slopes of log(time) and log(memory) over log(T): linear in T is 1. Model FLOPs of
// the chunked form per value head and chunk of C tokens: 2 (C²K for K Kᵀ and for Q Kᵀ, C²(K + V)
// for the two triangular solves, 3 C K V for the three products with the state) — against the
// fp32 matmul peak measured in the same run.
#include <ATen/ATen.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "bench_common.h"
#include "tandem/core/threads.h"
#include "tandem/models/gated_delta_rule.h"

namespace {

using namespace tandem;

struct Shape {
  int64_t key_heads = 16, value_heads = 32, key_dim = 128, value_dim = 128, chunk = 64;
};

struct Inputs {
  at::Tensor q, k, v, g, beta;
};

Inputs random_inputs(const Shape& s, int64_t length) {
  at::manual_seed(0);
  return {at::randn({1, length, s.key_heads, s.key_dim}),
          at::randn({1, length, s.key_heads, s.key_dim}),
          at::randn({1, length, s.value_heads, s.value_dim}), -at::rand({1, length, s.value_heads}),
          at::rand({1, length, s.value_heads})};
}

double chunked_flops(const Shape& s, int64_t length) {
  const double C = static_cast<double>(s.chunk), K = static_cast<double>(s.key_dim);
  const double V = static_cast<double>(s.value_dim);
  const double chunks = std::ceil(static_cast<double>(length) / C);
  return 2.0 * static_cast<double>(s.value_heads) * chunks *
         (2 * C * C * K + C * C * (K + V) + 3 * C * K * V);
}

double slope(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() < 2) return NAN;
  double mx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) mx += std::log(x[i]), my += std::log(y[i]);
  mx /= static_cast<double>(x.size()), my /= static_cast<double>(y.size());
  double sxy = 0, sxx = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxy += (std::log(x[i]) - mx) * (std::log(y[i]) - my);
    sxx += (std::log(x[i]) - mx) * (std::log(x[i]) - mx);
  }
  return sxy / sxx;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_gated_delta: the gated delta rule's time and memory from 2K to 32K tokens"};
  Shape s;
  std::string lengths_text = "2048,4096,8192,16384,32768";
  int repeats = 2, threads = 0;
  app.add_option("--lengths", lengths_text, "sequence lengths, comma-separated")
      ->capture_default_str();
  app.add_option("--key-heads", s.key_heads)->capture_default_str();
  app.add_option("--value-heads", s.value_heads)->capture_default_str();
  app.add_option("--key-dim", s.key_dim)->capture_default_str();
  app.add_option("--value-dim", s.value_dim)->capture_default_str();
  app.add_option("--chunk", s.chunk, "tokens per chunk")->capture_default_str();
  app.add_option("--repeats", repeats, "timed runs per length (after one for memory)")
      ->capture_default_str();
  app.add_option("--threads", threads, "0: all usable cores")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  configure_threads(threads);
  std::vector<int64_t> lengths;
  {
    std::stringstream stream(lengths_text);
    for (std::string item; std::getline(stream, item, ',');) lengths.push_back(std::stoll(item));
  }

  at::NoGradGuard no_grad;
  const double peak = bench::matmul_peak_flops(at::kFloat);
  std::printf(
      "gated delta rule, fp32 CPU, %d threads: %ld key heads -> %ld value heads, K %ld, "
      "V %ld, chunk %ld; fp32 matmul peak %.1f GFLOP/s\n",
      at::get_num_threads(), s.key_heads, s.value_heads, s.key_dim, s.value_dim, s.chunk,
      peak / 1e9);
  std::printf("%8s  %10s  %12s  %10s  %8s\n", "tokens", "time (s)", "tokens/s", "memory MiB",
              "of peak");
  std::vector<double> xs, times, memories;
  const GatedDeltaOptions options{s.chunk, true};
  for (const int64_t length : lengths) {
    const Inputs in = random_inputs(s, length);
    const bench::PeakAndTime measured = bench::measure_peak_and_time(
        [&] { chunked_gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, {}, options); }, repeats);
    const double flops = chunked_flops(s, length);
    std::printf("%8ld  %10.3f  %12.0f  %10.1f  %7.1f%%\n", length, measured.seconds,
                static_cast<double>(length) / measured.seconds, measured.peak_mib,
                100.0 * flops / measured.seconds / peak);
    std::fflush(stdout);
    xs.push_back(static_cast<double>(length));
    times.push_back(measured.seconds);
    memories.push_back(std::max(measured.peak_mib, 1e-3));
  }
  std::printf("fitted exponent in T: time %.2f, memory %.2f\n", slope(xs, times),
              slope(xs, memories));

  // The recurrent form over the shortest length: what prefill would cost token by token.
  const int64_t length = lengths.front();
  const Inputs in = random_inputs(s, length);
  const double recurrent = bench::best_seconds(
      [&] {
        at::Tensor state = at::zeros({1, s.value_heads, s.key_dim, s.value_dim});
        recurrent_gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, state);
      },
      1);
  std::printf("recurrent (token by token) at %ld tokens: %.3f s (%.0f tokens/s)\n", length,
              recurrent, static_cast<double>(length) / recurrent);
  return 0;
}
