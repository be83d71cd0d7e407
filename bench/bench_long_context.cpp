// Long-context memory and time of one EAGLE-3 and one DFlash training step (online: the frozen
// target runs in the loop; forward, backward and the AdamW update), at several sequence
// lengths, with the fused kernels (attention.kernel: fused, the default: EAGLE-3's TTT through
// ATen's flash kernel merged by log-sum-exp; DFlash's blocks through masked fused calls merged
// with their own keys), the blockwise kernels
// (attention.kernel: blockwise) and the dense ones they replaced (attention.kernel: dense).
//
// Each (objective, kernel, length) runs in a child process of its own, so its peak resident
// memory (VmHWM) is its own: "peak" is the whole process's (weights, libtorch, batch and step);
// "step" is the rise of the peak over the resident memory just before the measured step (what
// the step's activations and temporaries cost). The fitted exponent is the least-squares slope
// of log(step memory) over log(T). A dense case runs only while the dense memory measured at the
// previous length, scaled by (T / T_prev)^2, fits in 70% of MemAvailable.
//
// Model FLOPs (MFU against the fp32 matmul peak measured in the same child): the objectives'
// own counts (Objective::model_flops: target forward + teacher/lm_head + 3 x draft forward),
// visible attention pairs only.
#include <ATen/ATen.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench_common.h"
#include "bench_model.h"
#include "bench_objective.h"
#include "tandem/core/threads.h"
#include "tandem/objectives/dflash.h"
#include "tandem/objectives/eagle3.h"
#include "tandem/train/optimizer.h"

namespace {

using namespace tandem;

struct Settings {
  bench::ModelShape target;
  int64_t ttt_length = 7, block_size = 16, draft_layers = 1, max_anchors = 512;
  AttentionOptions attention;
  int repeats = 1;
  int threads = 0;
};

struct Measured {
  double step_seconds = 0, step_mib = 0, peak_mib = 0, flops = 0, matmul_peak = 0;
  bool ok = false;
};

// One training step of `objective` on one row of `length` tokens (one document), measured.
Measured measure(const std::string& objective_name, int64_t length, const Settings& s,
                 const std::string& target_dir) {
  configure_threads(s.threads);
  Measured m;
  m.matmul_peak = bench::matmul_peak_flops(at::kFloat);
  RunContext run;
  run.attention = s.attention;
  std::unique_ptr<Objective> objective;
  if (objective_name == "eagle3") {
    Eagle3Options options;
    options.run = run;
    options.target_path = target_dir;
    options.ttt_length = s.ttt_length;
    options.draft_vocab_size = std::min<int64_t>(2048, s.target.vocab);
    options.teacher_chunk_tokens = 1024;
    objective = std::make_unique<Eagle3Objective>(options);
  } else {
    DFlashOptions options;
    options.run = run;
    options.target_path = target_dir;
    options.block_size = s.block_size;
    options.dims.num_layers = s.draft_layers;
    options.max_anchors = s.max_anchors;
    options.mask_token_id = s.target.vocab - 1;  // random weights: any row serves
    options.loss.chunk_tokens = 1024;
    objective = std::make_unique<DFlashObjective>(options);
  }
  MixedPrecisionAdamW optimizer(trainable_parameters(objective->trainable()), {});
  const PackedBatch batch = bench::random_batch(s.target.vocab, 1, length, 1);
  const StepTotals totals = objective->count(batch);
  auto step = [&] {
    objective->compute(batch, totals).loss.backward();
    optimizer.step(1e-4);
    optimizer.zero_grad();
  };
  // The first step's peak is the one reported (a warm-up would hide nothing: the allocator
  // returns large blocks to the system); the best of `repeats` further steps is the time.
  bench::reset_peak_rss();
  const double before = bench::current_rss_mib();
  const auto start = std::chrono::steady_clock::now();
  step();
  m.step_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  m.step_mib = bench::peak_rss_mark_mib() - before;
  m.peak_mib = bench::peak_rss_mib();
  if (s.repeats > 1)
    m.step_seconds = std::min(m.step_seconds, bench::best_seconds(step, s.repeats - 1));
  m.flops = objective->model_flops(batch);
  m.ok = true;
  return m;
}

// Runs `measure` in a child process and returns what it reported (ok = false if it died, e.g.
// killed for memory).
Measured measure_in_child(const std::string& objective_name, int64_t length, const Settings& s,
                          const std::string& target_dir) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    Measured m;
    try {
      m = measure(objective_name, length, s, target_dir);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "  %s at %ld: %s\n", objective_name.c_str(), length, e.what());
    }
    const ssize_t written = write(fds[1], &m, sizeof(m));
    _exit(written == sizeof(m) ? 0 : 1);
  }
  close(fds[1]);
  Measured m;
  const ssize_t got = read(fds[0], &m, sizeof(m));
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (got != sizeof(m) || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return {};
  return m;
}

double mem_available_mib() { return bench::proc_field_mib("/proc/meminfo", "MemAvailable"); }

// Least-squares slope of log(y) over log(x).
double fitted_exponent(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() < 2) return NAN;
  double mx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) mx += std::log(x[i]), my += std::log(y[i]);
  mx /= x.size(), my /= y.size();
  double sxy = 0, sxx = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxy += (std::log(x[i]) - mx) * (std::log(y[i]) - my);
    sxx += (std::log(x[i]) - mx) * (std::log(x[i]) - mx);
  }
  return sxy / sxx;
}

std::vector<int64_t> parse_list(const std::string& text) {
  std::vector<int64_t> values;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) values.push_back(std::stoll(item));
  return values;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "bench_long_context: memory and time of an EAGLE-3 and a DFlash step at long sequence "
      "lengths, fused and blockwise attention kernels vs the dense ones"};
  Settings s;
  s.target = bench::demo_target_shape();
  std::string lengths_text = "2048,8192,16384,32768", objectives_text = "eagle3,dflash";
  std::string kernels_text = "fused,blockwise,dense";
  bench::add_shape_options(app, s.target);
  app.add_option("--lengths", lengths_text, "sequence lengths, comma-separated")
      ->capture_default_str();
  app.add_option("--objectives", objectives_text, "eagle3, dflash")->capture_default_str();
  app.add_option("--kernels", kernels_text, "fused, blockwise, dense")->capture_default_str();
  app.add_option("--ttt", s.ttt_length)->capture_default_str();
  app.add_option("--block-size", s.block_size)->capture_default_str();
  app.add_option("--draft-layers", s.draft_layers, "DFlash draft layers")->capture_default_str();
  app.add_option("--max-anchors", s.max_anchors, "DFlash blocks per row")->capture_default_str();
  app.add_option("--query-chunk", s.attention.query_chunk)->capture_default_str();
  app.add_option("--key-chunk", s.attention.key_chunk)->capture_default_str();
  app.add_option("--repeats", s.repeats, "timed steps per case (the first is also the memory one)")
      ->capture_default_str();
  app.add_option("--threads", s.threads, "0: all usable cores")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const std::string scratch =
      (std::filesystem::temp_directory_path() / ("tandem-bench-long-" + std::to_string(::getpid())))
          .string();
  {  // the target is written by a child too: the parent never starts libtorch's thread pools
    const pid_t child = fork();
    if (child == 0) {
      configure_threads(s.threads);
      bench::write_random_llama(s.target, scratch);
      _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
  }
  std::printf(
      "bench_long_context: target hidden %ld, layers %ld, heads %ld/%ld, intermediate %ld, "
      "vocab %ld (random weights); EAGLE-3 TTT %ld, draft vocab %ld; DFlash block %ld, "
      "%ld draft layer(s), %ld anchors; one row of T tokens (one document); fp32; "
      "blockwise tiles %ld queries x %ld keys; MemAvailable %.0f MiB\n",
      s.target.hidden, s.target.layers, s.target.heads, s.target.kv_heads, s.target.intermediate,
      s.target.vocab, s.ttt_length, std::min<int64_t>(2048, s.target.vocab), s.block_size,
      s.draft_layers, s.max_anchors, s.attention.query_chunk, s.attention.key_chunk,
      mem_available_mib());
  const std::vector<int64_t> lengths = parse_list(lengths_text);
  for (const std::string objective : {std::string("eagle3"), std::string("dflash")}) {
    if (objectives_text.find(objective) == std::string::npos) continue;
    for (const std::string kernel :
         {std::string("fused"), std::string("blockwise"), std::string("dense")}) {
      if (kernels_text.find(kernel) == std::string::npos) continue;
      s.attention.kernel = kernel == "dense"   ? AttentionKernel::Dense
                           : kernel == "fused" ? AttentionKernel::Fused
                                               : AttentionKernel::Blockwise;
      std::vector<double> xs, ys;
      double last_step_mib = 0, last_length = 0;
      for (const int64_t length : lengths) {
        if (kernel == "dense" && last_length > 0) {
          const double predicted = last_step_mib * std::pow(length / last_length, 2.0);
          if (predicted > 0.7 * mem_available_mib()) {
            std::printf(
                "  %-6s %-9s T=%6ld: skipped (dense memory predicted %.0f MiB from T=%.0f; "
                "MemAvailable %.0f MiB)\n",
                objective.c_str(), kernel.c_str(), length, predicted, last_length,
                mem_available_mib());
            continue;
          }
        }
        const Measured m = measure_in_child(objective, length, s, scratch);
        if (!m.ok) {
          std::printf("  %-6s %-9s T=%6ld: failed (out of memory or an error above)\n",
                      objective.c_str(), kernel.c_str(), length);
          break;
        }
        std::printf(
            "  %-6s %-9s T=%6ld: step %8.2f s, %7.0f tokens/s, MFU %4.1f%% | step memory "
            "%7.0f MiB, process peak %7.0f MiB\n",
            objective.c_str(), kernel.c_str(), length, m.step_seconds, length / m.step_seconds,
            100 * m.flops / m.step_seconds / m.matmul_peak, m.step_mib, m.peak_mib);
        std::fflush(stdout);
        xs.push_back(static_cast<double>(length));
        ys.push_back(std::max(m.step_mib, 1.0));
        last_step_mib = m.step_mib, last_length = static_cast<double>(length);
      }
      if (xs.size() >= 2)
        std::printf("  %-6s %-9s step memory ~ T^%.2f (least squares over %zu lengths)\n",
                    objective.c_str(), kernel.c_str(), fitted_exponent(xs, ys), xs.size());
    }
  }
  std::filesystem::remove_all(scratch);
  return 0;
}
