#pragma once
// What the frozen-forward benchmarks of target families share (bench_hybrid_forward,
// bench_family_forward): a model built in memory from its config.json, one forward as a draft's
// target runs it (every layer's output kept, logits), its model FLOPs (models/flops.h), and each
// model measured in a process of its own so one's freed pages never hide the other's peak.
#include <ATen/ATen.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_common.h"
#include "tandem/core/dtype.h"
#include "tandem/models/decoder.h"
#include "tandem/models/flops.h"
#include "tandem/models/layers.h"

namespace tandem::bench {

/// Runs this program again once per entry of `kinds` with `--model KIND` appended; 0 when every
/// run succeeded.
inline int run_each_model_in_own_process(int argc, char** argv,
                                         const std::vector<std::string>& kinds) {
  std::string command;
  for (int i = 0; i < argc; ++i) command += std::string(i ? " '" : "'") + argv[i] + "'";
  int status = 0;
  for (const std::string& kind : kinds)
    status |= std::system((command + " --model " + kind).c_str());
  return status == 0 ? 0 : 1;
}

/// The model of `config_json` (N(0, 0.02) weights, `dtype`), one row of `seq` random tokens
/// through the frozen forward, best of `repeats`: prints its parameters, GFLOP per token, time,
/// tokens/s, MFU against `peak` and the forward's peak memory (the rise over the loaded model).
inline void print_frozen_forward(const std::string& label, const nlohmann::json& config_json,
                                 int64_t seq, c10::ScalarType dtype, const std::string& dtype_name,
                                 double peak, int repeats, int64_t linear_chunk) {
  const DecoderConfig config = DecoderConfig::from_json(config_json, label);
  CausalLM model(config, at::TensorOptions().dtype(dtype));
  init_normal_(*model, 0.02, 0);
  model->attention_options.linear_chunk = linear_chunk;
  int64_t parameters = 0;
  for (const at::Tensor& p : model->parameters()) parameters += p.numel();
  const at::Tensor ids = at::randint(config.vocab_size, {1, seq}, at::kLong);
  const AttentionLayout layout = AttentionLayout::causal(1, seq, at::kCPU);
  std::vector<int64_t> every_layer;
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) every_layer.push_back(i);
  const double before = proc_field_mib("/proc/self/status", "VmRSS");
  reset_peak_rss();
  const double seconds = best_seconds(
      [&] {
        at::NoGradGuard no_grad;
        std::map<int64_t, at::Tensor> captured;
        const at::Tensor hidden = model->forward_hidden(ids, layout, every_layer, &captured);
        model->logits(hidden);
      },
      repeats);
  const double memory = proc_field_mib("/proc/self/status", "VmHWM") - before;
  const double tokens = static_cast<double>(seq);
  const double flops = decoder_forward_flops(config, tokens, tokens * tokens, true);
  std::printf(
      "  %-11s %s: %.1fM parameters, %.3f GFLOP per token | forward %.3f s, %.0f tokens/s, "
      "%.1f GFLOP/s, MFU %.1f%% of the %s matmul peak | forward peak memory +%.0f MiB\n",
      label.c_str(), dtype_name.c_str(), static_cast<double>(parameters) / 1e6,
      decoder_forward_flops(config, 1, 1, true) / 1e9, seconds, tokens / seconds,
      flops / seconds / 1e9, 100.0 * flops / seconds / peak, dtype_name.c_str(), memory);
}

/// print_frozen_forward in each of `dtypes` ("fp32", "bf16", comma-separated), after the matmul
/// peak measured for that dtype.
inline void print_frozen_forward_in(const std::string& dtypes, const std::string& label,
                                    const nlohmann::json& config_json, int64_t seq, int repeats,
                                    int64_t linear_chunk = 64) {
  for (const std::string name : {"fp32", "bf16"}) {
    if (dtypes.find(name) == std::string::npos) continue;
    const c10::ScalarType dtype = parse_compute_dtype(name, "--dtypes");
    const double peak = matmul_peak_flops(dtype);
    std::printf("  %s matmul peak %.1f GFLOP/s\n", name.c_str(), peak / 1e9);
    print_frozen_forward(label, config_json, seq, dtype, name, peak, repeats, linear_chunk);
  }
}

}  // namespace tandem::bench
