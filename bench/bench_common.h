#pragma once
// What every benchmark prints: the machine's measured matmul peak (the denominator of model
// FLOP utilisation), wall time of a callable, and the process's peak resident memory.
#include <ATen/ATen.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <utility>

#include "tandem/core/device.h"

namespace tandem::bench {

/// Best wall time in seconds of `repeats` runs of `work` after one warm-up run.
inline double best_seconds(const std::function<void()>& work, int repeats) {
  work();
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    work();
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    best = std::min(best, elapsed.count());
  }
  return best;
}

/// Achieved FLOP/s of an (n x n) @ (n x n) matmul in `dtype` on the CPU: the practical peak of
/// this machine (core/device.h, which the trainer's MFU uses too).
inline double matmul_peak_flops(c10::ScalarType dtype, int64_t n = 2048, int repeats = 5) {
  return measure_matmul_peak(at::Device(at::kCPU), dtype, n, repeats);
}

/// Peak resident set size of this process so far, in MiB.
inline double peak_rss_mib() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;
}

}  // namespace tandem::bench

namespace tandem::bench {

/// Resets the kernel's peak-RSS mark of this process (VmHWM) to the current RSS.
inline void reset_peak_rss() {
  if (FILE* file = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", file);
    std::fclose(file);
  }
}

/// A "Name: value kB" field of a /proc file (VmHWM, VmRSS of /proc/self/status; MemAvailable of
/// /proc/meminfo) in MiB; 0 when absent.
inline double proc_field_mib(const char* path, const char* field) {
  FILE* file = std::fopen(path, "r");
  if (!file) return 0;
  char line[256];
  double kib = 0;
  const size_t length = std::strlen(field);
  while (std::fgets(line, sizeof(line), file))
    if (std::strncmp(line, field, length) == 0 && line[length] == ':') {
      std::sscanf(line + length + 1, "%lf", &kib);
      break;
    }
  std::fclose(file);
  return kib / 1024.0;
}

/// The kernel's peak-RSS mark (VmHWM) in MiB: since start, or since reset_peak_rss().
inline double peak_rss_mark_mib() { return proc_field_mib("/proc/self/status", "VmHWM"); }

/// Current RSS (VmRSS) in MiB.
inline double current_rss_mib() { return proc_field_mib("/proc/self/status", "VmRSS"); }

struct PeakAndTime {
  double peak_mib;  // peak-RSS rise of one run
  double seconds;   // best wall time
};

/// Runs `work` once (warm-up, outside the mark), once under a freshly reset peak-RSS mark, then
/// `repeats` more times for the best wall time.
inline PeakAndTime measure_peak_and_time(const std::function<void()>& work, int repeats) {
  work();
  reset_peak_rss();
  const double before = current_rss_mib();
  work();
  const double peak = peak_rss_mark_mib() - before;
  return {peak, best_seconds(work, repeats)};
}

/// Prints the loss-level lines every fused-vs-unfused benchmark shares.
inline void print_loss_comparison(const PeakAndTime& unfused, const PeakAndTime& fused,
                                  int64_t tokens) {
  std::printf("  unfused: peak +%.0f MiB, %.3f s (%.0f tokens/s)\n", unfused.peak_mib,
              unfused.seconds, tokens / unfused.seconds);
  std::printf(
      "  fused  : peak +%.0f MiB, %.3f s (%.0f tokens/s) | memory %.2fx, time %.2fx of unfused\n",
      fused.peak_mib, fused.seconds, tokens / fused.seconds, fused.peak_mib / unfused.peak_mib,
      fused.seconds / unfused.seconds);
}

/// Prints a whole-step comparison: memory, time, tokens/s and MFU against `peak_flops`.
inline void print_step_comparison(const PeakAndTime& unfused, const PeakAndTime& fused,
                                  int64_t tokens, double step_flops, double peak_flops) {
  for (const auto& [name, m] : {std::pair<const char*, PeakAndTime>{"unfused", unfused},
                                std::pair<const char*, PeakAndTime>{"fused  ", fused}})
    std::printf("  %s: peak +%.0f MiB, %.3f s, %.0f tokens/s, MFU %.1f%%\n", name, m.peak_mib,
                m.seconds, tokens / m.seconds, 100.0 * step_flops / m.seconds / peak_flops);
  std::printf("  fused/unfused: memory %.2fx, time %.2fx\n", fused.peak_mib / unfused.peak_mib,
              fused.seconds / unfused.seconds);
}

}  // namespace tandem::bench
